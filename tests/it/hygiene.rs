//! Secret hygiene and hostile clients, with the real binaries.

use crate::common;

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{config, tempdir, Daemon, Sim};
use serde_json::json;

const KEY_ID: &str = "LTAIhygieneKeyId00001";
const SECRET: &str = "HyGiEnE-SeCrEt-ValUe-0123456789abcdef";

fn all_files(dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            all_files(&p, out);
        } else if let Ok(b) = std::fs::read(&p) {
            out.push((p.display().to_string(), b));
        }
    }
}

fn assert_absent(what: &str, haystacks: &[(String, Vec<u8>)], needles: &[&str]) {
    for (name, hay) in haystacks {
        let text = String::from_utf8_lossy(hay);
        for n in needles {
            assert!(!text.contains(n), "{what}: a secret appears in {name}");
        }
    }
}

fn session(d: &Daemon) -> Vec<String> {
    let mut replies = Vec::new();
    for line in [
        "alloc hy/one sandbox=a",
        "alloc hy/two",
        "show hy/one",
        "list",
        "status",
        "enis",
        "audit",
        "metrics",
        "config",
        "release hy/one",
        "help",
        "version",
        "bogus command",
        "alloc bad|owner",
    ] {
        replies.extend(d.ask(line));
    }
    replies
}

#[test]
fn no_secret_or_token_in_logs_replies_or_state() {
    let sim = Sim::start(&[
        "--access-key-id",
        KEY_ID,
        "--access-key-secret",
        SECRET,
        "--attach-delay-ms",
        "50",
        "--metadata-lag-ms",
        "50",
    ]);
    // Retries and errors at debug level exercise every log path that sees
    // a request.
    sim.fault(r#"{"action":"AssignPrivateIpAddresses","code":"Throttling.User","count":2}"#);
    sim.fault(r#"{"action":"CreateNetworkInterface","code":"InternalError","count":1}"#);
    let dir = tempdir("hygiene");
    let mut cfg = config(
        &sim,
        &dir,
        json!({"access_key": KEY_ID, "access_secret": SECRET, "min_pool_size": 3}),
    );
    cfg["state_dir"] = json!(dir.join("state").display().to_string());
    let mut d = Daemon::spawn(&dir, &cfg, &["--log-level", "trace"]);
    d.wait_ready(Duration::from_secs(60));
    let mut seen: Vec<(String, Vec<u8>)> = Vec::new();
    let replies = session(&d);
    assert!(replies.iter().any(|l| l.starts_with("OK ip=")));
    seen.push(("replies".into(), replies.join("\n").into_bytes()));
    let check = Command::new(env!("CARGO_BIN_EXE_eniipd"))
        .args(["--check-config", "--log-level", "trace", "--config"])
        .arg(&d.config)
        .output()
        .unwrap();
    seen.push(("--check-config stdout".into(), check.stdout));
    seen.push(("--check-config stderr".into(), check.stderr));
    d.terminate(Duration::from_secs(15));
    seen.push(("daemon log".into(), d.log_text().into_bytes()));
    assert!(
        d.log_text().contains("DEBUG") || d.log_text().contains("TRACE"),
        "debug logging was on"
    );
    let mut files = Vec::new();
    all_files(&dir.join("state"), &mut files);
    assert!(!files.is_empty());
    seen.extend(files);
    assert_absent("static key", &seen, &[SECRET]);
    drop(d);

    // RAM-role credentials: the STS secret and token from the emulator's
    // metadata must not leak either.
    let creds: serde_json::Value = serde_json::from_str(
        &ureq::get(&format!(
            "{}/latest/meta-data/ram/security-credentials/EniipdSimRole",
            sim.metadata
        ))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap(),
    )
    .unwrap();
    let sts_secret = creds["AccessKeySecret"].as_str().unwrap().to_string();
    let sts_token = creds["SecurityToken"].as_str().unwrap().to_string();
    let dir2 = tempdir("hygiene-role");
    let mut cfg2 = config(&sim, &dir2, json!({}));
    cfg2.as_object_mut().unwrap().remove("access_key");
    cfg2.as_object_mut().unwrap().remove("access_secret");
    let mut d = Daemon::spawn(&dir2, &cfg2, &["--log-level", "trace"]);
    d.wait_ready(Duration::from_secs(60));
    let mut seen = vec![("replies".to_string(), session(&d).join("\n").into_bytes())];
    d.terminate(Duration::from_secs(15));
    assert!(d.log_text().contains("RAM role"), "{}", d.log_text());
    seen.push(("daemon log".into(), d.log_text().into_bytes()));
    let mut files = Vec::new();
    all_files(&dir2.join("state"), &mut files);
    seen.extend(files);
    assert_absent("RAM role", &seen, &[&sts_secret, &sts_token, SECRET]);
}

#[test]
fn two_hundred_hostile_connections_do_not_stop_a_legitimate_alloc() {
    let sim = Sim::quick(&[]);
    let dir = tempdir("abuse");
    let d = Daemon::start(&dir, &config(&sim, &dir, json!({})));
    let mut hostile: Vec<UnixStream> = Vec::new();
    for i in 0..200 {
        let mut s = UnixStream::connect(&d.socket).unwrap();
        s.set_write_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        match i % 4 {
            0 => {}                                                 // idle
            1 => drop(s.write_all(b"allo")),                        // slowloris start
            2 => drop(s.write_all(&vec![b'x'; 3000])),              // half an oversized line
            _ => drop(s.write_all(b"\x00\xff\xfe\x01\x02garbage")), // binary, no newline
        }
        hostile.push(s);
    }
    // Keep the slow ones trickling while the real client works.
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| {
        let slow: Vec<&UnixStream> = hostile.iter().skip(1).step_by(4).collect();
        let stop = &stop;
        sc.spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                for mut s in slow.iter().copied() {
                    let _ = s.write_all(b"c");
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        });
        let t = Instant::now();
        let cold = d.ok("alloc legit/cold");
        let cold_latency = t.elapsed();
        let t = Instant::now();
        let warm = d.ok("show legit/cold");
        let warm_latency = t.elapsed();
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        println!(
            "with 200 hostile connections open: cold alloc {cold_latency:?}, show {warm_latency:?}"
        );
        assert!(cold.starts_with("ip="));
        assert_eq!(warm, cold);
    });
    assert_eq!(d.ask("ping"), vec!["OK pong"]);
    drop(hostile);
}
