//! Answers that wait for the disk. An `alloc`, `release`, `gc` or reap is
//! answered only once the records that make it durable are committed
//! (the journal's thread sends the reply, so the actor never waits for a
//! disk). A failed commit answers `internal` and stops the daemon: it can
//! make nothing durable any more.
//!
//! Invariant: every reply handed to [`Durable`] is sent exactly once,
//! after its records' commit ended, whatever its outcome.

use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Sender;

use crate::store::Record;
use eniip_protocol::core::{AllocError, Allocation, Answer, EniInfo, ErrCode};

use super::super::{Fatal, Journal};
use super::Reply;

/// The journal and where its failure goes.
pub(super) struct Durable {
    journal: Arc<dyn Journal>,
    fatal: Sender<Fatal>,
}

impl Durable {
    pub(super) fn new(journal: Arc<dyn Journal>, fatal: Sender<Fatal>) -> Durable {
        Durable { journal, fatal }
    }

    /// The journal, for the thread that lets go of the actor to have its
    /// records committed.
    pub(super) fn journal(&self) -> Arc<dyn Journal> {
        Arc::clone(&self.journal)
    }

    /// Answers every waiting `alloc` of one owner with `a` on `eni` once
    /// `records` are durable (the alloc latency is measured from each
    /// request's start).
    pub(super) fn allocated(
        &self,
        records: Vec<Record>,
        a: Allocation,
        eni: EniInfo,
        replies: Vec<(Reply, Instant)>,
    ) {
        let fatal = self.fatal.clone();
        self.journal.submit(
            records,
            Box::new(move |res| match res {
                Ok(()) => {
                    for (r, started) in replies {
                        crate::metrics::record_alloc("ok", started.elapsed().as_secs_f64());
                        let _ = r.send(Ok(Answer::Allocation(Box::new(a.clone()), eni.clone())));
                    }
                }
                Err(e) => {
                    let msg = format!("state commit failed: {e}");
                    for (r, _) in replies {
                        crate::metrics::record_alloc("internal", 0.0);
                        let _ = r.send(Err(AllocError::new(ErrCode::Internal, msg.clone())));
                    }
                    let _ = fatal.try_send(msg.into());
                }
            }),
        );
    }

    /// Answers `reply` with `answer()` once `records` are durable.
    pub(super) fn then(
        &self,
        records: Vec<Record>,
        reply: Reply,
        answer: impl FnOnce() -> Answer + Send + 'static,
    ) {
        let fatal = self.fatal.clone();
        self.journal.submit(
            records,
            Box::new(move |res| match res {
                Ok(()) => {
                    let _ = reply.send(Ok(answer()));
                }
                Err(e) => {
                    let msg = format!("state commit failed: {e}");
                    crate::metrics::record_release("internal");
                    let _ = reply.send(Err(AllocError::new(ErrCode::Internal, msg.clone())));
                    let _ = fatal.try_send(msg.into());
                }
            }),
        );
    }

    /// Writes `records` that answer nobody (holds that ended).
    pub(super) fn write(&self, records: Vec<Record>) {
        if !records.is_empty() {
            self.journal.submit(records, Box::new(|_| {}));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::fake::MemJournal;
    use eniip_protocol::core::Owner;
    use std::sync::atomic::Ordering;

    fn allocation() -> Allocation {
        Allocation {
            owner: Owner::parse("pod-a").unwrap(),
            sandbox: None,
            ip: "10.0.0.2".parse().unwrap(),
            ipv6: None,
            ipv6_prefix: None,
            eni: "eni-1".into(),
            since_ms: 1,
            gen: eniip_protocol::core::Generation::NONE,
            attach: None,
            intent: Default::default(),
        }
    }

    fn eni() -> EniInfo {
        EniInfo {
            eni: "eni-1".into(),
            mac: "00:16:3e:00:00:01".into(),
            vswitch: "vsw-a".into(),
            cidr: "10.0.0.0/24".into(),
            gateway: "10.0.0.253".parse().unwrap(),
            v6: None,
        }
    }

    #[test]
    fn replies_follow_the_commit_and_a_failed_commit_is_fatal() {
        let journal = Arc::new(MemJournal::default());
        let (fatal_tx, fatal_rx) = crossbeam_channel::bounded(4);
        let d = Durable::new(journal.clone(), fatal_tx);
        let (tx, rx) = crossbeam_channel::bounded(2);
        let a = allocation();
        let records = vec![Record::alloc(&a)];
        d.allocated(
            records.clone(),
            a.clone(),
            eni(),
            vec![
                (tx.clone().into(), Instant::now()),
                (tx.clone().into(), Instant::now()),
            ],
        );
        assert_eq!(journal.commits.load(Ordering::SeqCst), 1);
        for _ in 0..2 {
            assert!(matches!(rx.try_recv(), Ok(Ok(Answer::Allocation(got, _))) if *got == a));
        }
        assert!(fatal_rx.try_recv().is_err());

        journal.fail.store(true, Ordering::SeqCst);
        d.then(records, tx.into(), || Answer::Released(None));
        let e = rx.try_recv().unwrap().unwrap_err();
        assert_eq!(e.code, ErrCode::Internal);
        assert!(
            fatal_rx.try_recv().is_ok(),
            "a failed commit stops the daemon"
        );
        assert!(rx.try_recv().is_err(), "one answer per reply");
    }
}
