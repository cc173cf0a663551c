//! How `eniipd` fails: the exit codes of SPEC section 2, and the error
//! that carries one with its message (the cause chain said once).

use std::fmt;

use crate::server::socket::BindError;
use crate::store::StoreError;

/// Exit codes (SPEC section 2). Corrupt state files (65) is the store's
/// own ([`crate::store::StoreError::exit_code`]).
pub mod exit {
    /// Clean stop.
    pub(crate) const OK: i32 = 0;
    /// Anything else.
    pub(crate) const FAILURE: i32 = 1;
    /// Usage (every binary's: [`eniip_protocol::cli::USAGE_EXIT`]).
    pub(crate) const USAGE: i32 = eniip_protocol::cli::USAGE_EXIT as i32;
    /// Cloud or metadata unreachable at start.
    pub(crate) const UNAVAILABLE: i32 = 69;
    /// State directory held, or socket served, by another instance.
    pub(crate) const TEMPFAIL: i32 = 75;
    /// The cloud refused the credentials at start.
    pub(crate) const NOPERM: i32 = 77;
    /// Bad configuration.
    pub(crate) const CONFIG: i32 = 78;
    /// Stopped, but the state directory did not finish the final flush
    /// within the stop deadline (nothing acknowledged is lost).
    pub(crate) const NOT_DURABLE: i32 = 1;
}

/// A start-up or run failure with its exit code.
#[derive(Debug)]
pub(crate) struct DaemonError {
    /// Exit code.
    pub(crate) code: i32,
    /// What went wrong.
    pub(crate) message: String,
}

impl DaemonError {
    pub(super) fn new(code: i32, message: impl Into<String>) -> DaemonError {
        DaemonError {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for DaemonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DaemonError {}

pub(super) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let cause = c.to_string();
        // Some errors already end their sentence with their cause (the
        // store's I/O errors do): say it once.
        if !s.ends_with(&cause) {
            s.push_str(": ");
            s.push_str(&cause);
        }
        cur = c.source();
    }
    s
}

pub(super) fn store_error(e: &StoreError) -> DaemonError {
    DaemonError::new(e.exit_code(), chain(e))
}

pub(super) fn bind_error(e: &BindError) -> DaemonError {
    let code = if e.in_use() {
        exit::TEMPFAIL
    } else {
        exit::FAILURE
    };
    DaemonError::new(code, chain(e))
}

pub(super) fn preflight_error(problems: Vec<String>) -> DaemonError {
    DaemonError::new(exit::CONFIG, problems.join("; "))
}
