//! `eniip-sim --state-file` kept by one emulator at a time: a second one
//! on the same file exits non-zero naming the first's pid (two writers
//! lose each other's changes); and a state file whatever its name (even
//! `x.tmp`, which the save's temporary file once was) survives SIGKILLs
//! in the middle of saves: the next start restores every acknowledged
//! change.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{eventually, field, http, read_all, tempdir};

const VSW: &str = "vsw-keep";

/// An emulator keeping `file`: the child and its `ready` line, or its
/// exit status and stderr when it did not start.
fn start(file: &Path) -> Result<(Child, String), (i32, String)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_eniip-sim"))
        .args(["--vswitch", &format!("{VSW}=10.77.0.0/16")])
        .arg("--state-file")
        .arg(file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    if line.starts_with("ready ") {
        // Its log is not read: it must not fill the pipe.
        drop(child.stderr.take());
        return Ok((child, line));
    }
    let status = child.wait().unwrap();
    let err = read_all(child.stderr.take().unwrap());
    Err((status.code().unwrap_or(-1), err))
}

fn free_of(ecs: &str) -> u64 {
    let (code, body) = http("GET", &format!("{ecs}/__sim/state"), "");
    assert_eq!(code, 200, "{body}");
    let state: serde_json::Value = serde_json::from_str(&body).unwrap();
    let vsw = state["vswitches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == VSW)
        .unwrap_or_else(|| panic!("no {VSW}: {state}"))
        .clone();
    vsw["free"].as_u64().unwrap()
}

#[test]
fn a_second_emulator_on_one_state_file_exits_naming_the_first() {
    let dir = tempdir("sim-lock");
    let file = dir.join("world.json");
    let (mut first, _) = start(&file).unwrap_or_else(|e| panic!("{e:?}"));
    let (code, err) = match start(&file) {
        Ok((mut second, line)) => {
            let _ = second.kill();
            let _ = second.wait();
            let _ = first.kill();
            panic!("a second emulator kept the same file: {line}");
        }
        Err(e) => e,
    };
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains(&format!("pid {}", first.id())),
        "the first's pid {} is not named: {err}",
        first.id()
    );
    // Once the first is gone, the file is free again, with its world.
    let _ = first.kill();
    let _ = first.wait();
    let (mut again, _) = start(&file).unwrap_or_else(|e| panic!("{e:?}"));
    let _ = again.kill();
    let _ = again.wait();
}

#[test]
fn a_state_file_named_tmp_survives_sigkills_in_the_middle_of_saves() {
    let dir = tempdir("sim-tmp-name");
    let file = dir.join("x.tmp");
    let acked = Arc::new(AtomicU64::new(0));
    for round in 0..15u64 {
        let (mut sim, line) = start(&file).unwrap_or_else(|(code, err)| {
            panic!("round {round}: the emulator did not start again (exit {code}): {err}")
        });
        let ecs = field(&line, "ecs");
        if round > 0 {
            let free = free_of(&ecs);
            let last = acked.load(Ordering::SeqCst);
            assert!(
                free >= last,
                "round {round}: an acknowledged change was lost ({free} < {last})"
            );
        }
        // Changes saved one after another while the emulator is killed.
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (stop, acked, ecs) = (stop.clone(), acked.clone(), ecs.clone());
            std::thread::Builder::new()
                .name("sim-tmp-writer".into())
                .spawn(move || {
                    for _ in 0..100_000 {
                        if stop.load(Ordering::SeqCst) {
                            return;
                        }
                        let next = acked.load(Ordering::SeqCst) + 1;
                        let agent = crate::common::http_agent();
                        let body = format!(r#"{{"id":"{VSW}","free":{next}}}"#);
                        let Ok(r) = agent
                            .post(format!("{ecs}/__sim/vswitch"))
                            .content_type("application/json")
                            .send(&body)
                        else {
                            return;
                        };
                        if r.status().as_u16() != 200 {
                            return;
                        }
                        acked.store(next, Ordering::SeqCst);
                    }
                })
                .unwrap()
        };
        let from = acked.load(Ordering::SeqCst);
        let enough = eventually(Duration::from_secs(10), || {
            acked.load(Ordering::SeqCst) >= from + 3 + 4 * (round % 5)
        });
        let _ = sim.kill();
        let _ = sim.wait();
        stop.store(true, Ordering::SeqCst);
        writer.join().unwrap();
        assert!(enough, "round {round}: too few saves");
    }
    let left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "x.tmp" && n != "x.tmp.lock")
        .collect();
    assert!(left.len() <= 1, "saves left aside: {left:?}");
}
