//! What the client tells of its calls to whoever counts them: eniipd's
//! metrics install a [`Recorder`] once at start; a program that installs
//! none (the emulator, the tools) records nothing.

use std::sync::OnceLock;

/// Where the client's call outcomes go.
#[derive(Debug, Clone, Copy)]
pub struct Recorder {
    /// One OpenAPI call: its Action, its outcome (`OK`, the service's
    /// `Code`, `HTTP<status>`) and how long it took, in seconds.
    pub openapi: fn(action: &str, code: &str, seconds: f64),
    /// One metadata read: `ok`, `not-found` or `error`.
    pub metadata: fn(result: &str),
}

static RECORDER: OnceLock<Recorder> = OnceLock::new();

/// Installs the recorder; the first one installed stays.
pub fn set_recorder(r: Recorder) {
    let _ = RECORDER.set(r);
}

pub(crate) fn record_openapi(action: &str, code: &str, seconds: f64) {
    if let Some(r) = RECORDER.get() {
        (r.openapi)(action, code, seconds);
    }
}

pub(crate) fn record_metadata(result: &str) {
    if let Some(r) = RECORDER.get() {
        (r.metadata)(result);
    }
}
