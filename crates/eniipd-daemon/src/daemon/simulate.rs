//! `--simulate`: the in-process emulator, the throwaway directory of a
//! demo, `--simulate-links`, and the banner with commands that work as
//! pasted.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use log::info;

use crate::sim::hostlinks::{self, HostLinks, HostLinksOptions};
use crate::sim::{SimOptions, Simulator};

use super::args::Args;
use super::error::{chain, exit, DaemonError};

/// Where `--simulate --state-dir DIR` keeps the emulated cloud.
const SIM_WORLD_FILE: &str = "sim-world.json";

/// `--simulate`: the in-process emulator, and the throwaway directory of
/// a demo without `--state-dir`.
pub(super) fn start_simulator(
    args: &Args,
) -> Result<(Option<Simulator>, Option<PathBuf>), DaemonError> {
    Ok(if args.simulate {
        // With --state-dir the emulated cloud is kept beside the state,
        // so a restarted demo finds its ENIs and keeps its allocations.
        let opts = SimOptions {
            world_file: args.state_dir.as_ref().map(|d| d.join(SIM_WORLD_FILE)),
            ..SimOptions::default()
        };
        if let Some(d) = &args.state_dir {
            std::fs::create_dir_all(d).map_err(|e| {
                DaemonError::new(exit::CONFIG, format!("--state-dir {}: {e}", d.display()))
            })?;
        }
        let sim = Simulator::start(opts).map_err(|e| {
            DaemonError::new(
                exit::FAILURE,
                format!("cannot start the emulator: {}", chain(&e)),
            )
        })?;
        info!("emulator: {}", sim.ready_line());
        // A kept demo keeps its socket too (an exported SOCK stays right
        // across restarts); only a throwaway one gets a directory of its
        // own, removed at stop.
        let throwaway = match &args.state_dir {
            Some(_) => None,
            None => Some(simulate_dir()?),
        };
        (Some(sim), throwaway)
    } else {
        (None, None)
    })
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

/// `--simulate-links`: the emulator's ENIs as links on this host.
pub(super) fn simulate_links(sim: &Simulator) -> Result<HostLinks, DaemonError> {
    let tag = hostlinks::daemon_tag(std::process::id());
    let links = HostLinks::start(HostLinksOptions {
        ecs_url: sim.ecs_url(),
        instance_id: sim.instance_id(),
        node_netns: None,
        vpc_netns: None,
        tag: tag.clone(),
        poll: Duration::from_millis(100),
    })
    .map_err(|e| DaemonError::new(exit::FAILURE, format!("--simulate-links: {}", chain(&e))))?;
    info!(
        "simulated links: the emulated ENIs appear here as e{tag}n<N>; the VPC: nsenter --net={}",
        links.vpc_path().display()
    );
    Ok(links)
}

/// What `--simulate` prints for the user: commands that work as pasted.
pub(super) fn simulate_banner(socket: &Path, sim: &Simulator, links: Option<&HostLinks>) {
    // eniipctl is built beside eniipd; if it is not there (only eniipd was
    // built), cargo builds and runs it.
    let ctl = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("eniipctl")))
        .filter(|p| p.is_file())
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "cargo run --release --bin eniipctl --".into());
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "eniipd is running against the built-in emulator.");
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
    if let Some(l) = links {
        let gateway = hostlinks::first_gateway(&sim.state())
            .map(|g| format!(" (gateway {g})"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "links:  the emulated ENIs appear here as links; the VPC{gateway}: nsenter --net={}",
            l.vpc_path().display()
        );
    }
    let _ = writeln!(out, "stop with Ctrl-C.");
    let _ = out.flush();
}
