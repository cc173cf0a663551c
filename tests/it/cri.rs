//! Debian's containerd, started by a test with its own config, root,
//! state and socket, driven over its CRI socket the way a kubelet does
//! (`tests/it/cri.py`, PyPI's `container-runtime-interface-api` with
//! `grpcio` in the venv `.ci/run` makes under `target/cri-venv`).
//!
//! containerd runs in the test's node namespace (`nsenter --net`, keeping
//! /sys and the cgroup tree runc needs) and in a private mount namespace
//! where the test's eniipd socket is on `/run/eniipd`
//! ([`ShippedSocket`]), so the shipped conflist is installed
//! byte for byte. Its CNI bin dir holds eniip-cni and Debian's reference
//! plugins, its conf dir the shipped conflist; its sandbox image is built
//! offline from busybox-static and imported with `ctr images import`, so
//! it never pulls. On drop every sandbox is stopped and removed, then
//! containerd and any shim of its socket are stopped.

// `pub` here means "for the tests", not an API (as in cnienv).
#![allow(unreachable_pub, missing_debug_implementations)]
// The benchmark uses part of it.
#![allow(dead_code)]

use crate::cnienv::{self, World};
use crate::shipped::ShippedSocket;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

/// The sandbox image containerd is told to use (imported, never pulled).
pub const SANDBOX_IMAGE: &str = "docker.io/eniip-test/pause:1";

/// The CRI client's Python (the venv `.ci/run` makes).
pub fn python() -> String {
    std::env::var("ENIIPD_CRI_PYTHON")
        .unwrap_or_else(|_| format!("{}/target/cri-venv/bin/python", env!("CARGO_MANIFEST_DIR")))
}

/// What the containerd tests need, for [`cnienv::can_run`].
pub fn tools() -> Vec<String> {
    vec![
        "containerd".into(),
        "ctr".into(),
        "runc".into(),
        "nsenter".into(),
        "unshare".into(),
        "busybox".into(),
        "/usr/lib/cni/portmap".into(),
        "/usr/lib/cni/bandwidth".into(),
        "/usr/lib/cni/loopback".into(),
        python(),
    ]
}

/// A pod's state as PodSandboxStatus gives it.
#[derive(Debug, Clone)]
pub struct PodStatus {
    pub state: String,
    pub ip: String,
    pub pid: u64,
    pub netns: String,
}

pub struct Containerd {
    child: Option<Child>,
    pub dir: PathBuf,
    pub socket: PathBuf,
    _ship: Option<ShippedSocket>,
    _link: Option<HostSocketLink>,
}

/// A node's paths for [`Containerd::start_as_node`], in containerd's
/// private mount namespace, whose mounts are shared within it (so
/// `HostToContainer` propagation works as on a node whose `/` is a shared
/// mount, systemd's default). First each `tmpfs` folder gets an empty
/// tmpfs there (hiding the host's, for containerd only), then each test
/// folder of `binds` is bind-mounted on its node path: made inside a
/// tmpfs of `tmpfs`, else an existing folder of the host (or one made
/// empty on `/run` and left there, as [`ShippedSocket`] leaves
/// `/run/eniipd`). Nothing else of the host is created or changed.
pub struct NodeMounts {
    pub tmpfs: Vec<&'static str>,
    pub binds: Vec<(PathBuf, &'static str)>,
}

/// The shipped socket path in the host's own mount namespace, as a
/// symlink to the test's socket, for a containerd that must share the
/// host's mounts: the network namespaces it mounts under /var/run/netns
/// are then seen by eniipd (its sandbox reaper), as on a node. Refused if
/// something is there already (a real eniipd); removed at drop.
/// (A second containerd of the same test shares the first one's link.)
struct HostSocketLink(Option<PathBuf>);

impl HostSocketLink {
    fn new(socket: &Path) -> HostSocketLink {
        let link = PathBuf::from(crate::shipped::SHIPPED_SOCKET);
        std::fs::create_dir_all("/run/eniipd").unwrap();
        if std::fs::read_link(&link).is_ok_and(|t| t == socket) {
            return HostSocketLink(None);
        }
        assert!(
            std::fs::symlink_metadata(&link).is_err(),
            "{} exists (an eniipd runs on this host?): this test needs the path for itself",
            link.display()
        );
        std::os::unix::fs::symlink(socket, &link).unwrap();
        HostSocketLink(Some(link))
    }
}

impl Drop for HostSocketLink {
    fn drop(&mut self) {
        if let Some(l) = &self.0 {
            let _ = std::fs::remove_file(l);
        }
    }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// A docker archive of an image whose only file is busybox-static and
/// whose entrypoint sleeps (a pause container needs nothing else).
fn sandbox_image(dir: &Path) -> PathBuf {
    let img = dir.join("image");
    let root = img.join("rootfs");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::copy("/bin/busybox", root.join("bin/busybox")).unwrap();
    let layer = img.join("layer.tar");
    cnienv::sh(&[
        "tar",
        "--owner=0",
        "--group=0",
        "-C",
        &cnienv::s(&root),
        "-cf",
        &cnienv::s(&layer),
        "bin",
    ]);
    let sum = cnienv::sh(&["sha256sum", &cnienv::s(&layer)]);
    let digest = sum.split(' ').next().unwrap().to_string();
    let config = json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": ["/bin/busybox", "sleep", "2147483647"]},
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{digest}")]},
    });
    write(&img.join("config.json"), &config.to_string());
    let manifest = json!([{
        "Config": "config.json",
        "RepoTags": ["eniip-test/pause:1"],
        "Layers": ["layer.tar"],
    }]);
    write(&img.join("manifest.json"), &manifest.to_string());
    let archive = dir.join("pause.tar");
    cnienv::sh(&[
        "tar",
        "-C",
        &cnienv::s(&img),
        "-cf",
        &cnienv::s(&archive),
        "manifest.json",
        "config.json",
        "layer.tar",
    ]);
    archive
}

/// Debian's reference plugins, linked into `bin`; an eniip-cni someone
/// installed in /usr/lib/cni (as README says) is not the one under test.
fn link_reference_plugins(bin: &Path) {
    for p in std::fs::read_dir("/usr/lib/cni").unwrap().flatten() {
        if p.file_name() != "eniip-cni" {
            std::os::unix::fs::symlink(p.path(), bin.join(p.file_name())).unwrap();
        }
    }
}

/// containerd's config: everything under `dir`, CNI from `dir`'s folders,
/// the imported sandbox image, the native snapshotter (works on any
/// filesystem the test's temporary folder is on).
fn config(dir: &Path) -> String {
    let d = cnienv::s(dir);
    config_with_cni(dir, &format!("{d}/bin"), &format!("{d}/net.d"))
}

/// [`config`] with the CNI folders `bin` and `conf`.
fn config_with_cni(dir: &Path, bin: &str, conf: &str) -> String {
    let d = cnienv::s(dir);
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{SANDBOX_IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # A negative oom_score_adj for the sandbox needs CAP_SYS_RESOURCE a
  # containerized CI may lack: keep the runtime's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{bin}"
    conf_dir = "{conf}"
    max_conf_num = 1
"#
    )
}

impl Containerd {
    /// Starts containerd for `w` with the shipped conflist installed the
    /// way README says, and imports the sandbox image. It runs in a
    /// private mount namespace (the shipped socket path bind-mounted
    /// there), so the netns it mounts are its own.
    pub fn start(w: &World) -> Containerd {
        Containerd::start_with(w, false)
    }

    /// As [`Containerd::start`], in the host's mount namespace: the netns
    /// it mounts are seen by eniipd, as on a node.
    pub fn start_in_host_mounts(w: &World) -> Containerd {
        Containerd::start_with(w, true)
    }

    /// containerd as on a node: CNI from its default folders
    /// (`/opt/cni/bin`, `/etc/cni/net.d`), which `node` binds from test
    /// folders, with nothing installed there: whatever the node's pods
    /// need (eniip-cni, the conflist) is put there by what runs on it.
    /// Debian's reference plugins are linked into the folder bound on
    /// `/opt/cni/bin`, as a node's package would have installed them.
    pub fn start_as_node(w: &World, node: &NodeMounts) -> Containerd {
        let dir = crate::common::tempdir("containerd");
        let bin = node
            .binds
            .iter()
            .find(|(_, n)| *n == "/opt/cni/bin")
            .map(|(d, _)| d.clone())
            .expect("a node binds /opt/cni/bin");
        link_reference_plugins(&bin);
        let cfg = dir.join("config.toml");
        write(
            &cfg,
            &config_with_cni(&dir, "/opt/cni/bin", "/etc/cni/net.d"),
        );
        let mut script = String::from("mount --make-rshared / ");
        let mut argv = vec![format!("--net={}", cnienv::s(&w.node.path()))];
        argv.extend(["unshare", "-m", "--propagation", "private", "sh", "-c"].map(String::from));
        for t in &node.tmpfs {
            assert!(Path::new(t).is_dir(), "{t}: no such folder to cover");
            script.push_str(&format!("&& mount -t tmpfs -o mode=0755 tmpfs {t} "));
        }
        let mut sources = Vec::new();
        for (i, (src, at)) in node.binds.iter().enumerate() {
            if node.tmpfs.iter().any(|t| Path::new(at).starts_with(t)) {
                script.push_str(&format!("&& mkdir -p {at} "));
            } else {
                assert!(
                    Path::new(at).is_dir() || at.starts_with("/run/"),
                    "{at} is not on this host: it would have to be made"
                );
                std::fs::create_dir_all(at).unwrap();
            }
            std::fs::create_dir_all(src).unwrap();
            script.push_str(&format!("&& mount --bind \"${{{}}}\" {at} ", i + 1));
            sources.push(cnienv::s(src));
        }
        script.push_str("&& shift $0 && exec \"$@\"");
        argv.push(script);
        argv.push(sources.len().to_string());
        argv.extend(sources);
        argv.extend(["containerd".into(), "--config".into(), cnienv::s(&cfg)]);
        Containerd::spawn(dir, &argv, None, None)
    }

    /// The pid of containerd (its mount namespace is the node's for
    /// what plays kubelet).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("containerd runs").id()
    }

    /// Imports an image archive into the k8s.io namespace, as an operator
    /// does on an air-gapped node (`ctr -n k8s.io images import`).
    pub fn import(&self, archive: &Path) -> String {
        cnienv::sh(&[
            "ctr",
            "--address",
            &cnienv::s(&self.socket),
            "-n",
            "k8s.io",
            "images",
            "import",
            "--snapshotter",
            "native",
            &cnienv::s(archive),
        ])
    }

    /// As [`Containerd::start`], with `conflist` as its one network
    /// configuration and each binary of `instead` (a plugin's name and
    /// the file to run for it: a benchmark's timing wrapper) linked into
    /// its bin dir in place of the plugin of that name.
    pub fn start_with_conflist(
        w: &World,
        conflist: &Value,
        instead: &[(&str, PathBuf)],
    ) -> Containerd {
        let dir = crate::common::tempdir("containerd");
        let (bin, netd) = (dir.join("bin"), dir.join("net.d"));
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&netd).unwrap();
        link_reference_plugins(&bin);
        for (name, file) in instead {
            let _ = std::fs::remove_file(bin.join(name));
            std::os::unix::fs::symlink(file, bin.join(name)).unwrap();
        }
        write(&netd.join("10-bench.conflist"), &conflist.to_string());
        Containerd::start_in(w, dir, false)
    }

    fn start_with(w: &World, host_mounts: bool) -> Containerd {
        let dir = crate::common::tempdir("containerd");
        let (bin, netd) = (dir.join("bin"), dir.join("net.d"));
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&netd).unwrap();
        // README: install -m 0755 eniip-cni <bin dir>, install -m 0644
        // cni/eniip.conflist <conf dir>/10-eniip.conflist.
        cnienv::sh(&["install", "-m", "0755", cnienv::plugin(), &cnienv::s(&bin)]);
        let conflist = Path::new(env!("CARGO_MANIFEST_DIR")).join("cni/eniip.conflist");
        cnienv::sh(&[
            "install",
            "-m",
            "0644",
            &cnienv::s(&conflist),
            &cnienv::s(&netd.join("10-eniip.conflist")),
        ]);
        link_reference_plugins(&bin);
        Containerd::start_in(w, dir, host_mounts)
    }

    /// containerd on `dir`, whose `bin` and `net.d` are filled.
    fn start_in(w: &World, dir: PathBuf, host_mounts: bool) -> Containerd {
        let cfg = dir.join("config.toml");
        write(&cfg, &config(&dir));
        let (ship, link) = if host_mounts {
            (None, Some(HostSocketLink::new(&w.socket())))
        } else {
            (Some(ShippedSocket::new(&w.socket())), None)
        };
        let mut argv = vec![format!("--net={}", cnienv::s(&w.node.path()))];
        if let Some(ship) = &ship {
            argv.extend(ship.wrap());
        }
        argv.extend(["containerd".into(), "--config".into(), cnienv::s(&cfg)]);
        Containerd::spawn(dir, &argv, ship, link)
    }

    /// Runs `nsenter ARGV` (ending in containerd), waits for its CRI and
    /// imports the sandbox image.
    fn spawn(
        dir: PathBuf,
        argv: &[String],
        ship: Option<ShippedSocket>,
        link: Option<HostSocketLink>,
    ) -> Containerd {
        let log = std::fs::File::create(dir.join("containerd.log")).unwrap();
        let child = Command::new("nsenter")
            .args(argv)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let c = Containerd {
            child: Some(child),
            socket: dir.join("containerd.sock"),
            dir,
            _ship: ship,
            _link: link,
        };
        let up = crate::common::eventually(Duration::from_secs(30), || {
            c.socket.exists() && c.cri(&["list"]).is_ok()
        });
        assert!(up, "containerd did not come up: {}", c.log());
        let archive = sandbox_image(&c.dir);
        c.import(&archive);
        c
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default()
    }

    /// One CRI call: its JSON answer, or the RPC error's text.
    pub fn cri(&self, args: &[&str]) -> Result<Value, String> {
        let out = Command::new(python())
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/cri.py"))
            .arg(&self.socket)
            .args(args)
            .output()
            .map_err(|e| format!("python: {e}"))?;
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if out.status.success() {
            Ok(v)
        } else {
            Err(format!(
                "{} {}",
                v["error"].as_str().unwrap_or(""),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// RunPodSandbox: the sandbox id and the call's own duration.
    pub fn run_pod(&self, name: &str, ns: &str) -> Result<(String, f64), String> {
        self.run_pod_annotated(name, ns, &json!({}))
    }

    /// RunPodSandbox of a pod with `annotations` (a JSON object of
    /// strings, as a kubelet passes a pod's).
    pub fn run_pod_annotated(
        &self,
        name: &str,
        ns: &str,
        annotations: &Value,
    ) -> Result<(String, f64), String> {
        let uid = format!("uid-{name}");
        let v = self.cri(&["run", name, ns, &uid, &annotations.to_string()])?;
        Ok((
            v["id"].as_str().unwrap_or("").to_string(),
            v["seconds"].as_f64().unwrap_or(0.0),
        ))
    }

    pub fn status(&self, id: &str) -> PodStatus {
        let v = self
            .cri(&["status", id])
            .unwrap_or_else(|e| panic!("PodSandboxStatus {id}: {e}"));
        PodStatus {
            state: v["state"].as_str().unwrap_or("").to_string(),
            ip: v["ip"].as_str().unwrap_or("").to_string(),
            pid: v["pid"].as_u64().unwrap_or(0),
            netns: v["netns"].as_str().unwrap_or("").to_string(),
        }
    }

    pub fn stop(&self, id: &str) -> Result<(), String> {
        self.cri(&["stop", id]).map(drop)
    }

    pub fn remove(&self, id: &str) -> Result<(), String> {
        self.cri(&["remove", id]).map(drop)
    }

    /// ListPodSandbox: the ids.
    pub fn list(&self) -> Vec<String> {
        let v = self
            .cri(&["list"])
            .unwrap_or_else(|e| panic!("ListPodSandbox: {e}"));
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["id"].as_str().map(String::from))
            .collect()
    }

    /// Pings `dst` once from inside the sandbox whose pause process is
    /// `pid`.
    pub fn ping_from(&self, pid: u64, dst: &str) -> bool {
        Command::new("nsenter")
            .args([
                "-t",
                &pid.to_string(),
                "-n",
                "busybox",
                "ping",
                "-c",
                "1",
                "-W",
                "2",
                dst,
            ])
            .output()
            .is_ok_and(|o| o.status.success())
    }

    /// The shim serving sandbox `id`, if one runs.
    pub fn shim_of(&self, id: &str) -> Option<i32> {
        self.shims().into_iter().find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(id))
        })
    }

    /// containerd dies (SIGKILL) as in a crash; its shims and pods stay.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Pids of the shims serving this containerd (they outlive it).
    fn shims(&self) -> Vec<i32> {
        let sock = cnienv::s(&self.socket);
        let mut pids = Vec::new();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd);
            if cmd.contains("containerd-shim") && cmd.contains(&sock) {
                pids.push(pid);
            }
        }
        pids
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        // Bounded: one pass over what containerd still lists.
        if let Ok(v) = self.cri(&["list"]) {
            for s in v.as_array().into_iter().flatten() {
                if let Some(id) = s["id"].as_str() {
                    let _ = self.stop(id);
                    let _ = self.remove(id);
                }
            }
        }
        let shims = self.shims();
        if let Some(mut c) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(c.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let _ = crate::common::eventually(Duration::from_secs(10), || {
                c.try_wait().ok().flatten().is_some()
            });
            let _ = c.kill();
            let _ = c.wait();
        }
        for pid in shims {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        // A sandbox containerd no longer lists (one it forgot across a
        // restart, one a test left to the reaper) keeps its shm and rootfs
        // mounted under the state directory: they go too, always.
        unmount_below(&self.dir);
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Detaches every mount at or below `dir`, deepest first.
fn unmount_below(dir: &Path) {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut points: Vec<String> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| p.replace("\\040", " "))
        .filter(|p| Path::new(p).starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        let out = Command::new("umount").args(["-l", &p]).output();
        if !out.as_ref().is_ok_and(|o| o.status.success()) {
            eprintln!("containerd cleanup: cannot unmount {p}: {out:?}");
        }
    }
}
