//! A start that cannot reach the cloud says so (issue 31, Deliver 4): a
//! metadata service that gives no answer at all fails the start within
//! 15 s (exit 69) naming the endpoint and what to set, and a client of a
//! socket-activated daemon that is still starting gets an answer, not a
//! silent wait.

use crate::common;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{base_config, tempdir};

/// How long the start may take to give up (the issue's bound).
const FAIL_WITHIN: Duration = Duration::from_secs(15);

/// Writes a config whose metadata service is `metadata` (and whose
/// OpenAPI is never reached) into `dir`.
fn config_file(dir: &Path, metadata: &str) -> std::path::PathBuf {
    let cfg = base_config("http://127.0.0.1:9", metadata, dir);
    let path = dir.join("eni.json");
    std::fs::write(&path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    path
}

/// Waits for `child` to exit, at most `limit`: its exit code and when.
fn exit_within(child: &mut std::process::Child, limit: Duration) -> Option<(i32, Duration)> {
    let started = Instant::now();
    let mut code = None;
    common::eventually(limit, || {
        code = child.try_wait().unwrap().map(|s| s.code().unwrap_or(-1));
        code.is_some()
    });
    if code.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    code.map(|c| (c, started.elapsed()))
}

fn stderr_of(child: &mut std::process::Child) -> String {
    common::read_all(child.stderr.take().unwrap())
}

#[test]
fn a_metadata_service_that_never_answers_fails_the_start_fast_naming_it() {
    // Nothing listens (refused at once), and a listener that never
    // accepts (every request times out): neither ever answers.
    let refused = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let results = common::at_once(2, |i| {
        let endpoint = format!("http://{}", [refused, silent_addr][i]);
        let dir = tempdir(&format!("md-unreachable-{i}"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_eniipd"))
            .arg("--config")
            .arg(config_file(&dir, &endpoint))
            .env_remove("LISTEN_FDS")
            .env_remove("NOTIFY_SOCKET")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let exit = exit_within(&mut child, Duration::from_secs(90));
        (endpoint, exit, stderr_of(&mut child))
    });
    drop(silent);
    for (endpoint, exit, log) in results {
        let (code, took) = exit.unwrap_or_else(|| panic!("{endpoint}: still running\n{log}"));
        println!("{endpoint}: exit {code} after {took:?}");
        assert_eq!(code, 69, "{endpoint}\n{log}");
        assert!(took < FAIL_WITHIN, "{endpoint}: {took:?}\n{log}");
        assert!(
            log.contains(&format!("metadata service unreachable at {endpoint}"))
                && log.contains("metadata_endpoint"),
            "{log}"
        );
    }
}

#[test]
fn a_socket_activated_daemon_that_is_still_starting_answers_busy() {
    let Some(tool) = common::installed("socket activation", &["/usr/bin/systemd-socket-activate"])
    else {
        return;
    };
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let dir = tempdir("starting-busy");
    let sock = dir.join("act.sock");
    let mut child = Command::new(tool)
        .arg("-l")
        .arg(&sock)
        .arg(env!("CARGO_BIN_EXE_eniipd"))
        .arg("--config")
        .arg(config_file(&dir, &endpoint))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(common::eventually(Duration::from_secs(10), || sock.exists()));
    // The first connection starts the daemon; it cannot get ready, and
    // says so instead of leaving the client waiting.
    let asked = Instant::now();
    let r = common::ask(&sock, "ping");
    let waited = asked.elapsed();
    println!("ping while starting: {r:?} after {waited:?}");
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(r[0].starts_with("ERR busy eniipd is starting"), "{r:?}");
    let exit = exit_within(&mut child, Duration::from_secs(90));
    let log = stderr_of(&mut child);
    assert_eq!(exit.map(|e| e.0), Some(69), "{log}");
    assert!(log.contains("metadata service unreachable at"), "{log}");
}

/// A typo in eni.json under socket activation: the client that started
/// eniipd reads why it cannot start and what to run, at once, and its
/// queued connection is answered (closed), so it does not start eniipd
/// again (each start spends the unit's start limit).
#[test]
fn a_socket_activated_daemon_with_a_bad_config_tells_its_client_what_to_run() {
    let Some(tool) = common::installed("socket activation", &["/usr/bin/systemd-socket-activate"])
    else {
        return;
    };
    let dir = tempdir("activated-typo");
    let sock = dir.join("act.sock");
    let config = dir.join("eni.json");
    std::fs::write(&config, r#"{"min_pool_size": "ten"}"#).unwrap();
    let mut child = Command::new(tool)
        .arg("-l")
        .arg(&sock)
        .arg(env!("CARGO_BIN_EXE_eniipd"))
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(common::eventually(Duration::from_secs(10), || sock.exists()));
    let out = Command::new(env!("CARGO_BIN_EXE_eniipctl"))
        .arg("--socket")
        .arg(&sock)
        .arg("status")
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.starts_with("ERR internal eniipd cannot start: its configuration is refused (exit 78"),
        "{said}"
    );
    assert!(
        said.contains("journalctl -u eniipd") && said.contains("systemctl reset-failed"),
        "{said}"
    );
    let exit = exit_within(&mut child, Duration::from_secs(30));
    let log = stderr_of(&mut child);
    assert_eq!(exit.map(|e| e.0), Some(78), "{log}");
    assert!(log.contains("min_pool_size"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}
