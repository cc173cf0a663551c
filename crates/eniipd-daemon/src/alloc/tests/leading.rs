//! Who runs a change and who commits it (`actor::combine`): a lone
//! change on its client's thread, and a client answered at its deadline
//! while its thread is held in the commit it leads.

use super::*;
use crate::store::{Record, StoreError};
use eniip_protocol::core::Deliver;
use parking_lot::Mutex;

/// Records the thread that writes a reply (`Deliver`).
#[derive(Default)]
struct ThreadOfReply(parking_lot::Mutex<Option<std::thread::ThreadId>>);

impl eniip_protocol::core::Deliver for ThreadOfReply {
    fn deliver(&self, _: &Result<Answer, AllocError>) {
        *self.0.lock() = Some(std::thread::current().id());
    }
    fn revoke(&self) -> bool {
        false
    }
}

#[test]
fn a_lone_change_is_decided_committed_and_answered_on_the_askers_thread() {
    let fake = FakeCloud::new(4, 15, 1000);
    let (a, journal) = start(&fake, options(&fake, r#"{"min_pool_size": 2}"#));
    wait_for_an_idle_address(&a);
    let commands = a.commands();
    for command in [
        Command::Alloc {
            owner: owner("lone"),
            sandbox: None,
            prefer: None,
            attach: None,
            intent: Intent::default(),
        },
        Command::Release {
            owner: owner("lone"),
            sandbox: None,
            gen: None,
        },
    ] {
        let commits = journal.commits.load(Ordering::SeqCst);
        let seen = Arc::new(ThreadOfReply::default());
        let got = commands.ask_delivering(command, Instant::now(), Some(seen.clone()));
        assert!(got.is_ok(), "{got:?}");
        assert!(journal.commits.load(Ordering::SeqCst) > commits);
        assert_eq!(
            *seen.0.lock(),
            Some(std::thread::current().id()),
            "no other thread wakes for a lone change (issue 37)"
        );
    }
    assert!(journal.state.lock().allocations.is_empty());
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

type Done = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

/// A journal whose disk freezes on demand: while frozen, the thread that
/// leads a commit is held in it (as in an fdatasync of a frozen
/// filesystem) until the thaw.
#[derive(Default)]
struct FreezingDisk {
    queued: Mutex<Vec<Done>>,
    frozen: std::sync::atomic::AtomicBool,
}

impl FreezingDisk {
    fn commit(&self) {
        let dones = std::mem::take(&mut *self.queued.lock());
        for d in dones {
            d(Ok(()));
        }
    }
}

impl super::super::Journal for FreezingDisk {
    fn submit(&self, _: Vec<Record>, done: Done) {
        self.queued.lock().push(done);
    }
    fn lead(&self) {
        if self.queued.lock().is_empty() {
            return;
        }
        assert!(eventually(Duration::from_secs(30), || !self
            .frozen
            .load(Ordering::SeqCst)));
        self.commit();
    }
    fn hand_off(&self) {
        if !self.frozen.load(Ordering::SeqCst) {
            self.commit();
        }
    }
}

/// What a client was answered, by which thread and when.
type Answered = (Result<Answer, AllocError>, std::thread::ThreadId, Instant);

/// Records the first answer a client was written.
#[derive(Default)]
struct Client(Mutex<Option<Answered>>);

impl Deliver for Client {
    fn deliver(&self, outcome: &Result<Answer, AllocError>) {
        let mut c = self.0.lock();
        if c.is_none() {
            *c = Some((outcome.clone(), std::thread::current().id(), Instant::now()));
        }
    }
    fn revoke(&self) -> bool {
        self.0.lock().is_none()
    }
}

#[test]
fn a_client_whose_thread_the_disk_holds_in_its_commit_is_answered_timeout_at_its_deadline() {
    let fake = FakeCloud::new(4, 15, 1000);
    let mut o = options(&fake, r#"{"min_pool_size": 2}"#);
    o.alloc_timeout = Duration::from_millis(300);
    let disk = Arc::new(FreezingDisk::default());
    let a = Allocator::start(o, fake.clone(), disk.clone(), PoolState::new(false)).unwrap();
    wait_for_an_idle_address(&a);
    let commands = a.commands();
    let got = commands.ask(Command::Alloc {
        owner: owner("held"),
        sandbox: None,
        prefer: None,
        attach: None,
        intent: Intent::default(),
    });
    assert!(got.is_ok(), "{got:?}");

    disk.frozen.store(true, Ordering::SeqCst);
    let client = Arc::new(Client::default());
    let asked = Instant::now();
    std::thread::scope(|s| {
        let asker = s.spawn(|| {
            let release = Command::Release {
                owner: owner("held"),
                sandbox: None,
                gen: None,
            };
            let deliver = Arc::clone(&client) as Arc<dyn Deliver>;
            commands.ask_delivering(release, asked, Some(deliver))
        });
        // The asker leads the commit and the disk holds it: someone else
        // answers its client, at its deadline (alloc_timeout for a
        // release), while the commit is still held.
        assert!(
            eventually(Duration::from_secs(10), || client.0.lock().is_some()),
            "the client of a held commit was never answered"
        );
        let (answer, by, at) = client.0.lock().clone().unwrap();
        assert!(
            matches!(&answer, Err(e) if e.code == ErrCode::Timeout),
            "{answer:?}"
        );
        assert!(
            at >= asked + Duration::from_millis(300),
            "not before the deadline"
        );
        assert!(!asker.is_finished(), "answered while the commit is held");
        assert_ne!(by, asker.thread().id());
        disk.frozen.store(false, Ordering::SeqCst);
        // The commit ends: the change is made, its client already had
        // its `timeout` (the outcome unknown), and nothing more.
        assert!(asker.join().unwrap().is_ok());
    });
    let (answer, ..) = client.0.lock().clone().unwrap();
    assert!(matches!(answer, Err(e) if e.code == ErrCode::Timeout));
    a.shutdown(Instant::now() + Duration::from_secs(5));
}
