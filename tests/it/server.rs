//! The socket server with a fake backend: every command, pipelining,
//! access control, hostile clients, eviction, shutdown, socat and eniipctl.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::IpAddr;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common;
use crate::listener_harness::{self, me, read_reply};
use common::eventually;
use crossbeam_channel::bounded;
use eniip_protocol::core::{
    AllocError, Allocation, Answer, Collected, Command as Cmd, Commands, EniEntry, EniInfo,
    Envelope, ErrCode, ListEntry, Owner, StatusCounts,
};
use eniipd_daemon::server::listener::{bind_socket, ServerConfig};

/// A stand-in for the allocator: answers every command on a thread of its
/// own, as the actor would (slow allocs included).
#[derive(Default)]
struct Fake {
    held: Mutex<HashMap<String, Allocation>>,
    alloc_delay_ms: AtomicU64,
    /// `alloc`s begun (before their delay).
    allocs_begun: AtomicU64,
    completed: AtomicU64,
    /// When non-zero, `metrics` answers this many bytes of data lines.
    metrics_bytes: AtomicUsize,
    /// While true, an `alloc` of an owner under `hold/` waits (30 s at
    /// most) until it is false again and `opened` is notified.
    holding: Mutex<bool>,
    opened: std::sync::Condvar,
}

fn allocation(owner: &Owner, n: usize) -> Allocation {
    Allocation {
        owner: owner.clone(),
        sandbox: None,
        ip: std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(10, 0, 0, 10)) + n as u32),
        ipv6: None,
        ipv6_prefix: None,
        eni: "eni-test".into(),
        since_ms: 0,
        gen: eniip_protocol::core::Generation::NONE,
        attach: None,
        intent: Default::default(),
    }
}

/// The one ENI the fake has.
fn eni_test() -> EniInfo {
    EniInfo {
        eni: "eni-test".into(),
        mac: "00:16:3e:00:00:01".into(),
        vswitch: "vsw-test".into(),
        cidr: "10.0.0.0/24".into(),
        gateway: "10.0.0.253".parse().unwrap(),
        v6: None,
    }
}

impl Fake {
    fn alloc(&self, owner: &Owner) -> Result<Answer, AllocError> {
        self.allocs_begun.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(
            self.alloc_delay_ms.load(Ordering::SeqCst),
        ));
        if owner.as_str().starts_with("hold/") {
            let end = Instant::now() + Duration::from_secs(30);
            let mut holding = self.holding.lock().unwrap();
            while *holding && Instant::now() < end {
                let left = end.saturating_duration_since(Instant::now());
                holding = self.opened.wait_timeout(holding, left).unwrap().0;
            }
        }
        if owner.as_str() == "exhaust/me" {
            return Err(AllocError::new(ErrCode::Exhausted, "capacity reached"));
        }
        let mut held = self.held.lock().unwrap();
        let n = held.len();
        let a = held
            .entry(owner.to_string())
            .or_insert_with(|| allocation(owner, n))
            .clone();
        self.completed.fetch_add(1, Ordering::SeqCst);
        Ok(Answer::Allocation(Box::new(a), eni_test()))
    }

    fn answer(&self, command: Cmd) -> Result<Answer, AllocError> {
        let held = || self.held.lock().unwrap();
        Ok(match command {
            Cmd::Alloc { owner, .. } => return self.alloc(&owner),
            Cmd::Release { owner, .. } => {
                Answer::Released(held().remove(owner.as_str()).map(|a| IpAddr::V4(a.ip)))
            }
            Cmd::Show { owner } => held()
                .get(owner.as_str())
                .cloned()
                .map(|a| Answer::Allocation(Box::new(a), eni_test()))
                .ok_or_else(|| AllocError::bare(ErrCode::NotFound))?,
            Cmd::List => Answer::List(
                held()
                    .iter()
                    .map(|(o, a)| ListEntry {
                        ip: IpAddr::V4(a.ip),
                        state: "inuse",
                        owner: Some(o.clone()),
                        gen: None,
                        eni: a.eni.clone(),
                        carved: None,
                    })
                    .collect(),
            ),
            Cmd::Status => {
                let n = held().len();
                Answer::Status(StatusCounts {
                    enis: 1,
                    ips: 10,
                    idle: 10 - n,
                    inuse: n,
                    capacity: 10,
                    ..StatusCounts::default()
                })
            }
            Cmd::Eni { eni } if eni == "eni-test" => Answer::Eni(eni_test()),
            Cmd::Eni { .. } => return Err(AllocError::bare(ErrCode::NotFound)),
            Cmd::Enis => Answer::Enis(vec![EniEntry {
                eni: "eni-test".into(),
                mac: "00:16:3e:00:00:01".into(),
                vswitch: "vsw-test".into(),
                ips: 10,
                pending: 0,
                inhibited_until: None,
                prefixes: None,
                v6_prefix: None,
                security_groups: None,
                security_groups_cloud: None,
            }]),
            Cmd::Audit => Answer::Audit(if held().contains_key("drift") {
                vec!["address 10.0.0.99 is on eni eni-test in the cloud but unknown locally".into()]
            } else {
                Vec::new()
            }),
            Cmd::Metrics => Answer::Metrics(match self.metrics_bytes.load(Ordering::SeqCst) {
                0 => "# HELP eniipd_enis Managed ENIs.\n# TYPE eniipd_enis gauge\neniipd_enis 1\n"
                    .into(),
                big => {
                    let line = format!("eniipd_padding{{x=\"{}\"}} 1\n", "x".repeat(1000));
                    line.repeat(big / line.len() + 1)
                }
            }),
            Cmd::Config => Answer::Config(vec![
                ("access_secret".into(), "***".into()),
                ("max_pool_size".into(), "5".into()),
            ]),
            Cmd::Gc { owner_prefix, keep } => {
                let mut h = held();
                let doomed: Vec<String> = h
                    .keys()
                    .filter(|o| o.starts_with(&owner_prefix) && !keep.contains(o))
                    .cloned()
                    .collect();
                Answer::Collected(
                    doomed
                        .into_iter()
                        .map(|o| {
                            let a = h.remove(&o).unwrap();
                            Collected {
                                ip: IpAddr::V4(a.ip),
                                owner: Owner::parse(&o).unwrap(),
                                sandbox: None,
                                veth: None,
                            }
                        })
                        .collect(),
                )
            }
            Cmd::Capacity => Answer::Capacity(Vec::new()),
            Cmd::Drain(on) => Answer::Draining(on),
        })
    }

    /// The command channel the server sends to; answered until the server
    /// (the last sender) is gone.
    fn serve(self: &Arc<Fake>) -> Commands {
        let (tx, rx) = bounded::<Box<Envelope>>(64);
        let fake = Arc::clone(self);
        std::thread::spawn(move || {
            for env in rx {
                let fake = Arc::clone(&fake);
                std::thread::spawn(move || {
                    let _ = env.reply.send(fake.answer(env.command));
                });
            }
        });
        Commands::new(tx, Duration::from_secs(10))
    }
}

/// The server with a [`Fake`] behind it.
type Harness = listener_harness::Harness<Arc<Fake>>;

fn harness(cfg: ServerConfig) -> Harness {
    let fake = Arc::new(Fake::default());
    Harness::start(cfg, fake.serve(), fake)
}

fn last(v: &[String]) -> &str {
    v.last().unwrap()
}

#[test]
fn every_command_with_success_and_error_replies() {
    let h = harness(me());
    assert_eq!(h.ask("ping"), vec!["OK pong"]);
    assert_eq!(
        h.ask("VERSION"),
        vec![format!(
            "OK eniipd {} protocol=1",
            env!("CARGO_PKG_VERSION")
        )]
    );
    let help = h.ask("help");
    assert_eq!(help.len(), eniip_protocol::protocol::HELP.len() + 1);
    assert_eq!(last(&help), "OK");
    let a = h.ask("alloc default/web-1 sandbox=abc");
    assert!(a[0].starts_with("OK ip=10.0.0.10 eni=eni-test mac=00:16:3e:00:00:01 vswitch=vsw-test cidr=10.0.0.0/24 gateway=10.0.0.253"), "{a:?}");
    assert_eq!(
        h.ask("alloc exhaust/me"),
        vec!["ERR exhausted capacity reached"]
    );
    assert!(h.ask("show default/web-1")[0].starts_with("OK ip=10.0.0.10"));
    assert_eq!(h.ask("show nobody"), vec!["ERR not-found"]);
    let list = h.ask("list");
    assert_eq!(list, vec!["10.0.0.10 inuse default/web-1 eni-test", "OK 1"]);
    assert_eq!(
        h.ask("status"),
        vec!["OK enis=1 ips=10 idle=9 inuse=1 reserved=0 cooling=0 pending=0 capacity=10"]
    );
    assert_eq!(
        h.ask("enis"),
        vec![
            "eni-test 00:16:3e:00:00:01 vsw-test ips=10 pending=0 inhibited=-",
            "OK 1"
        ]
    );
    assert_eq!(h.ask("audit"), vec!["OK consistent"]);
    h.ask("alloc drift");
    let audit = h.ask("audit");
    assert_eq!(last(&audit), "ERR inconsistent 1");
    let m = h.ask("metrics");
    assert!(m.contains(&"eniipd_enis 1".to_string()) && last(&m) == "OK");
    assert_eq!(
        h.ask("config"),
        vec!["access_secret=***", "max_pool_size=5", "OK"]
    );
    assert_eq!(
        h.ask("release default/web-1"),
        vec!["OK released=10.0.0.10"]
    );
    assert_eq!(h.ask("release default/web-1"), vec!["OK released=none"]);
    assert_eq!(h.ask("quit"), vec!["OK bye"]);
    assert!(h.ask("frobnicate")[0].starts_with("ERR unknown-command"));
    assert!(h.ask("alloc bad|owner")[0].starts_with("ERR bad-request"));
    assert!(h.ask("alloc x colour=red")[0].starts_with("ERR bad-request"));
}

#[test]
fn pipelined_requests_are_answered_in_order_and_quit_closes() {
    let h = harness(me());
    let mut s = h.connect();
    s.write_all(b"ping\r\nalloc a\nshow a\nstatus\nquit\nping\n")
        .unwrap();
    let mut r = BufReader::new(s);
    assert_eq!(read_reply(&mut r), vec!["OK pong"]);
    assert!(read_reply(&mut r)[0].starts_with("OK ip="));
    assert!(read_reply(&mut r)[0].starts_with("OK ip="));
    assert!(read_reply(&mut r)[0].starts_with("OK enis="));
    assert_eq!(read_reply(&mut r), vec!["OK bye"]);
    let mut rest = String::new();
    r.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "", "nothing after quit");
}

#[test]
fn a_peer_outside_allowed_uids_may_read_but_not_allocate() {
    let h = harness(ServerConfig {
        allowed_uids: vec![nix::unistd::getuid().as_raw() + 4242],
        socket_gid: None,
        ..ServerConfig::default()
    });
    assert!(h.ask("alloc a")[0].starts_with("ERR denied"));
    assert!(h.ask("release a")[0].starts_with("ERR denied"));
    assert!(h.ask("status")[0].starts_with("OK enis="));
    assert_eq!(h.backend.completed.load(Ordering::SeqCst), 0);
    // Membership of the socket group is enough.
    let h = harness(ServerConfig {
        allowed_uids: vec![nix::unistd::getuid().as_raw() + 4242],
        socket_gid: Some(nix::unistd::getgid().as_raw()),
        ..ServerConfig::default()
    });
    assert!(h.ask("alloc a")[0].starts_with("OK ip="));
}

#[test]
fn hostile_input_is_refused_while_another_client_is_served() {
    let _turn = common::one_flood_at_a_time();
    let h = harness(ServerConfig {
        line_timeout: Duration::from_millis(800),
        ..me()
    });
    // Oversized line: ERR line-too-long, then closed.
    let mut s = h.connect();
    let _ = s.write_all(&vec![b'a'; 10_000]);
    let mut r = BufReader::new(s);
    assert_eq!(read_reply(&mut r), vec!["ERR line-too-long"]);
    let mut rest = String::new();
    let _ = r.read_to_string(&mut rest);
    assert_eq!(rest, "");
    // Binary garbage and invalid UTF-8.
    let mut s = h.connect();
    s.write_all(b"\xff\xfe\x00\x01garbage\n").unwrap();
    assert!(read_reply(&mut BufReader::new(s))[0].starts_with("ERR bad-request"));
    // One byte a second: cut after the line timeout; others are served meanwhile.
    let mut slow = h.connect();
    let started = Instant::now();
    let t = std::thread::spawn(move || {
        for b in b"alloc slow\n" {
            if slow.write_all(&[*b]).is_err() {
                return started.elapsed();
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        started.elapsed()
    });
    assert_eq!(h.ask("ping"), vec!["OK pong"]);
    let cut_after = t.join().unwrap();
    assert!(
        cut_after < Duration::from_millis(3300),
        "slow client not cut: {cut_after:?}"
    );
    assert!(h.ask("show slow")[0].starts_with("ERR not-found"));

    slow_readers_are_evicted_and_a_reading_client_is_always_served();
}

/// Clients that send `metrics` (a reply far bigger than a socket buffer)
/// and never read: their stuck writes are cut by the write deadline, and
/// under a flood of them a client that reads its replies never fails.
fn slow_readers_are_evicted_and_a_reading_client_is_always_served() {
    const MAX: usize = 16;
    let h = harness(ServerConfig {
        max_connections: MAX,
        ..me()
    });
    h.backend.metrics_bytes.store(512 << 10, Ordering::SeqCst);
    let server = h.server.as_ref().unwrap();

    // Alone, a non-reader is closed by the write deadline.
    let mut lone = h.connect();
    lone.write_all(b"metrics\n").unwrap();
    assert!(eventually(Duration::from_secs(5), || server.connections() == 1));
    assert!(
        eventually(Duration::from_secs(5), || server.connections() == 0),
        "a client that does not read its reply still holds a connection"
    );
    drop(lone);

    // A flood of them, bounded in count and time: 2 * MAX at first, then
    // two more for each request of a client that reads, so they arrive
    // while it works.
    const REQUESTS: usize = 60;
    let done = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicUsize::new(0));
    let served = Arc::new(AtomicUsize::new(0));
    let flood = {
        let (path, done, opened, served) =
            (h.path.clone(), done.clone(), opened.clone(), served.clone());
        std::thread::Builder::new()
            .name("slow-readers".into())
            .spawn(move || {
                let until = Instant::now() + Duration::from_secs(30);
                // Held open (never read) until the end.
                let mut held = Vec::new();
                for n in 0..2 * MAX + 2 * REQUESTS {
                    while n >= 2 * MAX + 2 * served.load(Ordering::SeqCst)
                        && !done.load(Ordering::SeqCst)
                        && Instant::now() < until
                    {
                        std::thread::park_timeout(Duration::from_millis(5));
                    }
                    if done.load(Ordering::SeqCst) || Instant::now() >= until {
                        break;
                    }
                    if let Ok(mut s) = UnixStream::connect(&path) {
                        let _ = s.write_all(b"metrics\n");
                        held.push(s);
                    }
                    opened.fetch_add(1, Ordering::SeqCst);
                }
                while !done.load(Ordering::SeqCst) && Instant::now() < until {
                    std::thread::park_timeout(Duration::from_millis(50));
                }
                drop(held);
            })
            .unwrap()
    };
    assert!(eventually(Duration::from_secs(10), || opened
        .load(Ordering::SeqCst)
        >= 2 * MAX));
    let mut failures = Vec::new();
    let until = Instant::now() + Duration::from_secs(30);
    for i in 0..REQUESTS {
        if Instant::now() >= until {
            failures.push(format!("out of time after {i} requests"));
            break;
        }
        let line = if i % 2 == 0 { "ping" } else { "status" };
        let outcome = UnixStream::connect(&h.path).and_then(|mut s| {
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            s.write_all(format!("{line}\n").as_bytes())?;
            let mut reply = String::new();
            BufReader::new(s).read_line(&mut reply)?;
            Ok(reply)
        });
        match outcome {
            Ok(r) if r.starts_with("OK ") => {}
            other => failures.push(format!("{line}: {other:?}")),
        }
        served.fetch_add(1, Ordering::SeqCst);
        flood.thread().unpark();
    }
    done.store(true, Ordering::SeqCst);
    flood.thread().unpark();
    flood.join().unwrap();
    println!(
        "{} slow readers opened; reading client failures: {failures:?}",
        opened.load(Ordering::SeqCst)
    );
    assert!(failures.is_empty(), "{failures:?}");
}

#[test]
fn two_hundred_idle_connections_evict_the_oldest_and_a_client_is_served() {
    let h = harness(ServerConfig {
        max_connections: 64,
        ..me()
    });
    let idle: Vec<UnixStream> = (0..200).map(|_| h.connect()).collect();
    let started = Instant::now();
    assert!(h.ask("alloc fresh/client")[0].starts_with("OK ip="));
    println!(
        "alloc with 200 idle connections open: {:?}",
        started.elapsed()
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while h.server.as_ref().unwrap().connections() > 64 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(h.server.as_ref().unwrap().connections() <= 64);
    // The oldest were closed.
    let mut first = &idle[0];
    let mut b = [0u8; 1];
    first
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    assert_eq!(first.read(&mut b).unwrap_or(0), 0);
    drop(idle);

    let h = harness(me());
    let idle: Vec<UnixStream> = (0..200).map(|_| h.connect()).collect();
    assert!(h.ask("alloc another")[0].starts_with("OK ip="));
    assert!(h.server.as_ref().unwrap().connections() >= 200);
    drop(idle);
}

#[test]
fn connections_closed_without_a_word_never_hold_up_the_accept_loop() {
    // At max_connections with every slot serving, a newcomer waits up to
    // 1 s for one to free. Connections that already left with nothing sent
    // (probes, connect storms) must not each take that wait: they are
    // dropped when accepted.
    let h = harness(ServerConfig {
        max_connections: 1,
        ..me()
    });
    h.backend.alloc_delay_ms.store(8000, Ordering::SeqCst);
    let mut serving = h.connect();
    serving.write_all(b"alloc slow/one\n").unwrap();
    let server = h.server.as_ref().unwrap();
    assert!(eventually(Duration::from_secs(5), || server.connections() == 1));
    for _ in 0..10 {
        drop(h.connect());
    }
    let started = Instant::now();
    let mut late = h.connect();
    late.set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    late.write_all(b"ping\n").unwrap();
    let reply = read_reply(&mut BufReader::new(late));
    let took = started.elapsed();
    assert_eq!(reply, vec!["ERR busy too many connections"]);
    // One wait at most for a connection caught before its client closed
    // it, one for this one; ten closed ones would take ten more.
    println!("the late client waited {took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    drop(serving);
}

#[test]
fn a_client_that_leaves_mid_alloc_still_gets_it_completed() {
    let h = harness(me());
    h.backend.alloc_delay_ms.store(300, Ordering::SeqCst);
    let mut s = h.connect();
    s.write_all(b"alloc gone/away\n").unwrap();
    drop(s);
    let deadline = Instant::now() + Duration::from_secs(5);
    while h.backend.completed.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(h.backend.held.lock().unwrap().contains_key("gone/away"));
}

#[test]
fn shutdown_answers_in_flight_refuses_new_and_returns_in_time() {
    let mut h = harness(me());
    h.backend.alloc_delay_ms.store(500, Ordering::SeqCst);
    let _idle: Vec<UnixStream> = (0..5).map(|_| h.connect()).collect();
    let mut busy = h.connect();
    busy.write_all(b"alloc in/flight\nping\n").unwrap();
    // In flight: the allocator has it (a fixed pause was too short on a
    // busy machine under qemu-user).
    assert!(eniip_util::thread::poll_until(
        Instant::now() + Duration::from_secs(10),
        Duration::from_millis(5),
        || h.backend.allocs_begun.load(Ordering::SeqCst) == 1
    ));
    let server = h.server.take().unwrap();
    let started = Instant::now();
    let t = std::thread::spawn(move || {
        server.shutdown(Instant::now() + Duration::from_secs(3));
        started.elapsed()
    });
    let mut r = BufReader::new(busy);
    assert!(
        read_reply(&mut r)[0].starts_with("OK ip="),
        "in-flight request answered"
    );
    assert_eq!(
        read_reply(&mut r),
        vec!["ERR shutting-down the daemon is stopping"]
    );
    let took = t.join().unwrap();
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert!(
        UnixStream::connect(&h.path).is_err() || {
            // The file may remain, but nobody accepts any more.
            let mut s = UnixStream::connect(&h.path).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
            let _ = s.write_all(b"ping\n");
            let mut b = [0u8; 8];
            !matches!(s.read(&mut b), Ok(n) if n > 0)
        }
    );
}

#[test]
fn a_client_still_sending_a_huge_line_reads_line_too_long() {
    let _turn = common::one_flood_at_a_time();
    let h = harness(me());
    let mut s = h.connect();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut line = vec![b'a'; 1 << 20];
    line.push(b'\n');
    s.write_all(&line)
        .expect("the whole line is taken (drained), not reset");
    let mut r = BufReader::new(s);
    assert_eq!(read_reply(&mut r), vec!["ERR line-too-long"]);
    let mut rest = String::new();
    r.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "", "closed after the error");

    // The draining is bounded: a client that never stops is cut off.
    let mut s = h.connect();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    let started = Instant::now();
    let chunk = vec![b'a'; 64 * 1024];
    let mut sent = 0usize;
    while sent < 64 << 20 && started.elapsed() < Duration::from_secs(20) {
        match s.write(&chunk) {
            Ok(n) => sent += n,
            Err(_) => break,
        }
    }
    assert!(sent < 64 << 20, "64 MiB taken after line-too-long");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn socat_sessions() {
    let Some(socat) = common::installed(
        "socat sessions",
        &["/usr/bin/socat", "/bin/socat", "/usr/local/bin/socat"],
    ) else {
        return;
    };
    let h = harness(me());
    h.backend.alloc_delay_ms.store(1500, Ordering::SeqCst);
    // The documented form: -t 90 waits for a slow alloc.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo 'alloc demo/web-1' | {} -t 90 - UNIX-CONNECT:{}",
            socat.display(),
            h.path.display()
        ))
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("OK ip=10.0.0.10 "), "{text}");
    h.backend.alloc_delay_ms.store(0, Ordering::SeqCst);
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "printf 'status\\nlist\\nquit\\n' | {} - UNIX-CONNECT:{}",
            socat.display(),
            h.path.display()
        ))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        vec![
            "OK enis=1 ips=10 idle=9 inuse=1 reserved=0 cooling=0 pending=0 capacity=10",
            "10.0.0.10 inuse demo/web-1 eni-test",
            "OK 1",
            "OK bye"
        ]
    );
}

fn ctl(h: &Harness, args: &[&str]) -> (i32, String, String) {
    common::run(
        Command::new(env!("CARGO_BIN_EXE_eniipctl"))
            .arg("--socket")
            .arg(&h.path)
            .args(args),
    )
}

#[test]
fn eniipctl_exit_codes_and_output() {
    let h = harness(me());
    let (code, out, _) = ctl(&h, &["alloc", "ns/pod", "sandbox=1"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("OK ip=10.0.0.10"));
    let (code, out, _) = ctl(&h, &["list"]);
    assert_eq!(
        (code, out.as_str()),
        (0, "10.0.0.10 inuse ns/pod eni-test\nOK 1\n")
    );
    let (code, out, _) = ctl(&h, &["show", "nobody"]);
    assert_eq!((code, out.as_str()), (1, "ERR not-found\n"));
    let (code, out, _) = ctl(&h, &["alloc", "exhaust/me"]);
    assert_eq!(code, 1, "{out}");
    h.backend.alloc_delay_ms.store(3000, Ordering::SeqCst);
    let started = Instant::now();
    let (code, _, err) = ctl(&h, &["--timeout", "0.5", "alloc", "slow/one"]);
    assert_eq!(code, 1);
    assert!(err.contains("no complete reply"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(3));
    let out = Command::new(env!("CARGO_BIN_EXE_eniipctl"))
        .args(["--socket", "/tmp/eniipd-no-such-dir/none.sock", "ping"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/tmp/eniipd-no-such-dir/none.sock"));
    let out = Command::new(env!("CARGO_BIN_EXE_eniipctl"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(env!("CARGO_BIN_EXE_eniipctl"))
        .arg("--help")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
}

/// eniipctl that cannot connect says what to do (issue 31): where the
/// path came from and whether eniipd runs; a user outside the socket's
/// group is told which group (before: the bare OS error).
#[test]
fn eniipctl_that_cannot_connect_says_what_to_do() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let out = Command::new(env!("CARGO_BIN_EXE_eniipctl"))
        .arg("status")
        .env("ENIIPD_SOCKET", "/tmp/eniipd-no-such-dir/none.sock")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("from ENIIPD_SOCKET") && err.contains("eniipd is not running"),
        "{err}"
    );
    if !nix::unistd::geteuid().is_root() {
        eniip_util::testing::skip("eniipctl as a non-member of the socket's group needs root");
        return;
    }
    let dir = common::tempdir("ctl-denied");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let sock = dir.join("d.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o660)).unwrap();
    // As uid 65534, from where it can run it (the checkout may be under
    // /root, mode 0700).
    let ctl = common::runnable_by_anyone(env!("CARGO_BIN_EXE_eniipctl"), "ctl-anyone");
    let out = Command::new(&ctl)
        .args(["--socket", &sock.display().to_string(), "status"])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("Permission denied"), "{err}");
    assert!(
        err.contains("for root and the members of group root (mode 0660)")
            && err.contains("socket_group")
            && !err.contains("usermod -aG root"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(ctl.parent().unwrap());
}

#[test]
fn bind_socket_replaces_a_stale_socket_but_not_a_live_one_nor_a_file() {
    let dir = PathBuf::from(format!("/tmp/eniipd-bind-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let p = dir.join("x.sock");
    let (l, _) = bind_socket(&p, 0o600, None).unwrap();
    drop(l);
    // Nothing answers on the file left behind: stale, replaced.
    let (live, file) = bind_socket(&p, 0o640, None).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
        0o640
    );
    // Something answers: in use, named with the listener's pid, untouched.
    let err = bind_socket(&p, 0o640, None).unwrap_err();
    assert!(err.in_use(), "{err}");
    let text = err.to_string();
    assert!(text.contains(&p.display().to_string()), "{text}");
    assert!(
        text.contains(&format!("pid {}", std::process::id())),
        "{text}"
    );
    assert!(eniipd_daemon::server::socket::check_socket_free(&p).is_err());
    UnixStream::connect(&p).expect("the live socket is still there");
    // A file that is not a socket is never removed.
    let f = dir.join("plain");
    std::fs::write(&f, "x").unwrap();
    assert!(bind_socket(&f, 0o600, None).is_err());
    assert!(f.exists());
    // Removal at stop: only while the path is still the socket bound here.
    std::fs::remove_file(&p).unwrap();
    let (_other, _) = bind_socket(&p, 0o600, None).unwrap();
    assert!(!file.remove_if_ours());
    UnixStream::connect(&p).expect("another's socket is left in place");
    drop(live);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `netns=` that is not a network namespace (a FIFO, which a blocking
/// open would wait on for ever; a device; a link) is refused at once,
/// naming the key, and never holds a connection slot: after 300 of them
/// `ping` still answers within a second. What a namespace eniipd cannot
/// see looks like (nothing, or the empty file of a mount it missed) is
/// served without the attachment.
#[test]
fn a_netns_that_is_not_a_namespace_is_refused_at_once() {
    let _turn = common::one_flood_at_a_time();
    let h = harness(me());
    let dir = common::tempdir("netns-fifo");
    let fifo = dir.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
    let link = dir.join("link");
    std::os::unix::fs::symlink(format!("/proc/{}/ns/net", std::process::id()), &link).unwrap();
    let veth = "enip0123456789a";
    for other in [link.to_str().unwrap(), "/dev/null", "/", "/dev/log"] {
        if !std::path::Path::new(other).exists() {
            continue;
        }
        let r = h.ask(&format!("alloc x/y sandbox=s netns={other} veth={veth}"));
        assert!(r[0].starts_with("ERR bad-request netns="), "{other}: {r:?}");
    }
    let unseen = dir.join("unseen");
    std::fs::write(&unseen, "").unwrap();
    for missed in [unseen.to_str().unwrap(), "/nonexistent/netns"] {
        let r = h.ask(&format!(
            "alloc m/{} sandbox=s netns={missed} veth={veth}",
            missed.len()
        ));
        assert!(r[0].starts_with("OK ip="), "{missed}: {r:?}");
    }
    let replies = common::at_once(30, |t| {
        let mut c =
            eniip_protocol::protocol::client::Client::connect(&h.path, Duration::from_secs(5))
                .unwrap();
        (0..10)
            .map(|i| {
                let line = format!(
                    "alloc f/{t}-{i} sandbox=s{i} netns={} veth={veth}",
                    fifo.display()
                );
                match c.ask_within(&line, Duration::from_secs(5)) {
                    Ok(r) => r.into_lines().join("\n"),
                    Err(e) => format!("no reply: {e}"),
                }
            })
            .collect::<Vec<_>>()
    });
    let refused = replies
        .iter()
        .flatten()
        .filter(|r| r.starts_with("ERR bad-request netns=") && r.contains("FIFO"))
        .count();
    assert_eq!(
        refused,
        300,
        "{:?}",
        replies
            .iter()
            .flatten()
            .find(|r| !r.starts_with("ERR bad-request"))
    );
    let started = Instant::now();
    assert_eq!(h.ask("ping"), vec!["OK pong"]);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    // A real one is taken.
    let ok = h.ask(&format!(
        "alloc x/y sandbox=s netns=/proc/{}/ns/net veth={veth}",
        std::process::id()
    ));
    assert!(ok[0].starts_with("OK ip="), "{ok:?}");
    assert_eq!(h.backend.completed.load(Ordering::SeqCst), 3);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// eniip-cni's ADD against an eniipd whose every connection slot is
/// serving for 10 s (256 allocs waiting on the cloud), then freed: the
/// ADD whose alloc already waits is not failed by its liveness probes
/// being answered `ERR busy`, and an ADD that connects meanwhile waits
/// for a slot; both succeed within their deadline. (eniip-cni's client
/// is these two calls: `connect_answering_within`, `alloc_within`.)
#[test]
fn an_add_is_never_failed_by_every_connection_slot_being_busy() {
    use eniip_protocol::protocol::client::{Client, ALLOC_DEADLINE};
    let _turn = common::one_flood_at_a_time();
    let h = harness(me());
    let slots = ServerConfig::default().max_connections;
    assert_eq!(slots, 256);
    *h.backend.holding.lock().unwrap() = true;
    let server = || h.server.as_ref().unwrap();
    let add = |owner: &str| {
        let started = Instant::now();
        let r = Client::connect_answering_within(&h.path, Duration::from_secs(60))
            .and_then(|mut c| c.alloc_within(&format!("alloc {owner} sandbox=s"), ALLOC_DEADLINE));
        (r.map(|r| r.into_lines().join("\n")), started.elapsed())
    };
    std::thread::scope(|s| {
        // An ADD whose alloc waits (its own slot), then every other slot
        // taken by an alloc that waits as long.
        let first = s.spawn(|| add("hold/add-1"));
        assert!(eventually(Duration::from_secs(10), || server()
            .connections()
            == 1));
        let holders: Vec<_> = (1..slots)
            .map(|i| {
                let path = &h.path;
                s.spawn(move || {
                    let mut c = Client::connect(path, Duration::from_secs(10)).unwrap();
                    c.ask_within(&format!("alloc hold/{i}"), Duration::from_secs(60))
                        .map(|r| r.into_lines().join("\n"))
                })
            })
            .collect();
        assert!(
            eventually(Duration::from_secs(20), || server().connections() == slots),
            "{} connections",
            server().connections()
        );
        let busy_since = Instant::now();
        // Meanwhile a new ADD comes: no slot is free.
        let second = s.spawn(|| add("hold/add-2"));
        // The scenario: every slot serving for 10 s (the first ADD's
        // probes are answered busy all along), then freed.
        std::thread::sleep(Duration::from_secs(10));
        assert_eq!(server().connections(), slots);
        *h.backend.holding.lock().unwrap() = false;
        h.backend.opened.notify_all();
        for (name, t) in [("first", first), ("second", second)] {
            let (r, took) = t.join().unwrap();
            let r = r.unwrap_or_else(|e| panic!("{name} ADD failed after {took:?}: {e}"));
            assert!(r.starts_with("OK ip="), "{name}: {r}");
            assert!(took < ALLOC_DEADLINE, "{name}: {took:?}");
        }
        assert!(busy_since.elapsed() >= Duration::from_secs(10));
        for t in holders {
            assert!(t.join().unwrap().unwrap().starts_with("OK ip="));
        }
    });
}
