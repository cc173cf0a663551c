//! The demand: clients waiting for an address (waiters, oldest first) and
//! the addresses asked of the cloud for them or for the pool (tickets).
//!
//! Invariants, kept by every method here and checked by [`Demand::check`]
//! in the tests:
//! - every ticket ends exactly once ([`Demand::end_ticket`] removes it; a
//!   second end of the same ticket finds nothing), so an ENI's `pending`
//!   returns to zero after any burst, errors included;
//! - a ticket is bound to at most one waiter and a waiter to at most one
//!   ticket, and the binding is mutual (a cloud error reaches the request
//!   that asked for it);
//! - a waiter that leaves with a ticket hands it to the oldest waiter
//!   without one (or to the pool), so demand is never asked twice;
//! - a ticket is asked on one vswitch, and is bound only to a waiter that
//!   takes an address there (one that asked that vswitch, or none): the
//!   address it brings can serve the waiter it stands for; likewise a
//!   ticket is asked for one security-group set (an ENI of that set),
//!   and is bound only to a waiter of that set.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use log::info;

use eniip_protocol::core::{AllocError, ErrCode, Intent, Owner, SandboxId, SecurityGroupSet};

use super::super::mailbox::TicketId;
use super::Reply;

/// A client's alloc that no idle address could answer yet.
#[derive(Debug)]
pub(super) struct Waiter {
    pub(super) id: u64,
    pub(super) since: Instant,
    pub(super) owner: Owner,
    pub(super) sandbox: Option<SandboxId>,
    pub(super) prefer: Option<IpAddr>,
    /// What it asks beyond an address (the vswitch it must be on).
    pub(super) intent: Intent,
    /// Every request of this owner while it waits (they get one address).
    pub(super) replies: Vec<(Reply, Instant)>,
    pub(super) deadline: Instant,
    ticket: Option<TicketId>,
    /// The security-group set of the ENI its address must be on: what it
    /// asked, else the node's own (`None`: the node has none to match).
    set: Option<SecurityGroupSet>,
}

impl Waiter {
    /// The security-group set its address must come from.
    pub(super) fn set(&self) -> Option<&SecurityGroupSet> {
        self.set.as_ref()
    }

    /// The vswitch it must get its address on, if it asked one.
    pub(super) fn vswitch(&self) -> Option<&str> {
        self.intent.vswitch.as_deref()
    }

    /// Whether an address on `vswitch` can serve it.
    fn fits(&self, vswitch: &str, set: Option<&SecurityGroupSet>) -> bool {
        self.vswitch().is_none_or(|v| v == vswitch) && self.set.as_ref() == set
    }

    /// Answers every request of this owner with `err`; `measured` counts
    /// them in the alloc metrics (a stop or a cancel is not an outcome).
    pub(super) fn fail(self, err: &AllocError, measured: bool) {
        for (r, started) in self.replies {
            if measured {
                crate::metrics::record_alloc(err.code.as_str(), started.elapsed().as_secs_f64());
            }
            let _ = r.send(Err(err.clone()));
        }
    }
}

/// What a waiter's new alloc asks.
#[derive(Debug)]
pub(super) struct Ask {
    pub(super) owner: Owner,
    pub(super) sandbox: Option<SandboxId>,
    pub(super) prefer: Option<IpAddr>,
    pub(super) intent: Intent,
    pub(super) reply: Reply,
    pub(super) started: Instant,
    pub(super) deadline: Instant,
}

#[cfg(test)]
impl Ask {
    /// An alloc of `owner` asking nothing more, due in a minute.
    pub(super) fn plain(owner: &str, reply: impl Into<Reply>) -> Ask {
        Ask {
            owner: Owner::parse(owner).unwrap(),
            sandbox: None,
            prefer: None,
            intent: Intent::default(),
            reply: reply.into(),
            started: Instant::now(),
            deadline: Instant::now() + Duration::from_secs(60),
        }
    }
}

/// What [`Demand::serve`]'s chooser decided for one waiter.
pub(super) enum Pick<T> {
    /// It is served with this: it leaves.
    Served(T),
    /// Nothing for it; look at the next one.
    Skip,
    /// Nothing for anyone: stop looking.
    Stop,
}

/// An address asked of the cloud: on which vswitch, and for whom.
#[derive(Debug)]
struct Ticket {
    /// The waiter it is bound to (none: the pool's).
    waiter: Option<u64>,
    /// The vswitch of the ENI it is asked of.
    vswitch: String,
    /// The security-group set of that ENI.
    set: Option<SecurityGroupSet>,
    /// When the pool asked it for its own top-up (`None`: asked for a
    /// client): a refill's lead time is measured from it.
    pool_since: Option<Instant>,
}

/// Waiters and tickets, with the invariants in the module's doc.
#[derive(Debug, Default)]
pub(super) struct Demand {
    waiters: VecDeque<Waiter>,
    /// Each ticket, with the waiter it is bound to, if any.
    tickets: HashMap<TicketId, Ticket>,
    next_id: u64,
    /// The node's own security-group set: that of a waiter that asked
    /// none, and of a ticket asked without one.
    default_set: Option<SecurityGroupSet>,
}

impl Demand {
    /// No demand; `default_set` is the node's own security-group set.
    pub(super) fn with_default_set(default_set: Option<SecurityGroupSet>) -> Demand {
        Demand {
            default_set,
            ..Demand::default()
        }
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Clients waiting.
    pub(super) fn waiting(&self) -> usize {
        self.waiters.len()
    }

    /// Tickets outstanding (addresses asked of the cloud).
    pub(super) fn pending(&self) -> usize {
        self.tickets.len()
    }

    /// Tickets no waiter is bound to (pool top-up).
    pub(super) fn spare_tickets(&self) -> usize {
        self.tickets.values().filter(|t| t.waiter.is_none()).count()
    }

    /// Tickets no waiter is bound to, asked on ENIs of the set `set`.
    pub(super) fn spare_tickets_in(&self, set: &SecurityGroupSet) -> usize {
        self.tickets
            .values()
            .filter(|t| t.waiter.is_none() && t.set.as_ref() == Some(set))
            .count()
    }

    /// Whether some ticket is asked for a client.
    pub(super) fn any_bound(&self) -> bool {
        self.tickets.values().any(|t| t.waiter.is_some())
    }

    /// What the waiter of `owner` asked, if it waits.
    pub(super) fn intent_of(&self, owner: &Owner) -> Option<&Intent> {
        self.waiters
            .iter()
            .find(|w| &w.owner == owner)
            .map(|w| &w.intent)
    }

    /// Adds `ask`'s reply to the waiter of the same owner (two concurrent
    /// allocs for one owner get one address; a stick time asked is the
    /// newest); gives `ask` back if there is none. The caller has checked
    /// that `ask` asks nothing the waiter contradicts.
    pub(super) fn join(&mut self, ask: Ask) -> Option<Ask> {
        match self.waiters.iter_mut().find(|w| w.owner == ask.owner) {
            Some(w) => {
                w.replies.push((ask.reply, ask.started));
                if ask.sandbox.is_some() {
                    w.sandbox = ask.sandbox;
                }
                if ask.intent.stick_s.is_some() {
                    w.intent.stick_s = ask.intent.stick_s;
                }
                None
            }
            None => Some(ask),
        }
    }

    /// A new waiter, last in line; its id.
    pub(super) fn push(&mut self, ask: Ask, now: Instant) -> u64 {
        let id = self.id();
        self.waiters.push_back(Waiter {
            id,
            since: now,
            owner: ask.owner,
            sandbox: ask.sandbox,
            prefer: ask.prefer,
            replies: vec![(ask.reply, ask.started)],
            deadline: ask.deadline,
            ticket: None,
            set: ask
                .intent
                .security_groups
                .clone()
                .or_else(|| self.default_set.clone()),
            intent: ask.intent,
        });
        id
    }

    fn remove_at(&mut self, pos: usize) -> Option<Waiter> {
        let w = self.waiters.remove(pos)?;
        if let Some(t) = w.ticket {
            self.rebind(t);
        }
        Some(w)
    }

    /// Gives a ticket whose waiter left to the oldest waiter that has none
    /// and takes an address on its vswitch (or to the pool).
    fn rebind(&mut self, t: TicketId) {
        let Some(ticket) = self.tickets.get_mut(&t) else {
            return;
        };
        ticket.waiter = None;
        let vswitch = ticket.vswitch.as_str();
        if let Some(w) = self
            .waiters
            .iter_mut()
            .find(|w| w.ticket.is_none() && w.fits(vswitch, ticket.set.as_ref()))
        {
            w.ticket = Some(t);
            ticket.waiter = Some(w.id);
        }
    }

    /// Takes the waiter `id` out of line.
    pub(super) fn take(&mut self, id: u64) -> Option<Waiter> {
        let pos = self.waiters.iter().position(|w| w.id == id)?;
        self.remove_at(pos)
    }

    /// Takes the waiter of `owner` out of line.
    pub(super) fn take_owner(
        &mut self,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
    ) -> Option<Waiter> {
        let pos = self.waiters.iter().position(|w| {
            &w.owner == owner && sandbox.is_none_or(|s| w.sandbox.as_ref() == Some(s))
        })?;
        self.remove_at(pos)
    }

    /// Takes one waiter whose deadline has passed at `now`.
    pub(super) fn take_expired(&mut self, now: Instant) -> Option<Waiter> {
        let pos = self.waiters.iter().position(|w| w.deadline <= now)?;
        self.remove_at(pos)
    }

    /// Fails the waiter `id`, if it still waits, with `err`.
    pub(super) fn fail(&mut self, id: u64, err: &AllocError) {
        if let Some(w) = self.take(id) {
            info!("alloc for {} failed: {err}", w.owner);
            w.fail(err, true);
        }
    }

    /// Fails every waiter whose deadline has passed at `now` (`timeout`
    /// after it asked) with `timeout`.
    pub(super) fn expire(&mut self, now: Instant, timeout: Duration) {
        while let Some(w) = self.take_expired(now) {
            info!("alloc for {} timed out after {timeout:?}", w.owner);
            let err = AllocError::new(
                ErrCode::Timeout,
                format!("no address within {} s", timeout.as_secs()),
            );
            w.fail(&err, true);
        }
    }

    /// Every waiter, out of line (the allocator stops).
    pub(super) fn drain(&mut self) -> Vec<Waiter> {
        let out: Vec<Waiter> = self.waiters.drain(..).collect();
        for ticket in self.tickets.values_mut() {
            ticket.waiter = None;
        }
        out
    }

    /// Offers each waiter, oldest first, to `choose`; those it serves
    /// leave, with what served them.
    pub(super) fn serve<T>(
        &mut self,
        mut choose: impl FnMut(&Waiter) -> Pick<T>,
    ) -> Vec<(T, Waiter)> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.waiters.len() {
            match choose(&self.waiters[i]) {
                Pick::Served(t) => {
                    if let Some(w) = self.remove_at(i) {
                        out.push((t, w));
                    }
                }
                Pick::Skip => i += 1,
                Pick::Stop => break,
            }
        }
        out
    }

    /// A new ticket asked on `vswitch`, bound to the waiter `waiter` if
    /// given and it takes an address there (a pool ticket otherwise).
    #[cfg(test)]
    pub(super) fn new_ticket(&mut self, waiter: Option<u64>, vswitch: &str) -> TicketId {
        let set = self.default_set.clone();
        self.new_ticket_in(waiter, vswitch, set)
    }

    /// [`new_ticket`](Self::new_ticket) asked on an ENI of the
    /// security-group set `set`.
    pub(super) fn new_ticket_in(
        &mut self,
        waiter: Option<u64>,
        vswitch: &str,
        set: Option<SecurityGroupSet>,
    ) -> TicketId {
        let t = self.id();
        let bound = waiter.and_then(|wid| {
            self.waiters
                .iter_mut()
                .find(|w| w.id == wid && w.fits(vswitch, set.as_ref()))
        });
        let slot = match bound {
            Some(w) => {
                if let Some(old) = w.ticket.replace(t) {
                    // Never two tickets for one waiter: the old one is
                    // the pool's now.
                    if let Some(old) = self.tickets.get_mut(&old) {
                        old.waiter = None;
                    }
                }
                Some(w.id)
            }
            None => None,
        };
        self.tickets.insert(
            t,
            Ticket {
                waiter: slot,
                vswitch: vswitch.to_string(),
                set,
                pool_since: slot.is_none().then(Instant::now),
            },
        );
        t
    }

    /// How long `tickets`, a batch the pool asked for its own top-up,
    /// have been outstanding (since the oldest was asked); `None` unless
    /// every one of them is outstanding and was the pool's.
    pub(super) fn pool_asked_for(&self, tickets: &[TicketId], now: Instant) -> Option<Duration> {
        let since: Option<Vec<Instant>> = tickets
            .iter()
            .map(|t| self.tickets.get(t)?.pool_since)
            .collect();
        let oldest = since?.into_iter().min()?;
        Some(now.saturating_duration_since(oldest))
    }

    /// Ends ticket `t`: `None` if it had already ended (or never was),
    /// else the waiter it was bound to, which is free to be planned again.
    pub(super) fn end_ticket(&mut self, t: TicketId) -> Option<Option<u64>> {
        let wid = self.tickets.remove(&t)?.waiter;
        if let Some(wid) = wid {
            if let Some(w) = self.waiters.iter_mut().find(|w| w.id == wid) {
                w.ticket = None;
            }
        }
        Some(wid)
    }

    /// The waiter ticket `t` is bound to, while it is outstanding.
    pub(super) fn ticket_waiter(&self, t: TicketId) -> Option<Option<u64>> {
        self.tickets.get(&t).map(|t| t.waiter)
    }

    /// Waiters without a ticket adopt pool tickets that can serve them,
    /// oldest first.
    pub(super) fn bind_spare(&mut self) {
        let mut spare: Vec<(TicketId, String, Option<SecurityGroupSet>)> = self
            .tickets
            .iter()
            .filter(|(_, t)| t.waiter.is_none())
            .map(|(id, t)| (*id, t.vswitch.clone(), t.set.clone()))
            .collect();
        spare.sort();
        for (t, vswitch, set) in spare {
            let Some(w) = self
                .waiters
                .iter_mut()
                .find(|w| w.ticket.is_none() && w.fits(&vswitch, set.as_ref()))
            else {
                continue;
            };
            w.ticket = Some(t);
            if let Some(ticket) = self.tickets.get_mut(&t) {
                ticket.waiter = Some(w.id);
            }
        }
    }

    fn unticketed(&self) -> impl DoubleEndedIterator<Item = &Waiter> {
        self.waiters.iter().filter(|w| w.ticket.is_none())
    }

    /// Ids of the waiters nothing is asked for yet that asked `vswitch`
    /// (`None`: that asked none), oldest first.
    pub(super) fn unplanned_on(&self, vswitch: Option<&str>) -> Vec<u64> {
        self.unticketed()
            .filter(|w| w.vswitch() == vswitch && w.set == self.default_set)
            .map(|w| w.id)
            .collect()
    }

    /// The vswitches that waiters nothing is asked for yet asked, in the
    /// order of their oldest waiter.
    pub(super) fn unplanned_vswitches(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let own = self.unticketed().filter(|w| w.set == self.default_set);
        for v in own.filter_map(Waiter::vswitch) {
            if !out.iter().any(|o| o == v) {
                out.push(v.to_string());
            }
        }
        out
    }

    /// Ids of the newest `n` waiters nothing is asked for that asked
    /// `vswitch` (`None`: that asked none), newest first.
    #[cfg(test)]
    pub(super) fn newest_unplanned_on(&self, vswitch: Option<&str>, n: usize) -> Vec<u64> {
        self.newest_unplanned_in(vswitch, self.default_set.as_ref(), n)
    }

    /// [`newest_unplanned_on`](Self::newest_unplanned_on) of the waiters
    /// of the security-group set `set`.
    pub(super) fn newest_unplanned_in(
        &self,
        vswitch: Option<&str>,
        set: Option<&SecurityGroupSet>,
        n: usize,
    ) -> Vec<u64> {
        self.unticketed()
            .rev()
            .filter(|w| w.vswitch() == vswitch && w.set.as_ref() == set)
            .take(n)
            .map(|w| w.id)
            .collect()
    }

    /// The security-group sets other than the node's own that waiters
    /// nothing is asked for yet asked, each with the vswitch asked (if
    /// any), in the order of their oldest waiter.
    pub(super) fn unplanned_sets(&self) -> Vec<(Option<String>, SecurityGroupSet)> {
        let mut out: Vec<(Option<String>, SecurityGroupSet)> = Vec::new();
        for w in self.unticketed().filter(|w| w.set != self.default_set) {
            let Some(set) = &w.set else { continue };
            let key = (w.vswitch().map(String::from), set.clone());
            if !out.contains(&key) {
                out.push(key);
            }
        }
        out
    }

    /// Ids of the waiters nothing is asked for yet that asked `vswitch`
    /// (`None`: none) and the security-group set `set`, oldest first.
    pub(super) fn unplanned_in(
        &self,
        vswitch: Option<&str>,
        set: Option<&SecurityGroupSet>,
    ) -> Vec<u64> {
        self.unticketed()
            .filter(|w| w.vswitch() == vswitch && w.set.as_ref() == set)
            .map(|w| w.id)
            .collect()
    }

    /// The security-group sets the waiters wait for.
    pub(super) fn waiting_sets(&self) -> impl Iterator<Item = SecurityGroupSet> + '_ {
        self.waiters.iter().filter_map(|w| w.set.clone())
    }

    /// When the newest waiter nothing is asked for arrived.
    pub(super) fn last_unplanned_arrival(&self) -> Option<Instant> {
        self.unticketed().map(|w| w.since).max()
    }

    /// Since when the oldest of `ids` (waiters) waits.
    pub(super) fn oldest_of(&self, ids: impl IntoIterator<Item = u64>) -> Option<Instant> {
        let ids: Vec<u64> = ids.into_iter().collect();
        self.waiters
            .iter()
            .filter(|w| ids.contains(&w.id))
            .map(|w| w.since)
            .min()
    }

    /// Since when the oldest waiter nothing is asked for waits.
    pub(super) fn oldest_unplanned(&self) -> Option<Instant> {
        self.unticketed().map(|w| w.since).min()
    }

    /// When the demand needs the actor next: a deadline, or an unplanned
    /// waiter's aggregation window closing (`replan` after it, for one
    /// that waits for a slot another thread frees without telling).
    pub(super) fn next_wakeup(
        &self,
        now: Instant,
        window: Duration,
        replan: Duration,
    ) -> Option<Instant> {
        let mut wake: Option<Instant> = None;
        for w in &self.waiters {
            let mut at = w.deadline;
            if w.ticket.is_none() {
                let gathered = w.since + window;
                at = at.min(if gathered > now {
                    gathered
                } else {
                    now + replan
                });
            }
            wake = Some(wake.map_or(at, |x| x.min(at)));
        }
        wake
    }

    /// The invariants of the module's doc, for tests.
    #[cfg(test)]
    pub(super) fn check(&self) -> Result<(), String> {
        for w in &self.waiters {
            if let Some(t) = w.ticket {
                if self.ticket_waiter(t) != Some(Some(w.id)) {
                    return Err(format!("waiter {} holds ticket {t} not bound to it", w.id));
                }
            }
        }
        for (t, ticket) in &self.tickets {
            if let Some(wid) = ticket.waiter {
                let Some(w) = self.waiters.iter().find(|w| w.id == wid) else {
                    return Err(format!("ticket {t} bound to waiter {wid}, who left"));
                };
                if w.ticket != Some(*t) {
                    return Err(format!("ticket {t} bound to waiter {wid}, who has another"));
                }
                if !w.fits(&ticket.vswitch, ticket.set.as_ref()) {
                    return Err(format!(
                        "ticket {t} on {} bound to waiter {wid}, who asked {:?}",
                        ticket.vswitch,
                        w.vswitch()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Whether waiter `id` has a ticket, for tests.
    #[cfg(test)]
    pub(super) fn ticket_of(&self, id: u64) -> Option<TicketId> {
        self.waiters.iter().find(|w| w.id == id)?.ticket
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(owner: &str) -> Ask {
        Ask::plain(owner, crossbeam_channel::bounded(1).0)
    }

    #[test]
    fn a_refill_is_timed_only_for_the_pools_own_batches() {
        let mut d = Demand::default();
        let w = d.push(ask("ns/a"), Instant::now());
        let pool = [d.new_ticket(None, "vsw-1"), d.new_ticket(None, "vsw-1")];
        let client = d.new_ticket(Some(w), "vsw-1");
        let later = Instant::now() + Duration::from_millis(250);
        let lead = d.pool_asked_for(&pool, later).unwrap();
        assert!(lead >= Duration::from_millis(250), "{lead:?}");
        // A batch with a client's ticket in it gathered for the client.
        assert_eq!(d.pool_asked_for(&[pool[0], client], later), None);
        // A pool ticket a waiter adopted was still asked by the pool.
        d.end_ticket(client);
        d.bind_spare();
        assert!(d.pool_asked_for(&pool, later).is_some());
        // Ended (or unknown) tickets are not timed.
        d.end_ticket(pool[0]);
        assert_eq!(d.pool_asked_for(&pool, later), None);
    }

    #[test]
    fn every_ticket_ends_exactly_once() {
        let mut d = Demand::default();
        let w = d.push(ask("o/1"), Instant::now());
        let t = d.new_ticket(Some(w), "vsw-a");
        let pool = d.new_ticket(None, "vsw-a");
        assert_eq!(d.pending(), 2);
        assert_eq!(d.end_ticket(t), Some(Some(w)));
        assert_eq!(d.end_ticket(t), None, "a second end finds nothing");
        assert_eq!(d.end_ticket(pool), Some(None));
        assert_eq!(d.pending(), 0);
        assert_eq!(d.ticket_of(w), None, "its waiter can be planned again");
        d.check().unwrap();
    }

    #[test]
    fn a_leaving_waiter_hands_its_ticket_to_the_oldest_without_one() {
        let mut d = Demand::default();
        let a = d.push(ask("o/a"), Instant::now());
        let b = d.push(ask("o/b"), Instant::now());
        let c = d.push(ask("o/c"), Instant::now());
        let t = d.new_ticket(Some(a), "vsw-a");
        let tc = d.new_ticket(Some(c), "vsw-a");
        assert!(d.take(a).is_some());
        assert_eq!(d.ticket_of(b), Some(t), "b inherits a's ticket");
        assert_eq!(d.ticket_waiter(t), Some(Some(b)));
        assert!(d.take_owner(&Owner::parse("o/b").unwrap(), None).is_some());
        assert!(d.take(c).is_some());
        assert_eq!(d.ticket_waiter(t), Some(None), "nobody left: the pool's");
        assert_eq!(d.ticket_waiter(tc), Some(None));
        assert_eq!(d.spare_tickets(), 2);
        d.check().unwrap();
    }

    #[test]
    fn spare_tickets_go_to_the_oldest_unplanned_waiters() {
        let mut d = Demand::default();
        let t = d.new_ticket(None, "vsw-a");
        let a = d.push(ask("o/a"), Instant::now());
        let b = d.push(ask("o/b"), Instant::now());
        d.bind_spare();
        assert_eq!(d.ticket_of(a), Some(t));
        assert_eq!(d.unplanned_on(None), vec![b]);
        assert_eq!(d.newest_unplanned_on(None, 5), vec![b]);
        assert!(d.any_bound());
        // A ticket for a waiter that has one frees the old one.
        let t2 = d.new_ticket(Some(a), "vsw-a");
        assert_eq!(d.ticket_waiter(t), Some(None));
        assert_eq!(d.ticket_of(a), Some(t2));
        d.check().unwrap();
    }

    fn ask_on(owner: &str, vswitch: &str) -> Ask {
        let mut a = ask(owner);
        a.intent.vswitch = Some(vswitch.into());
        a
    }

    #[test]
    fn a_ticket_is_bound_only_to_a_waiter_its_address_can_serve() {
        let mut d = Demand::default();
        let now = Instant::now();
        let b = d.push(ask_on("o/b", "vsw-b"), now);
        let any = d.push(ask("o/any"), now);
        let a = d.push(ask_on("o/a", "vsw-a"), now);
        assert_eq!(d.unplanned_vswitches(), vec!["vsw-b", "vsw-a"]);
        assert_eq!(d.unplanned_on(Some("vsw-b")), vec![b]);
        assert_eq!(d.unplanned_on(None), vec![any]);
        // A ticket on vsw-a for b is the pool's; b stays unplanned.
        let ta = d.new_ticket(Some(b), "vsw-a");
        assert_eq!(d.ticket_waiter(ta), Some(None));
        assert_eq!(d.ticket_of(b), None);
        // Spare tickets go to the oldest waiter they fit: `any` (b asked
        // vsw-b), then a.
        let ta2 = d.new_ticket(None, "vsw-a");
        d.bind_spare();
        assert_eq!(d.ticket_of(b), None);
        assert_eq!(d.ticket_of(any), Some(ta));
        assert_eq!(d.ticket_of(a), Some(ta2));
        d.check().unwrap();
        // `any` leaves: its vsw-a ticket passes over b to the pool.
        assert!(d.take(any).is_some());
        assert_eq!(d.ticket_waiter(ta), Some(None));
        let tb = d.new_ticket(Some(b), "vsw-b");
        assert_eq!(d.ticket_of(b), Some(tb));
        assert_eq!(d.newest_unplanned_on(Some("vsw-b"), 3), Vec::<u64>::new());
        d.check().unwrap();
        // Asks of one owner join; the newest stick time counts.
        let mut again = ask_on("o/b", "vsw-b");
        again.intent.stick_s = Some(60);
        assert!(d.join(again).is_none());
        assert_eq!(
            d.intent_of(&Owner::parse("o/b").unwrap())
                .and_then(|i| i.stick_s),
            Some(60)
        );
    }

    #[test]
    fn one_owner_waits_once_and_expired_waiters_leave() {
        let mut d = Demand::default();
        let now = Instant::now();
        let w = d.push(ask("o/1"), now);
        assert!(d.join(ask("o/1")).is_none());
        assert!(d.join(ask("o/2")).is_some());
        assert_eq!(d.waiting(), 1);
        assert!(d.take_expired(now).is_none());
        let gone = d.take_expired(now + Duration::from_secs(61)).unwrap();
        assert_eq!((gone.id, gone.replies.len()), (w, 2));
        assert_eq!(d.waiting(), 0);
    }

    #[test]
    fn failed_and_expired_waiters_are_answered_once_each() {
        let mut d = Demand::default();
        let now = Instant::now();
        let (tx, rx) = crossbeam_channel::bounded(4);
        let a = d.push(Ask::plain("o/a", tx.clone()), now);
        assert!(d.join(Ask::plain("o/a", tx.clone())).is_none());
        let mut late = Ask::plain("o/b", tx);
        late.deadline = now + Duration::from_secs(1);
        d.push(late, now);
        d.fail(a, &AllocError::bare(ErrCode::Exhausted));
        d.fail(a, &AllocError::bare(ErrCode::Exhausted));
        for _ in 0..2 {
            assert_eq!(rx.try_recv().unwrap().unwrap_err().code, ErrCode::Exhausted);
        }
        assert!(rx.try_recv().is_err(), "a second fail answers nobody");
        d.expire(now, Duration::from_secs(1));
        assert!(rx.try_recv().is_err(), "not yet due");
        d.expire(now + Duration::from_secs(1), Duration::from_secs(1));
        let e = rx.try_recv().unwrap().unwrap_err();
        assert_eq!(e.code, ErrCode::Timeout);
        assert!(e.to_string().contains("within 1 s"), "{e}");
        assert_eq!(d.waiting(), 0);
        d.check().unwrap();
    }

    #[test]
    fn serve_takes_what_is_chosen_and_stops_when_told() {
        let mut d = Demand::default();
        for o in ["o/a", "o/b", "o/c"] {
            d.push(ask(o), Instant::now());
        }
        let served = d.serve(|w| match w.owner.as_str() {
            "o/a" => Pick::Served(1),
            "o/b" => Pick::Skip,
            _ => Pick::Stop,
        });
        assert_eq!(served.len(), 1);
        assert_eq!(served[0].1.owner.as_str(), "o/a");
        assert_eq!(d.waiting(), 2);
        let t = d.new_ticket(d.unplanned_on(None).first().copied(), "vsw-a");
        assert_eq!(d.drain().len(), 2);
        assert_eq!(d.ticket_waiter(t), Some(None));
        d.check().unwrap();
    }

    #[test]
    fn the_demand_wakes_at_deadlines_and_closing_windows() {
        let mut d = Demand::default();
        let now = Instant::now();
        let window = Duration::from_millis(50);
        let replan = Duration::from_millis(100);
        assert_eq!(d.next_wakeup(now, window, replan), None);
        let w = d.push(ask("o/a"), now);
        assert_eq!(d.next_wakeup(now, window, replan), Some(now + window));
        let later = now + Duration::from_secs(1);
        assert_eq!(d.next_wakeup(later, window, replan), Some(later + replan));
        d.new_ticket(Some(w), "vsw-a");
        let deadline = d.next_wakeup(later, window, replan).unwrap();
        assert!(
            deadline > later + Duration::from_secs(50),
            "only its deadline"
        );
    }
}
