//! The vswitch state the actor keeps: which vswitches are inhibited
//! (exhausted, [`VSwitches`]), which have no free /28 and get single
//! addresses instead (the prefix fallback), the IPv6 CIDR and gateway of
//! each (read once: they never change), and when inhibited ones are probed.
//!
//! Invariants: an inhibition or a prefix fallback ends on its own at its
//! deadline (nothing has to remember to lift it), or earlier when a probe
//! finds the vswitch refilled; at most one probe is due per
//! [`VswState::PROBE`], and none while nothing is inhibited.

use std::collections::HashMap;
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use super::super::prefix::{self, Kind};
use super::super::vswitch::VSwitches;

/// The vswitches' state, with the invariants in the module's doc.
#[derive(Debug)]
pub(super) struct VswState {
    switches: VSwitches,
    prefix_mode: bool,
    /// Until when (Unix ms) a vswitch's ENIs get single addresses.
    prefix_inhibit: HashMap<String, u64>,
    v6: HashMap<String, (String, Ipv6Addr)>,
    next_probe: Instant,
}

impl VswState {
    /// How often an inhibited vswitch's free count is read
    /// (DescribeVSwitches is cheap): a refilled vswitch serves again
    /// within this, not after the whole inhibit window.
    pub(super) const PROBE: Duration = Duration::from_secs(10);

    pub(super) fn new(switches: VSwitches, prefix_mode: bool, now: Instant) -> VswState {
        VswState {
            switches,
            prefix_mode,
            prefix_inhibit: HashMap::new(),
            v6: HashMap::new(),
            next_probe: now,
        }
    }

    /// The vswitches, for reading (order, inhibitions, ids).
    pub(super) fn switches(&self) -> &VSwitches {
        &self.switches
    }

    /// Usable vswitches in preference order (`random` shuffles, hence mut).
    pub(super) fn order(&mut self, now_ms: u64) -> Vec<super::super::planner::VswChoice> {
        self.switches.order(now_ms)
    }

    /// No address may be asked on `vswitch` until `until_ms`.
    pub(super) fn inhibit(&mut self, vswitch: &str, until_ms: u64) {
        self.switches.inhibit(vswitch, until_ms);
    }

    /// Free counts read; the ids whose inhibition is lifted (at least
    /// `lift_at` free).
    pub(super) fn set_free(
        &mut self,
        counts: impl IntoIterator<Item = (String, u64)>,
        lift_at: u64,
    ) -> Vec<String> {
        self.switches.set_free(counts, lift_at)
    }

    /// No free /28 on `vswitch`: single addresses until `until_ms`.
    pub(super) fn inhibit_prefixes(&mut self, vswitch: &str, until_ms: u64) {
        self.prefix_inhibit.insert(vswitch.to_string(), until_ms);
    }

    /// How the next addresses of an ENI on `vswitch` are asked.
    pub(super) fn kind_on(&self, vswitch: &str, now_ms: u64) -> Kind {
        prefix::next_kind(
            self.prefix_mode,
            self.prefix_inhibit.get(vswitch).copied(),
            now_ms,
        )
    }

    /// The IPv6 CIDR and gateway of `vswitch`, once read.
    pub(super) fn v6(&self, vswitch: &str) -> Option<&(String, Ipv6Addr)> {
        self.v6.get(vswitch)
    }

    pub(super) fn set_v6(&mut self, vswitch: String, cidr6: String, gateway6: Ipv6Addr) {
        self.v6.insert(vswitch, (cidr6, gateway6));
    }

    /// The inhibited vswitches to probe now, if a probe is due (the next
    /// is then due [`Self::PROBE`] later).
    pub(super) fn probe_due(&mut self, now: Instant, now_ms: u64) -> Option<Vec<String>> {
        if now < self.next_probe {
            return None;
        }
        let ids = self.switches.inhibited_ids(now_ms);
        if ids.is_empty() {
            return None;
        }
        self.next_probe = now + Self::PROBE;
        Some(ids)
    }

    /// When the next probe is due, if anything is inhibited.
    pub(super) fn next_wakeup(&self, now: Instant, now_ms: u64) -> Option<Instant> {
        (self.switches.inhibited_count(now_ms) > 0).then(|| self.next_probe.max(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::VSwitchPolicy;

    fn state(prefix_mode: bool, now: Instant) -> VswState {
        let v = VSwitches::new(vec!["a".into(), "b".into()], VSwitchPolicy::Ordered);
        VswState::new(v, prefix_mode, now)
    }

    #[test]
    fn probes_only_while_inhibited_and_once_per_period() {
        let now = Instant::now();
        let mut s = state(false, now);
        assert_eq!(s.probe_due(now, 0), None, "nothing inhibited");
        assert_eq!(s.next_wakeup(now, 0), None);
        s.inhibit("a", 1000);
        assert_eq!(s.probe_due(now, 0), Some(vec!["a".to_string()]));
        assert_eq!(s.probe_due(now, 0), None, "not again at once");
        assert_eq!(s.next_wakeup(now, 0), Some(now + VswState::PROBE));
        let later = now + VswState::PROBE;
        assert_eq!(s.probe_due(later, 0).map(|v| v.len()), Some(1));
        assert_eq!(s.probe_due(later + VswState::PROBE, 1000), None, "ended");
        s.inhibit("b", 5000);
        assert_eq!(s.set_free([("b".to_string(), 9)], 10), Vec::<String>::new());
        assert_eq!(
            s.set_free([("b".to_string(), 10)], 10),
            vec!["b".to_string()]
        );
        assert_eq!(s.switches().inhibited_until("b", 0), None, "lifted");
    }

    #[test]
    fn the_prefix_fallback_ends_at_its_deadline() {
        let mut s = state(true, Instant::now());
        assert_eq!(s.kind_on("a", 0), Kind::Prefix);
        s.inhibit_prefixes("a", 100);
        assert_eq!(s.kind_on("a", 99), Kind::Single);
        assert_eq!(s.kind_on("b", 99), Kind::Prefix, "per vswitch");
        assert_eq!(s.kind_on("a", 100), Kind::Prefix);
        let off = state(false, Instant::now());
        assert_eq!(off.kind_on("a", 0), Kind::Single);
    }

    #[test]
    fn ipv6_gateways_are_kept_by_vswitch() {
        let mut s = state(false, Instant::now());
        assert!(s.v6("a").is_none());
        s.set_v6(
            "a".into(),
            "2001:db8::/64".into(),
            "2001:db8::1".parse().unwrap(),
        );
        assert_eq!(s.v6("a").map(|v| v.0.as_str()), Some("2001:db8::/64"));
        assert!(s.v6("b").is_none());
    }
}
