//! The shipped conflists as they are: `cni/eniip.conflist` and
//! `cni/eniip-1.1.conflist` name eniipd's socket `/run/eniipd/eniipd.sock`,
//! the test's eniipd has its own. What runs a shipped conflist (the
//! plugins, containerd, podman) runs in a private mount namespace with the
//! test's socket on `/run/eniipd` ([`ShippedSocket`], [`MountHolder`]), so
//! the file is used byte for byte; and a conflist is run the way libcni
//! runs it ([`plugin_conf`], [`plugin_bin`]).

// `pub` here means "for the tests", not an API (as in cnienv).
#![allow(unreachable_pub, missing_debug_implementations)]
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::cnienv::{plugin, s};
use crate::common::eventually;

/// To run a shipped conflist byte for byte,
/// what runs it (the plugins, a runtime) runs in a private mount namespace
/// where a folder holding `eniipd.sock` (a symlink to the test's socket) is
/// bind-mounted on `/run/eniipd`. The host's `/run/eniipd` is only ever a
/// mount point: an empty folder, created if missing and left in place
/// (another test may be using it as its own mount point).
pub struct ShippedSocket {
    dir: PathBuf,
}

/// The path the shipped conflists name.
pub const SHIPPED_SOCKET: &str = "/run/eniipd/eniipd.sock";

impl ShippedSocket {
    pub fn new(socket: &Path) -> ShippedSocket {
        let dir = crate::common::tempdir("shipsock");
        std::os::unix::fs::symlink(socket, dir.join("eniipd.sock")).unwrap();
        std::fs::create_dir_all("/run/eniipd").unwrap();
        ShippedSocket { dir }
    }

    /// The command prefix: a private mount namespace with the socket
    /// folder on `/run/eniipd`, then the command (`"$@"`).
    pub fn wrap(&self) -> Vec<String> {
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            "mount --bind \"$0\" /run/eniipd && exec \"$@\"",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([s(&self.dir)])
        .collect()
    }
}

impl Drop for ShippedSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A shipped conflist (`cni/<name>`), as it is.
pub fn shipped_conflist(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("cni").join(name);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The plugin's binary for a conflist `type`: ours, or the reference
/// plugin of that name in /usr/lib/cni (Debian's).
pub fn plugin_bin(kind: &str) -> String {
    if kind == "eniip-cni" {
        plugin().to_string()
    } else {
        format!("/usr/lib/cni/{kind}")
    }
}

/// One plugin's configuration as libcni builds it from a conflist entry:
/// the list's `cniVersion` and `name`, and the result so far.
pub fn plugin_conf(list: &Value, plugin: &Value, prev: &Value) -> Value {
    let mut c = plugin.clone();
    c["cniVersion"] = list["cniVersion"].clone();
    c["name"] = list["name"].clone();
    if !prev.is_null() {
        c["prevResult"] = prev.clone();
    }
    c
}

/// A process that holds one private mount namespace with
/// [`ShippedSocket`]'s folder on `/run/eniipd`, for runtimes made of many
/// short commands (podman): each enters it (`nsenter -t PID -m`), so the
/// network namespaces one command mounts are there for the next. Killed
/// (by its pid) on drop, which ends the namespace.
pub struct MountHolder {
    child: std::process::Child,
    _ship: ShippedSocket,
}

impl MountHolder {
    pub fn new(socket: &Path) -> MountHolder {
        let ship = ShippedSocket::new(socket);
        let argv = ship.wrap();
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            // Bounded: a test lasts minutes at most.
            .args(["busybox", "sleep", "1800"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let h = MountHolder { child, _ship: ship };
        let mountinfo = format!("/proc/{}/mountinfo", h.child.id());
        assert!(
            eventually(Duration::from_secs(10), || {
                std::fs::read_to_string(&mountinfo).is_ok_and(|m| m.contains(" /run/eniipd "))
            }),
            "the mount holder did not mount /run/eniipd"
        );
        h
    }

    /// `nsenter` arguments that enter its mount namespace.
    pub fn enter(&self) -> Vec<String> {
        vec!["-t".into(), self.child.id().to_string(), "-m".into()]
    }
}

impl Drop for MountHolder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
