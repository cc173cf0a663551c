//! The listen socket under connect storms: these tests race the accept
//! thread against clients, so they take turns with the other tests that
//! flood a server ([`common::one_flood_at_a_time`]).

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::common;
use crate::listener_harness::Harness;

use eniip_protocol::core::Commands;
use eniipd_daemon::server::listener::{bind_socket, ServerConfig};
use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};

/// A server whose commands are never answered: these tests need `ping`
/// (answered by the listener itself) and nothing else.
fn harness() -> Harness<crossbeam_channel::Receiver<Box<eniip_protocol::core::Envelope>>> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    Harness::start(
        ServerConfig::default(),
        Commands::new(tx, Duration::from_secs(1)),
        rx,
    )
}

/// One non-blocking connect (as Go and most event loops make them): the
/// socket, or why the connect failed.
fn connect_nonblocking(addr: &UnixAddr) -> nix::Result<OwnedFd> {
    let fd = socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )
    .unwrap();
    connect(fd.as_raw_fd(), addr)?;
    Ok(fd)
}

/// `n` non-blocking connects (as Go and most event loops make them), each
/// closed at once, from `threads` named threads; how many found the
/// listen backlog full (EAGAIN) and how many were made.
fn connect_storm(path: &std::path::Path, threads: usize, n: usize) -> (usize, usize) {
    let until = Instant::now() + Duration::from_secs(60);
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let path = path.to_path_buf();
            std::thread::Builder::new()
                .name(format!("storm-{t}"))
                .spawn(move || {
                    let addr = UnixAddr::new(&path).unwrap();
                    let (mut full, mut made) = (0, 0);
                    for _ in 0..n / threads {
                        if Instant::now() >= until {
                            break;
                        }
                        match connect_nonblocking(&addr) {
                            Ok(_closed_at_once) => {}
                            Err(nix::errno::Errno::EAGAIN) => full += 1,
                            Err(e) => panic!("connect: {e}"),
                        }
                        made += 1;
                    }
                    (full, made)
                })
                .unwrap()
        })
        .collect();
    workers
        .into_iter()
        .map(|w| w.join().unwrap())
        .fold((0, 0), |(f, m), (f2, m2)| (f + f2, m + m2))
}

#[test]
fn several_clients_connecting_at_once_all_get_in() {
    let _turn = common::one_flood_at_a_time();
    // Fewer than the backlog holds, so every one succeeds even if the
    // accept thread gets no CPU meanwhile (with a backlog of 1024 some
    // get EAGAIN).
    let h = harness();
    let (full, made) = connect_storm(&h.path, 4, 2000);
    assert_eq!((full, made), (0, 2000));
    assert_eq!(h.ask("ping"), vec!["OK pong"]);
}

/// A race between one client and the accept thread: passes alone on an
/// idle machine (4137 of 10 000 connects got EAGAIN before connections
/// closed with nothing sent were dropped at accept), but with other work
/// on two cores the accept thread can lose it (209 to 1371 EAGAINs seen at
/// load 6). Run it on a quiet machine:
/// `cargo test --test it storm:: -- --ignored`.
#[test]
#[ignore = "races the accept thread against a client: needs an idle machine"]
fn a_connect_close_storm_never_finds_the_backlog_full() {
    let _turn = common::one_flood_at_a_time();
    let h = harness();
    let n = 10_000;
    let started = Instant::now();
    let (full, made) = connect_storm(&h.path, 1, n);
    println!(
        "{made} connects in {:?}, {full} found the backlog full",
        started.elapsed()
    );
    assert_eq!(made, n, "the storm ran out of time");
    assert_eq!(full, 0, "{full} of {n} connects got EAGAIN");
    assert_eq!(h.ask("ping"), vec!["OK pong"]);
}

#[test]
fn the_listen_backlog_queues_4096_connections_before_an_accept() {
    let _turn = common::one_flood_at_a_time();
    let dir = common::tempdir("backlog");
    let p = dir.join("b.sock");
    let (_listener, _) = bind_socket(&p, 0o600, None).unwrap();
    let somaxconn: i32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4096);
    // The daemon asks for 4096; the kernel may cap it lower.
    let expected = 4096.min(somaxconn) as usize;
    let addr = UnixAddr::new(&p).unwrap();
    let mut queued = Vec::new();
    // Nobody accepts: count what the kernel queues (bounded).
    for _ in 0..expected + 10 {
        match connect_nonblocking(&addr) {
            Ok(fd) => queued.push(fd),
            Err(nix::errno::Errno::EAGAIN) => break,
            Err(e) => panic!("connect: {e}"),
        }
    }
    assert!(
        queued.len() >= expected,
        "{} queued, backlog {expected}",
        queued.len()
    );
    drop(queued);
    let _ = std::fs::remove_dir_all(&dir);
}
