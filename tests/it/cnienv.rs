//! The world eniip-cni's tests run in, all inside namespaces the test
//! creates (the host's own tables are never touched):
//!
//! - `node`: the node the plugin runs in (`ip netns exec node eniip-cni`);
//!   each managed ENI appears there as one end of a veth pair carrying the
//!   ENI's MAC, a moment after its attach, made by the product's own
//!   emulation ([`eniip_sim::hostlinks`], what `eniipd --simulate
//!   --simulate-links` runs on the host), which follows `/__sim/state`;
//! - `vpc`: set up by that emulation: the vswitch gateway (on `lo`) and
//!   the other end of every ENI; its routes and permanent
//!   neighbour entries (address -> ENI MAC) play the VPC router; strict
//!   rp_filter there drops a packet that arrives over the wrong ENI. In
//!   dual stack ([`World::start_dual`]) the vswitch's IPv6 gateway is on
//!   every ENI's VPC end (so it answers neighbour solicitations there, as
//!   the VPC does), IPv6 addresses get routes and neighbour entries too,
//!   and ip6tables' `rpfilter` (added here) plays strict rp_filter for
//!   IPv6;
//! - containers: one namespace each.
//!
//! eniipd and eniip-sim run in the host namespace on loopback; eniipd's
//! socket is a path, reachable from every namespace. Everything is removed
//! on drop, on success and on failure.

// Shared by several test crates: each uses part of it, and `pub` here
// means "for the tests", not an API.
#![allow(unreachable_pub, missing_debug_implementations)]
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use eniip_protocol::protocol::reply::{parse_list_line, ListLine};
use eniip_sim::hostlinks::{HostLinks, HostLinksOptions};

use serde_json::{json, Value};

use crate::common::{config, eventually, tempdir, Daemon, Sim, DUAL_VSWITCH};

/// The emulator's default vswitch gateway (192.168.0.0/22).
pub const GATEWAY: &str = "192.168.3.253";
/// The IPv6 gateway of [`DUAL_VSWITCH`], as the emulator computes it.
pub const GATEWAY6: &str = "2408:4005:3ff:5100:ffff:ffff:ffff:fff7";

/// True when these tests can run here (root, `ip`, the commands named and
/// the absolute paths named); otherwise says so loudly, and under CI
/// (`ENIIPD_CI=1`) fails instead of skipping.
pub fn can_run(test: &str, extra_tools: &[&str]) -> bool {
    let mut missing = Vec::new();
    if !nix::unistd::geteuid().is_root() {
        missing.push("root".to_string());
    }
    for t in ["ip"].iter().chain(extra_tools) {
        if t.starts_with('/') {
            if !Path::new(t).exists() {
                missing.push(t.to_string());
            }
            continue;
        }
        if !Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {t}"))
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            missing.push(format!("the {t} command"));
        }
    }
    if missing.is_empty() {
        return true;
    }
    crate::common::skip(&format!("{test}: needs {}", missing.join(", ")));
    false
}

/// Runs a command; panics with its output if it fails.
pub fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command; true if it succeeded.
pub fn try_sh(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A unique short tag for names (namespaces, links).
pub fn tag() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{:x}{}",
        std::process::id() % 0xffff,
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// A named network namespace, deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(name: &str) -> Netns {
        let _ = try_sh(&["ip", "netns", "del", name]);
        sh(&["ip", "netns", "add", name]);
        sh(&["ip", "-n", name, "link", "set", "lo", "up"]);
        Netns {
            name: name.to_string(),
        }
    }

    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}", self.name))
    }

    /// Runs a command inside.
    pub fn exec(&self, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .output()
            .unwrap()
    }

    /// Deletes it now (the drop then does nothing).
    pub fn delete(&mut self) {
        if !self.name.is_empty() {
            let _ = try_sh(&["ip", "netns", "del", &self.name]);
            self.name.clear();
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        self.delete();
    }
}

/// Sim + eniipd + node + VPC + hotplug.
pub struct World {
    /// The ENIs as links, and the VPC namespace (removed on drop).
    hotplug: Option<HostLinks>,
    pub daemon: Option<Daemon>,
    pub sim: Sim,
    pub dir: PathBuf,
    pub cfg: Value,
    pub node: Netns,
    pub vpc: Netns,
    pub tag: String,
    pub network: String,
}

impl World {
    /// `instance_type`: the emulator's (an ENI of `ecs.g7.large` holds 6
    /// addresses, of `ecs.g7.xlarge` 15).
    pub fn start(instance_type: &str, extra: Value) -> World {
        World::start_on(instance_type, false, extra, true)
    }

    /// Same in dual stack: eniipd with `ip_stack` `dual` on
    /// [`DUAL_VSWITCH`] (only ever routed inside the test's namespaces),
    /// the VPC answering [`GATEWAY6`] too.
    pub fn start_dual(instance_type: &str, extra: Value) -> World {
        let mut extra = extra;
        extra["ip_stack"] = json!("dual");
        World::start_on(instance_type, true, extra, true)
    }

    /// The emulator, the node, the VPC and the ENIs, without eniipd:
    /// whoever runs it (a pod) uses [`World::cfg`]'s endpoints and
    /// `socket_path`, and [`World::start_daemon`] is never called.
    pub fn start_without_daemon(instance_type: &str, extra: Value) -> World {
        World::start_on(instance_type, false, extra, false)
    }

    /// [`World::start`] on the emulator's vswitches `vswitches`
    /// (`ID=CIDR[,free=N]`, the instance's first): eniipd is configured
    /// with none of them (`extra` says which).
    pub fn start_on_vswitches(instance_type: &str, vswitches: &[&str], extra: Value) -> World {
        World::start_with(instance_type, vswitches, false, extra, true)
    }

    fn start_on(instance_type: &str, dual: bool, extra: Value, daemon: bool) -> World {
        let vswitches: &[&str] = if dual { &[DUAL_VSWITCH] } else { &[] };
        World::start_with(instance_type, vswitches, dual, extra, daemon)
    }

    /// [`World::start`] with the security groups `groups` in the
    /// emulated VPC besides the instance's own (`--security-group`).
    pub fn start_with_groups(instance_type: &str, groups: &[&str], extra: Value) -> World {
        World::start_full(instance_type, &[], groups, false, extra, true)
    }

    fn start_with(
        instance_type: &str,
        vswitches: &[&str],
        dual: bool,
        extra: Value,
        daemon: bool,
    ) -> World {
        World::start_full(instance_type, vswitches, &[], dual, extra, daemon)
    }

    fn start_full(
        instance_type: &str,
        vswitches: &[&str],
        groups: &[&str],
        dual: bool,
        extra: Value,
        daemon: bool,
    ) -> World {
        let t = tag();
        let node = Netns::new(&format!("eniip-node-{t}"));
        let mut sim_args = vec!["--instance-type", instance_type];
        for v in vswitches {
            sim_args.extend(["--vswitch", v]);
        }
        for g in groups {
            sim_args.extend(["--security-group", g]);
        }
        let sim = Sim::quick(&sim_args);
        let vpc = Netns::new(&format!("eniip-vpc-{t}"));
        let hotplug = HostLinks::start(HostLinksOptions {
            ecs_url: sim.ecs.clone(),
            instance_id: sim.instance.clone(),
            node_netns: Some(node.path()),
            vpc_netns: Some(vpc.path()),
            tag: t.clone(),
            poll: Duration::from_millis(30),
        })
        .unwrap_or_else(|e| panic!("the ENI emulation: {}", chain(&e)));
        if dual {
            // Strict reverse-path filtering for IPv6 (the kernel has no
            // rp_filter knob for it).
            sh(&[
                "ip",
                "netns",
                "exec",
                &vpc.name,
                "ip6tables",
                "-t",
                "raw",
                "-A",
                "PREROUTING",
                "-m",
                "rpfilter",
                "--invert",
                "-j",
                "DROP",
            ]);
        }
        let dir = tempdir("cni");
        let cfg = config(&sim, &dir, extra);
        let daemon = daemon.then(|| Daemon::start(&dir, &cfg));
        World {
            hotplug: Some(hotplug),
            daemon,
            sim,
            dir,
            cfg,
            node,
            vpc,
            tag: t.clone(),
            network: format!("eninet{t}"),
        }
    }

    pub fn daemon(&self) -> &Daemon {
        self.daemon.as_ref().unwrap()
    }

    /// eniipd's socket (the config's `socket_path`).
    pub fn socket(&self) -> PathBuf {
        PathBuf::from(self.cfg["socket_path"].as_str().expect("socket_path"))
    }

    /// One request to eniipd, the whole reply.
    pub fn ask(&self, line: &str) -> Vec<String> {
        crate::common::ask(&self.socket(), line)
    }

    /// The plugin's network configuration.
    pub fn conf(&self, version: &str, extra: Value) -> Value {
        let mut c = json!({
            "cniVersion": version,
            "name": self.network,
            "type": "eniip-cni",
            "socket": self.cfg["socket_path"],
            "mtu": 1500,
        });
        if let (Value::Object(b), Value::Object(m)) = (&mut c, extra) {
            b.extend(m);
        }
        c
    }

    /// An ADD that fails after its address was taken (eth0 is already in
    /// the container, so the veth cannot be made): error 101, and the
    /// address is given back.
    pub fn failed_add(&self, c: &Ctr, conf: &Value) {
        sh(&[
            "ip", "-n", &c.ns.name, "link", "add", "eth0", "type", "veth", "peer", "name", "other0",
        ]);
        let out = self.cni("ADD", Some(c), conf);
        assert_eq!(out.code(), 101, "{out:?}");
        self.assert_none_in_use_within(Duration::from_secs(5));
    }

    /// Asserts that eniipd holds no address in use within `limit` (a
    /// release may still be on its way).
    #[track_caller]
    pub fn assert_none_in_use_within(&self, limit: Duration) {
        assert!(
            eventually(limit, || self.inuse().is_empty()),
            "{:?}",
            self.inuse()
        );
    }

    /// Asserts that the node has no pod's host end (`enip...`) left.
    #[track_caller]
    pub fn assert_no_host_end(&self) {
        let links = self.node_ip(&["-o", "link"]);
        assert!(!links.contains("enip"), "{links}");
    }

    /// The ENIs that hold an address in use, from eniipd's `list`.
    pub fn enis_in_use(&self) -> BTreeSet<String> {
        self.in_use().map(|l| l.eni).collect()
    }

    /// `ip=owner` of every in-use address, from eniipd's `list`.
    pub fn inuse(&self) -> BTreeMap<String, String> {
        self.in_use()
            .filter_map(|l| Some((l.ip.to_string(), l.owner?)))
            .collect()
    }

    /// The ENI eniipd hands `ip` out on (its `list` line's, as `eni`
    /// answers it).
    pub fn eni_of(&self, ip: &str) -> eniip_protocol::core::EniInfo {
        let line = self
            .in_use()
            .find(|l| l.ip.to_string() == ip)
            .unwrap_or_else(|| panic!("{ip} is not in use: {:?}", self.inuse()));
        let reply = self.ask(&format!("eni {}", line.eni)).join("\n");
        let text = reply.strip_prefix("OK ").unwrap_or(&reply);
        eniip_protocol::protocol::reply::parse_eni(text).unwrap_or_else(|e| panic!("{reply}: {e}"))
    }

    /// The in-use lines of eniipd's `list`.
    fn in_use(&self) -> impl Iterator<Item = ListLine> {
        let lines = self.ask("list");
        let last = lines.len().saturating_sub(1);
        lines
            .into_iter()
            .take(last)
            .map(|l| parse_list_line(&l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
            .filter(|l| l.state == "inuse")
    }

    /// Kills eniipd (its state survives).
    pub fn stop_daemon(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            d.kill9();
        }
    }

    /// Starts eniipd again on the same state.
    pub fn start_daemon(&mut self) {
        assert!(self.daemon.is_none());
        self.daemon = Some(Daemon::start(&self.dir, &self.cfg));
    }

    /// Starts eniipd again on the same state, its command line prefixed
    /// by `wrap` and with the environment variables `env`.
    pub fn start_daemon_as(&mut self, wrap: &[&str], env: &[(&str, &str)]) {
        assert!(self.daemon.is_none());
        self.daemon = Some(Daemon::start_wrapped_with(wrap, env, &self.dir, &self.cfg));
    }

    /// A rule/route/link listing of the node (for assertions and messages).
    pub fn node_ip(&self, args: &[&str]) -> String {
        let mut a = vec!["ip", "-n", self.node.name.as_str()];
        a.extend_from_slice(args);
        sh(&a)
    }

    /// The node's and the VPC's links, rules, routes and neighbours (for
    /// failure messages).
    pub fn diag(&self) -> String {
        let mut out = String::new();
        let node = [
            "link",
            "rule",
            "route show table all",
            "neigh",
            "-6 rule",
            "-6 route show table all",
            "-6 neigh",
        ];
        let vpc = ["link", "route", "neigh", "-6 addr", "-6 route", "-6 neigh"];
        let listings = node
            .iter()
            .map(|w| (&self.node.name, w))
            .chain(vpc.iter().map(|w| (&self.vpc.name, w)));
        for (ns, what) in listings {
            let mut a = vec!["ip", "-n", ns.as_str()];
            a.extend(what.split(' '));
            let o = Command::new(a[0]).args(&a[1..]).output().unwrap();
            out.push_str(&format!(
                "--- ip -n {ns} {what}\n{}",
                String::from_utf8_lossy(&o.stdout)
            ));
        }
        out
    }

    /// Runs the plugin in the node namespace as a runtime would.
    pub fn cni(&self, cmd: &str, ctr: Option<&Ctr>, conf: &Value) -> CniOut {
        self.cni_with(
            cmd,
            ctr.map(|c| (c.id.as_str(), c.ns.path(), c.args.as_str())),
            conf,
        )
    }

    /// Same with explicit id, netns path and CNI_ARGS.
    pub fn cni_with(&self, cmd: &str, ctr: Option<(&str, PathBuf, &str)>, conf: &Value) -> CniOut {
        run_bin(&[], &self.node.name, plugin(), cmd, ctr, conf)
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.hotplug.take();
        self.daemon.take();
        // Kept after a failure: eniipd's log is there.
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The plugin's binary.
pub fn plugin() -> &'static str {
    env!("CARGO_BIN_EXE_eniip-cni")
}

/// Runs the plugin binary `bin` in namespace `node` as libcni would, the
/// command line prefixed by `wrap` (none, or e.g.
/// [`crate::shipped::ShippedSocket::wrap`]).
pub fn run_bin(
    wrap: &[String],
    node: &str,
    bin: &str,
    cmd: &str,
    ctr: Option<(&str, PathBuf, &str)>,
    conf: &Value,
) -> CniOut {
    let mut argv: Vec<String> = wrap.to_vec();
    argv.extend(["ip", "netns", "exec", node, bin].map(String::from));
    let mut c = plugin_command(&argv, cmd);
    if let Some((id, ns, args)) = ctr {
        c.env("CNI_CONTAINERID", id)
            .env("CNI_NETNS", ns)
            .env("CNI_IFNAME", "eth0")
            .env("CNI_ARGS", args);
    }
    CniOut::from(feed(c, conf))
}

/// The plugin command line `argv` as a runtime starts it for `cmd`: in
/// its environment only `PATH`, `CNI_COMMAND` and `CNI_PATH` (the caller
/// adds the container's), its stdin, stdout and stderr piped.
pub fn plugin_command<S: AsRef<OsStr>>(argv: &[S], cmd: &str) -> Command {
    let mut c = Command::new(&argv[0]);
    c.args(&argv[1..])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CNI_COMMAND", cmd)
        .env("CNI_PATH", "/usr/lib/cni")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Runs a [`plugin_command`] with the network configuration `conf` on its
/// stdin, to its end.
pub fn feed(mut c: Command, conf: &Value) -> Output {
    let mut child = c.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(conf.to_string().as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// A plugin invocation's outcome.
#[derive(Debug)]
pub struct CniOut {
    pub ok: bool,
    pub json: Value,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for CniOut {
    fn from(out: Output) -> CniOut {
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        CniOut {
            ok: out.status.success(),
            json: serde_json::from_str(&stdout).unwrap_or(Value::Null),
            stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl CniOut {
    /// Panics unless it succeeded.
    pub fn expect_ok(self, what: &str) -> CniOut {
        assert!(self.ok, "{what} failed: {self:?}");
        self
    }

    /// The CNI error code (panics on success).
    pub fn code(&self) -> u64 {
        assert!(!self.ok, "expected an error, got {self:?}");
        self.json["code"]
            .as_u64()
            .unwrap_or_else(|| panic!("no code in {self:?}"))
    }

    /// The pod's IPv6 address of an ADD result.
    pub fn ip6(&self) -> String {
        self.json["ips"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["address"].as_str())
            .find(|a| a.contains(':'))
            .unwrap_or_else(|| panic!("no IPv6 address in {self:?}"))
            .trim_end_matches("/128")
            .to_string()
    }

    /// The pod address of an ADD result.
    pub fn ip(&self) -> String {
        self.json["ips"][0]["address"]
            .as_str()
            .unwrap_or_else(|| panic!("no address in {self:?}"))
            .trim_end_matches("/32")
            .to_string()
    }
}

/// A container: its namespace and ids.
pub struct Ctr {
    pub id: String,
    pub ns: Netns,
    pub args: String,
}

/// `conf` with `prevResult` set to `result` (as a runtime sends DEL and
/// CHECK).
pub fn with_prev(conf: &Value, result: &Value) -> Value {
    let mut c = conf.clone();
    c["prevResult"] = result.clone();
    c
}

impl Ctr {
    /// A pod sandbox named as a kubelet names it (`default/<name>`).
    pub fn pod(world: &World, n: usize, name: &str) -> Ctr {
        let mut c = Ctr::new(world, n);
        c.args = format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={name}");
        c
    }

    pub fn new(world: &World, n: usize) -> Ctr {
        let id = format!("ctr{}x{n}", world.tag);
        Ctr {
            ns: Netns::new(&format!("eniip-c-{}-{n}", world.tag)),
            id,
            args: String::new(),
        }
    }

    /// Pings `dst` once from inside (busybox ping; the answer must come
    /// within 2 s).
    pub fn ping(&self, dst: &str) -> bool {
        let out = self
            .ns
            .exec(&["busybox", "ping", "-c", "1", "-W", "2", dst]);
        out.status.success()
    }
}

impl Ctr {
    /// Pings IPv6 `dst` once from inside (busybox ping6; the answer must
    /// come within 2 s).
    pub fn ping6(&self, dst: &str) -> bool {
        let out = self
            .ns
            .exec(&["busybox", "ping6", "-c", "1", "-W", "2", dst]);
        out.status.success()
    }
}

/// An error and its causes, as one line.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(&format!(": {c}"));
        cur = c.source();
    }
    s
}

/// `path` as a string.
pub fn s(p: &Path) -> String {
    p.display().to_string()
}

/// A socket in front of eniipd's that passes every request through (on
/// the protocol's own client) and gives back each reply with its final
/// line rewritten by `rewrite(request, final line)`: eniipd as a later
/// version may answer, seen by the plugin built now, or a reply held back
/// (`rewrite` may block: the request is done in eniipd, its client does
/// not know yet). Connections are served on named threads; all are shut
/// and joined on drop.
pub struct ReplyRewriter {
    pub path: PathBuf,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    accept: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl ReplyRewriter {
    pub fn start(
        dir: &Path,
        upstream: PathBuf,
        rewrite: impl Fn(&str, &str) -> String + Send + Sync + 'static,
    ) -> ReplyRewriter {
        use std::io::{BufRead, BufReader};
        use std::os::unix::net::UnixListener;
        use std::sync::atomic::AtomicBool;
        use std::sync::{Arc, Mutex};
        let rewrite = Arc::new(rewrite);
        let path = dir.join("later-eniipd.sock");
        let listener = UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let accept = move || {
            let seen = Arc::new(Mutex::new(Vec::new()));
            let mut conns = Vec::new();
            while !stopped.load(Ordering::SeqCst) {
                let Ok((s, _)) = listener.accept() else {
                    // Nothing to accept: wait for the next client or stop.
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                s.set_nonblocking(false).unwrap();
                let (upstream, seen, rewrite) = (upstream.clone(), seen.clone(), rewrite.clone());
                let mut w = s.try_clone().unwrap();
                let shut = s.try_clone().unwrap();
                let serve = move || {
                    let wait = Duration::from_secs(120);
                    let Ok(mut up) =
                        eniip_protocol::protocol::client::Client::connect(&upstream, wait)
                    else {
                        return;
                    };
                    for line in BufReader::new(s).lines() {
                        let Ok(line) = line else { break };
                        let Ok(reply) = up.ask_within(&line, wait) else {
                            break;
                        };
                        let mut lines = reply.into_lines();
                        let last = lines.pop().unwrap();
                        lines.push(rewrite(&line, &last));
                        seen.lock().unwrap().push(line);
                        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
                        if w.write_all(text.as_bytes()).is_err() {
                            break;
                        }
                    }
                };
                let named = std::thread::Builder::new().name("later-eniipd".into());
                // Those whose client has gone are let go (their sockets
                // with them): a long race makes hundreds.
                conns.retain(|(_, h)| !std::thread::JoinHandle::is_finished(h));
                conns.push((shut, named.spawn(serve).unwrap()));
            }
            for (s, h) in conns {
                let _ = s.shutdown(std::net::Shutdown::Both);
                let _ = h.join();
            }
            let seen = seen.lock().unwrap().clone();
            seen
        };
        let named = std::thread::Builder::new().name("later-eniipd-accept".into());
        ReplyRewriter {
            path,
            stop,
            accept: Some(named.spawn(accept).unwrap()),
        }
    }

    /// Stops it: every request line it passed through, in order.
    pub fn stop(mut self) -> Vec<String> {
        self.stop.store(true, Ordering::SeqCst);
        self.accept.take().unwrap().join().unwrap()
    }
}

impl Drop for ReplyRewriter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}
