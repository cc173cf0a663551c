//! `cni_conflist`: the conflist is installed only once the node can serve
//! pods (ready, and the pool holds `min_pool_size` idle addresses),
//! because a runtime calls the node's network ready as soon as a conflist
//! is in its conf dir, and the first pods would then wait on a cold pool.
//!
//! How it is written is what containerd 1.6 sees: it ignores a file
//! renamed into the conf dir, but reloads one created or written in
//! place. So the file is written in place, whole in one `write`, then
//! fsynced; an identical file is left untouched (no event, no reload), and
//! nothing is removed at stop (pods keep being served while eniipd
//! restarts).

use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use log::{info, warn};
use serde_json::Value;

use crate::config::Config;
use eniip_protocol::core::{Answer, Command, Commands};

use super::{exit, DaemonError};

/// The conflist README installs, as shipped.
const SHIPPED: &str = include_str!("../../../../cni/eniip.conflist");
/// How often the pool is looked at until it is warm.
const POLL: Duration = Duration::from_millis(200);
/// After this long below the minimum, say so (once).
const SLOW_NOTE: Duration = Duration::from_secs(60);

/// The bytes to install: the source file as it is, or the shipped
/// conflist with its `eniip-cni` plugins pointed at `socket`.
pub(super) fn content(source: Option<&Path>, socket: &Path) -> Result<Vec<u8>, DaemonError> {
    let bad = |m: String| DaemonError::new(exit::CONFIG, m);
    if let Some(src) = source {
        let bytes = std::fs::read(src)
            .map_err(|e| bad(format!("cni_conflist_source {}: {e}", src.display())))?;
        serde_json::from_slice::<Value>(&bytes).map_err(|e| {
            bad(format!(
                "cni_conflist_source {}: not JSON: {e}",
                src.display()
            ))
        })?;
        return Ok(bytes);
    }
    let mut v: Value = serde_json::from_str(SHIPPED)
        .map_err(|e| bad(format!("the shipped conflist does not parse: {e}")))?;
    if let Some(plugins) = v.get_mut("plugins").and_then(Value::as_array_mut) {
        for p in plugins {
            if p.get("type").and_then(Value::as_str) == Some("eniip-cni") {
                p["socket"] = Value::String(socket.display().to_string());
            }
        }
    }
    let mut out = serde_json::to_vec_pretty(&v)
        .map_err(|e| bad(format!("cannot render the conflist: {e}")))?;
    out.push(b'\n');
    Ok(out)
}

/// Writes `bytes` at `path` in place unless it already holds them;
/// returns whether it wrote.
pub(super) fn install(path: &Path, bytes: &[u8]) -> std::io::Result<bool> {
    if std::fs::read(path).is_ok_and(|have| have == bytes) {
        return Ok(false);
    }
    // In place (not a rename: containerd 1.6 would not see it), one
    // write of the whole file so a reader sees it empty or whole.
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(true)
}

/// The installer thread: waits for a warm pool, installs, ends.
#[derive(Debug)]
pub(super) struct Installer {
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

impl Installer {
    /// Starts it when `cni_conflist` is set (the content was checked at
    /// start: a bad source is exit 78 before anything runs).
    pub(super) fn start(
        cfg: &Config,
        bytes: Vec<u8>,
        commands: Commands,
    ) -> Result<Option<Installer>, DaemonError> {
        let Some(path) = cfg.cni.conflist.clone() else {
            return Ok(None);
        };
        let (stop, stopped) = bounded(1);
        let thread = std::thread::Builder::new()
            .name("eniipd-conflist".into())
            .spawn(move || wait_and_install(&path, &bytes, &commands, &stopped))
            .map_err(|e| DaemonError::new(exit::FAILURE, format!("cannot start a thread: {e}")))?;
        Ok(Some(Installer { stop, thread }))
    }

    /// Stops it (it may be in one `status` ask, bounded by its own
    /// deadline) and joins it until `until`.
    pub(super) fn stop_until(self, until: Instant) {
        let _ = self.stop.try_send(());
        eniip_util::thread::join_until(self.thread, until);
    }
}

/// Idle addresses and the (clamped) minimum, from the allocator.
fn warmth(commands: &Commands) -> Option<(usize, usize)> {
    let idle = match commands.ask(Command::Status) {
        Ok(Answer::Status(c)) => c.idle,
        _ => return None,
    };
    let min = match commands.ask(Command::Config) {
        Ok(Answer::Config(kv)) => kv
            .iter()
            .find(|(k, _)| k == "min_pool_size")
            .and_then(|(_, v)| v.parse().ok())?,
        _ => return None,
    };
    Some((idle, min))
}

fn wait_and_install(path: &Path, bytes: &[u8], commands: &Commands, stopped: &Receiver<()>) {
    let started = Instant::now();
    let mut noted = false;
    loop {
        if let Some((idle, min)) = warmth(commands) {
            if idle >= min {
                match install(path, bytes) {
                    Ok(true) => info!(
                        "cni_conflist: installed {} (pool holds {idle} idle address(es), min_pool_size {min})",
                        path.display()
                    ),
                    Ok(false) => info!("cni_conflist: {} is already up to date", path.display()),
                    Err(e) => warn!("cni_conflist: cannot write {}: {e}", path.display()),
                }
                return;
            }
            if !noted && started.elapsed() > SLOW_NOTE {
                noted = true;
                warn!(
                    "cni_conflist: {} not installed yet: the pool holds {idle} idle address(es), min_pool_size is {min}",
                    path.display()
                );
            }
        }
        match stopped.recv_timeout(POLL) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_content_points_at_the_socket() {
        let b = content(None, Path::new("/run/x/e.sock")).unwrap();
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["plugins"][0]["type"], "eniip-cni");
        assert_eq!(v["plugins"][0]["socket"], "/run/x/e.sock");
        assert_eq!(v["name"], "eniip");
    }

    #[test]
    fn install_writes_once_and_in_place() {
        let dir = std::env::temp_dir().join(format!("eniipd-conflist-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("10-eniip.conflist");
        let _ = std::fs::remove_file(&p);
        assert!(install(&p, b"{}\n").unwrap());
        assert!(!install(&p, b"{}\n").unwrap(), "identical: not rewritten");
        use std::os::unix::fs::MetadataExt as _;
        let ino = std::fs::metadata(&p).unwrap().ino();
        assert!(install(&p, b"{\"a\":1}\n").unwrap());
        assert_eq!(std::fs::metadata(&p).unwrap().ino(), ino, "in place");
        assert_eq!(std::fs::read(&p).unwrap(), b"{\"a\":1}\n");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
