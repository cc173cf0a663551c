//! README's `socat` commands as a user pastes them: the one-shot request
//! answers and returns, the interactive session, whose input stays open,
//! ends when `quit` is answered (not 90 s later), and requests piped in
//! are all answered (issue 31: with `-t 0` they printed nothing).

use crate::cnienv;
use crate::common::{config, eventually, tempdir, Daemon, Sim};

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

/// README's `$ ... socat ...` lines (the shell prompt dropped).
fn readme_socat_lines() -> Vec<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    readme
        .lines()
        .filter_map(|l| l.strip_prefix("$ "))
        .filter(|l| l.contains("socat"))
        .map(str::to_string)
        .collect()
}

/// Waits up to 20 s for `child` to end (killed past that): whether it
/// ended, its status and its output.
fn to_its_end(mut child: std::process::Child) -> (bool, std::process::ExitStatus, String) {
    let ended = eventually(Duration::from_secs(20), || {
        child.try_wait().is_ok_and(|s| s.is_some())
    });
    if !ended {
        let _ = child.kill();
    }
    let status = child.wait().unwrap();
    let mut shown = String::new();
    let _ = child.stdout.take().unwrap().read_to_string(&mut shown);
    (ended, status, shown)
}

#[test]
fn readmes_one_shot_and_interactive_socat_forms_return_when_answered() {
    if !cnienv::can_run("readme_socat", &["socat"]) {
        return;
    }
    let lines = readme_socat_lines();
    let one_shot = lines
        .iter()
        .find(|l| l.starts_with("echo "))
        .expect("README has a one-shot socat line");
    let interactive = lines
        .iter()
        .find(|l| l.starts_with("socat "))
        .expect("README has an interactive socat line");
    let sim = Sim::quick(&[]);
    let dir = tempdir("readme-socat");
    let d = Daemon::start(&dir, &config(&sim, &dir, serde_json::json!({})));

    let out = Command::new("sh")
        .args(["-c", one_shot])
        .env("SOCK", &d.socket)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.starts_with("OK ip="),
        "{one_shot}: {text}"
    );

    // A terminal's input: lines typed, never closed.
    let mut child = Command::new("sh")
        .args(["-c", &format!("exec {interactive}")])
        .env("SOCK", &d.socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"status\nquit\n").unwrap();
    let (ended, status, shown) = to_its_end(child);
    drop(stdin);
    assert!(
        ended,
        "`{interactive}` still runs 20 s after `quit` was answered:\n{shown}"
    );
    assert!(status.success(), "{interactive}: {status}\n{shown}");
    assert!(
        shown.starts_with("OK enis=") && shown.trim_end().ends_with("OK bye"),
        "{shown}"
    );

    let piped = lines
        .iter()
        .find(|l| l.starts_with("printf "))
        .expect("README has a piped socat line");
    let child = Command::new("sh")
        .args(["-c", piped])
        .env("SOCK", &d.socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (ended, status, shown) = to_its_end(child);
    assert!(
        ended,
        "`{piped}` still runs 20 s after its input ended:\n{shown}"
    );
    assert!(status.success(), "{piped}: {status}\n{shown}");
    let finals: Vec<&str> = shown
        .lines()
        .filter(|l| eniip_protocol::protocol::is_final_line(l))
        .collect();
    assert_eq!(finals.len(), 2, "`{piped}` printed:\n{shown}");
    assert!(finals[0].starts_with("OK enis="), "{shown}");
}
