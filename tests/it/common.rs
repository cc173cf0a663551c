//! Test harness: the real `eniip-sim` and `eniipd` binaries on loopback,
//! in private temporary directories, with readiness taken from a test
//! `NOTIFY_SOCKET` (never from sleeps). Beside them, what every area of
//! the tests shares: polling with a deadline ([`eventually`]), fresh
//! directories ([`tempdir`]), skipping where a tool is missing ([`skip`]),
//! requests at once ([`at_once`]), requests to eniipd through the
//! protocol's own client ([`ask`]) and plain HTTP to the emulator
//! ([`http`]). The benches take this file in too (`#[path]`).

// Shared by several test crates: each uses part of it, and `pub` here
// means "for the tests", not an API.
#![allow(unreachable_pub, missing_debug_implementations)]
#![allow(dead_code)]

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use eniip_protocol::protocol::client::Client;
use serde_json::Value;

/// Tests that flood a server take turns: side by side on a small machine
/// they starve each other's connection threads, and the connect storms
/// race the accept thread.
pub fn one_flood_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static FLOODS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    FLOODS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The one skip policy: a test that cannot run here (`why`: the test and
/// what it needs) says SKIPPED loudly and passes; under CI
/// (`ENIIPD_CI=1`) it fails instead.
pub use eniip_util::testing::skip;

/// The first of `paths` (one tool's usual places) that exists; else
/// `None`, after [`skip`] for `test`.
pub fn installed(test: &str, paths: &[&str]) -> Option<PathBuf> {
    let found = paths.iter().map(PathBuf::from).find(|p| p.exists());
    if found.is_none() {
        skip(&format!("{test}: needs {}", paths.join(" or ")));
    }
    found
}

/// Runs `f(0)` to `f(n - 1)` each on a thread of its own, all at once;
/// their results in that order (a panic in one fails the caller).
pub fn at_once<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|i| {
                let f = &f;
                s.spawn(move || f(i))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// A fresh, empty directory in /tmp, named for `tag`, this process and a
/// counter.
pub fn tempdir(tag: &str) -> PathBuf {
    tempdir_in(Path::new("/tmp"), tag)
}

/// The same under `base` (tmpfs, for instance).
pub fn tempdir_in(base: &Path, tag: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = base.join(format!(
        "eniipd-it-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

/// A copy of the binary `bin` that any user can run: in a fresh mode-0755
/// directory of /tmp (the checkout may be where only its owner can reach,
/// as /root is), removed with that directory by the caller.
pub fn runnable_by_anyone(bin: &str, tag: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir(tag);
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    let name = Path::new(bin).file_name().unwrap();
    let copy = dir.join(name);
    fs::copy(bin, &copy).unwrap();
    fs::set_permissions(&copy, fs::Permissions::from_mode(0o755)).unwrap();
    copy
}

/// Polls `f` every 20 ms until it returns true or `limit` passes.
pub fn eventually(limit: Duration, f: impl FnMut() -> bool) -> bool {
    eniip_util::thread::poll_until(Instant::now() + limit, Duration::from_millis(20), f)
}

/// The strings of a JSON array (an ENI's security groups as the
/// emulator's state or DescribeNetworkInterfaces gives them), sorted.
pub fn sorted_strings(list: &Value) -> Vec<String> {
    let mut v: Vec<String> = list
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

/// Two security groups of the emulated VPC beside the instance's own,
/// for the official SDKs' checks (tests/sdk: created in, then changed away
/// from; issue 39).
pub const SDK_POD_GROUPS: [&str; 2] = ["sg-bp1sdkpodsa000000000", "sg-bp1sdkpodsb000000000"];

/// [`SDK_POD_GROUPS`] as the checks take them, `sg-a,sg-b`.
pub fn sdk_pod_groups_arg() -> String {
    SDK_POD_GROUPS.join(",")
}

/// Emulator options with [`SDK_POD_GROUPS`] in the VPC.
pub fn with_sdk_pod_groups(o: eniip_sim::SimOptions) -> eniip_sim::SimOptions {
    eniip_sim::SimOptions {
        security_groups: SDK_POD_GROUPS.iter().map(|g| g.to_string()).collect(),
        ..o
    }
}

/// A dual-stack vswitch for eniip-sim's `--vswitch`: the emulator's
/// default IPv4 block and an IPv6 /64.
pub const DUAL_VSWITCH: &str =
    "vsw-dual0000000000000001=192.168.0.0/22,ipv6=2408:4005:3ff:5100::/64,free=1000";

/// The emulator as a child process.
pub struct Sim {
    child: Child,
    pub ecs: String,
    pub metadata: String,
    pub instance: String,
    pub region: String,
    /// With `--instances N` (N > 1): (id, type, metadata URL) per
    /// instance, from the `instance ...` lines after `ready`.
    pub fleet: Vec<(String, String, String)>,
}

impl Sim {
    pub fn start(args: &[&str]) -> Sim {
        let mut child = Command::new(env!("CARGO_BIN_EXE_eniip-sim"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        out.read_line(&mut line).unwrap();
        let n: usize = args
            .iter()
            .position(|a| *a == "--instances")
            .map_or(0, |i| args[i + 1].parse().unwrap());
        let mut fleet = Vec::new();
        // One line per instance, none for one alone.
        for _ in 0..if n > 1 { n } else { 0 } {
            let mut l = String::new();
            out.read_line(&mut l).unwrap();
            assert!(l.starts_with("instance "), "{l:?}");
            fleet.push((field(&l, "id"), field(&l, "type"), field(&l, "metadata")));
        }
        Sim {
            ecs: field(&line, "ecs"),
            metadata: field(&line, "metadata"),
            instance: field(&line, "instance"),
            region: field(&line, "region"),
            fleet,
            child,
        }
    }

    /// An emulator whose attaches take 50 ms and whose metadata lags
    /// 50 ms behind (both still happen, quickly), with the flags `more`.
    pub fn quick(more: &[&str]) -> Sim {
        let mut args = vec!["--attach-delay-ms", "50", "--metadata-lag-ms", "50"];
        args.extend_from_slice(more);
        Sim::start(&args)
    }

    fn admin(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        http(method, &format!("{}{path}", self.ecs), body)
    }

    pub fn state(&self) -> Value {
        serde_json::from_str(&self.admin("GET", "/__sim/state", "").1).unwrap()
    }

    pub fn fault(&self, json: &str) {
        assert_eq!(self.admin("POST", "/__sim/faults", json).0, 200);
    }

    pub fn clear_faults(&self) {
        assert_eq!(self.admin("DELETE", "/__sim/faults", "").0, 200);
    }

    pub fn set_free(&self, vsw: &str, free: u64) {
        assert_eq!(
            self.admin(
                "POST",
                "/__sim/vswitch",
                &format!(r#"{{"id":"{vsw}","free":{free}}}"#)
            )
            .0,
            200
        );
    }

    /// `POST /__sim/vswitch` with a JSON body (free counts of a vswitch).
    pub fn vswitch(&self, json: &str) {
        let (code, body) = self.admin("POST", "/__sim/vswitch", json);
        assert_eq!(code, 200, "{body}");
    }

    /// `POST /__sim/metadata`: the metadata lag from now on.
    pub fn set_metadata_lag(&self, ms: u64) {
        let (code, body) = self.admin("POST", "/__sim/metadata", &format!(r#"{{"lag_ms":{ms}}}"#));
        assert_eq!(code, 200, "{body}");
    }

    /// Options for eniipd's OpenAPI client against this emulator: its
    /// endpoints and key pair (`crate::openapi_client::client` makes the client).
    pub fn openapi_options(&self) -> eniip_cloud::aliyun::AliyunCloudOptions {
        use eniip_cloud::aliyun::AliyunCloudOptions;
        AliyunCloudOptions {
            ecs_endpoint: self.ecs.clone(),
            vpc_endpoint: self.ecs.clone(),
            ..AliyunCloudOptions::new(
                &self.region,
                &self.metadata,
                eniip_cloud::credentials::CredentialSource::Static {
                    id: eniip_sim::DEFAULT_ACCESS_KEY_ID.into(),
                    secret: eniip_util::Secret::new(eniip_sim::DEFAULT_ACCESS_KEY_SECRET),
                    token: None,
                },
            )
        }
    }

    pub fn calls(&self, action: &str) -> u64 {
        self.state()["calls"][action].as_u64().unwrap_or(0)
    }

    /// Managed ENIs (tagged creator=eniipd) in the emulator.
    pub fn managed(&self) -> Vec<Value> {
        self.state()["enis"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["tags"]["creator"] == "eniipd")
            .cloned()
            .collect()
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP client that hands 4xx and 5xx answers back as answers.
pub fn http_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

/// One HTTP request (`GET`, `DELETE`, or else a `POST` of the JSON
/// `body`): the status and the body.
pub fn http(method: &str, url: &str, body: &str) -> (u16, String) {
    let agent = http_agent();
    let mut r = match method {
        "GET" => agent.get(url).call(),
        "DELETE" => agent.delete(url).call(),
        _ => agent.post(url).content_type("application/json").send(body),
    }
    .unwrap();
    (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
}

/// The daemon as a child process.
pub struct Daemon {
    pub dir: PathBuf,
    pub socket: PathBuf,
    pub config: PathBuf,
    child: Option<Child>,
    log: PathBuf,
    notify: UnixDatagram,
}

/// A config for the daemon against `sim`: [`base_config`], fast
/// maintenance, and the keys of `extra`.
pub fn config(sim: &Sim, dir: &Path, extra: Value) -> Value {
    let fast = serde_json::json!({"pool_check_interval": 1, "aggregation_window_ms": 100});
    merged(
        merged(base_config(&sim.ecs, &sim.metadata, dir), fast),
        extra,
    )
}

/// eniipd's config against the emulator at `ecs` (ECS and VPC) and
/// `metadata`: its key pair, the socket and state in `dir`, our uid
/// allowed; nothing else (the benches measure the defaults).
pub fn base_config(ecs: &str, metadata: &str, dir: &Path) -> Value {
    serde_json::json!({
        "access_key": eniip_sim::DEFAULT_ACCESS_KEY_ID,
        "access_secret": eniip_sim::DEFAULT_ACCESS_KEY_SECRET,
        "ecs_endpoint": ecs,
        "vpc_endpoint": ecs,
        "metadata_endpoint": metadata,
        "socket_path": dir.join("d.sock").display().to_string(),
        "state_dir": dir.join("state").display().to_string(),
        "allowed_uids": [nix::unistd::getuid().as_raw()],
    })
}

/// `base` with the keys of `more` set on it (both JSON objects).
pub fn merged(mut base: Value, more: Value) -> Value {
    if let (Value::Object(b), Value::Object(m)) = (&mut base, more) {
        b.extend(m);
    }
    base
}

impl Daemon {
    /// Writes `cfg` and starts the daemon; waits for READY=1.
    pub fn start(dir: &Path, cfg: &Value) -> Daemon {
        let d = Daemon::spawn(dir, cfg, &[]);
        d.wait_ready(Duration::from_secs(60));
        d
    }

    /// Starts without waiting.
    pub fn spawn(dir: &Path, cfg: &Value, extra_args: &[&str]) -> Daemon {
        Daemon::spawn_wrapped(&[], dir, cfg, extra_args)
    }

    /// [`Daemon::start`] with the command line prefixed by `wrap` (as
    /// `unshare --pid --fork`: the process is then the wrapper's).
    pub fn start_wrapped(wrap: &[&str], dir: &Path, cfg: &Value) -> Daemon {
        Daemon::start_wrapped_with(wrap, &[], dir, cfg)
    }

    /// [`Daemon::start_wrapped`] with the environment variables `env` set
    /// (the knobs debug builds read for tests).
    pub fn start_wrapped_with(
        wrap: &[&str],
        env: &[(&str, &str)],
        dir: &Path,
        cfg: &Value,
    ) -> Daemon {
        let d = Daemon::spawn_wrapped_with(wrap, env, dir, cfg, &[]);
        d.wait_ready(Duration::from_secs(60));
        d
    }

    fn spawn_wrapped(wrap: &[&str], dir: &Path, cfg: &Value, extra_args: &[&str]) -> Daemon {
        Daemon::spawn_wrapped_with(wrap, &[], dir, cfg, extra_args)
    }

    fn spawn_wrapped_with(
        wrap: &[&str],
        env: &[(&str, &str)],
        dir: &Path,
        cfg: &Value,
        extra_args: &[&str],
    ) -> Daemon {
        let config = dir.join("eni.json");
        fs::write(&config, serde_json::to_vec_pretty(cfg).unwrap()).unwrap();
        let notify_path = dir.join(format!("n{}.sock", rand_suffix()));
        let notify = UnixDatagram::bind(&notify_path).unwrap();
        let log = dir.join("daemon.log");
        let logf = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let eniipd = env!("CARGO_BIN_EXE_eniipd");
        let child = Command::new(wrap.first().copied().unwrap_or(eniipd))
            .args(wrap.iter().skip(1))
            .args(wrap.first().map(|_| eniipd))
            .arg("--config")
            .arg(&config)
            .args(extra_args)
            .env("NOTIFY_SOCKET", &notify_path)
            .env_remove("JOURNAL_STREAM")
            .env_remove("LISTEN_FDS")
            .env_remove("ENIIPD_LOG")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(logf)
            .spawn()
            .unwrap();
        Daemon {
            dir: dir.to_path_buf(),
            socket: PathBuf::from(cfg["socket_path"].as_str().unwrap()),
            config,
            child: Some(child),
            log,
            notify,
        }
    }

    /// After a restart served from the state files: blocks until the first
    /// reconcile has verified the pool against the OpenAPI (before it, the
    /// pool holds only what was handed out; eniipd(8)). At once after a
    /// first start.
    pub fn wait_verified(&self, limit: Duration) {
        // The log is appended across restarts: this start's part begins
        // at its last "state: ..." line.
        let this_start =
            |l: &str| l[l.rfind("eniipd_daemon::daemon: state: ").unwrap_or(0)..].to_string();
        if !this_start(&self.log_text()).contains("restarted from the state files") {
            return;
        }
        let ok = eventually(limit, || {
            this_start(&self.log_text()).contains("the pool is verified against the OpenAPI")
        });
        assert!(ok, "the pool was never verified:\n{}", self.log_text());
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// Blocks until READY=1 arrives (panics with the log otherwise).
    pub fn wait_ready(&self, limit: Duration) {
        let end = Instant::now() + limit;
        let mut buf = [0u8; 512];
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                panic!("no READY=1 within {limit:?}; log:\n{}", self.log_text());
            }
            self.notify
                .set_read_timeout(Some(left.min(Duration::from_millis(200))))
                .unwrap();
            if let Ok(n) = self.notify.recv(&mut buf) {
                if says_ready(&buf[..n]) {
                    return;
                }
            }
        }
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// One request, the whole reply.
    pub fn ask(&self, line: &str) -> Vec<String> {
        ask(&self.socket, line)
    }

    /// The `OK` text of a request that must succeed.
    pub fn ok(&self, line: &str) -> String {
        let r = self.ask(line);
        let last = r.last().unwrap();
        assert!(
            last.starts_with("OK"),
            "{line} -> {r:?}\nlog:\n{}",
            self.log_text()
        );
        last.trim_start_matches("OK").trim().to_string()
    }

    /// Asserts that `audit` says consistent within `limit` (a maintenance
    /// pass may still be settling what the test just did).
    pub fn audits_consistent_within(&self, limit: Duration) {
        assert!(
            eventually(limit, || self.ask("audit") == ["OK consistent"]),
            "{:?}",
            self.ask("audit")
        );
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait (at most `limit`) for the exit status.
    pub fn terminate(&mut self, limit: Duration) -> (ExitStatus, Duration) {
        let mut c = self.child.take().unwrap();
        let t = Instant::now();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        loop {
            if let Some(s) = c.try_wait().unwrap() {
                return (s, t.elapsed());
            }
            if t.elapsed() > limit {
                let _ = c.kill();
                panic!("no exit within {limit:?}; log:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the process to exit by itself.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let mut c = self.child.take().unwrap();
        let t = Instant::now();
        loop {
            if let Some(s) = c.try_wait().unwrap() {
                return s;
            }
            if t.elapsed() > limit {
                let _ = c.kill();
                panic!("no exit within {limit:?}; log:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// `eniipd --simulate --state-dir STATE` (with `--socket` when given one)
/// as a child, its `XDG_RUNTIME_DIR` the test's; killed on drop unless
/// stopped.
pub struct Demo {
    child: Child,
    /// Where it answers: the `--socket` given, else `STATE/eniipd.sock`.
    pub socket: PathBuf,
}

impl Demo {
    /// Starts it and waits (at most 30 s) until it answers `ping`.
    pub fn start(runtime_dir: &Path, state: &Path, socket: Option<&Path>) -> Demo {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_eniipd"));
        cmd.arg("--simulate").arg("--state-dir").arg(state);
        if let Some(s) = socket {
            cmd.arg("--socket").arg(s);
        }
        let child = cmd
            .env("XDG_RUNTIME_DIR", runtime_dir)
            .env_remove("NOTIFY_SOCKET")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let d = Demo {
            child,
            socket: socket.map_or_else(|| state.join("eniipd.sock"), Path::to_path_buf),
        };
        assert!(
            eventually(Duration::from_secs(30), || try_ask(&d.socket, "ping")
                .is_some_and(|r| r == "OK pong")),
            "the demo does not answer on {}",
            d.socket.display()
        );
        d
    }

    /// SIGINT; asserts that it exits 0.
    pub fn stop(mut self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        )
        .unwrap();
        assert!(self.child.wait().unwrap().success());
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// True if a datagram to `NOTIFY_SOCKET` says `READY=1`.
pub fn says_ready(datagram: &[u8]) -> bool {
    String::from_utf8_lossy(datagram)
        .lines()
        .any(|l| l == "READY=1")
}

fn rand_suffix() -> String {
    eniip_util::rand::with_thread_rng(|r| r.hex(4))
}

/// How long a test waits for one reply (an `audit` or a cold `alloc` on
/// a loaded machine).
pub const REPLY_WAIT: Duration = Duration::from_secs(120);

/// One request on a socket; returns every reply line (`<closed>` alone
/// when no whole reply came).
pub fn ask(socket: &Path, line: &str) -> Vec<String> {
    let mut c = Client::connect(socket, REPLY_WAIT)
        .unwrap_or_else(|e| panic!("connect {}: {e}", socket.display()));
    match c.ask_within(line, REPLY_WAIT) {
        Ok(r) => r.into_lines(),
        Err(_) => vec!["<closed>".into()],
    }
}

/// The first vswitch's id in an emulator's `/__sim/state`.
pub fn first_vswitch(state: &Value) -> String {
    state["vswitches"][0]["id"]
        .as_str()
        .expect("a vswitch id")
        .to_string()
}

/// Every IPv4 address an ENI holds in the emulator's `/__sim/state`.
pub fn sim_held_v4(state: &Value) -> std::collections::BTreeSet<String> {
    state["enis"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| e["private_ips"].as_array().unwrap().iter())
        .map(|ip| ip.as_str().unwrap().to_string())
        .collect()
}

/// The entry of `list` (`enis`, `vswitches`) in an emulator's
/// `/__sim/state` whose `id` is `id`.
pub fn by_id(state: &Value, list: &str, id: &str) -> Value {
    state[list]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["id"] == id))
        .unwrap_or_else(|| panic!("no {list} entry {id}"))
        .clone()
}

/// The value of `key=` in a line of words: a reply (`OK ip=.. eni=..`),
/// eniip-sim's `ready` line.
/// `reply` without its `gen=` field: what a repeated `alloc` answers the
/// same (each answer names a new generation).
pub fn sans_gen(reply: &str) -> String {
    reply
        .split(' ')
        .filter(|w| !w.starts_with("gen="))
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn field(reply: &str, key: &str) -> String {
    eniip_protocol::protocol::reply::field(reply.trim_end(), key)
        .unwrap_or_else(|| panic!("no {key} in {reply:?}"))
        .to_string()
}

/// The rows of a whole `list` reply, read by the protocol's own parser:
/// a reply that is not `OK <count>` after as many well-formed rows fails.
pub fn list_rows(reply: &[String]) -> Vec<eniip_protocol::protocol::reply::ListLine> {
    let (last, rows) = reply
        .split_last()
        .unwrap_or_else(|| panic!("an empty reply to list"));
    let count: usize = last
        .strip_prefix("OK ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("list answered {last:?}: {reply:?}"));
    assert_eq!(count, rows.len(), "{reply:?}");
    rows.iter()
        .map(|l| {
            eniip_protocol::protocol::reply::parse_list_line(l)
                .unwrap_or_else(|e| panic!("list row {l:?}: {e}"))
        })
        .collect()
}

/// Runs `cmd` to its end: the exit code (-1 when a signal ended it),
/// stdout and stderr.
pub fn run(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Reads a process's whole stdout (for one-shot commands).
pub fn read_all(mut r: impl Read) -> String {
    let mut s = String::new();
    let _ = r.read_to_string(&mut s);
    s
}

/// One request; the final line, or `None` if the connection failed or
/// closed before it (a killed daemon).
pub fn try_ask(socket: &Path, line: &str) -> Option<String> {
    let mut c = Client::connect(socket, REPLY_WAIT).ok()?;
    let r = c.ask_within(line, REPLY_WAIT).ok()?;
    Some(r.final_line().to_string())
}

/// The count of OpenAPI calls signed with `version` (`v1`, `v3`) in the
/// emulator's `signatures` (which says both, zeros included): a renamed
/// or missing key fails, never reads as 0.
pub fn signed(sigs: &Value, version: &str) -> u64 {
    sigs[version]
        .as_u64()
        .unwrap_or_else(|| panic!("no {version} count in the emulator's signatures: {sigs}"))
}
