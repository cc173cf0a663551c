//! The releases eniip-cni queued while eniipd was away
//! ([`eniip_protocol::releases`]): all are applied before the socket accepts, then
//! every [`RESCAN`] by a thread of their own (a DEL that queued while this
//! eniipd was starting). Each goes to the allocator as the `release` a
//! client would send; its file is removed once the release is durable,
//! and kept for the next pass when the allocator could not answer.

use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{bounded, RecvTimeoutError, Sender};
use log::{debug, info, warn};

use eniip_protocol::core::{Answer, Commands};
use eniip_protocol::releases::{self, RESCAN};

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Pass {
    /// Releases that gave an address back.
    pub(super) released: usize,
    /// Releases whose sandbox held nothing (any more).
    pub(super) nothing: usize,
    /// Left queued for the next pass.
    pub(super) kept: usize,
}

/// Applies what is queued in `dir` now; the queue's own error (it cannot
/// be read, or is not trusted) is returned for the caller to report.
pub(super) fn apply(dir: &Path, commands: &Commands) -> std::io::Result<Pass> {
    let mut pass = Pass::default();
    let queued = releases::pending(dir)?;
    for q in queued {
        let release = match &q.release {
            Ok(c) => c.clone(),
            Err(why) => {
                match releases::refuse(&q) {
                    Ok(aside) => warn!(
                        "{} is no queued release ({why}): put aside as {}",
                        q.path.display(),
                        aside.display()
                    ),
                    Err(e) => warn!("{} is no queued release ({why}); {e}", q.path.display()),
                }
                continue;
            }
        };
        match commands.ask(release) {
            Ok(answer) => {
                match answer {
                    Answer::Released(Some(ip)) => {
                        debug!("queued release {}: released {ip}", q.path.display());
                        pass.released += 1;
                    }
                    _ => pass.nothing += 1,
                }
                if let Err(e) = releases::done(&q) {
                    warn!("cannot remove {} once applied: {e}", q.path.display());
                }
            }
            Err(e) => {
                debug!("queued release {}: {e}", q.path.display());
                pass.kept += 1;
            }
        }
    }
    if pass.released + pass.nothing > 0 {
        if let Err(e) = releases::settle(dir) {
            warn!("cannot make the removals in {} durable: {e}", dir.display());
        }
    }
    if pass != Pass::default() {
        info!(
            "applied the releases eniip-cni queued while eniipd was away: {} released, {} held nothing for their sandbox, {} kept for the next pass",
            pass.released, pass.nothing, pass.kept
        );
    }
    Ok(pass)
}

/// [`apply`], its queue's error logged once until it changes.
pub(super) fn apply_logged(dir: &Path, commands: &Commands, last_error: &mut Option<String>) {
    match apply(dir, commands) {
        Ok(_) => *last_error = None,
        Err(e) => {
            let e = e.to_string();
            if last_error.as_deref() != Some(e.as_str()) {
                warn!("the releases queued in {}: {e}", dir.display());
            }
            *last_error = Some(e);
        }
    }
}

/// The thread that applies releases queued after the start.
pub(super) struct Watcher {
    stop: Sender<()>,
    handle: JoinHandle<()>,
}

impl Watcher {
    /// Looks in `dir` every [`RESCAN`].
    pub(super) fn spawn(dir: PathBuf, commands: Commands) -> std::io::Result<Watcher> {
        let (stop, stop_rx) = bounded::<()>(1);
        let handle = std::thread::Builder::new()
            .name("eniipd-queued".into())
            .spawn(move || {
                let mut last_error = None;
                loop {
                    match stop_rx.recv_timeout(RESCAN) {
                        Err(RecvTimeoutError::Timeout) => {
                            apply_logged(&dir, &commands, &mut last_error)
                        }
                        _ => return,
                    }
                }
            })?;
        Ok(Watcher { stop, handle })
    }

    /// Stops it (a pass in progress finishes first, within `until`).
    pub(super) fn stop(self, until: Instant) {
        let _ = self.stop.try_send(());
        if !eniip_util::thread::join_until(self.handle, until) {
            warn!("the queued-release watcher did not stop in time; abandoned");
        }
    }
}
