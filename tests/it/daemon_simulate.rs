//! `eniipd --simulate --state-dir DIR` across restarts: the socket stays
//! where the first run said it is, so an exported `SOCK` keeps working.

use crate::common::{ask, eventually, tempdir, try_ask};

use std::process::{Child, Command, Stdio};
use std::time::Duration;

struct Demo(Child);

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn with_a_state_dir_the_demo_socket_stays_in_it_across_restarts() {
    let dir = tempdir("simulate-sock");
    let state = dir.join("demo");
    let socket = state.join("eniipd.sock");
    let run = || {
        let d = Demo(
            Command::new(env!("CARGO_BIN_EXE_eniipd"))
                .arg("--simulate")
                .arg("--state-dir")
                .arg(&state)
                .env("XDG_RUNTIME_DIR", &dir)
                .env_remove("NOTIFY_SOCKET")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        assert!(
            eventually(Duration::from_secs(30), || try_ask(&socket, "ping")
                .is_some_and(|r| r == "OK pong")),
            "the demo does not answer on {}",
            socket.display()
        );
        d
    };
    let stop = |mut d: Demo| {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(d.0.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        )
        .unwrap();
        assert!(d.0.wait().unwrap().success());
    };
    let first = run();
    let held = ask(&socket, "alloc demo/web-1");
    assert!(held[0].starts_with("OK ip="), "{held:?}");
    stop(first);
    // The state is kept (the directory is not the demo's to remove).
    assert!(state.join("sim-world.json").is_file());
    let second = run();
    assert_eq!(ask(&socket, "show demo/web-1"), held);
    stop(second);
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
    let root = nix::unistd::geteuid().is_root();
    let mut cmd = match root {
        true => {
            let mut c = Command::new("setpriv");
            c.args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--",
                eniipd,
            ]);
            c
        }
        false => Command::new(eniipd),
    };
    cmd.args(["--simulate", "--simulate-links"])
        .env("XDG_RUNTIME_DIR", "/nonexistent");
    let (code, err) = run(&mut cmd);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--simulate-links needs root"), "{err}");
}
