//! README's "Try eniip-cni without a cloud": `eniipd --simulate
//! --simulate-links` and Debian's podman on the shipped
//! `cni/eniip.conflist`, unchanged. The "host" is a network namespace the
//! test creates (with a global address of its own, as a host's `eth0`
//! has), so eniipd's links, eniip-cni's rules and every packet stay in
//! namespaces made here and on loopback.
//!
//! Shows: the emulated ENIs appear as links carrying the ENI's MAC; a
//! container on the `eniip` network gets an address eniipd lists for it
//! and pings the gateway the banner names; `podman rm` gives it back; at
//! SIGTERM eniipd exits 0 and every link it made is gone, and so is its
//! VPC namespace (nothing holds it any more: no process, no open file, no
//! mount); after SIGKILL the kernel takes the namespace and the links
//! along all the same.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::cnienv::{self, sh, tag, Netns};
use crate::common::{ask, eventually, tempdir, try_ask};
use crate::podman::{one_at_a_time, Podman};

/// The host's own address (on `lo`, global scope, as an `eth0`'s).
const HOST_ADDR: &str = "10.250.0.2";

/// Panics, naming what is missing, unless the test can run here: it
/// must not pass without having run.
fn require(tools: &[&str]) {
    let mut missing = Vec::new();
    if !nix::unistd::geteuid().is_root() {
        missing.push("root".to_string());
    }
    for t in tools {
        let found = match t.starts_with('/') {
            true => Path::new(t).exists(),
            false => Command::new("sh")
                .arg("-c")
                .arg(format!("command -v {t}"))
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success()),
        };
        if !found {
            missing.push(t.to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "the demo test needs {} (run the tests as root on Debian 12 with \
         podman, containernetworking-plugins and busybox-static installed)",
        missing.join(", ")
    );
}

/// `eniipd --simulate --simulate-links` running in `host`, killed on drop
/// if the test did not stop it.
struct Demo {
    child: Child,
    out: PathBuf,
    socket: PathBuf,
}

impl Demo {
    fn start(host: &Netns, state: &Path, dir: &Path, n: usize) -> Demo {
        let out = dir.join(format!("eniipd-{n}.out"));
        let err = dir.join(format!("eniipd-{n}.err"));
        let child = Command::new("nsenter")
            .arg(format!("--net={}", host.path().display()))
            .arg(env!("CARGO_BIN_EXE_eniipd"))
            .args(["--simulate", "--simulate-links", "--state-dir"])
            .arg(state)
            .env_remove("NOTIFY_SOCKET")
            .env_remove("LISTEN_FDS")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        let d = Demo {
            child,
            out,
            socket: state.join("eniipd.sock"),
        };
        let ready = eventually(Duration::from_secs(60), || {
            try_ask(&d.socket, "ping").is_some_and(|r| r == "OK pong") && d.banner().is_some()
        });
        assert!(
            ready,
            "the demo is not ready:\n{}\n{}",
            std::fs::read_to_string(&d.out).unwrap_or_default(),
            std::fs::read_to_string(&err).unwrap_or_default()
        );
        d
    }

    /// eniipd's pid (nsenter execs it).
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// From the banner's `links:` line: the gateway and the VPC
    /// namespace's path.
    fn banner(&self) -> Option<(String, String)> {
        let text = std::fs::read_to_string(&self.out).ok()?;
        let line = text.lines().find(|l| l.starts_with("links:"))?;
        let gw = line.split_once("(gateway ")?.1.split_once(')')?.0;
        let path = line.split_once("nsenter --net=")?.1.trim();
        Some((gw.to_string(), path.to_string()))
    }

    /// The VPC namespace's inode, read from the link to it (not opened:
    /// an open file would keep it alive).
    fn vpc_inode(&self) -> String {
        let (_, path) = self.banner().unwrap();
        let target = std::fs::read_link(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let t = target.display().to_string();
        assert!(t.starts_with("net:["), "{path} -> {t}");
        t
    }

    /// The links eniipd made in the host namespace.
    fn links(&self, host: &Netns) -> Vec<String> {
        let prefix = format!("es{:x}n", self.pid());
        sh(&["ip", "-n", &host.name, "-o", "link"])
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .map(|n| n.split('@').next().unwrap_or(n).to_string())
            .filter(|n| n.starts_with(&prefix))
            .collect()
    }

    fn signal(&mut self, sig: Signal) -> std::process::ExitStatus {
        kill(Pid::from_raw(self.pid() as i32), sig).unwrap();
        let mut status = None;
        let exited = eventually(Duration::from_secs(20), || {
            status = self.child.try_wait().unwrap();
            status.is_some()
        });
        assert!(exited, "eniipd did not exit on {sig}");
        status.unwrap()
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What still holds the namespace `ns` (`net:[INODE]`): a process in it,
/// an open file of it, a mount of it. Empty: the kernel has removed it.
fn holders(ns: &str) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return vec!["/proc unreadable".into()];
    };
    for p in procs.flatten() {
        let pid = p.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let base = p.path();
        let tasks = std::fs::read_dir(base.join("task"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|t| t.path().join("ns/net"));
        let fds = std::fs::read_dir(base.join("fd"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|f| f.path());
        for l in tasks.chain(fds) {
            if std::fs::read_link(&l).is_ok_and(|t| t.as_os_str() == ns) {
                found.push(l.display().to_string());
            }
        }
        if std::fs::read_to_string(base.join("mountinfo")).is_ok_and(|m| m.contains(ns)) {
            found.push(format!("a mount seen by pid {pid}"));
        }
    }
    found
}

/// eniipd's `list` row of `ip`: (state, owner).
fn row(socket: &Path, ip: &str) -> Option<(String, String)> {
    crate::common::list_rows(&ask(socket, "list"))
        .into_iter()
        .find(|l| l.ip.to_string() == ip)
        .map(|l| (l.state, l.owner.unwrap_or_else(|| "-".into())))
}

#[test]
fn podman_on_the_simulated_links_pings_its_gateway_and_the_demo_leaves_nothing() {
    require(&[
        "ip",
        "nsenter",
        "unshare",
        "podman",
        "runc",
        "conmon",
        "busybox",
        "tar",
        "/usr/lib/cni/portmap",
        "/usr/lib/cni/bandwidth",
    ]);
    let _serial = one_at_a_time();
    let host = Netns::new(&format!("eniip-demo-{}", tag()));
    sh(&[
        "ip",
        "-n",
        &host.name,
        "addr",
        "add",
        &format!("{HOST_ADDR}/32"),
        "dev",
        "lo",
    ]);
    let dir = tempdir("demo");
    let state = dir.join("state");

    let mut demo = Demo::start(&host, &state, &dir, 1);
    let (gateway, _) = demo.banner().unwrap();
    assert_eq!(gateway, cnienv::GATEWAY);
    let vpc = demo.vpc_inode();
    // The demo's pool starts empty: no ENI yet, no link.
    assert_eq!(demo.links(&host), Vec::<String>::new());

    let pm = Podman::shipped(&host.name, &demo.socket);
    pm.ok(&[
        "run",
        "-d",
        "--name",
        "demo",
        "--network",
        "eniip",
        "localhost/eniip-bb:1",
        "sleep",
        "600",
    ]);
    let (_, ip) = pm.address("demo", "eniip");
    // Its address came with the first ENI, which appeared as a link.
    assert!(
        !demo.links(&host).is_empty(),
        "{}",
        sh(&["ip", "-n", &host.name, "link"])
    );
    let (st, owner) = row(&demo.socket, &ip).unwrap_or_default();
    assert_eq!(st, "inuse", "{:?}", ask(&demo.socket, "list"));
    assert!(owner.starts_with("eniip/"), "{owner}");
    let out = pm.run(&["exec", "demo", "ping", "-c", "1", "-W", "2", &gateway]);
    assert!(
        out.status.success(),
        "ping {gateway}: {}{}\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        sh(&["ip", "-n", &host.name, "link"]),
        sh(&["ip", "-n", &host.name, "neigh"])
    );
    pm.ok(&["rm", "-f", "-t", "0", "demo"]);
    assert_eq!(row(&demo.socket, &ip).map(|r| r.0).as_deref(), Some("idle"));
    let rules = sh(&["ip", "-n", &host.name, "rule"]);
    assert!(!rules.contains(&ip), "{rules}");

    // SIGTERM: a clean stop, and nothing of the demo is left.
    let made = demo.links(&host);
    // What the checks below must find gone is there while it runs.
    assert!(!holders(&vpc).is_empty(), "nothing holds {vpc}");
    assert!(demo.signal(Signal::SIGTERM).success());
    let left = demo.links(&host);
    assert!(
        left.is_empty(),
        "after SIGTERM, {left:?} are left of {made:?}"
    );
    assert!(
        eventually(Duration::from_secs(10), || holders(&vpc).is_empty()),
        "after SIGTERM, the VPC namespace {vpc} is held by {:?}",
        holders(&vpc)
    );

    // SIGKILL: the restored demo's ENI comes back as a link, and goes
    // with the process.
    let mut demo = Demo::start(&host, &state, &dir, 2);
    let vpc = demo.vpc_inode();
    assert!(
        eventually(Duration::from_secs(30), || !demo.links(&host).is_empty()),
        "no ENI link after the restart:\n{}",
        sh(&["ip", "-n", &host.name, "link"])
    );
    assert!(!holders(&vpc).is_empty(), "nothing holds {vpc}");
    demo.signal(Signal::SIGKILL);
    assert!(
        eventually(Duration::from_secs(10), || demo.links(&host).is_empty()
            && holders(&vpc).is_empty()),
        "after SIGKILL: links {:?}, the VPC namespace held by {:?}",
        demo.links(&host),
        holders(&vpc)
    );
    drop(pm);
    drop(demo);
    let _ = std::fs::remove_dir_all(&dir);
}
