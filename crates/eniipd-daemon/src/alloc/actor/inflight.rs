//! The operations in flight: ENI creations and frees running on threads of
//! their own, and the permits that bound them.
//!
//! Invariants:
//! - an ENI slot (`eni_sem`) is held by every managed ENI (in
//!   `eni_permits`) and by every creation in flight, and by nothing else:
//!   a ready creation hands its slot to its ENI, a failed one and a
//!   forgotten ENI give theirs back, so the slots in use never drift from
//!   the ENIs that exist or may exist;
//! - an operation slot (`op_sem`) is held by the thread doing the
//!   operation (it goes with the job), so it is free the moment the thread
//!   ends, whatever the actor does;
//! - an operation ends once: [`InFlight::ready`], [`InFlight::failed`]
//!   and [`InFlight::freed`] remove it, and a late second report finds
//!   nothing.

use std::collections::{BTreeMap, HashMap};

use log::warn;

use eniip_protocol::core::SecurityGroupSet;
use eniip_util::sem::{Permit, Semaphore};

use super::super::mailbox::{OpId, TicketId};

#[derive(Debug)]
enum Op {
    Create {
        vswitch: String,
        init: usize,
        eni: Option<String>,
        tickets: Vec<TicketId>,
        permit: Permit,
        /// The security groups it is created with.
        set: Option<SecurityGroupSet>,
    },
    Free {
        eni: String,
    },
}

/// A creation that ended.
#[derive(Debug)]
pub(super) struct Ended {
    pub(super) vswitch: String,
    /// The ENI, if the cloud had made it before the end.
    pub(super) eni: Option<String>,
    pub(super) tickets: Vec<TicketId>,
    /// The security groups it was created with.
    pub(super) set: Option<SecurityGroupSet>,
}

/// Both slots a creation needs, taken together.
#[derive(Debug)]
pub(super) struct CreateSlots {
    eni: Permit,
    op: Permit,
}

/// A creation in flight, as listed.
#[derive(Debug)]
pub(super) struct Creating<'a> {
    pub(super) vswitch: &'a str,
    pub(super) eni: Option<&'a str>,
    pub(super) tickets: usize,
    pub(super) set: Option<&'a SecurityGroupSet>,
}

/// ENI operations in flight and the slots of ENIs and operations.
#[derive(Debug)]
pub(super) struct InFlight {
    ops: BTreeMap<OpId, Op>,
    eni_permits: HashMap<String, Permit>,
    eni_sem: Semaphore,
    op_sem: Semaphore,
    next_id: OpId,
}

impl InFlight {
    /// `enis` are the managed ENIs already attached: each takes its slot,
    /// over the limit if need be (warned: then no ENI is created).
    pub(super) fn new<'a>(
        eni_sem: Semaphore,
        op_sem: Semaphore,
        enis: impl Iterator<Item = &'a str>,
    ) -> InFlight {
        let mut f = InFlight {
            ops: BTreeMap::new(),
            eni_permits: HashMap::new(),
            eni_sem,
            op_sem,
            next_id: 0,
        };
        for id in enis {
            f.adopt(id);
        }
        if f.eni_sem.used() > f.eni_sem.limit() {
            warn!(
                "{} managed ENIs are attached but the capacity allows {}: no new ENI will be created",
                f.eni_sem.used(),
                f.eni_sem.limit()
            );
        }
        f
    }

    fn id(&mut self) -> OpId {
        self.next_id += 1;
        self.next_id
    }

    /// An ENI found attached (start-up, reconcile) takes a slot, over the
    /// limit if need be: it exists, whatever the capacity says.
    pub(super) fn adopt(&mut self, eni: &str) {
        let p = self
            .eni_sem
            .try_acquire()
            .unwrap_or_else(|| self.eni_sem.acquire_over_limit());
        self.eni_permits.insert(eni.to_string(), p);
    }

    /// An ENI that is gone gives its slot back.
    pub(super) fn forget(&mut self, eni: &str) {
        self.eni_permits.remove(eni);
    }

    /// Operations in flight.
    pub(super) fn len(&self) -> usize {
        self.ops.len()
    }

    /// ENIs that may still be created.
    pub(super) fn eni_slots(&self) -> usize {
        self.eni_sem.available()
    }

    /// Operations that may start now.
    pub(super) fn op_slots(&self) -> usize {
        self.op_sem.available()
    }

    /// Operations running now (threads holding an operation slot,
    /// sweeps included).
    pub(super) fn op_slots_used(&self) -> usize {
        self.op_sem.used()
    }

    /// Both slots of a creation, if both are free.
    pub(super) fn create_slots(&self) -> Option<CreateSlots> {
        match (self.eni_sem.try_acquire(), self.op_sem.try_acquire()) {
            (Some(eni), Some(op)) => Some(CreateSlots { eni, op }),
            _ => None,
        }
    }

    /// A creation starts on `vswitch` for `init` addresses, asked by
    /// `tickets`: its id, and the operation slot for its thread.
    #[cfg(test)]
    pub(super) fn begin_create(
        &mut self,
        slots: CreateSlots,
        vswitch: String,
        init: usize,
        tickets: Vec<TicketId>,
    ) -> (OpId, Permit) {
        self.begin_create_in(slots, vswitch, init, tickets, None)
    }

    /// [`begin_create`](Self::begin_create) with the security groups
    /// `set`.
    pub(super) fn begin_create_in(
        &mut self,
        slots: CreateSlots,
        vswitch: String,
        init: usize,
        tickets: Vec<TicketId>,
        set: Option<SecurityGroupSet>,
    ) -> (OpId, Permit) {
        let op = self.id();
        let create = Op::Create {
            vswitch,
            init,
            eni: None,
            tickets,
            permit: slots.eni,
            set,
        };
        self.ops.insert(op, create);
        (op, slots.op)
    }

    /// A free of `eni` starts, if an operation slot is free: its id and
    /// the slot for its thread.
    pub(super) fn begin_free(&mut self, eni: &str) -> Option<(OpId, Permit)> {
        let permit = self.op_sem.try_acquire()?;
        let op = self.id();
        self.ops.insert(
            op,
            Op::Free {
                eni: eni.to_string(),
            },
        );
        Some((op, permit))
    }

    /// The cloud made creation `op`'s ENI (not ready yet).
    pub(super) fn created(&mut self, op: OpId, eni: String) {
        if let Some(Op::Create { eni: slot, .. }) = self.ops.get_mut(&op) {
            *slot = Some(eni);
        }
    }

    /// Creation `op` ended with `eni` ready: its slot is the ENI's now.
    pub(super) fn ready(&mut self, op: OpId, eni: &str) -> Option<Ended> {
        let (ended, permit) = self.end_create(op)?;
        self.eni_permits.insert(eni.to_string(), permit);
        Some(ended)
    }

    /// Creation `op` failed: its slot is free again.
    pub(super) fn failed(&mut self, op: OpId) -> Option<Ended> {
        self.end_create(op).map(|(ended, _)| ended)
    }

    fn end_create(&mut self, op: OpId) -> Option<(Ended, Permit)> {
        match self.ops.remove(&op)? {
            Op::Create {
                vswitch,
                eni,
                tickets,
                permit,
                set,
                ..
            } => Some((
                Ended {
                    vswitch,
                    eni,
                    tickets,
                    set,
                },
                permit,
            )),
            free @ Op::Free { .. } => {
                self.ops.insert(op, free);
                None
            }
        }
    }

    /// The free of `eni` ended (whatever its outcome).
    pub(super) fn freed(&mut self, eni: &str) {
        self.ops
            .retain(|_, op| !matches!(op, Op::Free { eni: e } if e == eni));
    }

    /// ENIs an operation works on now (created ones not ready yet, and
    /// ones being freed), in operation order.
    pub(super) fn busy_enis(&self) -> Vec<String> {
        self.ops
            .values()
            .filter_map(|op| match op {
                Op::Create { eni, .. } => eni.clone(),
                Op::Free { eni } => Some(eni.clone()),
            })
            .collect()
    }

    /// ENIs being created that the cloud has made, and ENIs being freed.
    pub(super) fn creating_and_freeing(&self) -> (Vec<String>, Vec<String>) {
        let mut creating = Vec::new();
        let mut freeing = Vec::new();
        for op in self.ops.values() {
            match op {
                Op::Create { eni: Some(e), .. } => creating.push(e.clone()),
                Op::Create { eni: None, .. } => {}
                Op::Free { eni } => freeing.push(eni.clone()),
            }
        }
        (creating, freeing)
    }

    /// The creations in flight.
    pub(super) fn creating(&self) -> impl Iterator<Item = Creating<'_>> {
        self.ops.values().filter_map(|op| match op {
            Op::Create {
                vswitch,
                eni,
                tickets,
                set,
                ..
            } => Some(Creating {
                vswitch,
                eni: eni.as_deref(),
                tickets: tickets.len(),
                set: set.as_ref(),
            }),
            Op::Free { .. } => None,
        })
    }

    /// Room the ENIs being created (on `on`, when given) add once ready,
    /// beyond their initial addresses (an ENI holds `ips_per_eni` at most).
    #[cfg(test)]
    pub(super) fn creating_room(&self, on: Option<&str>, ips_per_eni: usize) -> usize {
        self.creating_room_in(on, None, ips_per_eni)
    }

    /// [`creating_room`](Self::creating_room) of the ENIs being created
    /// with the security groups `in_set`, when given.
    pub(super) fn creating_room_in(
        &self,
        on: Option<&str>,
        in_set: Option<&SecurityGroupSet>,
        ips_per_eni: usize,
    ) -> usize {
        self.ops
            .values()
            .map(|op| match op {
                Op::Create {
                    init, vswitch, set, ..
                } if on.is_none_or(|v| v == vswitch)
                    && in_set.is_none_or(|s| set.as_ref() == Some(s)) =>
                {
                    ips_per_eni.saturating_sub(*init)
                }
                Op::Create { .. } | Op::Free { .. } => 0,
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enis(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_creation_holds_a_slot_and_hands_it_to_its_eni_when_ready() {
        let known = enis(&["eni-1"]);
        let mut f = InFlight::new(
            Semaphore::new(3),
            Semaphore::new(2),
            known.iter().map(String::as_str),
        );
        assert_eq!(f.eni_slots(), 2);
        let slots = f.create_slots().unwrap();
        let (op, op_permit) = f.begin_create(slots, "vsw-a".into(), 3, vec![7, 8]);
        assert_eq!((f.eni_slots(), f.op_slots()), (1, 1));
        assert_eq!(f.creating_room(None, 10), 7);
        assert_eq!(f.creating_room(Some("vsw-a"), 10), 7);
        assert_eq!(f.creating_room(Some("vsw-b"), 10), 0, "none on vsw-b");
        f.created(op, "eni-2".into());
        assert_eq!(f.busy_enis(), enis(&["eni-2"]));
        drop(op_permit);
        assert_eq!(f.op_slots(), 2, "the thread's slot ends with the thread");
        let ended = f.ready(op, "eni-2").unwrap();
        assert_eq!(
            (ended.vswitch.as_str(), ended.tickets),
            ("vsw-a", vec![7, 8])
        );
        assert_eq!(f.eni_slots(), 1, "the ENI holds it now");
        assert!(f.ready(op, "eni-2").is_none(), "an operation ends once");
        assert!(f.failed(op).is_none());
        f.forget("eni-2");
        assert_eq!(f.eni_slots(), 2);
    }

    #[test]
    fn a_failed_creation_gives_its_slot_back() {
        let mut f = InFlight::new(
            Semaphore::new(1),
            Semaphore::new(1),
            enis(&[]).iter().map(String::as_str),
        );
        let slots = f.create_slots().unwrap();
        assert!(f.create_slots().is_none(), "no second slot");
        let (op, _p) = f.begin_create(slots, "vsw-a".into(), 1, vec![1]);
        let ended = f.failed(op).unwrap();
        assert_eq!(ended.eni, None);
        assert_eq!(f.eni_slots(), 1);
        assert_eq!(f.len(), 0);
    }

    #[test]
    fn frees_are_listed_and_end_once() {
        let known = enis(&["eni-1", "eni-2"]);
        let mut f = InFlight::new(
            Semaphore::new(1),
            Semaphore::new(1),
            known.iter().map(String::as_str),
        );
        assert_eq!(f.eni_slots(), 0, "over the limit, not refused");
        let (op, permit) = f.begin_free("eni-1").unwrap();
        assert!(f.begin_free("eni-2").is_none(), "one operation slot");
        assert!(f.failed(op).is_none(), "a free is not a creation");
        assert_eq!(f.creating_and_freeing(), (vec![], enis(&["eni-1"])));
        drop(permit);
        f.freed("eni-1");
        assert_eq!(f.len(), 0);
        f.forget("eni-1");
        f.forget("eni-2");
        assert_eq!(f.eni_slots(), 1);
    }
}
