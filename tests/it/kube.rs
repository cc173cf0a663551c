//! A Kubernetes node played with what ships: the image `.ci/image` built
//! (`target/images/`), imported into Debian's containerd the way an
//! operator does on an air-gapped node, and the DaemonSet's pod template
//! of `deploy/kubernetes/eniipd.yaml` run as it is by a kubelet stand-in
//! (`tests/it/kubelet.py`, over CRI, inside containerd's mount namespace,
//! as a kubelet shares the node's mounts with its runtime).
//!
//! The node ([`Node`]): the emulated cloud and ENIs of
//! [`cnienv::World`] (no eniipd of the test's own); containerd in the
//! node's network namespace with containerd's default CNI folders, and the
//! manifest's hostPaths that eniipd and the runtime share (`/opt/cni/bin`,
//! `/etc/cni/net.d`, `/run/eniipd`) bound from test folders in
//! containerd's mount namespace (`/run/netns` is the node's own; the
//! host's `/opt` is covered by a tmpfs there, so nothing is made on the
//! host); the emulator's endpoints reachable from the node's namespace at
//! the same addresses ([`Bridge`]). What the test changes of the shipped
//! files: the state's hostPath (`/var/lib/eniipd`, which only eniipd
//! reads) is moved under the test's root; the ConfigMap's `eni.json` gains
//! the emulator's endpoints (and, for the reaper, a faster pace); the
//! credentials come from the optional Secret the manifest names.

// `pub` here means "for the tests", not an API (as in cnienv).
#![allow(unreachable_pub, missing_debug_implementations)]
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{json, Value};

use crate::cnienv::{self, Netns, World};
use crate::common::{eventually, tempdir};
use crate::cri::{self, Containerd, NodeMounts};

/// The shipped manifest.
pub const MANIFEST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/kubernetes/eniipd.yaml");
/// The pod's name prefix (a DaemonSet's pods are `eniipd-<hash>`).
const POD: &str = "eniipd";

/// The image archive `.ci/image` writes for this machine's architecture.
pub fn image_archive() -> PathBuf {
    let arch = match std::env::consts::ARCH {
        "aarch64" => "arm64",
        _ => "amd64",
    };
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "target/images/eniipd-{}-{arch}.tar",
        env!("CARGO_PKG_VERSION")
    ))
}

/// True when a node can be played here: containerd's tools, socat, the
/// CRI client's venv with PyYAML, and the image (`.ci/image`, which
/// `.ci/run` runs first). Says SKIPPED loudly otherwise (a failure under
/// ENIIPD_CI=1).
pub fn can(test: &str) -> bool {
    let mut tools = cri::tools();
    tools.push("socat".into());
    tools.push("ss".into());
    let tools: Vec<&str> = tools.iter().map(String::as_str).collect();
    if !cnienv::can_run(test, &tools) {
        return false;
    }
    let yaml = Command::new(cri::python())
        .args(["-c", "import yaml"])
        .output()
        .is_ok_and(|o| o.status.success());
    let mut missing = Vec::new();
    if !yaml {
        missing.push(format!("PyYAML in {} (.ci/run installs it)", cri::python()));
    }
    if !image_archive().exists() {
        missing.push(format!("{} (run .ci/image)", image_archive().display()));
    }
    if missing.is_empty() {
        return true;
    }
    crate::common::skip(&format!("{test}: needs {}", missing.join(", ")));
    false
}

fn kubelet_py() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/kubelet.py")
}

/// The manifest's documents, as JSON (PyYAML reads the YAML).
pub fn manifest() -> Vec<Value> {
    let out = Command::new(cri::python())
        .arg(kubelet_py())
        .args(["-", "yaml2json", MANIFEST])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// The shipped ConfigMap's `eni.json`.
pub fn shipped_eni_json() -> Value {
    let docs = manifest();
    let cm = docs.iter().find(|d| d["kind"] == "ConfigMap").unwrap();
    serde_json::from_str(cm["data"]["eni.json"].as_str().unwrap()).unwrap()
}

/// A TCP endpoint of the emulator (loopback, the host's namespace) made
/// reachable at the same address in a namespace: socat listens there and
/// forwards over a Unix socket to socat on the host, which connects to the
/// emulator. Both are killed (by pid) on drop.
pub struct Bridge {
    procs: Vec<Child>,
}

impl Bridge {
    pub fn new(ns: &Netns, url: &str, dir: &Path) -> Bridge {
        let port = url.rsplit(':').next().unwrap().trim_end_matches('/');
        let sock = dir.join(format!("bridge-{port}.sock"));
        let host = Command::new("socat")
            .arg(format!("UNIX-LISTEN:{},fork,unlink-early", sock.display()))
            .arg(format!("TCP:127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let inside = Command::new("ip")
            .args(["netns", "exec", &ns.name, "socat"])
            .arg(format!("TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr"))
            .arg(format!("UNIX-CONNECT:{}", sock.display()))
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let b = Bridge {
            procs: vec![host, inside],
        };
        let up = eventually(Duration::from_secs(10), || {
            sock.exists() && {
                let ss = ns.exec(&["ss", "-Hltn"]);
                String::from_utf8_lossy(&ss.stdout).contains(&format!("127.0.0.1:{port} "))
            }
        });
        assert!(up, "the bridge to {url} did not come up");
        b
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        for p in &mut self.procs {
            let _ = p.kill();
            let _ = p.wait();
        }
    }
}

/// The eniipd pod of the DaemonSet, as the kubelet stand-in started it.
#[derive(Debug, Clone)]
pub struct EniipdPod {
    pub name: String,
    pub pod: String,
    pub container: String,
}

/// A node (see the module doc).
pub struct Node {
    /// The kubelet's own folder (ConfigMap volumes, logs).
    pub root: PathBuf,
    /// The node's folders bound on the manifest's hostPaths.
    pub cni_bin: PathBuf,
    pub cni_conf: PathBuf,
    pub state: PathBuf,
    pub run: PathBuf,
    /// The eniipd pod now running, if one is.
    eniipd: Mutex<Option<EniipdPod>>,
    /// ConfigMaps and Secrets the pods are given.
    setup: Value,
    pods_started: AtomicUsize,
    pub c: Containerd,
    _bridges: Vec<Bridge>,
    pub w: World,
    /// Last: removed after containerd, the bridges and the world stopped.
    _base: RemoveOnDrop,
}

/// A test folder removed on drop, unless the test failed (its logs are
/// there).
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Node {
    /// The node, the shipped image imported; no pod yet. `eni_json`: the
    /// keys the test adds to the shipped `eni.json` beyond the
    /// emulator's endpoints.
    pub fn start(instance_type: &str, eni_json: Value) -> Node {
        let mut w = World::start_without_daemon(instance_type, json!({}));
        let base = tempdir("kubenode");
        let root = base.clone();
        let dirs = [
            "opt-cni-bin",
            "etc-cni-net.d",
            "state",
            "run-eniipd",
            "kubelet",
        ];
        for d in dirs {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let run = root.join("run-eniipd");
        // The test's own requests reach the pod's eniipd here.
        w.cfg["socket_path"] = json!(cnienv::s(&run.join("eniipd.sock")));
        let bridges = vec![
            Bridge::new(&w.node, &w.sim.ecs, &root),
            Bridge::new(&w.node, &w.sim.metadata, &root),
        ];
        // The host's /opt stays as it is: containerd sees a tmpfs there.
        let node = NodeMounts {
            tmpfs: vec!["/opt"],
            binds: vec![
                (root.join("opt-cni-bin"), "/opt/cni/bin"),
                (root.join("etc-cni-net.d"), "/etc/cni/net.d"),
                (run.clone(), "/run/eniipd"),
            ],
        };
        let c = Containerd::start_as_node(&w, &node);
        let imported = c.import(&image_archive());
        assert!(imported.contains("localhost/eniipd"), "{imported}");
        let mut eni = crate::common::merged(
            shipped_eni_json(),
            json!({
                "ecs_endpoint": w.sim.ecs,
                "vpc_endpoint": w.sim.ecs,
                "metadata_endpoint": w.sim.metadata,
            }),
        );
        eni = crate::common::merged(eni, eni_json);
        let setup = json!({
            // Only eniipd reads its state: moved under the test's root.
            "hostpaths": {"/var/lib/eniipd": cnienv::s(&root.join("state"))},
            "configmaps": {"eniipd-config": {"eni.json": eni.to_string()}},
            "secrets": {"eniipd-credentials": {
                "access_key_id": eniip_sim::DEFAULT_ACCESS_KEY_ID,
                "access_key_secret": eniip_sim::DEFAULT_ACCESS_KEY_SECRET,
            }},
        });
        Node {
            cni_bin: root.join("opt-cni-bin"),
            cni_conf: root.join("etc-cni-net.d"),
            state: root.join("state"),
            run,
            root: root.join("kubelet"),
            eniipd: Mutex::new(None),
            setup,
            pods_started: AtomicUsize::new(0),
            c,
            _bridges: bridges,
            w,
            _base: RemoveOnDrop(base),
        }
    }

    /// One call of the kubelet stand-in, in containerd's mount namespace.
    pub fn kubelet(&self, args: &[&str]) -> Result<Value, String> {
        let out = Command::new("nsenter")
            .args(["-t", &self.c.pid().to_string(), "-m"])
            .arg(cri::python())
            .arg(kubelet_py())
            .arg(&self.c.socket)
            .args(args)
            .output()
            .map_err(|e| format!("nsenter python: {e}"))?;
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if out.status.success() {
            Ok(v)
        } else {
            Err(format!(
                "kubelet.py {args:?}: {v} {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Runs a new eniipd pod from the DaemonSet's template: its init
    /// container must install eniip-cni and exit 0, then its startup
    /// probe must pass (within its failureThreshold) and its liveness and
    /// readiness probes with it. Returns the seconds from RunPodSandbox
    /// to the startup probe's success.
    pub fn start_eniipd(&self) -> f64 {
        assert!(self.eniipd().is_none(), "one eniipd pod per node");
        let name = format!("{POD}-{}", self.pods_started.fetch_add(1, Ordering::SeqCst));
        let mut setup = self.setup.clone();
        setup["name"] = json!(name);
        let root = cnienv::s(&self.root);
        let v = self
            .kubelet(&["up", MANIFEST, &root, &setup.to_string()])
            .unwrap_or_else(|e| panic!("the eniipd pod: {e}\n{}", self.c.log()));
        for init in v["init"].as_array().unwrap() {
            assert_eq!(init["exit_code"], 0, "init container: {init}");
        }
        let pod = EniipdPod {
            name,
            pod: v["pod"].as_str().unwrap().to_string(),
            container: v["containers"]["eniipd"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        };
        assert!(!pod.container.is_empty(), "no eniipd container: {v}");
        *self.eniipd.lock().unwrap() = Some(pod.clone());
        let started = self.probe_until("startup");
        assert!(
            started["ok"] == true,
            "the startup probe failed: {started}\n{}",
            self.eniipd_log()
        );
        for kind in ["liveness", "readiness"] {
            let p = self.probe(kind);
            assert_eq!(
                p["exit_code"],
                0,
                "{kind} probe: {p}\n{}",
                self.eniipd_log()
            );
        }
        v["seconds"].as_f64().unwrap() + started["seconds"].as_f64().unwrap()
    }

    /// The eniipd pod now running.
    pub fn eniipd(&self) -> Option<EniipdPod> {
        self.eniipd.lock().unwrap().clone()
    }

    /// One run of the eniipd container's `kind` probe.
    pub fn probe(&self, kind: &str) -> Value {
        let pod = self.eniipd().expect("an eniipd pod");
        self.kubelet(&["probe", MANIFEST, &pod.container, "eniipd", kind])
            .unwrap_or_else(|e| panic!("{kind} probe: {e}"))
    }

    fn probe_until(&self, kind: &str) -> Value {
        let pod = self.eniipd().expect("an eniipd pod");
        self.kubelet(&["until-probe", MANIFEST, &pod.container, "eniipd", kind])
            .unwrap_or_else(|e| panic!("{kind} probe: {e}"))
    }

    /// The eniipd pod goes as kubelet deletes a pod: SIGTERM, SIGKILL
    /// after the grace (`kill9`: SIGKILL at once, as on an OOM kill or a
    /// node's `kill -9`), then the sandbox is stopped and removed.
    pub fn stop_eniipd(&self, kill9: bool) {
        let pod = self.eniipd.lock().unwrap().take().expect("an eniipd pod");
        if kill9 {
            let pid = self.kubelet(&["pid", &pod.container]).unwrap()["pid"]
                .as_i64()
                .unwrap();
            assert!(pid > 0, "no pid for {}", pod.container);
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            )
            .unwrap();
        }
        self.kubelet(&["down", &pod.pod, "30"])
            .unwrap_or_else(|e| panic!("stopping the eniipd pod: {e}"));
    }

    /// The eniipd container's log (CRI format).
    pub fn eniipd_log(&self) -> String {
        let mut all = String::new();
        for e in std::fs::read_dir(self.root.join("logs"))
            .into_iter()
            .flatten()
            .flatten()
        {
            all.push_str(&format!("--- {}\n", e.path().display()));
            all.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
        }
        all
    }

    /// The conflist eniipd installs once the pool is warm.
    pub fn conflist(&self) -> PathBuf {
        self.cni_conf.join("10-eniip.conflist")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // The pods first, while eniipd serves their DELs; then eniipd.
        let eniipd = self.eniipd().map(|p| p.pod);
        if let Ok(v) = self.c.cri(&["list"]) {
            for s in v.as_array().into_iter().flatten() {
                let Some(id) = s["id"].as_str() else { continue };
                if Some(id) != eniipd.as_deref() {
                    let _ = self.c.stop(id);
                    let _ = self.c.remove(id);
                }
            }
        }
        if self.eniipd().is_some() {
            self.stop_eniipd(false);
        }
    }
}
