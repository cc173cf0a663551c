//! `cni_conflist`: eniipd installs the conflist only once the pool holds
//! `min_pool_size` idle addresses, in place, not again when identical,
//! and never removes it.

use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{config, eventually, field, tempdir, Daemon, Sim};

fn idle(d: &Daemon) -> usize {
    field(&d.ok("status"), "idle").parse().unwrap()
}

#[test]
fn installed_once_the_pool_is_warm_in_place_and_kept() {
    // A slow attach leaves the daemon ready long before its pool is warm.
    let sim = Sim::start(&["--attach-delay-ms", "1500"]);
    let dir = tempdir("conflist");
    let netd = dir.join("net.d");
    fs::create_dir_all(&netd).unwrap();
    let dest = netd.join("10-eniip.conflist");
    let cfg = config(
        &sim,
        &dir,
        json!({
            "min_pool_size": 4,
            "max_pool_size": 6,
            "cni_conflist": dest.display().to_string(),
        }),
    );
    let mut d = Daemon::start(&dir, &cfg);
    // Looked at in this order, a file that exists while the pool is below
    // its minimum is caught: idle only grows here (nobody allocates).
    assert!(
        eventually(Duration::from_secs(60), || dest.exists()),
        "no conflist at {}; log:\n{}",
        dest.display(),
        d.log_text()
    );
    let warm = idle(&d);
    assert!(
        warm >= 4,
        "conflist installed with only {warm} idle address(es)"
    );
    let v: Value = serde_json::from_slice(&fs::read(&dest).unwrap()).unwrap();
    assert_eq!(v["plugins"][0]["type"], "eniip-cni");
    assert_eq!(
        v["plugins"][0]["socket"].as_str(),
        Some(d.socket.to_str().unwrap()),
        "the shipped conflist points at this daemon's socket"
    );
    let before = fs::metadata(&dest).unwrap();

    // A stop keeps it; a restart finds it identical and leaves it be.
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success());
    assert!(dest.exists(), "removed at stop");
    let d = Daemon::start(&dir, &cfg);
    assert!(
        eventually(Duration::from_secs(30), || d
            .log_text()
            .contains("is already up to date")),
        "log:\n{}",
        d.log_text()
    );
    let after = fs::metadata(&dest).unwrap();
    assert_eq!(after.ino(), before.ino());
    assert_eq!(after.mtime_nsec(), before.mtime_nsec(), "rewritten");
}

#[test]
fn a_source_file_is_installed_as_it_is_over_an_old_one() {
    let sim = Sim::start(&[]);
    let dir = tempdir("conflist-src");
    let dest = dir.join("10-eniip.conflist");
    let src = dir.join("mine.conflist");
    let mine = b"{\"cniVersion\":\"1.0.0\",\"name\":\"mine\",\"plugins\":[]}\n";
    fs::write(&src, mine).unwrap();
    fs::write(&dest, b"{\"old\": true}").unwrap();
    let ino = fs::metadata(&dest).unwrap().ino();
    let cfg = config(
        &sim,
        &dir,
        json!({
            "min_pool_size": 1,
            "cni_conflist": dest.display().to_string(),
            "cni_conflist_source": src.display().to_string(),
        }),
    );
    let d = Daemon::start(&dir, &cfg);
    assert!(
        eventually(Duration::from_secs(60), || fs::read(&dest).unwrap() == mine),
        "log:\n{}",
        d.log_text()
    );
    assert_eq!(fs::metadata(&dest).unwrap().ino(), ino, "written in place");
}

#[test]
fn a_source_that_is_not_json_is_exit_78() {
    let sim = Sim::start(&[]);
    let dir = tempdir("conflist-bad");
    let src = dir.join("bad.conflist");
    fs::write(&src, b"not json").unwrap();
    let cfg = config(
        &sim,
        &dir,
        json!({
            "cni_conflist": dir.join("x.conflist").display().to_string(),
            "cni_conflist_source": src.display().to_string(),
        }),
    );
    let mut d = Daemon::spawn(&dir, &cfg, &[]);
    let st = d.wait_exit(Duration::from_secs(30));
    assert_eq!(st.code(), Some(78), "log:\n{}", d.log_text());
    assert!(d.log_text().contains("cni_conflist_source"));
}
