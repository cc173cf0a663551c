//! Local preconditions, checked before the first cloud call or state
//! change: a missing `socket_group` or a busy `metrics_listen` must not be
//! found only after an ENI was created in the cloud. `--check-config`
//! runs the same checks.

use std::net::TcpListener;
use std::path::Path;

use crate::config::Config;
use crate::server::listener::resolve_group;

/// What the checks produced and start-up uses later.
#[derive(Debug)]
pub(crate) struct Preflight {
    /// `socket_group` resolved.
    pub(crate) socket_gid: Option<u32>,
    /// `metrics_listen`, bound now so nothing can take it meanwhile.
    pub(crate) metrics: Option<TcpListener>,
}

/// Every local precondition; the errors name the key. With `dry_run`
/// nothing is left behind (no directory created, no port kept).
pub(crate) fn check(cfg: &Config, dry_run: bool) -> Result<Preflight, Vec<String>> {
    let mut problems = Vec::new();
    let socket_gid = match &cfg.socket_group {
        Some(g) => match resolve_group(g).and_then(group_exists) {
            Ok(gid) => Some(gid),
            Err(e) => {
                problems.push(format!("socket_group {g}: {e}"));
                None
            }
        },
        None => None,
    };
    let metrics = match cfg.metrics_listen {
        Some(addr) => match TcpListener::bind(addr) {
            Ok(l) => (!dry_run).then_some(l),
            Err(e) => {
                problems.push(format!("metrics_listen {addr}: cannot bind: {e}"));
                None
            }
        },
        None => None,
    };
    // An inherited socket (systemd socket activation) needs no directory.
    if std::env::var_os("LISTEN_FDS").is_none() {
        if let Some(dir) = cfg.socket_path.parent() {
            if let Err(e) = directory_can_exist(dir, dry_run) {
                problems.push(format!(
                    "socket_path {}: its directory {} {e}",
                    cfg.socket_path.display(),
                    dir.display()
                ));
            }
        }
    }
    if problems.is_empty() {
        Ok(Preflight {
            socket_gid,
            metrics,
        })
    } else {
        Err(problems)
    }
}

/// A numeric gid with no group behind it cannot be meant: the socket
/// would belong to a group nobody can join.
fn group_exists(gid: u32) -> std::io::Result<u32> {
    match nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid))? {
        Some(_) => Ok(gid),
        None => Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("no group has gid {gid} (create it, or name an existing group)"),
        )),
    }
}

/// Creates `dir` (or, for a dry run, checks that it could be created: its
/// nearest existing ancestor is a writable directory).
fn directory_can_exist(dir: &Path, dry_run: bool) -> Result<(), String> {
    if dir.is_dir() {
        return Ok(());
    }
    if !dry_run {
        return std::fs::create_dir_all(dir).map_err(|e| format!("cannot be created: {e}"));
    }
    let mut cur = dir;
    while let Some(parent) = cur.parent() {
        if parent.exists() {
            if !parent.is_dir() {
                return Err(format!(
                    "cannot be created: {} is not a directory",
                    parent.display()
                ));
            }
            return nix::unistd::access(parent, nix::unistd::AccessFlags::W_OK).map_err(|e| {
                format!(
                    "cannot be created: {} is not writable ({e})",
                    parent.display()
                )
            });
        }
        cur = parent;
    }
    Ok(())
}
