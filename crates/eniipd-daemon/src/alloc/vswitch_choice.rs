//! Vswitch choice and exhaustion inhibition.
//!
//! Exhaustion belongs to the vswitch, not to one ENI (the seed inhibited
//! only the ENI that saw `InvalidVSwitchId.IpNotEnough`, so its siblings on
//! the same vswitch kept asking): for the inhibit window no address is
//! asked of any ENI on an exhausted vswitch and no ENI is created on it.

use std::collections::HashMap;

use crate::config::VSwitchPolicy;
use eniip_util::rand::Rng;

use super::placement::VswChoice;

/// The configured vswitches of this zone, their cached free counts and
/// their inhibitions.
#[derive(Debug)]
pub(crate) struct VSwitches {
    ids: Vec<String>,
    policy: VSwitchPolicy,
    free: HashMap<String, u64>,
    inhibited_until_ms: HashMap<String, u64>,
    rng: Rng,
}

impl VSwitches {
    /// The vswitches new ENIs may use, in configuration order.
    pub(crate) fn new(ids: Vec<String>, policy: VSwitchPolicy) -> VSwitches {
        VSwitches {
            ids,
            policy,
            free: HashMap::new(),
            inhibited_until_ms: HashMap::new(),
            rng: Rng::from_entropy(),
        }
    }

    /// The configured ids.
    pub(crate) fn ids(&self) -> &[String] {
        &self.ids
    }

    /// Records free-address counts (DescribeVSwitches); an inhibited
    /// vswitch with at least `lift_at` free addresses (refilled, not just
    /// the last few the failed batch could not use) is usable again at
    /// once. The ids whose inhibition was lifted.
    pub(crate) fn set_free(
        &mut self,
        counts: impl IntoIterator<Item = (String, u64)>,
        lift_at: u64,
    ) -> Vec<String> {
        let mut lifted = Vec::new();
        for (id, free) in counts {
            if free >= lift_at.max(1) && self.inhibited_until_ms.remove(&id).is_some() {
                lifted.push(id.clone());
            }
            self.free.insert(id, free);
        }
        lifted
    }

    /// eniipd itself gave `n` addresses of `id` back (an unassign, an ENI
    /// deleted): it has at least that many free, so an inhibition ends at
    /// once and a cached free count grows by `n`. Whether an inhibition
    /// ended.
    pub(crate) fn gave_back(&mut self, id: &str, n: u64) -> bool {
        if n == 0 {
            return false;
        }
        if let Some(f) = self.free.get_mut(id) {
            *f = f.saturating_add(n);
        }
        self.inhibited_until_ms.remove(id).is_some()
    }

    /// Ids of the vswitches inhibited at `now_ms`.
    pub(crate) fn inhibited_ids(&self, now_ms: u64) -> Vec<String> {
        self.inhibited_until_ms
            .iter()
            .filter(|(_, u)| **u > now_ms)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Inhibits a vswitch until `until_ms` (Unix ms).
    pub(crate) fn inhibit(&mut self, id: &str, until_ms: u64) {
        self.inhibited_until_ms.insert(id.to_string(), until_ms);
    }

    /// Until when a vswitch is inhibited, if it is at `now_ms`.
    pub(crate) fn inhibited_until(&self, id: &str, now_ms: u64) -> Option<u64> {
        self.inhibited_until_ms
            .get(id)
            .copied()
            .filter(|u| *u > now_ms)
    }

    /// Vswitches currently inhibited.
    pub(crate) fn inhibited_count(&self, now_ms: u64) -> usize {
        self.inhibited_until_ms
            .values()
            .filter(|u| **u > now_ms)
            .count()
    }

    /// Usable vswitches in preference order: `ordered` by cached free
    /// addresses (most first; unknown last), `random` shuffled each time.
    pub(crate) fn order(&mut self, now_ms: u64) -> Vec<VswChoice> {
        let mut v: Vec<VswChoice> = self
            .ids
            .iter()
            .filter(|id| self.inhibited_until(id, now_ms).is_none())
            .map(|id| VswChoice {
                id: id.clone(),
                free: self.free.get(id).copied(),
            })
            .collect();
        match self.policy {
            VSwitchPolicy::Ordered => {
                v.sort_by_key(|c| std::cmp::Reverse(c.free.map(|f| f + 1).unwrap_or(0)))
            }
            VSwitchPolicy::Random => self.rng.shuffle(&mut v),
        }
        v
    }

    /// Rank of a vswitch in `order` (for sorting ENIs); unknown vswitches
    /// (an ENI on a vswitch no longer configured) rank last but stay usable.
    pub(crate) fn rank(order: &[VswChoice], id: &str) -> usize {
        order.iter().position(|c| c.id == id).unwrap_or(order.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordered_policy_sorts_by_free_and_skips_inhibited() {
        let mut v = VSwitches::new(
            vec!["a".into(), "b".into(), "c".into()],
            VSwitchPolicy::Ordered,
        );
        v.set_free([("a".to_string(), 10), ("b".to_string(), 300)], u64::MAX);
        let ids: Vec<String> = v.order(0).into_iter().map(|c| c.id).collect();
        assert_eq!(ids, vec!["b", "a", "c"]);
        v.inhibit("b", 1000);
        assert_eq!(v.inhibited_until("b", 999), Some(1000));
        assert_eq!(v.inhibited_until("b", 1000), None);
        let ids: Vec<String> = v.order(500).into_iter().map(|c| c.id).collect();
        assert_eq!(ids, vec!["a", "c"]);
        assert_eq!(v.inhibited_count(500), 1);
        assert_eq!(v.order(2000).len(), 3);
    }

    #[test]
    fn addresses_given_back_end_an_inhibition_and_count_as_free() {
        let mut v = VSwitches::new(vec!["a".into(), "b".into()], VSwitchPolicy::Ordered);
        v.set_free([("a".to_string(), 0)], 1);
        v.inhibit("a", 1000);
        assert!(!v.gave_back("a", 0), "nothing given back changes nothing");
        assert_eq!(v.inhibited_until("a", 0), Some(1000));
        assert!(v.gave_back("a", 4));
        assert_eq!(v.inhibited_until("a", 0), None);
        assert_eq!(v.order(0)[0].free, Some(4));
        assert!(!v.gave_back("b", 2), "b was not inhibited");
        assert_eq!(v.order(0)[1].free, None, "an unknown count stays unknown");
    }

    #[test]
    fn random_policy_keeps_every_usable_vswitch() {
        let mut v = VSwitches::new(
            vec!["a".into(), "b".into(), "c".into()],
            VSwitchPolicy::Random,
        );
        for _ in 0..10 {
            let mut ids: Vec<String> = v.order(0).into_iter().map(|c| c.id).collect();
            ids.sort();
            assert_eq!(ids, vec!["a", "b", "c"]);
        }
    }
}
