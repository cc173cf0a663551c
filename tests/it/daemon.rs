//! The real `eniipd` against the real `eniip-sim`, through the socket:
//! every command, socat, access control, signals and restart, readiness,
//! the state lock, configuration errors, socket activation, metrics.

use crate::common;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{ask, config, field, sans_gen, tempdir, Daemon, Demo, Sim};
use serde_json::json;

#[test]
fn every_command_through_the_real_daemon() {
    let sim = Sim::quick(&[]);
    let dir = tempdir("cmds");
    let d = Daemon::start(&dir, &config(&sim, &dir, json!({})));
    assert!(
        d.log_text().lines().any(|l| l.contains("ready")),
        "{}",
        d.log_text()
    );
    assert_eq!(d.ask("ping"), vec!["OK pong"]);
    assert_eq!(
        d.ask("version"),
        vec![format!(
            "OK eniipd {} protocol=1",
            env!("CARGO_PKG_VERSION")
        )]
    );
    assert_eq!(d.ask("help").last().unwrap(), "OK");
    let a = d.ok("alloc default/web-1 sandbox=s1");
    let ip = field(&a, "ip");
    let eni = field(&a, "eni");
    for k in ["mac", "vswitch", "cidr", "gateway"] {
        field(&a, k);
    }
    let again = d.ok("alloc default/web-1 sandbox=s1");
    assert_eq!(sans_gen(&again), sans_gen(&a), "idempotent");
    assert!(field(&again, "gen").parse::<u64>().unwrap() > field(&a, "gen").parse().unwrap());
    assert_eq!(d.ok("show default/web-1"), again);
    let list = d.ask("list");
    assert!(
        list.contains(&format!(
            "{ip} inuse default/web-1 {eni} gen={}",
            field(&again, "gen")
        )),
        "{list:?}"
    );
    let status = d.ok("status");
    assert!(
        status.starts_with("enis=1 ips=")
            && status.contains(" inuse=1 ")
            && status.ends_with("capacity=45"),
        "{status}"
    );
    let enis = d.ask("enis");
    assert!(
        enis[0].starts_with(&format!("{eni} "))
            && enis[0].split(' ').any(|f| f == "inhibited=-")
            && enis[0]
                .split(' ')
                .any(|f| f.starts_with("security-groups=sg-")),
        "{enis:?}"
    );
    assert_eq!(d.ask("audit"), vec!["OK consistent"]);
    let m = d.ask("metrics");
    for family in [
        "eniipd_ips{state=\"inuse\"} 1",
        "eniipd_alloc_total{result=\"ok\"}",
        "eniipd_openapi_requests_total{action=\"CreateNetworkInterface\",code=\"OK\"}",
        "eniipd_state_commit_duration_seconds_count",
    ] {
        assert!(m.iter().any(|l| l.starts_with(family)), "{family} missing");
    }
    let cfg = d.ask("config");
    assert!(cfg.contains(&"access_secret=***".to_string()));
    assert!(!cfg
        .iter()
        .any(|l| l.contains(eniip_sim::DEFAULT_ACCESS_KEY_SECRET)));
    assert_eq!(
        d.ask("release default/web-1 sandbox=other"),
        vec!["OK released=none"],
        "other sandbox"
    );
    assert_eq!(
        d.ask("release default/web-1"),
        vec![format!("OK released={ip}")]
    );
    assert_eq!(d.ask("release default/web-1"), vec!["OK released=none"]);
    assert_eq!(
        d.ask("show default/web-1"),
        vec!["ERR not-found default/web-1 holds no address"]
    );
    assert!(d.ask("alloc bad|owner")[0].starts_with("ERR bad-request"));
    assert!(d.ask("teleport")[0].starts_with("ERR unknown-command"));
    assert_eq!(
        d.ask("stauts"),
        vec!["ERR unknown-command stauts (did you mean status? try help)"]
    );
    assert_eq!(d.ask("quit"), vec!["OK bye"]);
    // The emulator agrees: our ENI is tagged for this instance.
    let managed = sim.managed();
    assert_eq!(managed.len(), 1);
    assert_eq!(
        managed[0]["tags"]["eniipd/instance-id"],
        sim.instance.as_str()
    );
}

#[test]
fn a_socat_session() {
    if common::installed("a socat session", &["/usr/bin/socat"]).is_none() {
        return;
    }
    let sim = Sim::quick(&[]);
    let dir = tempdir("socat");
    let d = Daemon::start(&dir, &config(&sim, &dir, json!({})));
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo 'alloc demo/web-1' | socat -t 90 - UNIX-CONNECT:{}",
            d.socket.display()
        ))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.starts_with("OK ip="), "{text}");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "printf 'show demo/web-1\\nstatus\\nquit\\n' | socat -t 5 - UNIX-CONNECT:{}",
            d.socket.display()
        ))
        .output()
        .unwrap();
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0], text.trim());
    assert_eq!(lines[2], "OK bye");
}

#[test]
fn a_peer_outside_allowed_uids_is_refused_for_alloc() {
    let sim = Sim::quick(&[]);
    let dir = tempdir("uid");
    let other = nix::unistd::getuid().as_raw() + 4242;
    let d = Daemon::start(&dir, &config(&sim, &dir, json!({"allowed_uids": [other]})));
    assert!(d.ask("alloc x")[0].starts_with("ERR denied"));
    assert!(d.ask("release x")[0].starts_with("ERR denied"));
    assert!(d.ask("status")[0].starts_with("OK enis=0"));
    assert_eq!(sim.calls("CreateNetworkInterface"), 0);
}

#[test]
fn sigterm_exits_0_in_time_and_a_restart_keeps_the_allocations() {
    let sim = Sim::quick(&[]);
    let dir = tempdir("restart");
    let cfg = config(&sim, &dir, json!({}));
    let mut d = Daemon::start(&dir, &cfg);
    let before: Vec<String> = (0..3).map(|i| d.ok(&format!("alloc ns/pod-{i}"))).collect();
    let (status, took) = d.terminate(Duration::from_secs(15));
    assert!(status.success(), "{status:?}\n{}", d.log_text());
    assert!(took < Duration::from_secs(10), "{took:?}");
    drop(d);
    let d = Daemon::start(&dir, &cfg);
    for (i, a) in before.iter().enumerate() {
        assert_eq!(&d.ok(&format!("show ns/pod-{i}")), a);
    }
    assert!(d.ok("status").contains(" inuse=3 "));
    assert_eq!(d.ask("audit"), vec!["OK consistent"]);
    // A clean restart warns of nothing: the idle addresses the state
    // files do not hold are restored, not adopted as unknown.
    d.wait_verified(Duration::from_secs(30));
    let log = d.log_text();
    let this_start = &log[log.rfind("eniipd_daemon::daemon: state: ").unwrap_or(0)..];
    assert!(
        this_start.contains("that the state files do not hold"),
        "{this_start}"
    );
    assert!(!this_start.contains("unknown locally"), "{this_start}");
}

#[test]
fn a_second_daemon_on_the_same_state_directory_exits_75() {
    let sim = Sim::quick(&[]);
    let dir = tempdir("lock");
    let cfg = config(&sim, &dir, json!({}));
    let _first = Daemon::start(&dir, &cfg);
    let mut cfg2 = cfg.clone();
    cfg2["socket_path"] = json!(dir.join("other.sock").display().to_string());
    let mut second = Daemon::spawn(&dir, &cfg2, &[]);
    let status = second.wait_exit(Duration::from_secs(20));
    assert_eq!(status.code(), Some(75), "{}", second.log_text());
    assert!(second.log_text().contains("in use by another eniipd"));
}

#[test]
fn a_second_daemon_on_the_same_socket_exits_75_and_the_first_keeps_serving() {
    let sim = Sim::quick(&[]);
    let dir = tempdir("sock-first");
    let cfg = config(&sim, &dir, json!({}));
    let mut first = Daemon::start(&dir, &cfg);
    let dir2 = tempdir("sock-second");
    let mut cfg2 = config(&sim, &dir2, json!({}));
    cfg2["socket_path"] = cfg["socket_path"].clone();
    let mut second = Daemon::spawn(&dir2, &cfg2, &[]);
    let status = second.wait_exit(Duration::from_secs(30));
    let log = second.log_text();
    assert_eq!(status.code(), Some(75), "{log}");
    assert!(log.contains(&first.socket.display().to_string()), "{log}");
    assert!(log.contains(&format!("pid {}", first.pid())), "{log}");
    assert!(!log.contains("removing stale socket"), "{log}");
    assert_eq!(first.ask("ping"), vec!["OK pong"]);

    // A stopping daemon removes the socket only while it is its own: here
    // the path was taken over behind its back, and is left alone.
    std::fs::remove_file(&first.socket).unwrap();
    let other = std::os::unix::net::UnixListener::bind(&first.socket).unwrap();
    let (status, _) = first.terminate(Duration::from_secs(15));
    assert!(status.success(), "{status:?}\n{}", first.log_text());
    assert!(first.socket.exists(), "{}", first.log_text());
    drop(other);
}

#[test]
fn bad_config_exits_78_naming_the_key_and_check_config_masks_secrets() {
    let sim = Sim::quick(&[]);
    let dir = tempdir("cfg");
    let cfg = config(&sim, &dir, json!({"max_ips_per_call": 11}));
    let mut d = Daemon::spawn(&dir, &cfg, &[]);
    assert_eq!(d.wait_exit(Duration::from_secs(10)).code(), Some(78));
    let log = d.log_text();
    assert!(
        log.contains("`max_ips_per_call`") && log.contains("11") && log.contains("allowed"),
        "{log}"
    );
    let cfg = config(
        &sim,
        &dir,
        json!({"frobnicate": true, "service_cidr": "10.0.0.0/16"}),
    );
    std::fs::write(dir.join("ok.json"), serde_json::to_vec(&cfg).unwrap()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_eniipd"))
        .args(["--check-config", "--config"])
        .arg(dir.join("ok.json"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("access_secret=***") && stdout.contains("max_ips_per_call=10"),
        "{stdout}"
    );
    assert!(
        !stdout.contains(eniip_sim::DEFAULT_ACCESS_KEY_SECRET)
            && !stderr.contains(eniip_sim::DEFAULT_ACCESS_KEY_SECRET)
    );
    assert!(
        stderr.contains("frobnicate") && stderr.contains("service_cidr"),
        "{stderr}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_eniipd"))
        .arg("--bogus")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(env!("CARGO_BIN_EXE_eniipd"))
        .args(["--check-config", "--config", "/nonexistent/eni.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    // A key of the wrong type is named, with what it must be.
    std::fs::write(dir.join("type.json"), r#"{"vswitches": ["vsw-1"]}"#).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_eniipd"))
        .args(["--check-config", "--config"])
        .arg(dir.join("type.json"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("`vswitches`") && stderr.contains("zone -> list of vswitch ids"),
        "{stderr}"
    );
    // A secret others can read is warned about.
    use std::os::unix::fs::PermissionsExt;
    let ok = dir.join("ok.json");
    std::fs::set_permissions(&ok, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_eniipd"))
        .args(["--check-config", "--config"])
        .arg(&ok)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("readable by others"), "{stderr}");
    std::fs::set_permissions(&ok, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_eniipd"))
        .args(["--check-config", "--config"])
        .arg(&ok)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("readable by others"), "{stderr}");
}

#[test]
fn corrupt_state_exits_65_and_recover_state_salvages() {
    let sim = Sim::quick(&[]);
    let dir = tempdir("corrupt");
    let cfg = config(&sim, &dir, json!({}));
    let mut d = Daemon::start(&dir, &cfg);
    let a = d.ok("alloc keep/me");
    d.terminate(Duration::from_secs(15));
    drop(d);
    let snap = dir.join("state").join("state.json");
    let text = std::fs::read_to_string(&snap).unwrap();
    std::fs::write(&snap, text.replace("keep/me", "keep/mE")).unwrap();
    let mut d = Daemon::spawn(&dir, &cfg, &[]);
    assert_eq!(d.wait_exit(Duration::from_secs(20)).code(), Some(65));
    assert!(
        d.log_text().contains("state.json") && d.log_text().contains("checksum"),
        "{}",
        d.log_text()
    );
    drop(d);
    let d = Daemon::spawn(&dir, &cfg, &["--recover-state"]);
    d.wait_ready(Duration::from_secs(60));
    // Nothing was salvageable from the tampered snapshot: the address is
    // held back (quarantined) rather than handed to someone new.
    let ip = field(&a, "ip");
    let list = d.ask("list");
    assert!(
        list.contains(&format!("{ip} reserved - {}", field(&a, "eni"))),
        "{list:?}"
    );
    assert!(std::fs::read_dir(dir.join("state"))
        .unwrap()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("corrupt-")));
}

#[test]
fn metrics_over_http() {
    let sim = Sim::quick(&[]);
    let dir = tempdir("metrics");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let d = Daemon::start(
        &dir,
        &config(
            &sim,
            &dir,
            json!({"metrics_listen": format!("127.0.0.1:{port}")}),
        ),
    );
    d.ok("alloc m/one");
    let body = ureq::get(&format!("http://127.0.0.1:{port}/metrics"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    assert!(body.contains("eniipd_ips{state=\"inuse\"} 1"), "{body}");
    assert!(body.contains("eniipd_connections "));
}

#[test]
fn socket_activation_through_systemd_socket_activate() {
    let Some(tool) = common::installed("socket activation", &["/usr/bin/systemd-socket-activate"])
    else {
        return;
    };
    let sim = Sim::quick(&[]);
    let dir = tempdir("activate");
    let sock = dir.join("act.sock");
    let cfg = config(
        &sim,
        &dir,
        json!({"socket_path": dir.join("never-bound.sock").display().to_string()}),
    );
    std::fs::write(dir.join("eni.json"), serde_json::to_vec(&cfg).unwrap()).unwrap();
    let mut child = Command::new(tool)
        .arg("-l")
        .arg(&sock)
        .arg(env!("CARGO_BIN_EXE_eniipd"))
        .arg("--config")
        .arg(dir.join("eni.json"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(common::eventually(Duration::from_secs(10), || sock.exists()));
    // The first connection starts the daemon; it answers once ready.
    let r = common::ask(&sock, "ping");
    assert_eq!(r, vec!["OK pong"]);
    assert!(common::ask(&sock, "alloc act/one")[0].starts_with("OK ip="));
    assert!(
        !dir.join("never-bound.sock").exists(),
        "the inherited socket was used"
    );
    let _ = child.kill();
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    let _ = child.wait();
}

#[test]
fn sighup_reloads_the_pool_sizes() {
    let sim = Sim::quick(&[]);
    let dir = tempdir("hup");
    let cfg = config(
        &sim,
        &dir,
        json!({"min_pool_size": 0, "max_pool_size": 100}),
    );
    let d = Daemon::start(&dir, &cfg);
    assert!(d.ok("status").contains(" idle=0 "));
    // The view is what runs: max clamped to the capacity (45), with a
    // warning naming the key.
    let view = d.ask("config");
    assert!(view.contains(&"max_pool_size=45".to_string()), "{view:?}");
    assert!(
        d.log_text().contains("WARN")
            && d.log_text()
                .contains("max_pool_size 100 exceeds the capacity 45"),
        "{}",
        d.log_text()
    );
    let mut cfg2 = cfg.clone();
    cfg2["min_pool_size"] = json!(6);
    cfg2["max_pool_size"] = json!(8);
    cfg2["max_connections"] = json!(100);
    std::fs::write(&d.config, serde_json::to_vec(&cfg2).unwrap()).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(d.pid()),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    assert!(
        common::eventually(Duration::from_secs(20), || {
            let s = d.ok("status");
            s.contains(" idle=6 ") || s.contains(" idle=7 ") || s.contains(" idle=8 ")
        }),
        "{}",
        d.ok("status")
    );
    assert!(d.log_text().contains("SIGHUP"), "{}", d.log_text());
    let view = d.ask("config");
    assert!(view.contains(&"min_pool_size=6".to_string()), "{view:?}");
    assert!(view.contains(&"max_pool_size=8".to_string()), "{view:?}");
    assert!(
        d.log_text()
            .contains("SIGHUP: max_connections changed; it takes effect only after a restart"),
        "{}",
        d.log_text()
    );
    // A broken file is refused and the daemon keeps running.
    std::fs::write(&d.config, "{ not json").unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(d.pid()),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    assert!(common::eventually(Duration::from_secs(5), || d
        .log_text()
        .contains("keeping the current pool sizes")));
    assert_eq!(d.ask("ping"), vec!["OK pong"]);
}

/// SIGHUP with nothing changed says nothing changed, whatever came from
/// flags rather than the file (issue 31: `--state-dir` and the endpoint
/// flags each gave a false "changed" warning on every reload).
#[test]
fn sighup_with_flags_warns_only_about_what_changed() {
    let sim = Sim::quick(&[]);
    let dir = tempdir("hup-flags");
    let mut cfg = config(&sim, &dir, json!({"min_pool_size": 0, "max_pool_size": 4}));
    let flags = dir.join("flag-state").display().to_string();
    let args = [
        "--state-dir",
        flags.as_str(),
        "--ecs-endpoint",
        sim.ecs.as_str(),
        "--vpc-endpoint",
        sim.ecs.as_str(),
        "--metadata-endpoint",
        sim.metadata.as_str(),
    ];
    for k in [
        "ecs_endpoint",
        "vpc_endpoint",
        "metadata_endpoint",
        "state_dir",
    ] {
        cfg.as_object_mut().unwrap().remove(k);
    }
    let d = Daemon::spawn(&dir, &cfg, &args);
    d.wait_ready(Duration::from_secs(60));
    let hup = |d: &Daemon| {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(d.pid()),
            nix::sys::signal::Signal::SIGHUP,
        )
        .unwrap()
    };
    let reloads = |d: &Daemon| d.log_text().matches("SIGHUP: idle pool now").count();
    hup(&d);
    assert!(
        common::eventually(Duration::from_secs(10), || reloads(&d) == 1),
        "{}",
        d.log_text()
    );
    assert!(
        !d.log_text().contains("takes effect only after a restart"),
        "a reload with nothing changed warned:\n{}",
        d.log_text()
    );
    // A change of a key that needs a restart is still named, alone.
    cfg["max_connections"] = json!(100);
    std::fs::write(&d.config, serde_json::to_vec(&cfg).unwrap()).unwrap();
    hup(&d);
    assert!(
        common::eventually(Duration::from_secs(10), || reloads(&d) == 2),
        "{}",
        d.log_text()
    );
    let warned: Vec<String> = d
        .log_text()
        .lines()
        .filter(|l| l.contains("takes effect only after a restart"))
        .map(str::to_string)
        .collect();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].contains("SIGHUP: max_connections changed"),
        "{warned:?}"
    );
}

#[test]
fn watchdog_pings_and_journald_prefixes() {
    use std::os::unix::net::UnixDatagram;
    let sim = Sim::quick(&[]);
    let dir = tempdir("watchdog");
    let cfg = config(&sim, &dir, json!({}));
    std::fs::write(dir.join("eni.json"), serde_json::to_vec(&cfg).unwrap()).unwrap();
    let notify = dir.join("wd.sock");
    let rx = UnixDatagram::bind(&notify).unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_eniipd"))
        .arg("--config")
        .arg(dir.join("eni.json"))
        .env("NOTIFY_SOCKET", &notify)
        .env("WATCHDOG_USEC", "400000")
        .env("JOURNAL_STREAM", "8:1234")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    let end = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < end
        && !(seen.iter().any(|m: &String| m.contains("READY=1"))
            && seen.iter().filter(|m| m.contains("WATCHDOG=1")).count() >= 2)
    {
        if let Ok(n) = rx.recv(&mut buf) {
            seen.push(String::from_utf8_lossy(&buf[..n]).to_string());
        }
    }
    assert!(seen.iter().any(|m| m.contains("READY=1")), "{seen:?}");
    assert!(
        seen.iter().any(|m| m.starts_with("STATUS=enis=")),
        "{seen:?}"
    );
    assert!(
        seen.iter().filter(|m| m.contains("WATCHDOG=1")).count() >= 2,
        "{seen:?}"
    );
    // The status line follows the pool.
    let sock = PathBuf::from(cfg["socket_path"].as_str().unwrap());
    let reply = ask(&sock, "alloc app/status");
    assert!(reply.last().unwrap().starts_with("OK ip="), "{reply:?}");
    let end = std::time::Instant::now() + Duration::from_secs(20);
    let mut updated = false;
    while !updated && std::time::Instant::now() < end {
        if let Ok(n) = rx.recv(&mut buf) {
            let m = String::from_utf8_lossy(&buf[..n]).to_string();
            updated = m.starts_with("STATUS=") && m.contains(" inuse=1 ");
        }
    }
    assert!(updated, "no STATUS= line with inuse=1");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let mut stopping = false;
    while let Ok(n) = rx.recv(&mut buf) {
        if String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1") {
            stopping = true;
            break;
        }
    }
    assert!(stopping);
    assert!(child.wait().unwrap().success());
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        !lines.is_empty() && lines.iter().all(|l| l.starts_with('<')),
        "{err}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("<6>eniipd_daemon::daemon: eniipd") && l.contains("ready")),
        "{err}"
    );
}

#[test]
fn simulate_runs_with_no_config_credentials_or_root() {
    let dir = tempdir("simulate");
    let mut child = Command::new(env!("CARGO_BIN_EXE_eniipd"))
        .arg("--simulate")
        .env("XDG_RUNTIME_DIR", &dir)
        .env_remove("NOTIFY_SOCKET")
        .env_remove("ALIBABA_CLOUD_ACCESS_KEY_ID")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut printed = String::new();
    let mut socket = None;
    while socket.is_none() {
        let mut l = String::new();
        if std::io::BufRead::read_line(&mut out, &mut l).unwrap() == 0 {
            break;
        }
        printed.push_str(&l);
        socket = l
            .strip_prefix("socket: ")
            .map(|s| std::path::PathBuf::from(s.trim()));
    }
    let socket = socket.unwrap_or_else(|| panic!("no socket line in {printed:?}"));
    assert!(
        socket.starts_with(&dir),
        "{socket:?} is not under XDG_RUNTIME_DIR"
    );
    let mut l = String::new();
    std::io::BufRead::read_line(&mut out, &mut l).unwrap();
    assert_eq!(
        l.trim(),
        format!(
            "try:    echo 'alloc demo/web-1' | socat -t 90 - UNIX-CONNECT:{}",
            socket.display()
        )
    );
    assert!(common::ask(&socket, "alloc demo/web-1")[0].starts_with("OK ip="));
    // The eniipctl lines run as pasted.
    let mut or = String::new();
    for _ in 0..2 {
        let mut l = String::new();
        std::io::BufRead::read_line(&mut out, &mut l).unwrap();
        or.push_str(l.trim().trim_start_matches("or:").trim());
        or.push('\n');
    }
    let ran = Command::new("sh").arg("-c").arg(&or).output().unwrap();
    let stdout = String::from_utf8_lossy(&ran.stdout);
    assert!(
        ran.status.success() && stdout.contains("inuse=1"),
        "{or}: {stdout} {}",
        String::from_utf8_lossy(&ran.stderr)
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    assert!(child.wait().unwrap().success());
}

#[test]
fn an_unreachable_metadata_service_at_start_is_exit_69() {
    let sim = Sim::quick(&[]);
    let dir = tempdir("unreachable");
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let cfg = config(
        &sim,
        &dir,
        json!({"metadata_endpoint": format!("http://127.0.0.1:{closed}"), "start_timeout": 3}),
    );
    let mut d = Daemon::spawn(&dir, &cfg, &[]);
    let status = d.wait_exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(69), "{}", d.log_text());
    assert!(d.log_text().contains("metadata"), "{}", d.log_text());
}

#[test]
fn refused_credentials_at_start_are_exit_77_naming_the_code() {
    let sim = Sim::quick(&[]);
    let dir = tempdir("creds");
    let cfg = config(
        &sim,
        &dir,
        json!({"access_secret": "not-the-secret", "start_timeout": 30}),
    );
    let mut d = Daemon::spawn(&dir, &cfg, &[]);
    let status = d.wait_exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(77), "{}", d.log_text());
    assert!(
        d.log_text().contains("SignatureDoesNotMatch"),
        "{}",
        d.log_text()
    );
    assert!(
        !d.log_text().contains("not-the-secret"),
        "the secret leaked"
    );
    let mut cfg = cfg;
    cfg["access_key"] = json!("LTAInosuchkey00000000");
    cfg["access_secret"] = json!(eniip_sim::DEFAULT_ACCESS_KEY_SECRET);
    let mut d = Daemon::spawn(&dir, &cfg, &[]);
    let status = d.wait_exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(77), "{}", d.log_text());
    assert!(
        d.log_text().contains("InvalidAccessKeyId.NotFound"),
        "{}",
        d.log_text()
    );
}

#[test]
fn sigterm_during_a_hanging_cold_alloc_fails_it_at_once_and_exits_in_time() {
    let sim = Sim::quick(&[]);
    let dir = tempdir("hang");
    let cfg = config(&sim, &dir, json!({"min_pool_size": 0}));
    let mut d = Daemon::start(&dir, &cfg);
    // Every ENI creation now takes 20 s: the cold alloc below waits on it.
    sim.fault(r#"{"action":"CreateNetworkInterface","latency_ms":20000}"#);
    let socket = d.socket.clone();
    let client = std::thread::spawn(move || {
        let r = ask(&socket, "alloc cold/one");
        (r, std::time::Instant::now())
    });
    assert!(common::eventually(Duration::from_secs(10), || sim
        .calls("CreateNetworkInterface")
        > 0));
    // The alloc is now waiting on a cloud call that will not end in time.
    let signalled = std::time::Instant::now();
    let (status, took) = d.terminate(Duration::from_secs(15));
    let (reply, answered) = client.join().unwrap();
    assert_eq!(
        reply.last().map(String::as_str).unwrap_or(""),
        "ERR shutting-down the daemon is stopping",
        "{reply:?}"
    );
    let waited = answered.duration_since(signalled);
    assert!(
        waited < Duration::from_secs(1),
        "the waiter was answered after {waited:?}"
    );
    assert_eq!(status.code(), Some(0), "{}", d.log_text());
    assert!(took < Duration::from_secs(10), "exit after {took:?}");
}

#[test]
fn local_preconditions_fail_before_any_cloud_call() {
    let sim = Sim::quick(&[]);
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_addr = busy.local_addr().unwrap().to_string();
    let blocker = tempdir("precond-file").join("not-a-dir");
    std::fs::create_dir_all(blocker.parent().unwrap()).unwrap();
    std::fs::write(&blocker, "").unwrap();
    let cases = [
        (
            json!({"socket_group": "no-such-group-eniipd"}),
            "socket_group",
        ),
        (json!({"metrics_listen": busy_addr}), "metrics_listen"),
        (
            json!({"socket_path": blocker.join("sub/d.sock").display().to_string()}),
            "socket_path",
        ),
    ];
    for (extra, key) in cases {
        let dir = tempdir("precond");
        let mut extra = extra;
        // A warm pool would create an ENI right after start: none may be.
        extra["min_pool_size"] = json!(10);
        let cfg = config(&sim, &dir, extra);
        let mut d = Daemon::spawn(&dir, &cfg, &[]);
        let status = d.wait_exit(Duration::from_secs(30));
        assert_eq!(status.code(), Some(78), "{key}: {}", d.log_text());
        assert!(d.log_text().contains(key), "{key}: {}", d.log_text());
        let mutating: u64 = [
            "CreateNetworkInterface",
            "AttachNetworkInterface",
            "AssignPrivateIpAddresses",
        ]
        .iter()
        .map(|a| sim.calls(a))
        .sum();
        assert_eq!(mutating, 0, "{key}: the cloud was changed before exit 78");
        // --check-config reports the same problem.
        std::fs::write(&d.config, serde_json::to_vec(&cfg).unwrap()).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_eniipd"))
            .args(["--check-config", "--config"])
            .arg(&d.config)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(78), "{key} --check-config");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(key), "{key} --check-config: {err}");
    }
    drop(busy);
}

#[test]
fn a_second_daemon_with_another_state_directory_refuses_to_run_beside_the_first() {
    let sim = Sim::quick(&[]);
    let dir = tempdir("peer-a");
    let cfg = config(&sim, &dir, json!({}));
    let first = Daemon::start(&dir, &cfg);
    let held = first.ok("alloc ns/first");
    let eni = field(&held, "eni");
    let node = std::fs::read_to_string(dir.join("state/node-id")).unwrap();
    let tags = sim
        .managed()
        .into_iter()
        .find(|e| e["id"] == eni.as_str())
        .unwrap()["tags"]
        .clone();
    assert_eq!(tags["eniipd/node-id"], node.trim(), "{tags}");

    let other = tempdir("peer-b");
    let cfg2 = config(&sim, &other, json!({}));
    let mut second = Daemon::spawn(&other, &cfg2, &[]);
    let status = second.wait_exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(75), "{}", second.log_text());
    assert!(
        second.log_text().contains(&eni) && second.log_text().contains("another eniipd"),
        "{}",
        second.log_text()
    );
    // The first one still holds what it handed out, unchanged.
    assert_eq!(first.ok("show ns/first"), held);
    assert_eq!(first.ask("audit"), vec!["OK consistent"]);
    // Once the first is gone for good, the second adopts its ENIs.
    let mut first = first;
    let (status, _) = first.terminate(Duration::from_secs(15));
    assert!(status.success());
    let second = Daemon::start(&other, &cfg2);
    assert!(
        second.ask("enis").iter().any(|l| l.starts_with(&eni)),
        "{:?}\n{}",
        second.ask("enis"),
        second.log_text()
    );
    assert!(
        second.log_text().contains("adopting it"),
        "{}",
        second.log_text()
    );
}

#[test]
fn simulate_with_a_state_dir_keeps_the_emulated_cloud_and_the_allocations() {
    let dir = tempdir("simulate-keep");
    let state = dir.join("demo");
    let socket = dir.join("demo.sock");
    let first = Demo::start(&dir, &state, Some(&socket));
    let held = ask(&socket, "alloc demo/web-1");
    assert!(held[0].starts_with("OK ip="), "{held:?}");
    first.stop();
    assert!(state.join("sim-world.json").is_file());
    let second = Demo::start(&dir, &state, Some(&socket));
    assert_eq!(ask(&socket, "show demo/web-1"), held);
    assert_eq!(ask(&socket, "audit"), vec!["OK consistent"]);
    second.stop();
}

#[test]
fn a_restart_beside_a_live_peer_is_ready_then_stops_with_75_at_its_first_reconcile() {
    let sim = Sim::quick(&[]);
    let a_dir = tempdir("warm-peer-a");
    let a_cfg = config(&sim, &a_dir, json!({}));
    let mut a = Daemon::start(&a_dir, &a_cfg);
    a.ok("alloc ns/a");
    let (status, _) = a.terminate(Duration::from_secs(15));
    assert!(status.success(), "{}", a.log_text());
    // Another state directory on the same instance: it adopts the ENI of
    // the node that is gone, and makes one of its own.
    let b_dir = tempdir("warm-peer-b");
    let b = Daemon::start(
        &b_dir,
        &config(
            &sim,
            &b_dir,
            json!({"min_pool_size": 20, "max_pool_size": 30}),
        ),
    );
    let b_node = std::fs::read_to_string(b_dir.join("state/node-id")).unwrap();
    assert!(
        common::eventually(Duration::from_secs(30), || sim
            .managed()
            .iter()
            .any(|e| e["tags"]["eniipd/node-id"] == b_node.trim())),
        "{}",
        b.log_text()
    );
    // The first comes back: its restart is served from its state files
    // (no OpenAPI call before ready), and its first reconcile finds the
    // live peer's ENI: exit 75, as a first start refuses before serving.
    let mut again = Daemon::spawn(&a_dir, &a_cfg, &[]);
    let status = again.wait_exit(Duration::from_secs(30));
    let log = again.log_text();
    assert_eq!(status.code(), Some(75), "{log}");
    assert!(log.contains("restarted from the state files"), "{log}");
    assert!(log.contains("another eniipd"), "{log}");
    assert!(b.ok("status").contains("inuse=0"), "the peer is untouched");
}
