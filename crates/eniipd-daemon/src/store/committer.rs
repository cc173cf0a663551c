//! The committer: one thread ("eniipd-store") that owns the open store and
//! makes records durable with group commit.
//!
//! It blocks on its queue, then takes everything queued, writes it as one
//! log frame, fsyncs once, and only then runs each submitter's callback in
//! order. While one fsync is in flight new submissions pile up for the
//! next frame, so concurrent clients share fsyncs. A batch with no records
//! (a reply ordered after earlier commits) needs no write: everything
//! before it is already durable. A failed write fails its batch and every
//! later submission: after a failed write the log may hold a partial frame,
//! so nothing more may be acknowledged until a restart reloads it.
//!
//! Stopping is bounded: an fsync on a frozen filesystem can block for
//! ever, and a thread inside it can be neither joined nor killed. So
//! [`Committer::close_until`] and `Drop` wait for the thread only until a
//! deadline, then leave it behind (detached, still holding the state lock
//! until the process exits) and say how many submitted records were not
//! made durable.

use std::io::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded, Receiver, RecvTimeoutError, Sender};
use log::{error, info, warn};

use super::record::Record;
use super::snapshot::LogRef;
use super::{rewrite, Store, StoreError};
use crate::metrics::Stage;

/// How long [`Committer::close`] waits for the disk.
pub(crate) const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long dropping a [`Committer`] waits for the disk.
pub(crate) const DROP_TIMEOUT: Duration = Duration::from_secs(2);

type Done = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

enum Msg {
    /// Records, what to call once they are durable, and when they came.
    Submit(Vec<Record>, Done, Instant),
    /// Make everything before it durable, write a final snapshot, stop.
    Close(Sender<Result<(), StoreError>>),
    /// Make everything before it durable and stop, without a snapshot.
    Stop,
}

/// The store thread and how to tell when it has finished.
struct Worker {
    handle: JoinHandle<()>,
    /// Disconnects when the thread's function returns.
    exited: Receiver<()>,
}

/// Queues records for durable storage. `Send + Sync`; share it with `Arc`.
pub struct Committer {
    tx: Sender<Msg>,
    worker: parking_lot::Mutex<Option<Worker>>,
    syncs: Arc<AtomicU64>,
    /// Records submitted / made durable, to say how many a timed-out
    /// close leaves behind.
    submitted: AtomicUsize,
    durable: Arc<AtomicUsize>,
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
        let (tx, rx) = unbounded();
        let syncs = Arc::new(AtomicU64::new(0));
        let durable = Arc::new(AtomicUsize::new(0));
        let (counter, made_durable) = (Arc::clone(&syncs), Arc::clone(&durable));
        let (exited_tx, exited) = bounded::<()>(0);
        let (fail_tx, failures) = bounded::<String>(1);
        let thread = std::thread::Builder::new()
            .name("eniipd-store".into())
            .spawn(move || {
                let _exited = exited_tx;
                run(store, &rx, &counter, &made_durable, &fail_tx);
            });
        let worker = match thread {
            Ok(handle) => Some(Worker { handle, exited }),
            Err(e) => {
                // Without the thread every submission fails (its queue
                // is gone), which the daemon turns into a clean exit.
                error!("cannot start the state thread: {e}");
                None
            }
        };
        Committer {
            tx,
            worker: parking_lot::Mutex::new(worker),
            syncs,
            submitted: AtomicUsize::new(0),
            durable,
            failures,
        }
    }

    /// Receives the first failure of the store (a commit or a compaction)
    /// when it happens: from then on nothing more can be made durable, so
    /// the daemon stops at once instead of at the next request.
    pub(crate) fn failures(&self) -> Receiver<String> {
        self.failures.clone()
    }

    /// Queues records; `done` runs on the store thread once they are
    /// durable (or failed). Never blocks.
    pub(crate) fn submit(
        &self,
        records: Vec<Record>,
        done: Box<dyn FnOnce(Result<(), StoreError>) + Send>,
    ) {
        let n = records.len();
        self.submitted.fetch_add(n, Ordering::Relaxed);
        if let Err(e) = self.tx.send(Msg::Submit(records, done, Instant::now())) {
            self.submitted.fetch_sub(n, Ordering::Relaxed);
            if let Msg::Submit(_, done, _) = e.into_inner() {
                done(Err(StoreError::Closed));
            }
        }
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
    pub(crate) fn close_until(self, deadline: Instant) -> Result<(), StoreError> {
        let (tx, rx) = bounded(1);
        if self.tx.send(Msg::Close(tx)).is_err() {
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

    /// Fsyncs done so far.
    pub(crate) fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    fn not_durable(&self) -> StoreError {
        let submitted = self.submitted.load(Ordering::Relaxed);
        let durable = self.durable.load(Ordering::Relaxed);
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
        let _ = self.tx.send(Msg::Stop);
        if !self.reap(Instant::now() + DROP_TIMEOUT) {
            warn!(
                "the state thread did not stop within {DROP_TIMEOUT:?}: {}",
                self.not_durable()
            );
        }
    }
}

fn run(
    mut store: Store,
    rx: &Receiver<Msg>,
    syncs: &AtomicU64,
    durable: &AtomicUsize,
    failures: &Sender<String>,
) {
    let mut failed: Option<StoreError> = None;
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while let Ok(m) = rx.try_recv() {
            let last = matches!(m, Msg::Close(_) | Msg::Stop);
            batch.push(m);
            if last {
                break;
            }
        }
        let mut records = Vec::new();
        let mut dones = Vec::new();
        let mut close = None;
        let mut stop = false;
        let taken = Instant::now();
        for m in batch {
            match m {
                Msg::Submit(r, d, submitted) => {
                    let waited = taken.saturating_duration_since(submitted);
                    crate::metrics::record_stage(Stage::ToCommitter, waited.as_secs_f64());
                    records.extend(r);
                    dones.push(d);
                }
                Msg::Close(reply) => close = Some(reply),
                Msg::Stop => stop = true,
            }
        }
        let result = match &failed {
            Some(e) => Err(e.clone()),
            None if records.is_empty() => Ok(()),
            None => append(&mut store, &records, syncs),
        };
        match &result {
            Ok(()) => {
                durable.fetch_add(records.len(), Ordering::Relaxed);
            }
            Err(e) => {
                if failed.is_none() {
                    error!("state commit failed: {e}");
                    let _ = failures.try_send(format!("state commit failed: {e}"));
                    failed = Some(e.clone());
                }
            }
        }
        crate::metrics::mark_committed();
        for d in dones {
            d(result.clone());
        }
        if failed.is_none() && store.wal_len >= store.opts.compact_after_bytes {
            if let Err(e) = compact(&mut store) {
                error!("state compaction failed: {e}");
                let _ = failures.try_send(format!("state compaction failed: {e}"));
                failed = Some(e);
            }
        }
        if let Some(reply) = close {
            let r = match &failed {
                Some(e) => Err(e.clone()),
                None => compact(&mut store),
            };
            let _ = reply.send(r);
            return;
        }
        if stop {
            return;
        }
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
