//! The committer: makes records durable with group commit, in the order
//! they were queued, on whichever thread is free to do it.
//!
//! Records are queued; one thread at a time holds the right to commit
//! (the token) and takes everything queued as one log frame, fsyncs once,
//! and only then runs each submitter's callback in order. Who holds it:
//! - the thread that queued, when no commit is in flight: it calls
//!   [`Committer::lead`] after it queued (the allocator's combining
//!   client, which then answers its own client with no thread to wake:
//!   issue 37). It commits one frame, then gives the token back, or hands
//!   it to the store's thread if more was queued meanwhile;
//! - otherwise the store's thread ("eniipd-store"), woken by
//!   [`Committer::hand_off`] or by a leader's hand-over. It commits frame
//!   after frame while records keep coming, so under load concurrent
//!   clients share fsyncs and the next frame gathers while one is in
//!   flight, as before. Compactions and the final snapshot are its alone.
//!
//! A batch with no records (a reply ordered after earlier commits) needs
//! no write: everything before it is already durable. A failed write fails
//! its batch and every later one: after a failed write the log may hold a
//! partial frame, so nothing more may be acknowledged until a restart
//! reloads it.
//!
//! Invariants (kept by [`Queue`], under one mutex): at most one thread
//! holds the token; records are taken only by the holder, whole and in
//! queue order; a holder checks the queue before it lets the token go, so
//! nothing queued is left without a committer.
//!
//! Stopping is bounded: an fsync on a frozen filesystem can block for
//! ever, and a thread inside it can be neither joined nor killed. So
//! [`Committer::close_until`] and `Drop` wait for the thread only until a
//! deadline, then leave it behind (detached, still holding the state lock
//! until the process exits) and say how many submitted records were not
//! made durable. A leader stuck so is a client's thread: its connection
//! is left behind at stop like the store's thread, and every later
//! change waits for the token and answers `timeout`, as before.

use std::io::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use log::{error, info, warn};
use parking_lot::{Condvar, Mutex};

use super::record::Record;
use super::snapshot::LogRef;
use super::{rewrite, Store, StoreError};
use crate::metrics::Stage;

/// How long [`Committer::close`] waits for the disk.
pub(crate) const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long dropping a [`Committer`] waits for the disk.
pub(crate) const DROP_TIMEOUT: Duration = Duration::from_secs(2);

type Done = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

/// Records, what to call once they are durable, and when they came.
struct Queued {
    records: Vec<Record>,
    done: Done,
    at: Instant,
}

/// Who may commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    /// Nobody commits: the next to queue may lead.
    Free,
    /// A thread is committing (the store's or a leader).
    Held,
    /// Handed to the store's thread, which has not taken it yet.
    ForThread,
}

/// How the store's thread ends.
enum Ending {
    /// Make everything queued durable, write a final snapshot, stop.
    Close(Sender<Result<(), StoreError>>),
    /// Make everything queued durable and stop, without a snapshot.
    Stop,
}

/// What waits to be committed, and who commits it.
struct Queue {
    queued: Vec<Queued>,
    token: Token,
    /// Set once a close or stop was asked: nothing more is queued.
    ending: Option<Ending>,
    ended: bool,
}

/// The open store and the first failure, touched only by the token's
/// holder.
struct Core {
    store: Store,
    failed: Option<StoreError>,
}

struct Shared {
    queue: Mutex<Queue>,
    /// The store's thread waits here for the token or its end.
    wake: Condvar,
    core: Mutex<Core>,
    syncs: AtomicU64,
    /// Records queued / made durable, to say how many a timed-out close
    /// leaves behind.
    submitted: AtomicUsize,
    durable: AtomicUsize,
    fail_tx: Sender<String>,
}

/// The store thread and how to tell when it has finished.
struct Worker {
    handle: JoinHandle<()>,
    /// Disconnects when the thread's function returns.
    exited: Receiver<()>,
}

/// Queues records for durable storage. `Send + Sync`; share it with `Arc`.
pub struct Committer {
    shared: Arc<Shared>,
    worker: Mutex<Option<Worker>>,
    /// The first failure, as soon as it happens (a compaction fails
    /// between commits, with no submitter to tell).
    failures: Receiver<String>,
}

impl std::fmt::Debug for Committer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Committer")
            .field("syncs", &self.syncs())
            .finish()
    }
}

impl Committer {
    pub(super) fn start(store: Store) -> Committer {
        let (fail_tx, failures) = bounded::<String>(1);
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                queued: Vec::new(),
                token: Token::Free,
                ending: None,
                ended: false,
            }),
            wake: Condvar::new(),
            core: Mutex::new(Core {
                store,
                failed: None,
            }),
            syncs: AtomicU64::new(0),
            submitted: AtomicUsize::new(0),
            durable: AtomicUsize::new(0),
            fail_tx,
        });
        let (exited_tx, exited) = bounded::<()>(0);
        let theirs = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("eniipd-store".into())
            .spawn(move || {
                let _exited = exited_tx;
                run(&theirs);
            });
        let worker = match thread {
            Ok(handle) => Some(Worker { handle, exited }),
            Err(e) => {
                // Without the thread nothing is committed but by leaders
                // and nothing closes: the queue ends now, every submission
                // fails, which the daemon turns into a clean exit.
                error!("cannot start the state thread: {e}");
                shared.queue.lock().ended = true;
                None
            }
        };
        Committer {
            shared,
            worker: Mutex::new(worker),
            failures,
        }
    }

    /// Receives the first failure of the store (a commit or a compaction)
    /// when it happens: from then on nothing more can be made durable, so
    /// the daemon stops at once instead of at the next request.
    pub(crate) fn failures(&self) -> Receiver<String> {
        self.failures.clone()
    }

    /// Queues records and makes sure someone commits them (the store's
    /// thread, unless a commit is in flight); `done` runs once they are
    /// durable (or failed). Never blocks.
    pub(crate) fn submit(&self, records: Vec<Record>, done: Done) {
        self.queue(records, done);
        self.hand_off();
    }

    /// Queues records without waking anyone: the caller then calls
    /// [`lead`](Self::lead) or [`hand_off`](Self::hand_off). Never blocks.
    pub(crate) fn queue(&self, records: Vec<Record>, done: Done) {
        let n = records.len();
        let mut q = self.shared.queue.lock();
        if q.ended {
            drop(q);
            done(Err(StoreError::Closed));
            return;
        }
        self.shared.submitted.fetch_add(n, Ordering::Relaxed);
        q.queued.push(Queued {
            records,
            done,
            at: Instant::now(),
        });
    }

    /// What is queued goes to the store's thread, unless a commit is in
    /// flight (its holder takes it next).
    pub(crate) fn hand_off(&self) {
        let mut q = self.shared.queue.lock();
        if q.token == Token::Free && !q.queued.is_empty() {
            q.token = Token::ForThread;
            self.shared.wake.notify_one();
        }
    }

    /// Commits what is queued on the calling thread, if no commit is in
    /// flight (otherwise its holder takes it next); then hands what was
    /// queued meanwhile to the store's thread. Blocks for one fsync.
    pub(crate) fn lead(&self) {
        let batch = {
            let mut q = self.shared.queue.lock();
            if q.token != Token::Free || q.queued.is_empty() {
                return;
            }
            q.token = Token::Held;
            std::mem::take(&mut q.queued)
        };
        let compact_due = {
            let mut core = self.shared.core.lock();
            commit(&self.shared, &mut core, batch);
            core.compaction_due()
        };
        let mut q = self.shared.queue.lock();
        // The store's thread is woken only when it has something to do:
        // the token, or its end. Waking it after every commit put one
        // more runnable thread beside the client's (issue 37).
        if compact_due || !q.queued.is_empty() {
            q.token = Token::ForThread;
            self.shared.wake.notify_one();
        } else {
            q.token = Token::Free;
            if q.ending.is_some() {
                self.shared.wake.notify_one();
            }
        }
    }

    /// Whether no commit is in flight (tests).
    #[cfg(test)]
    pub(crate) fn token_free(&self) -> bool {
        self.shared.queue.lock().token == Token::Free
    }

    /// Submits and waits for the outcome.
    pub fn commit(&self, records: Vec<Record>, timeout: Duration) -> Result<(), StoreError> {
        let (tx, rx) = bounded(1);
        self.submit(
            records,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        rx.recv_timeout(timeout).unwrap_or(Err(StoreError::Closed))
    }

    /// [`close_until`](Self::close_until) with [`CLOSE_TIMEOUT`].
    pub fn close(self) -> Result<(), StoreError> {
        self.close_until(Instant::now() + CLOSE_TIMEOUT)
    }

    /// Makes everything submitted durable, writes a final snapshot, stops
    /// the thread and releases the lock — or, if the disk has not answered
    /// by `deadline`, returns [`StoreError::NotDurable`] with the count of
    /// submitted records not made durable, leaving the thread behind.
    /// Nothing is queued once it is called (a later submission fails), so
    /// it may close a committer still shared: with a leader held in the
    /// disk, a client's thread holds it too, and the close then waits for
    /// that commit like for any other.
    pub(crate) fn close_until(&self, deadline: Instant) -> Result<(), StoreError> {
        let (tx, rx) = bounded(1);
        if !self.end(Ending::Close(tx)) {
            self.reap(deadline);
            return Err(StoreError::Closed);
        }
        let r = match rx.recv_deadline(deadline) {
            Ok(r) => r,
            Err(RecvTimeoutError::Disconnected) => Err(StoreError::Closed),
            Err(RecvTimeoutError::Timeout) => Err(self.not_durable()),
        };
        if !self.reap(deadline) && r.is_ok() {
            return Err(self.not_durable());
        }
        r
    }

    /// Asks the thread to end: nothing more is queued from now on. False
    /// if it was asked before (or never started).
    fn end(&self, how: Ending) -> bool {
        let mut q = self.shared.queue.lock();
        if q.ended {
            return false;
        }
        q.ended = true;
        q.ending = Some(how);
        self.shared.wake.notify_one();
        true
    }

    /// Fsyncs done so far.
    pub(crate) fn syncs(&self) -> u64 {
        self.shared.syncs.load(Ordering::Relaxed)
    }

    fn not_durable(&self) -> StoreError {
        let submitted = self.shared.submitted.load(Ordering::Relaxed);
        let durable = self.shared.durable.load(Ordering::Relaxed);
        StoreError::NotDurable {
            records: submitted.saturating_sub(durable),
        }
    }

    /// Joins the thread if it finishes by `deadline`; otherwise leaves it
    /// (dropping its handle detaches it). Returns whether it finished.
    fn reap(&self, deadline: Instant) -> bool {
        let Some(w) = self.worker.lock().take() else {
            return true;
        };
        if w.handle.thread().id() == std::thread::current().id() {
            // Dropped by a callback on the store thread itself: it stops
            // once the callback returns; waiting here would wait on itself.
            return true;
        }
        match w.exited.recv_deadline(deadline) {
            // Only ever disconnected: the thread's function has returned,
            // so the join cannot block on the disk.
            Err(RecvTimeoutError::Disconnected) | Ok(()) => {
                let _ = w.handle.join();
                true
            }
            Err(RecvTimeoutError::Timeout) => false,
        }
    }
}

impl Drop for Committer {
    /// Makes what was submitted durable and stops the thread, without a
    /// final snapshot (the next start replays the log), waiting at most
    /// [`DROP_TIMEOUT`].
    fn drop(&mut self) {
        if self.worker.lock().is_none() {
            return;
        }
        self.end(Ending::Stop);
        if !self.reap(Instant::now() + DROP_TIMEOUT) {
            warn!(
                "the state thread did not stop within {DROP_TIMEOUT:?}: {}",
                self.not_durable()
            );
        }
    }
}

impl Core {
    fn compaction_due(&self) -> bool {
        self.failed.is_none() && self.store.wal_len >= self.store.opts.compact_after_bytes
    }
}

/// What wakes the store's thread.
enum Wake {
    /// The token is its own: commit what is queued.
    Token,
    /// End now (the token is its own too).
    End(Ending),
}

/// The store's thread: waits for the token or its end.
fn run(shared: &Shared) {
    loop {
        let wake = {
            let mut q = shared.queue.lock();
            loop {
                if q.token == Token::ForThread {
                    q.token = Token::Held;
                    break Wake::Token;
                }
                if q.token == Token::Free {
                    if let Some(how) = q.ending.take() {
                        q.token = Token::Held;
                        break Wake::End(how);
                    }
                }
                shared.wake.wait(&mut q);
            }
        };
        let mut core = shared.core.lock();
        loop {
            if core.compaction_due() {
                if let Err(e) = compact(&mut core.store) {
                    error!("state compaction failed: {e}");
                    let _ = shared
                        .fail_tx
                        .try_send(format!("state compaction failed: {e}"));
                    core.failed = Some(e);
                }
            }
            let batch = {
                let mut q = shared.queue.lock();
                if q.queued.is_empty() {
                    if matches!(wake, Wake::Token) {
                        q.token = Token::Free;
                    }
                    break;
                }
                std::mem::take(&mut q.queued)
            };
            commit(shared, &mut core, batch);
        }
        if let Wake::End(how) = wake {
            // Nothing more is queued (`ended`): everything is durable.
            if let Ending::Close(reply) = how {
                let r = match &core.failed {
                    Some(e) => Err(e.clone()),
                    None => compact(&mut core.store),
                };
                let _ = reply.send(r);
            }
            return;
        }
    }
}

/// Writes `batch` as one frame, fsyncs, then runs its callbacks in order.
fn commit(shared: &Shared, core: &mut Core, batch: Vec<Queued>) {
    let taken = Instant::now();
    let mut records = Vec::new();
    let mut dones = Vec::with_capacity(batch.len());
    for q in batch {
        let waited = taken.saturating_duration_since(q.at);
        crate::metrics::record_stage(Stage::ToCommitter, waited.as_secs_f64());
        records.extend(q.records);
        dones.push(q.done);
    }
    let result = match &core.failed {
        Some(e) => Err(e.clone()),
        None if records.is_empty() => Ok(()),
        None => append(&mut core.store, &records, &shared.syncs),
    };
    match &result {
        Ok(()) => {
            shared.durable.fetch_add(records.len(), Ordering::Relaxed);
        }
        Err(e) => {
            if core.failed.is_none() {
                error!("state commit failed: {e}");
                let _ = shared.fail_tx.try_send(format!("state commit failed: {e}"));
                core.failed = Some(e.clone());
            }
        }
    }
    crate::metrics::mark_committed();
    for d in dones {
        d(result.clone());
    }
}
fn append(store: &mut Store, records: &[Record], syncs: &AtomicU64) -> Result<(), StoreError> {
    let started = Instant::now();
    let frame = super::wal::frame(store.frames + 1, records);
    store
        .wal
        .write_all(&frame)
        .and_then(|()| store.wal.sync_data())
        .map_err(|e| StoreError::io("cannot write the state log", e))?;
    let took = started.elapsed().as_secs_f64();
    crate::metrics::record_stage(Stage::Commit, took);
    syncs.fetch_add(1, Ordering::Relaxed);
    store.frames += 1;
    store.wal_len += frame.len() as u64;
    for r in records {
        store.state.apply(r);
    }
    crate::metrics::record_commit(took);
    Ok(())
}

/// Writes a snapshot of the next generation that names the current log as
/// absorbed, then starts a fresh log for it. A crash between the two
/// leaves the absorbed log, which loading recognises and discards.
fn compact(store: &mut Store) -> Result<(), StoreError> {
    let generation = store.generation + 1;
    let absorbed = LogRef {
        generation: store.generation,
        frames: store.frames,
    };
    let (wal, len) = rewrite(&store.dir, generation, Some(absorbed), &store.state)?;
    info!(
        "state compacted: generation {generation}, {} allocation(s), {} hold(s)",
        store.state.allocations.len(),
        store.state.holds.len()
    );
    store.wal = wal;
    store.wal_len = len;
    store.frames = 0;
    store.generation = generation;
    Ok(())
}
