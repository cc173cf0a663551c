//! `--simulate`: the emulator as a child process (the shipped `eniip-sim`
//! program beside this one, or on `PATH`: the daemon never links its test
//! double), the throwaway directory of a demo, `--simulate-links`, and the
//! banner with commands that work as pasted.
//!
//! The child is given a fresh access key pair through its environment
//! (never its command line, which any user can read), reports its
//! endpoints on its first line, and holds its standard input open on a pipe
//! from here: when eniipd is gone, however it died, the pipe ends and the
//! emulator stops (`--exit-with-stdin`).

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use eniip_util::Secret;
use log::{info, warn};

use super::args::Args;
use super::error::{exit, DaemonError};

/// Where `--simulate --state-dir DIR` keeps the emulated cloud.
const SIM_WORLD_FILE: &str = "sim-world.json";
/// The emulator's program.
const SIM_PROGRAM: &str = "eniip-sim";
/// How long the emulator may take to say it is ready (with its links).
const SIM_READY_TIMEOUT: Duration = Duration::from_secs(20);

/// The running emulator: the child, what it answered, and the pipe whose
/// end stops it.
#[derive(Debug)]
pub(crate) struct SimChild {
    child: Child,
    /// Held open: its end is the emulator's cue to stop.
    stdin: Option<ChildStdin>,
    /// Drains the child's standard output to its end.
    reader: Option<JoinHandle<()>>,
    pub(crate) ecs_url: String,
    pub(crate) vpc_url: String,
    pub(crate) metadata_url: String,
    pub(crate) access_key_id: String,
    pub(crate) access_key_secret: Secret,
    /// `--simulate-links`: where the emulated VPC is.
    pub(crate) links: Option<SimLinks>,
}

/// What `--host-links` made.
#[derive(Debug)]
pub(crate) struct SimLinks {
    /// The VPC namespace's path (for `nsenter --net=`).
    pub(crate) vpc: String,
    /// The first vswitch's gateway, when the emulator told it.
    pub(crate) gateway: Option<String>,
}

impl SimChild {
    /// Starts `program` and waits for its ready line (and, with a links
    /// tag, its links line).
    fn start(
        program: &Path,
        world_file: Option<&Path>,
        links_tag: Option<&str>,
    ) -> Result<SimChild, String> {
        let (key_id, key_secret) =
            eniip_util::rand::with_thread_rng(|r| (format!("LTAIsim{}", r.hex(8)), r.hex(16)));
        let mut cmd = Command::new(program);
        cmd.arg("--exit-with-stdin")
            .env("ENIIP_SIM_ACCESS_KEY_ID", &key_id)
            .env("ENIIP_SIM_ACCESS_KEY_SECRET", &key_secret)
            // The child is no service of its own: it must not tell
            // systemd "ready", nor take the sockets systemd passed here.
            .env_remove("NOTIFY_SOCKET")
            .env_remove("LISTEN_FDS")
            .env_remove("LISTEN_PID")
            .env_remove("LISTEN_FDNAMES")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(f) = world_file {
            cmd.arg("--state-file").arg(f);
        }
        if let Some(tag) = links_tag {
            cmd.arg("--host-links").arg(tag);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
        let stdin = child.stdin.take();
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err("no pipe from the emulator's standard output".into());
        };
        let (tx, rx) = crossbeam_channel::unbounded();
        let reader = std::thread::Builder::new()
            .name("sim-stdout".into())
            .spawn(move || {
                // To the end, whether or not anyone still listens: the
                // emulator never blocks on a full pipe.
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    let _ = tx.send(line);
                }
            })
            .map_err(|e| format!("cannot start a thread: {e}"))?;
        let mut sim = SimChild {
            child,
            stdin,
            reader: Some(reader),
            ecs_url: String::new(),
            vpc_url: String::new(),
            metadata_url: String::new(),
            access_key_id: key_id,
            access_key_secret: Secret::new(key_secret),
            links: None,
        };
        sim.read_ready(program, &rx, links_tag.is_some())?;
        Ok(sim)
    }

    /// Reads the child's lines until it said it is ready (and, with
    /// `links`, where its links are).
    fn read_ready(
        &mut self,
        program: &Path,
        rx: &Receiver<String>,
        links: bool,
    ) -> Result<(), String> {
        let until = Instant::now() + SIM_READY_TIMEOUT;
        while self.ecs_url.is_empty() || (links && self.links.is_none()) {
            let line = match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(l) => l,
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!(
                        "{} did not say it was ready within {} s",
                        program.display(),
                        SIM_READY_TIMEOUT.as_secs()
                    ))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self
                        .child
                        .wait()
                        .map(|s| s.to_string())
                        .unwrap_or_else(|e| e.to_string());
                    return Err(format!(
                        "{} stopped before it was ready ({status}; its reason is on standard error above)",
                        program.display()
                    ));
                }
            };
            let mut words = line.split_whitespace();
            let first = words.next();
            let fields = words.filter_map(|w| w.split_once('='));
            match first {
                Some("ready") => {
                    let (mut ecs, mut vpc, mut md) = (None, None, None);
                    for (k, v) in fields {
                        match k {
                            "ecs" => ecs = Some(v.to_string()),
                            "vpc" => vpc = Some(v.to_string()),
                            "metadata" => md = Some(v.to_string()),
                            _ => {}
                        }
                    }
                    let (Some(ecs), Some(vpc), Some(md)) = (ecs, vpc, md) else {
                        return Err(format!(
                            "the emulator's ready line lacks an endpoint: {line}"
                        ));
                    };
                    (self.ecs_url, self.vpc_url, self.metadata_url) = (ecs, vpc, md);
                }
                Some("links") => {
                    let mut l = SimLinks {
                        vpc: String::new(),
                        gateway: None,
                    };
                    for (k, v) in fields {
                        match k {
                            "vpc" => l.vpc = v.to_string(),
                            "gateway" => l.gateway = Some(v.to_string()),
                            _ => {}
                        }
                    }
                    self.links = Some(l);
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The child's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the emulator: SIGTERM (its links go first), then, at
    /// `until`, SIGKILL.
    pub(crate) fn stop_until(mut self, until: Instant) {
        self.stop(until);
    }

    fn stop(&mut self, until: Instant) {
        let Some(reader) = self.reader.take() else {
            return;
        };
        self.stdin = None;
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let exited = eniip_util::thread::poll_until(until, Duration::from_millis(10), || {
            matches!(self.child.try_wait(), Ok(Some(_)) | Err(_))
        });
        if !exited {
            warn!("the emulator (pid {pid}) did not stop in time: killed");
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // Its pipe is closed now: the reader ends at once.
        let _ = eniip_util::thread::join_until(reader, Instant::now() + Duration::from_millis(500));
    }
}

impl Drop for SimChild {
    fn drop(&mut self) {
        self.stop(Instant::now() + Duration::from_secs(3));
    }
}

/// The emulator's program: beside this executable, else on `PATH`; from
/// `cargo run` (which builds only the binary it runs), built first.
fn find_sim() -> Result<PathBuf, String> {
    let dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf));
    let beside = || {
        dir.as_ref()
            .map(|d| d.join(SIM_PROGRAM))
            .filter(|p| p.is_file())
    };
    if let Some(p) = beside() {
        return Ok(p);
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(SIM_PROGRAM))
            .find(|p| p.is_file())
    });
    if let Some(p) = on_path {
        return Ok(p);
    }
    let release = dir.as_ref().is_some_and(|d| d.ends_with("release"));
    if build_with_cargo(release) {
        if let Some(p) = beside() {
            return Ok(p);
        }
    }
    Err(format!(
        "--simulate runs the {SIM_PROGRAM} program, which is neither beside this eniipd nor on PATH (from a checkout: cargo build --release builds both)"
    ))
}

/// Under `cargo run` (cargo sets `CARGO` and `CARGO_MANIFEST_DIR` for
/// what it runs, and has let go of its build directory by then): builds
/// the emulator beside this eniipd, in the same profile. False when not
/// under cargo or the build failed (cargo said why on standard error).
fn build_with_cargo(release: bool) -> bool {
    let (Some(cargo), Some(manifest)) = (
        std::env::var_os("CARGO"),
        std::env::var_os("CARGO_MANIFEST_DIR"),
    ) else {
        return false;
    };
    info!("{SIM_PROGRAM} is not built yet: building it (cargo build --bin {SIM_PROGRAM})");
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "--bin", SIM_PROGRAM, "--manifest-path"])
        .arg(Path::new(&manifest).join("Cargo.toml"))
        .stdout(Stdio::null());
    if release {
        cmd.arg("--release");
    }
    cmd.status().is_ok_and(|s| s.success())
}

/// `--simulate`: the emulator, and the throwaway directory of a demo
/// without `--state-dir`.
pub(super) fn start_simulator(
    args: &Args,
) -> Result<(Option<SimChild>, Option<PathBuf>), DaemonError> {
    if !args.simulate {
        return Ok((None, None));
    }
    let program = find_sim().map_err(|e| DaemonError::new(exit::CONFIG, e))?;
    // With --state-dir the emulated cloud is kept beside the state, so a
    // restarted demo finds its ENIs and keeps its allocations.
    let world_file = args.state_dir.as_ref().map(|d| d.join(SIM_WORLD_FILE));
    if let Some(d) = &args.state_dir {
        std::fs::create_dir_all(d).map_err(|e| {
            DaemonError::new(exit::CONFIG, format!("--state-dir {}: {e}", d.display()))
        })?;
    }
    // `--simulate-links`: the emulated ENIs as links e<tag>n<slot>, the
    // tag this eniipd's pid in hex (two demos never share a name).
    let tag = args
        .simulate_links
        .then(|| format!("s{:x}", std::process::id()));
    let sim = SimChild::start(&program, world_file.as_deref(), tag.as_deref())
        .map_err(|e| DaemonError::new(exit::FAILURE, format!("cannot start the emulator: {e}")))?;
    info!(
        "emulator: {} (pid {}) ecs={} metadata={}",
        program.display(),
        sim.pid(),
        sim.ecs_url,
        sim.metadata_url
    );
    if let (Some(t), Some(l)) = (&tag, &sim.links) {
        info!(
            "simulated links: the emulated ENIs appear here as e{t}n<N>; the VPC: nsenter --net={}",
            l.vpc
        );
    }
    // A kept demo keeps its socket too (an exported SOCK stays right
    // across restarts); only a throwaway one gets a directory of its
    // own, removed at stop.
    let throwaway = match &args.state_dir {
        Some(_) => None,
        None => Some(simulate_dir()?),
    };
    Ok((Some(sim), throwaway))
}

/// A fresh private directory for `--simulate`.
fn simulate_dir() -> Result<PathBuf, DaemonError> {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("eniipd-sim-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .and_then(|()| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        })
        .map_err(|e| {
            DaemonError::new(
                exit::FAILURE,
                format!("cannot create {}: {e}", dir.display()),
            )
        })?;
    Ok(dir)
}

/// What `--simulate` prints for the user: commands that work as pasted.
pub(super) fn simulate_banner(socket: &Path, sim: &SimChild) {
    // eniipctl is built beside eniipd; if it is not there (only eniipd was
    // built), cargo builds and runs it.
    let ctl = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("eniipctl")))
        .filter(|p| p.is_file())
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "cargo run --release --bin eniipctl --".into());
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "eniipd is running against the emulator (eniip-sim, pid {}).",
        sim.pid()
    );
    let _ = writeln!(out, "socket: {}", socket.display());
    let _ = writeln!(
        out,
        "try:    echo 'alloc demo/web-1' | socat -t 90 - UNIX-CONNECT:{}",
        socket.display()
    );
    let _ = writeln!(
        out,
        "or:     export SOCK={0} ENIIPD_SOCKET={0}",
        socket.display()
    );
    let _ = writeln!(out, "        {ctl} status");
    if let Some(l) = &sim.links {
        let gateway = l
            .gateway
            .as_ref()
            .map(|g| format!(" (gateway {g})"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "links:  the emulated ENIs appear here as links; the VPC{gateway}: nsenter --net={}",
            l.vpc
        );
    }
    let _ = writeln!(out, "stop with Ctrl-C.");
    let _ = out.flush();
}
