//! Client requests that change allocations: `alloc`, `release`, `gc`, the
//! reaper's release, and the reads that run on threads of their own
//! (`eni` from metadata, `audit`). Waiters are served here too.
//!
//! [`Clients`] borrows only the parts a client request may touch: it
//! hands out and takes back addresses of the pool, queues and answers
//! waiters, and has its answers made durable; it never asks the cloud for
//! addresses (planning does) and never starts an ENI operation.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use log::{debug, info};

use crate::pool::choose::pick_in_set;
use crate::pool::{PoolState, ReleaseOutcome};
use crate::store::Record;
use eniip_protocol::core::{
    AllocError, Allocation, Answer, Attachment, Collected, EniInfo, ErrCode, Generation, Owner,
    SandboxId,
};
use eniip_util::time::unix_ms;

use super::super::capacity::Capacity;
use super::super::mailbox::Teardown;
use super::super::sg_sets;
use super::super::AllocatorOptions;
use super::demand::{Ask, Demand, Pick};
use super::durable::Durable;
use super::intent::{self, Has};
use super::lookups::{self, Local, Lookups};
use super::threads::Threads;
use super::verify::Verification;
use super::vswstate::VswState;
use super::Reply;

/// What one release did.
#[derive(Debug, Clone, Copy)]
enum Released {
    /// Gave this address back.
    Ip(IpAddr),
    /// The owner held nothing for that sandbox.
    Nothing,
    /// The owner's allocation is a newer one than the generation named.
    Stale,
}

/// The parts a client request touches.
pub(super) struct Clients<'a> {
    pub(super) opts: &'a Arc<AllocatorOptions>,
    pub(super) cap: &'a Capacity,
    pub(super) pool: &'a mut PoolState,
    pub(super) demand: &'a mut Demand,
    pub(super) durable: &'a Durable,
    pub(super) verification: &'a mut Verification,
    pub(super) lookups: &'a Lookups,
    pub(super) threads: &'a mut Threads,
    pub(super) vsw: &'a VswState,
    /// Brought forward when a release leaves the pool too big.
    pub(super) next_maintenance: &'a mut Instant,
    pub(super) stopping: bool,
}

impl Clients<'_> {
    /// An `alloc`: the owner's address again, else an idle one, else a
    /// place in line; every answer under a new generation. What it asks
    /// beyond an address is checked first ([`intent::refusal`]): a refused
    /// `alloc` changes nothing. `attach` is noted for the owner.
    pub(super) fn alloc(&mut self, ask: Ask, attach: Option<Attachment>) {
        if self.stopping {
            let _ = ask.reply.send(Err(AllocError::shutting_down()));
            return;
        }
        self.pool.settle(unix_ms());
        if let Some(why) = self.refusal(&ask) {
            debug!("alloc for {} refused: {why}", ask.owner);
            let _ = ask.reply.send(Err(AllocError::bad(why)));
            return;
        }
        self.pool
            .note_attachment(&ask.owner, ask.sandbox.as_ref(), attach);
        if self.pool.allocation(&ask.owner).is_some() {
            // Idempotent: the same address again (a new sandbox moves it,
            // a stick time asked is the newest), under a new generation:
            // what the releases of earlier answers name (a DEL queued
            // before this ADD of the same sandbox) no longer touches it.
            // Its record is written again and the answer sent once it is
            // durable (and with it the original allocation).
            self.pool.move_sandbox(&ask.owner, ask.sandbox.as_ref());
            if let Some(s) = ask.intent.stick_s {
                self.pool.restick(&ask.owner, s);
            }
            let renewed = self.pool.renew(&ask.owner);
            let records: Vec<Record> = renewed.iter().map(Record::alloc).collect();
            let found = self.pool.allocation_with_eni(&ask.owner);
            self.answer_allocation(records, found, vec![(ask.reply, ask.started)]);
            return;
        }
        // Two concurrent allocs for one owner get one address.
        let Some(ask) = self.demand.join(ask) else {
            return;
        };
        if !self.verification.verified() {
            // Nothing new before the OpenAPI has said what is ours: this
            // waiter is served once the first reconcile has run (asked
            // for now) or fails at its deadline.
            self.demand.push(ask, Instant::now());
            self.verification.hurry();
            return;
        }
        let own = self.opts.default_set();
        let set = ask.intent.security_groups.as_ref().or(own.as_ref());
        match pick_in_set(
            self.pool,
            &ask.owner,
            ask.prefer,
            ask.intent.vswitch.as_deref(),
            set,
        ) {
            Some(v4) => {
                let taken =
                    self.pool
                        .take(v4, &ask.owner, ask.sandbox.as_ref(), unix_ms(), &ask.intent);
                self.answer_taken(v4, &ask.owner, taken, vec![(ask.reply, ask.started)]);
            }
            None => {
                self.demand.push(ask, Instant::now());
            }
        }
    }

    /// Why `ask` is refused, if it is (see [`intent::refusal`]).
    fn refusal(&self, ask: &Ask) -> Option<String> {
        if ask.intent.is_empty() {
            return None;
        }
        let held = self.pool.allocation_with_eni(&ask.owner);
        let held_set = held
            .as_ref()
            .map(|(a, _)| a.intent.security_groups.as_ref());
        let waiting_set = self
            .demand
            .intent_of(&ask.owner)
            .map(|w| w.security_groups.as_ref());
        if let Some(why) = sg_sets::refusal(
            &ask.owner,
            &ask.intent,
            self.opts.sg_policy.allowed.as_deref(),
            held_set.or(waiting_set),
        ) {
            return Some(why);
        }
        let has = match (&held, self.demand.intent_of(&ask.owner)) {
            (Some((a, eni)), _) => Has::Held(a, &eni.vswitch),
            (None, Some(w)) => Has::Waiting(w),
            (None, None) => Has::Nothing,
        };
        intent::refusal(
            ask.owner.as_str(),
            &ask.intent,
            &self.opts.vswitches,
            self.opts.max_ip_stick_time,
            has,
        )
    }

    /// Commits an address just taken from the pool for `owner` and
    /// answers once it is durable (nothing was taken: no answer).
    fn answer_taken(
        &mut self,
        v4: Ipv4Addr,
        owner: &Owner,
        taken: Option<Allocation>,
        replies: Vec<(Reply, Instant)>,
    ) {
        let Some(a) = taken else {
            return;
        };
        debug!("{owner} gets {v4}");
        let records = vec![Record::alloc(&a)];
        let found = self.pool.eni_info(&a.eni).map(|eni| (a, eni));
        self.answer_allocation(records, found, replies);
    }

    /// Answers an allocation once `records` are durable; `found` is the
    /// allocation and its ENI.
    fn answer_allocation(
        &self,
        records: Vec<Record>,
        found: Option<(Allocation, EniInfo)>,
        replies: Vec<(Reply, Instant)>,
    ) {
        match found {
            Some((a, eni)) => self.durable.allocated(records, a, eni, replies),
            None => {
                let err = AllocError::new(ErrCode::Internal, "allocation on an unknown ENI");
                for (r, _) in replies {
                    let _ = r.send(Err(err.clone()));
                }
            }
        }
    }

    /// A `release`: answered once it is durable (a release of an owner
    /// still waiting for the same sandbox, naming no generation, cancels
    /// its alloc).
    pub(super) fn release(
        &mut self,
        owner: Owner,
        sandbox: Option<SandboxId>,
        gen: Option<Generation>,
        reply: Reply,
    ) {
        if self.stopping {
            let _ = reply.send(Err(AllocError::shutting_down()));
            return;
        }
        let (records, released) = self.release_one(&owner, sandbox.as_ref(), gen);
        self.durable.then(records, reply, move || {
            crate::metrics::record_release(if matches!(released, Released::Ip(_)) {
                "ok"
            } else {
                "none"
            });
            match released {
                Released::Ip(ip) => Answer::Released(Some(ip)),
                Released::Nothing => Answer::Released(None),
                Released::Stale => Answer::Stale,
            }
        });
    }

    /// `gc`: releases every allocation whose owner starts with `prefix`
    /// unless its owner or its sandbox is in `keep`, in one commit.
    pub(super) fn gc(&mut self, prefix: &str, keep: &[String], reply: Reply) {
        if self.stopping {
            let _ = reply.send(Err(AllocError::shutting_down()));
            return;
        }
        let mut records = Vec::new();
        let mut collected = Vec::new();
        for (owner, sandbox) in self.pool.owners().collectable(prefix, keep) {
            let veth = self.pool.attachment(&owner).map(|a| a.veth.clone());
            let (mut r, released) = self.release_one(&owner, sandbox.as_ref(), None);
            records.append(&mut r);
            if let Released::Ip(ip) = released {
                info!("gc: released {ip} of {owner}");
                collected.push(Collected {
                    ip,
                    owner,
                    sandbox,
                    veth,
                });
            }
        }
        self.durable.then(records, reply, move || {
            for _ in &collected {
                crate::metrics::record_release("ok");
            }
            Answer::Collected(collected)
        });
    }

    /// The sandbox reaper found `owner`'s sandbox gone: if the address is
    /// still held for that sandbox and the very attachment the reaper
    /// `seen` (a new ADD in the meantime, even into a namespace of the
    /// same identity, makes a new one and keeps everything), `teardown`
    /// removes its datapath and the address is released. Both happen
    /// here, between this check and the next message, so no ADD can come
    /// in between and lose a host end of the same name.
    pub(super) fn reap(
        &mut self,
        owner: &Owner,
        sandbox: Option<SandboxId>,
        seen: &Attachment,
        teardown: Option<Teardown>,
        reply: Reply,
    ) {
        if self.stopping {
            let _ = reply.send(Err(AllocError::shutting_down()));
            return;
        }
        let same = self
            .pool
            .attached()
            .iter()
            .any(|a| &a.owner == owner && a.sandbox == sandbox && &a.attach == seen);
        if !same {
            let _ = reply.send(Ok(Answer::Released(None)));
            return;
        }
        if let Some(Teardown(t)) = teardown {
            t();
        }
        let (records, released) = self.release_one(owner, sandbox.as_ref(), None);
        self.durable.then(records, reply, move || {
            Answer::Released(match released {
                Released::Ip(ip) => Some(ip),
                Released::Nothing | Released::Stale => None,
            })
        });
    }

    /// Releases in the pool; the records that make it durable and what
    /// was given back.
    fn release_one(
        &mut self,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
        gen: Option<Generation>,
    ) -> (Vec<Record>, Released) {
        let outcome = self
            .pool
            .release(owner, sandbox, gen, unix_ms(), &self.opts.hold_times());
        match outcome {
            ReleaseOutcome::NotHeld => {
                // A release while the owner's alloc still waits: the client
                // gave up, so the alloc is cancelled rather than completed
                // for nobody. Only its own: a release naming a generation
                // undoes an allocation that was answered, never one still
                // waiting, and one naming another sandbox is an older
                // sandbox's late release.
                if gen.is_none() {
                    if let Some(w) = self.demand.take_owner(owner, sandbox) {
                        let err = AllocError::new(
                            ErrCode::Timeout,
                            "cancelled by a release of the same owner",
                        );
                        w.fail(&err, false);
                    }
                }
                (Vec::new(), Released::Nothing)
            }
            ReleaseOutcome::SandboxMismatch => (Vec::new(), Released::Nothing),
            ReleaseOutcome::Stale => (Vec::new(), Released::Stale),
            ReleaseOutcome::Released {
                v4,
                hold,
                superseded,
                ..
            } => {
                debug!("{owner} released {v4}");
                if self.pool.idle_count() > self.cap.max_idle {
                    let soon =
                        Instant::now() + self.opts.pool_check_interval.min(Duration::from_secs(10));
                    *self.next_maintenance = (*self.next_maintenance).min(soon);
                }
                let mut records = vec![Record::release(owner, hold.as_ref())];
                records.extend(superseded.map(|ipv4| Record::ClearHold { ipv4 }));
                (records, Released::Ip(IpAddr::V4(v4)))
            }
        }
    }

    /// `eni ID`: from the pool, or from metadata on a thread of its own.
    pub(super) fn eni(&mut self, id: &str, reply: Reply) {
        let local = lookups::local(self.pool, self.opts.dual, id, |v| self.vsw.v6(v).cloned());
        match local {
            Local::Answer(a) => {
                let _ = reply.send(a);
            }
            Local::NeedsMetadata(_) if self.stopping => {
                let _ = reply.send(Err(AllocError::shutting_down()));
            }
            Local::NeedsMetadata(info) => self.lookups.start(self.threads, info, reply),
        }
    }

    /// `audit` reads the cloud, which the actor never does itself: a
    /// thread of its own compares and answers. Before the first reconcile
    /// of a restart the pool is not settled (it holds only what was handed
    /// out): the audit waits for that reconcile, asked for now.
    pub(super) fn audit(&mut self, reply: Reply) {
        if self.stopping {
            let _ = reply.send(Err(AllocError::shutting_down()));
            return;
        }
        if !self.verification.verified() {
            self.verification.defer_audit(reply);
            return;
        }
        self.threads.audit(self.opts, reply);
    }

    /// Hands idle addresses to waiters, oldest first: first to those that
    /// asked a vswitch (only its addresses serve them), then to all.
    pub(super) fn serve_waiters(&mut self) {
        if !self.verification.verified() {
            return;
        }
        let now_ms = unix_ms();
        let pool = &mut self.pool;
        let mut served = Vec::new();
        for pinned_only in [true, false] {
            served.extend(self.demand.serve(|w| {
                if pinned_only && w.vswitch().is_none() {
                    return Pick::Skip;
                }
                match pick_in_set(pool, &w.owner, w.prefer, w.vswitch(), w.set()) {
                    Some(v4) => Pick::Served((
                        v4,
                        pool.take(v4, &w.owner, w.sandbox.as_ref(), now_ms, &w.intent),
                    )),
                    None if pool.idle_count() == 0 => Pick::Stop,
                    None => Pick::Skip,
                }
            }));
        }
        for ((v4, a), w) in served {
            self.answer_taken(v4, &w.owner, a, w.replies);
        }
    }
}
