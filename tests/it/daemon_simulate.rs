//! `eniipd --simulate --state-dir DIR` across restarts: the socket stays
//! where the first run said it is, so an exported `SOCK` keeps working.

use crate::common::{ask, tempdir, Demo};

use std::process::{Command, Stdio};

#[test]
fn with_a_state_dir_the_demo_socket_stays_in_it_across_restarts() {
    let dir = tempdir("simulate-sock");
    let state = dir.join("demo");
    let socket = state.join("eniipd.sock");
    let first = Demo::start(&dir, &state, None);
    let held = ask(&socket, "alloc demo/web-1");
    assert!(held[0].starts_with("OK ip="), "{held:?}");
    first.stop();
    // The state is kept (the directory is not the demo's to remove).
    assert!(state.join("sim-world.json").is_file());
    let second = Demo::start(&dir, &state, None);
    assert_eq!(ask(&socket, "show demo/web-1"), held);
    second.stop();
    assert!(state.join("sim-world.json").is_file());
}

/// `--simulate-links` is root only and needs `--simulate`: either way a
/// usage error (exit 2) that says why, before anything is started.
#[test]
fn simulate_links_needs_root_and_simulate() {
    let eniipd = env!("CARGO_BIN_EXE_eniipd");
    let run = |cmd: &mut Command| {
        let out = cmd
            .env_remove("NOTIFY_SOCKET")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(Command::new(eniipd).arg("--simulate-links"));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--simulate-links needs --simulate"), "{err}");

    // As an unprivileged user (uid 65534, through setpriv when the test
    // runs as root; the test's own uid otherwise).
    // (A copy it can reach: the checkout may be under /root, mode 0700.)
    let root = nix::unistd::geteuid().is_root();
    let anyone = root.then(|| crate::common::runnable_by_anyone(eniipd, "sim-anyone"));
    let mut cmd = match &anyone {
        Some(copy) => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(copy);
            c
        }
        None => Command::new(eniipd),
    };
    cmd.args(["--simulate", "--simulate-links"])
        .env("XDG_RUNTIME_DIR", "/nonexistent");
    let (code, err) = run(&mut cmd);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--simulate-links needs root"), "{err}");
    if let Some(copy) = anyone {
        let _ = std::fs::remove_dir_all(copy.parent().unwrap());
    }
}
