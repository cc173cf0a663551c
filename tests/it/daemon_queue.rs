//! The releases eniip-cni queued while eniipd was away, as eniipd finds
//! them at start (eniipd(8), FILES): only files it can trust are applied,
//! nothing there stalls it, and every one is applied before it serves,
//! however many.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::{config, skip, tempdir, Daemon, Sim};
use serde_json::json;

/// The files in the queue folder, by name.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Who holds an address, by owner, from `list`.
fn holders(d: &Daemon) -> Vec<String> {
    let mut v: Vec<String> = crate::common::list_rows(&d.ask("list"))
        .into_iter()
        .filter_map(|l| l.owner)
        .collect();
    v.sort();
    v
}

#[test]
fn a_fifo_a_foreign_file_and_a_link_are_refused_and_the_rest_applied_before_eniipd_serves() {
    if !nix::unistd::geteuid().is_root() {
        skip("queued releases owned by another user: needs root (chown)");
        return;
    }
    let sim = Sim::quick(&[]);
    let dir = tempdir("queue-hostile");
    let cfg = config(&sim, &dir, json!({"min_pool_size": 0}));
    let socket = PathBuf::from(cfg["socket_path"].as_str().unwrap());
    let mut d = Daemon::start(&dir, &cfg);
    for o in ["a", "b", "c", "d", "e"] {
        d.ok(&format!("alloc ns/{o} sandbox=s{o}"));
    }
    let (status, _) = d.terminate(Duration::from_secs(15));
    assert!(status.success(), "{}", d.log_text());

    // As eniip-cni queues them while eniipd is away.
    eniip_protocol::releases::queue(&socket, "ns/a", "sa", None).unwrap();
    eniip_protocol::releases::queue(&socket, "ns/e", "se", None).unwrap();
    let q = eniip_protocol::releases::dir_for(&socket);
    let line = |o: &str| format!("release ns/{o} sandbox=s{o}\n");
    // A FIFO nobody writes to: a blocking open would wait for ever.
    nix::unistd::mkfifo(
        &q.join("fifo.release"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    // A file a user other than root wrote, and one anybody may write.
    std::fs::write(q.join("nobody.release"), line("b")).unwrap();
    std::os::unix::fs::chown(q.join("nobody.release"), Some(65534), Some(65534)).unwrap();
    std::fs::write(q.join("open.release"), line("b")).unwrap();
    std::fs::set_permissions(
        q.join("open.release"),
        std::os::unix::fs::PermissionsExt::from_mode(0o666),
    )
    .unwrap();
    // A link to a valid release kept elsewhere.
    std::fs::write(dir.join("elsewhere"), line("c")).unwrap();
    std::os::unix::fs::symlink(dir.join("elsewhere"), q.join("link.release")).unwrap();
    // A valid first line, then 20 MB.
    let mut big = line("d").into_bytes();
    big.resize(20 << 20, b' ');
    std::fs::write(q.join("big.release"), big).unwrap();

    let d = Daemon::spawn(&dir, &cfg, &[]);
    d.wait_ready(Duration::from_secs(30));
    // The first reply: everything was judged before it.
    assert_eq!(holders(&d), ["ns/b", "ns/c", "ns/d"], "{}", d.log_text());
    assert_eq!(
        names(&q),
        [
            "big.release.refused",
            "fifo.release.refused",
            "link.release.refused",
            "nobody.release.refused",
            "open.release.refused"
        ]
    );
    let log = d.log_text();
    for why in [
        "FIFO",
        "symbolic link",
        "uid 65534",
        "666",
        "more than 4096",
    ] {
        assert!(log.contains(why), "{why}:\n{log}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn twenty_thousand_queued_releases_are_all_applied_before_the_first_reply() {
    let sim = Sim::quick(&[]);
    let dir = tempdir("queue-20k");
    let cfg = config(&sim, &dir, json!({"min_pool_size": 0}));
    let socket = PathBuf::from(cfg["socket_path"].as_str().unwrap());
    let mut d = Daemon::start(&dir, &cfg);
    d.ok("alloc ns/last sandbox=s");
    let (status, _) = d.terminate(Duration::from_secs(15));
    assert!(status.success(), "{}", d.log_text());
    // 19 999 releases of sandboxes that hold nothing, and one that does,
    // written as eniip-cni writes them (without the fsyncs).
    let q = eniip_protocol::releases::dir_for(&socket);
    eniip_protocol::releases::queue(&socket, "ns/last", "s", None).unwrap();
    for i in 0..19_999 {
        std::fs::write(
            q.join(format!("{i:05}.release")),
            format!("release ns/gone-{i} sandbox=s\n"),
        )
        .unwrap();
    }
    assert_eq!(names(&q).len(), 20_000);
    let started = Instant::now();
    let d = Daemon::spawn(&dir, &cfg, &[]);
    d.wait_ready(Duration::from_secs(120));
    let ready = started.elapsed();
    assert_eq!(holders(&d), Vec::<String>::new(), "{}", d.log_text());
    let left = names(&q);
    assert!(
        left.is_empty(),
        "{} left, as {:?}",
        left.len(),
        left.first()
    );
    eprintln!("queue-20k: 20000 queued releases applied, ready after {ready:?}");
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}
