//! What the plugin's unit tests share: a stand-in eniipd on a socket
//! ([`fake_eniipd`]), a network configuration pointing at it
//! ([`conf_on`]), a network namespace of a thread's own ([`OtherNetns`])
//! and fresh directories ([`test_dir`]).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::json;

use super::spec::{Command, NetConf};

/// A fresh directory in the temp dir, named for `what`.
pub(crate) fn test_dir(what: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "eniip-cni-test-{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// What the stand-in answers a line of `verb`: the first of `answers`
/// for it (`ERR unknown-command` for none). An answer `sleep N` waits N
/// ms, then gives the next answer for that verb.
fn answer(answers: &[(&str, &'static str)], verb: &str) -> &'static str {
    let mut mine = answers.iter().filter(|(v, _)| *v == verb).map(|(_, a)| *a);
    let first = mine.next().unwrap_or("ERR unknown-command");
    match first.strip_prefix("sleep ") {
        Some(ms) => {
            std::thread::sleep(Duration::from_millis(ms.parse().unwrap()));
            mine.next().unwrap_or("ERR unknown-command")
        }
        None => first,
    }
}

/// A stand-in eniipd on a socket: answers each request line by its verb
/// from `answers` ([`answer`]; `ping` with `pong`), on every connection,
/// until the first connection (the plugin's own) ends, at most 20 s. Its
/// thread gives back every line it was sent but the pings.
pub(crate) fn fake_eniipd(
    answers: &[(&'static str, &'static str)],
) -> (PathBuf, JoinHandle<Vec<String>>) {
    let answers: std::sync::Arc<[(&str, &'static str)]> = answers.into();
    let dir = test_dir("eniipd");
    let path = dir.join("eniipd.sock");
    let listener = UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let serve = move || {
        let seen = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
        let mut conns: Vec<JoinHandle<()>> = Vec::new();
        let end = Instant::now() + Duration::from_secs(20);
        while Instant::now() < end {
            let s = match listener.accept() {
                Ok((s, _)) => s,
                Err(_) if conns.first().is_some_and(JoinHandle::is_finished) => break,
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
            };
            let (seen, answers) = (seen.clone(), answers.clone());
            let conn = move || {
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut w = s.try_clone().unwrap();
                for line in BufReader::new(s).lines() {
                    let Ok(line) = line else { break };
                    let verb = line.split(' ').next().unwrap_or("").to_string();
                    let a = if verb == "ping" {
                        "OK pong"
                    } else {
                        seen.lock().push(line);
                        answer(&answers, &verb)
                    };
                    if writeln!(w, "{a}").is_err() {
                        break;
                    }
                }
            };
            let named = std::thread::Builder::new().name("fake-eniipd-conn".into());
            conns.push(named.spawn(conn).unwrap());
        }
        for c in conns {
            let _ = c.join();
        }
        let _ = std::fs::remove_dir_all(&dir);
        let seen = seen.lock().clone();
        seen
    };
    let named = std::thread::Builder::new().name("fake-eniipd".into());
    (path, named.spawn(serve).unwrap())
}

/// An `alloc` answer in dual stack.
pub(crate) const ALLOC_V6: &str = "OK ip=192.168.0.9 ipv6=2408:4005:3ff:5100::9 eni=eni-1 \
    mac=00:16:3e:00:00:01 vswitch=vsw-1 cidr=192.168.0.0/22 gateway=192.168.3.253";
/// [`ALLOC_V6`] with fields this version does not know, as a later
/// eniipd may send.
pub(crate) const ALLOC_V6_LATER: &str = "OK zone=cn-hangzhou-i ip=192.168.0.9 \
    ipv6=2408:4005:3ff:5100::9 eni=eni-1 mac=00:16:3e:00:00:01 vswitch=vsw-1 \
    prefix=192.168.0.0/28 cidr=192.168.0.0/22 gateway=192.168.3.253 gateway6=fe80::1 flags";
/// An `eni` answer without the IPv6 pair.
pub(crate) const ENI_V4_ONLY: &str =
    "OK eni=eni-1 mac=00:16:3e:00:00:01 vswitch=vsw-1 cidr=192.168.0.0/22 gateway=192.168.3.253";

/// A network configuration for network `eni` on `socket`.
pub(crate) fn conf_on(socket: &Path) -> NetConf {
    NetConf::parse(
        json!({
            "cniVersion": "1.1.0", "name": "eni", "socket": socket,
            "lockDir": test_dir("locks"),
        })
        .to_string()
        .as_bytes(),
        Command::Add,
    )
    .unwrap()
}

/// A network namespace of a thread's own, for as long as the guard
/// lives.
#[derive(Debug)]
pub(crate) struct OtherNetns {
    pub(crate) path: PathBuf,
    done: Option<crossbeam_channel::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl OtherNetns {
    /// `None`, after [`eniip_util::testing::skip`] for `test`, without
    /// the right to make one.
    pub(crate) fn new(test: &str) -> Option<OtherNetns> {
        let (ready_tx, ready_rx) = crossbeam_channel::bounded(1);
        let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(1);
        let hold = move || {
            let r = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
                .map(|()| nix::unistd::gettid());
            let ok = r.is_ok();
            let _ = ready_tx.send(r);
            if ok {
                let _ = done_rx.recv_timeout(Duration::from_secs(60));
            }
        };
        let thread = std::thread::Builder::new()
            .name("other-netns".into())
            .spawn(hold)
            .unwrap();
        match ready_rx.recv_timeout(Duration::from_secs(10)).unwrap() {
            Ok(tid) => Some(OtherNetns {
                path: format!("/proc/{}/task/{tid}/ns/net", std::process::id()).into(),
                done: Some(done_tx),
                thread: Some(thread),
            }),
            Err(e) => {
                eniip_util::testing::skip(&format!("{test}: needs a network namespace ({e})"));
                None
            }
        }
    }
}

impl Drop for OtherNetns {
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
