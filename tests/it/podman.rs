//! Debian's podman (CNI backend) with runc, driven as the tests need it:
//! in a test's node namespace (`nsenter --net`, which, unlike `ip netns
//! exec`, keeps /sys and the cgroup tree podman and runc need), with
//! private storage, run root, network and plugin folders, and an image
//! imported from busybox-static (nothing is pulled). Used by
//! [`crate::cni_podman`] and [`crate::cni_demo`].

// `pub` here means "for the tests", not an API (as in cnienv).
#![allow(unreachable_pub, missing_debug_implementations)]
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

use crate::cnienv::{self, sh};
use crate::common;

/// One podman test at a time: podman instances with private roots still
/// share run-time state (`podman system reset` at the end of one test
/// left the other's containers without their network).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

pub struct Podman {
    pub dir: PathBuf,
    pub node: String,
    /// The network's name (the shipped conflist's `eniip`, or the test's).
    pub net: String,
    /// `nsenter` arguments entering the mount namespace where the shipped
    /// conflist's socket path is the test's eniipd (empty: none needed).
    pub enter: Vec<String>,
    pub holder: Option<std::sync::Arc<crate::shipped::MountHolder>>,
}

impl Podman {
    /// podman in the namespace `node` on the shipped
    /// `cni/eniip.conflist`, installed unchanged the way README says, its
    /// socket path made the test's eniipd at `socket`
    /// ([`crate::shipped::MountHolder`]).
    pub fn shipped(node: &str, socket: &Path) -> Podman {
        let mut p = Podman::with_plugins(node, "eniip", None);
        let conflist = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("cni/eniip.conflist");
        sh(&[
            "install",
            "-m",
            "0644",
            &conflist.display().to_string(),
            &p.dir.join("net/10-eniip.conflist").display().to_string(),
        ]);
        let holder = crate::shipped::MountHolder::new(socket);
        p.enter = holder.enter();
        p.holder = Some(std::sync::Arc::new(holder));
        p
    }

    /// podman in the namespace `node` on a conflist of the test's own
    /// named `network` (`plugins`; none: no conflist is written, the
    /// caller puts one there).
    pub fn with_plugins(node: &str, network: &str, plugins: Option<Value>) -> Podman {
        let dir = common::tempdir("podman");
        for d in [
            "root",
            "runroot",
            "net",
            "plugins",
            "rootfs/bin",
            "rootfs/www",
        ] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        // An eniip-cni someone installed in /usr/lib/cni (as README says)
        // is not the one under test.
        for e in std::fs::read_dir("/usr/lib/cni").unwrap().flatten() {
            if e.file_name() != "eniip-cni" {
                std::os::unix::fs::symlink(e.path(), dir.join("plugins").join(e.file_name()))
                    .unwrap();
            }
        }
        std::os::unix::fs::symlink(cnienv::plugin(), dir.join("plugins/eniip-cni")).unwrap();
        let conf = format!(
            r#"[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{d}/events.log"
[containers]
default_ulimits = ["nofile=16384:16384", "nproc=16384:16384"]
[network]
network_backend = "cni"
network_config_dir = "{d}/net"
cni_plugin_dirs = ["{d}/plugins"]
"#,
            d = dir.display()
        );
        std::fs::write(dir.join("containers.conf"), conf).unwrap();
        if let Some(plugins) = plugins {
            let conflist = json!({
                "cniVersion": "1.0.0",
                "name": network,
                "plugins": plugins,
            });
            std::fs::write(
                dir.join("net").join(format!("{network}.conflist")),
                serde_json::to_vec_pretty(&conflist).unwrap(),
            )
            .unwrap();
        }
        // The image: busybox-static and its applets.
        let rootfs = dir.join("rootfs");
        std::fs::copy("/bin/busybox", rootfs.join("bin/busybox")).unwrap();
        for a in ["sh", "ping", "ping6", "httpd", "sleep", "ip", "cat"] {
            std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(a)).unwrap();
        }
        std::fs::write(rootfs.join("www/index.html"), "hello-from-the-pod\n").unwrap();
        sh(&[
            "tar",
            "-C",
            &rootfs.display().to_string(),
            "-cf",
            &dir.join("bb.tar").display().to_string(),
            ".",
        ]);
        let p = Podman {
            dir,
            node: node.to_string(),
            net: network.to_string(),
            enter: Vec::new(),
            holder: None,
        };
        let out = p.run(&[
            "import",
            &p.dir.join("bb.tar").display().to_string(),
            "localhost/eniip-bb:1",
        ]);
        assert!(
            out.status.success(),
            "import: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        p
    }

    pub fn run(&self, args: &[&str]) -> Output {
        Command::new("nsenter")
            .args(&self.enter)
            .arg(format!("--net=/run/netns/{}", self.node))
            .arg("podman")
            .arg("--root")
            .arg(self.dir.join("root"))
            .arg("--runroot")
            .arg(self.dir.join("runroot"))
            .arg("--storage-driver")
            .arg("vfs")
            .args(args)
            .env("CONTAINERS_CONF", self.dir.join("containers.conf"))
            .output()
            .unwrap()
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "podman {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The container's id and address on `net`.
    pub fn address(&self, name: &str, net: &str) -> (String, String) {
        let v: Value = serde_json::from_str(&self.ok(&["inspect", name])).unwrap();
        let id = v[0]["Id"].as_str().unwrap().to_string();
        let ip = v[0]["NetworkSettings"]["Networks"][net]["IPAddress"]
            .as_str()
            .unwrap_or_else(|| panic!("no address for {name}: {v}"))
            .to_string();
        (id, ip)
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        // eniipd still runs (the World is dropped after us): DELs succeed.
        let _ = self.run(&["rm", "-af", "-t", "0"]);
        let _ = self.run(&["system", "reset", "-f"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
