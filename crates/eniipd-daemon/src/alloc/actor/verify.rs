//! Whether the pool is the OpenAPI's view. After a restart served from the
//! state files (`first_reconcile` in the options) it is not, until the
//! first reconcile: the pool holds only what was handed out, so nothing
//! new is handed out, planned or given back, and an `audit` waits for
//! that reconcile. Owners keep theirs; releases work.
//!
//! Invariants: once verified, always verified; every audit deferred is
//! handed back exactly once (when the reconcile ran, or at stop); a
//! deferral asks the maintenance thread for the reconcile at once.

use crossbeam_channel::Sender;

use super::Reply;

/// Unverified while `kick` is set.
#[derive(Debug, Default)]
pub(super) struct Verification {
    /// Asks the maintenance thread for the first reconcile now.
    kick: Option<Sender<()>>,
    /// `audit`s asked before the first reconcile.
    audits: Vec<Reply>,
}

impl Verification {
    /// Unverified until the first reconcile, which `kick` asks for early.
    pub(super) fn until_first_reconcile(kick: Sender<()>) -> Verification {
        Verification {
            kick: Some(kick),
            audits: Vec::new(),
        }
    }

    pub(super) fn verified(&self) -> bool {
        self.kick.is_none()
    }

    /// Asks for the first reconcile at once (a waiter needs it).
    pub(super) fn hurry(&self) {
        if let Some(k) = &self.kick {
            let _ = k.try_send(());
        }
    }

    /// Keeps an audit for after the first reconcile, asked for now.
    pub(super) fn defer_audit(&mut self, reply: Reply) {
        self.audits.push(reply);
        self.hurry();
    }

    /// A reconcile ran: if it was the first, the audits it held, to start
    /// now.
    pub(super) fn reconciled(&mut self) -> Option<Vec<Reply>> {
        self.kick.take()?;
        Some(std::mem::take(&mut self.audits))
    }

    /// The audits still held (the allocator stops).
    pub(super) fn drain_audits(&mut self) -> Vec<Reply> {
        std::mem::take(&mut self.audits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audits_wait_for_the_first_reconcile_and_are_handed_back_once() {
        let (kick_tx, kick_rx) = crossbeam_channel::bounded(1);
        let mut v = Verification::until_first_reconcile(kick_tx);
        assert!(!v.verified());
        let (reply, _) = crossbeam_channel::bounded(1);
        v.defer_audit(reply.clone().into());
        v.defer_audit(reply.into());
        assert!(kick_rx.try_recv().is_ok(), "the reconcile is asked for");
        assert_eq!(v.reconciled().map(|a| a.len()), Some(2));
        assert!(v.verified());
        assert!(v.reconciled().is_none(), "only the first");
        assert!(v.drain_audits().is_empty());
        assert!(Verification::default().verified());
    }
}
