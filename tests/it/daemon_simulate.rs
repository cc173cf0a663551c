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
