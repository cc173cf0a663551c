//! Placement, planning's deciding part: where the addresses for the
//! demand waiting right now come from. Pure: the actor gathers the
//! inputs, this decides, the actor acts.
//!
//! The seed submits one request at a time and creates an ENI whenever every
//! ENI's backlog is busy, so a burst creates ENIs it does not need and asks
//! the cloud for one address per call. Here the whole waiting demand is
//! planned at once: existing ENIs are filled a batch (up to
//! `max_ips_per_call`) at a time, a full backlog only defers demand (it
//! never causes an ENI to be created), and new ENIs are created only for
//! demand that no existing or already-creating ENI can hold, each sized by
//! that demand. That keeps the calls near the lower bound of
//! ceil(demand / max_ips_per_call) assign-or-create calls plus the attaches.

/// An ENI that can take more addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EniRoom {
    /// Its id.
    pub(crate) id: String,
    /// Addresses it can still take (per-ENI limit minus held and pending).
    pub(crate) room: usize,
    /// Free places in its worker's backlog right now.
    pub(crate) backlog_free: usize,
    /// Addresses one call on it asks at most (its vswitch's cap).
    pub(crate) call: usize,
}

/// A vswitch a new ENI may go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VswChoice {
    /// Its id.
    pub(crate) id: String,
    /// Free addresses, if known (`ordered` policy).
    pub(crate) free: Option<u64>,
}

/// What the planner looks at.
#[derive(Debug, Clone, Default)]
pub(crate) struct PlanInput {
    /// Units of demand not yet planned (clients first, then pool top-up).
    pub(crate) demand: usize,
    /// How many of `demand` are clients (the rest is pool top-up, which is
    /// never reported as unplaceable).
    pub(crate) client_demand: usize,
    /// Usable ENIs in preference order (vswitch policy, then fewest addresses).
    pub(crate) enis: Vec<EniRoom>,
    /// Room that ENIs being created will add once ready (beyond their
    /// initial addresses).
    pub(crate) creating_room: usize,
    /// Vswitches a new ENI may go on, in preference order (inhibited ones
    /// already removed).
    pub(crate) vswitches: Vec<VswChoice>,
    /// ENIs that may still be created (capacity).
    pub(crate) eni_slots: usize,
    /// ENI operations that may start now.
    pub(crate) op_slots: usize,
    /// Addresses per Assign/Create call.
    pub(crate) max_per_call: usize,
    /// Addresses an ENI holds at most, its primary included.
    pub(crate) ips_per_eni: usize,
    /// Pool addresses that may ride along on the calls this plan makes
    /// anyway (a surge: demand arriving faster than the pool refills).
    /// They fill an assign's call (the ENI's backlog) or a create's
    /// initial addresses, within the ENI's room, and never make a call of
    /// their own. Not part of `demand`.
    pub(crate) surplus: usize,
}

/// What to do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Queue this many units on this ENI's worker.
    pub(crate) submits: Vec<(String, usize)>,
    /// Create an ENI on this vswitch with this many initial addresses.
    pub(crate) creates: Vec<(String, usize)>,
    /// Client units that no source can ever serve now (capacity reached or
    /// every vswitch exhausted): they fail at once with `exhausted`.
    pub(crate) unplaceable: usize,
    /// How much of `surplus` the submits and creates above carry.
    pub(crate) surplus: usize,
}

/// Decides where the waiting demand goes.
pub(crate) fn plan(input: &PlanInput) -> Plan {
    let mut out = Plan::default();
    let per_call = input.max_per_call.max(1);
    let mut left = input.demand;
    let mut deferred_room = input.creating_room;
    for e in &input.enis {
        let n = left.min(e.room).min(e.backlog_free);
        if n > 0 {
            out.submits.push((e.id.clone(), n));
            left -= n;
        }
        deferred_room += e.room - n;
    }

    let mut need_new = left.saturating_sub(deferred_room);
    let mut slots = input.eni_slots.min(input.op_slots);
    let mut eni_slots = input.eni_slots;
    let mut free: Vec<Option<u64>> = input.vswitches.iter().map(|v| v.free).collect();
    let mut new_room = 0;
    while need_new > 0 && slots > 0 && !input.vswitches.is_empty() && input.ips_per_eni > 0 {
        let init = need_new.min(per_call).min(input.ips_per_eni);
        let pick = free
            .iter()
            .position(|f| f.is_none_or(|f| f >= init as u64))
            .unwrap_or(0);
        if let Some(Some(f)) = free.get_mut(pick) {
            *f = f.saturating_sub(input.ips_per_eni as u64);
        }
        out.creates.push((input.vswitches[pick].id.clone(), init));
        left -= init;
        new_room += input.ips_per_eni - init;
        need_new = need_new.saturating_sub(input.ips_per_eni);
        slots -= 1;
        eni_slots -= 1;
    }

    let future_enis = if input.vswitches.is_empty() {
        0
    } else {
        eni_slots
    };
    let potential = deferred_room + new_room + future_enis * input.ips_per_eni;
    let clients_left = left.min(input.client_demand.saturating_sub(input.demand - left));
    out.unplaceable = clients_left.saturating_sub(potential);
    ride_along(input, &mut out);
    out
}

/// Adds the input's surplus to the calls `out` makes: each submit up to
/// its ENI's room and backlog (the call it is gathered into), then each
/// create up to one call and one ENI.
fn ride_along(input: &PlanInput, out: &mut Plan) {
    let mut left = input.surplus;
    for (id, n) in &mut out.submits {
        let Some(e) = input.enis.iter().find(|e| &e.id == id) else {
            continue;
        };
        // What fills the last of the calls the submit makes.
        let fill = match e.call {
            0 => 0,
            c => (c - *n % c) % c,
        };
        let add = left
            .min(fill)
            .min(e.room.saturating_sub(*n))
            .min(e.backlog_free.saturating_sub(*n));
        *n += add;
        left -= add;
    }
    let create_max = input.max_per_call.max(1).min(input.ips_per_eni);
    for (_, init) in &mut out.creates {
        let add = left.min(create_max.saturating_sub(*init));
        *init += add;
        left -= add;
    }
    out.surplus = input.surplus - left;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(demand: usize) -> PlanInput {
        PlanInput {
            demand,
            client_demand: demand,
            vswitches: vec![VswChoice {
                id: "vsw-a".into(),
                free: None,
            }],
            eni_slots: 7,
            op_slots: 3,
            max_per_call: 10,
            ips_per_eni: 30,
            ..PlanInput::default()
        }
    }

    #[test]
    fn cold_burst_creates_only_the_enis_it_needs() {
        let p = plan(&input(100));
        // 3 ops at most; each ENI sized by the demand; the rest waits for room.
        assert_eq!(
            p.creates,
            vec![
                ("vsw-a".into(), 10),
                ("vsw-a".into(), 10),
                ("vsw-a".into(), 10)
            ]
        );
        assert_eq!(p.unplaceable, 0);
        // Once they are ready with backlogs free, 10 per ENI are queued and a
        // fourth ENI covers what the three cannot hold.
        let mut i = input(70);
        i.enis = (0..3)
            .map(|k| EniRoom {
                id: format!("eni-{k}"),
                room: 20,
                backlog_free: 10,
                call: 10,
            })
            .collect();
        i.eni_slots = 4;
        let p = plan(&i);
        assert_eq!(p.submits.iter().map(|s| s.1).sum::<usize>(), 30);
        assert_eq!(p.creates, vec![("vsw-a".into(), 10)]);
    }

    #[test]
    fn full_backlog_defers_instead_of_creating() {
        let mut i = input(15);
        i.enis = vec![EniRoom {
            id: "eni-0".into(),
            room: 20,
            backlog_free: 0,
            call: 10,
        }];
        let p = plan(&i);
        assert!(p.submits.is_empty());
        assert!(p.creates.is_empty(), "{p:?}");
        assert_eq!(p.unplaceable, 0);
    }

    #[test]
    fn a_surplus_rides_along_on_the_calls_made_anyway() {
        // One client on an ENI with room: the call is filled to the
        // backlog, not past the room; the surplus left makes no call.
        let mut i = input(1);
        i.surplus = 50;
        i.enis = vec![
            EniRoom {
                id: "a".into(),
                room: 8,
                backlog_free: 10,
                call: 10,
            },
            EniRoom {
                id: "b".into(),
                room: 20,
                backlog_free: 10,
                call: 10,
            },
        ];
        let p = plan(&i);
        assert_eq!(p.submits, vec![("a".into(), 8)]);
        assert!(p.creates.is_empty(), "{p:?}");
        assert_eq!(p.surplus, 7);
        // A create is filled to one call, within the ENI.
        let mut i = input(3);
        i.surplus = 50;
        let p = plan(&i);
        assert_eq!(p.creates, vec![("vsw-a".into(), 10)]);
        assert_eq!(p.surplus, 7);
        // A vswitch whose calls are capped (its last addresses) is filled
        // to its cap only: the surplus never makes a call.
        let mut i = input(1);
        i.surplus = 50;
        i.enis = vec![EniRoom {
            id: "a".into(),
            room: 20,
            backlog_free: 10,
            call: 2,
        }];
        assert_eq!(plan(&i).submits, vec![("a".into(), 2)]);
        // No client demand, no call: nothing rides.
        let mut i = input(0);
        i.surplus = 50;
        let p = plan(&i);
        assert!(p.submits.is_empty() && p.creates.is_empty());
        assert_eq!(p.surplus, 0);
        // Bounded by the surplus itself.
        let mut i = input(2);
        i.surplus = 3;
        assert_eq!(plan(&i).creates, vec![("vsw-a".into(), 5)]);
    }

    #[test]
    fn batches_fill_one_eni_before_the_next() {
        let mut i = input(12);
        i.enis = vec![
            EniRoom {
                id: "a".into(),
                room: 25,
                backlog_free: 10,
                call: 10,
            },
            EniRoom {
                id: "b".into(),
                room: 25,
                backlog_free: 10,
                call: 10,
            },
        ];
        let p = plan(&i);
        assert_eq!(p.submits, vec![("a".into(), 10), ("b".into(), 2)]);
    }

    #[test]
    fn exhaustion_is_reported_for_clients_only() {
        let mut i = input(5);
        i.vswitches.clear();
        i.enis = vec![EniRoom {
            id: "a".into(),
            room: 2,
            backlog_free: 10,
            call: 10,
        }];
        let p = plan(&i);
        assert_eq!(p.submits, vec![("a".into(), 2)]);
        assert_eq!(p.unplaceable, 3);
        // Pool top-up beyond capacity is not an error.
        let mut i = input(5);
        i.client_demand = 1;
        i.vswitches.clear();
        assert_eq!(plan(&i).unplaceable, 1);
        // Capacity reached.
        let mut i = input(1);
        i.eni_slots = 0;
        assert_eq!(plan(&i).unplaceable, 1);
    }

    #[test]
    fn creating_room_counts_before_new_enis() {
        let mut i = input(20);
        i.creating_room = 20;
        assert_eq!(plan(&i), Plan::default());
    }

    #[test]
    fn ordered_vswitches_skip_ones_without_room() {
        let mut i = input(10);
        i.vswitches = vec![
            VswChoice {
                id: "small".into(),
                free: Some(3),
            },
            VswChoice {
                id: "big".into(),
                free: Some(500),
            },
        ];
        assert_eq!(plan(&i).creates, vec![("big".into(), 10)]);
        // Unknown counts are tried in order.
        i.vswitches[0].free = None;
        assert_eq!(plan(&i).creates, vec![("small".into(), 10)]);
    }

    #[test]
    fn small_eni_types_cap_the_initial_count() {
        let mut i = input(4);
        i.ips_per_eni = 3;
        i.op_slots = 1;
        let p = plan(&i);
        assert_eq!(p.creates, vec![("vsw-a".into(), 3)]);
        assert_eq!(p.unplaceable, 0);
    }
}
