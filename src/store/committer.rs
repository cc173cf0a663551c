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

use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use log::{error, info};

use super::record::Record;
use super::snapshot::LogRef;
use super::{rewrite, Store, StoreError};

type Done = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

enum Msg {
    Submit(Vec<Record>, Done),
    Close(Sender<Result<(), StoreError>>),
}

/// Queues records for durable storage. `Send + Sync`; share it with `Arc`.
pub struct Committer {
    tx: Sender<Msg>,
    thread: parking_lot::Mutex<Option<JoinHandle<()>>>,
    syncs: Arc<AtomicU64>,
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
        let counter = Arc::clone(&syncs);
        let thread = std::thread::Builder::new()
            .name("eniipd-store".into())
            .spawn(move || run(store, &rx, &counter));
        let thread = match thread {
            Ok(t) => Some(t),
            Err(e) => {
                // Without the thread every submission fails (its queue
                // is gone), which the daemon turns into a clean exit.
                error!("cannot start the state thread: {e}");
                None
            }
        };
        Committer {
            tx,
            thread: parking_lot::Mutex::new(thread),
            syncs,
        }
    }

    /// Queues records; `done` runs on the store thread once they are
    /// durable (or failed). Never blocks.
    pub fn submit(
        &self,
        records: Vec<Record>,
        done: Box<dyn FnOnce(Result<(), StoreError>) + Send>,
    ) {
        if let Err(e) = self.tx.send(Msg::Submit(records, done)) {
            if let Msg::Submit(_, done) = e.into_inner() {
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

    /// Makes everything queued durable, writes a final snapshot, stops the
    /// thread and releases the lock.
    pub fn close(self) -> Result<(), StoreError> {
        let (tx, rx) = bounded(1);
        if self.tx.send(Msg::Close(tx)).is_err() {
            return Err(StoreError::Closed);
        }
        let r = rx.recv().unwrap_or(Err(StoreError::Closed));
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
        r
    }

    /// Fsyncs done so far.
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }
}

fn run(mut store: Store, rx: &Receiver<Msg>, syncs: &AtomicU64) {
    let mut failed: Option<StoreError> = None;
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while let Ok(m) = rx.try_recv() {
            let close = matches!(m, Msg::Close(_));
            batch.push(m);
            if close {
                break;
            }
        }
        let mut records = Vec::new();
        let mut dones = Vec::new();
        let mut close = None;
        for m in batch {
            match m {
                Msg::Submit(r, d) => {
                    records.extend(r);
                    dones.push(d);
                }
                Msg::Close(reply) => close = Some(reply),
            }
        }
        let result = match &failed {
            Some(e) => Err(e.clone()),
            None if records.is_empty() => Ok(()),
            None => append(&mut store, &records, syncs),
        };
        if let Err(e) = &result {
            if failed.is_none() {
                error!("state commit failed: {e}");
                failed = Some(e.clone());
            }
        }
        for d in dones {
            d(result.clone());
        }
        if failed.is_none() && store.wal_len >= store.opts.compact_after_bytes {
            if let Err(e) = compact(&mut store) {
                error!("state compaction failed: {e}");
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
    syncs.fetch_add(1, Ordering::Relaxed);
    store.frames += 1;
    store.wal_len += frame.len() as u64;
    for r in records {
        store.state.apply(r);
    }
    crate::metrics::record_commit(started.elapsed().as_secs_f64());
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
