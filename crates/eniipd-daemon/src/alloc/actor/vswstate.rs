//! The vswitch state the actor keeps: which vswitches are inhibited
//! (exhausted, [`VSwitches`]), which have no free /28 and get single
//! addresses instead (the prefix fallback), which have no IPv6 /80 to give
//! and get single IPv6 addresses instead (dual stack), the IPv6 CIDR and
//! gateway of each (read once: they never change), and when inhibited ones
//! are probed.
//!
//! Near exhaustion a vswitch's calls are capped (`call_cap`): an
//! `InvalidVSwitchId.IpNotEnough` answer to a call for n > 1 addresses
//! halves the cap instead of inhibiting (an assign is all or nothing, so
//! the last few free addresses are only had by asking fewer); only a call
//! for one address that is refused inhibits. A free count read caps the
//! calls at what the vswitch has; a call served at the cap doubles it.
//!
//! Invariants: an inhibition or a prefix fallback (of /28s or /80s) ends
//! on its own at its
//! deadline (nothing has to remember to lift it), or earlier when a probe
//! finds the vswitch with any free address (an inhibition) or a prefix is
//! granted on the vswitch (a fallback: the cloud says nothing of a
//! vswitch's /28 room but by granting or refusing one, so while a
//! fallback is on, the next ask on its vswitch tries a prefix again
//! every [`VswState::PREFIX_RETRY_MS`]); at most one probe is due per
//! [`VswState::PROBE`], and none while nothing is inhibited; a cap is
//! never 0 and never reaches `max_per_call` (it is removed there).

use std::collections::HashMap;
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use super::super::prefix_mode::{self, Kind, V6From};
use super::super::vswitch_choice::VSwitches;

/// The vswitches' state, with the invariants in the module's doc.
#[derive(Debug)]
pub(super) struct VswState {
    switches: VSwitches,
    prefix_mode: bool,
    /// Every address is an IPv4+IPv6 pair.
    dual: bool,
    /// Until when (Unix ms) a vswitch's ENIs get single addresses.
    prefix_inhibit: HashMap<String, u64>,
    /// Until when (Unix ms) a vswitch's ENIs without a /80 get single
    /// IPv6 addresses (dual stack, prefix mode).
    v6_prefix_inhibit: HashMap<String, u64>,
    /// From when (Unix ms) a vswitch on a /28 (`.0`) or /80 (`.1`)
    /// fallback is asked a prefix again (its room may have returned).
    prefix_retry: HashMap<String, (u64, u64)>,
    v6: HashMap<String, (String, Ipv6Addr)>,
    next_probe: Instant,
    /// Addresses one call on a vswitch may ask, when fewer than a call's
    /// worth (see the module's doc).
    call_cap: HashMap<String, usize>,
    max_per_call: usize,
}

/// What an exhaustion answer did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Exhaustion {
    /// Calls on the vswitch now ask at most this many addresses.
    Capped(usize),
    /// Even one address was refused: the vswitch is inhibited.
    Inhibited,
}

impl VswState {
    /// How often an inhibited vswitch's free count is read
    /// (DescribeVSwitches is cheap): a refilled vswitch serves again
    /// within this, not after the whole inhibit window.
    pub(super) const PROBE: Duration = Duration::from_secs(10);

    pub(super) fn new(
        switches: VSwitches,
        prefix_mode: bool,
        max_per_call: usize,
        now: Instant,
    ) -> VswState {
        VswState {
            switches,
            prefix_mode,
            dual: false,
            prefix_inhibit: HashMap::new(),
            v6_prefix_inhibit: HashMap::new(),
            prefix_retry: HashMap::new(),
            v6: HashMap::new(),
            next_probe: now,
            call_cap: HashMap::new(),
            max_per_call: max_per_call.max(1),
        }
    }

    /// The same, in dual stack: every address is an IPv4+IPv6 pair.
    pub(super) fn dual_stack(mut self, dual: bool) -> VswState {
        self.dual = dual;
        self
    }

    /// Whether every address is an IPv4+IPv6 pair.
    pub(super) fn dual(&self) -> bool {
        self.dual
    }

    /// Addresses one call on `vswitch` may ask (a call's worth unless
    /// capped).
    pub(super) fn call_size(&self, vswitch: &str) -> usize {
        self.call_cap
            .get(vswitch)
            .copied()
            .unwrap_or(self.max_per_call)
    }

    /// The cap of `vswitch`'s calls, if any.
    pub(super) fn call_cap(&self, vswitch: &str) -> Option<usize> {
        self.call_cap.get(vswitch).copied()
    }

    fn set_cap(&mut self, vswitch: &str, n: usize) {
        if n >= self.max_per_call {
            self.call_cap.remove(vswitch);
        } else {
            self.call_cap.insert(vswitch.to_string(), n.max(1));
        }
    }

    /// A call for `asked` addresses on `vswitch` was refused for want of
    /// addresses: the next ones ask half (at most), or, if it asked one,
    /// the vswitch is inhibited until `until_ms`.
    pub(super) fn exhausted(&mut self, vswitch: &str, asked: usize, until_ms: u64) -> Exhaustion {
        if asked <= 1 {
            self.switches.inhibit(vswitch, until_ms);
            return Exhaustion::Inhibited;
        }
        let half = (asked / 2).max(1).min(self.call_size(vswitch));
        self.set_cap(vswitch, half);
        Exhaustion::Capped(half)
    }

    /// A call for `asked` addresses on `vswitch` was served: a capped
    /// vswitch's next calls may ask twice as many.
    pub(super) fn served(&mut self, vswitch: &str, asked: usize) {
        if let Some(c) = self.call_cap(vswitch) {
            if asked >= c {
                self.set_cap(vswitch, c * 2);
            }
        }
    }

    /// The vswitches, for reading (order, inhibitions, ids).
    pub(super) fn switches(&self) -> &VSwitches {
        &self.switches
    }

    /// Usable vswitches in preference order (`random` shuffles, hence mut).
    pub(super) fn order(&mut self, now_ms: u64) -> Vec<super::super::placement::VswChoice> {
        self.switches.order(now_ms)
    }

    /// No address may be asked on `vswitch` until `until_ms`.
    pub(super) fn inhibit(&mut self, vswitch: &str, until_ms: u64) {
        self.switches.inhibit(vswitch, until_ms);
    }

    /// Free counts read (DescribeVSwitches): calls are capped at what a
    /// vswitch has; the ids whose inhibition is lifted (any free address).
    pub(super) fn set_free(&mut self, counts: Vec<(String, u64)>) -> Vec<String> {
        for (id, free) in &counts {
            if *free > 0 {
                self.set_cap(id, usize::try_from(*free).unwrap_or(usize::MAX));
            }
        }
        self.switches.set_free(counts, 1)
    }

    /// eniipd gave `n` addresses of `vswitch` back to the cloud: the
    /// vswitch has at least `n` free, so an inhibition ends at once (a
    /// probe would find the same, up to [`Self::PROBE`] later, and an
    /// `alloc` in between was refused as exhausted) and a cap is at least
    /// `n`. Whether an inhibition ended.
    pub(super) fn gave_back(&mut self, vswitch: &str, n: usize) -> bool {
        if let Some(c) = self.call_cap(vswitch) {
            self.set_cap(vswitch, c.max(n));
        }
        self.switches.gave_back(vswitch, n as u64)
    }

    /// While a vswitch is on a prefix fallback, how often its next ask
    /// tries a prefix again (a refused one costs one call).
    pub(super) const PREFIX_RETRY_MS: u64 = 10_000;

    /// No free /28 on `vswitch` (found at `now_ms`): single addresses
    /// until `until_ms`, a /28 tried again every
    /// [`Self::PREFIX_RETRY_MS`].
    pub(super) fn inhibit_prefixes(&mut self, vswitch: &str, now_ms: u64, until_ms: u64) {
        self.prefix_inhibit.insert(vswitch.to_string(), until_ms);
        self.prefix_retry.entry(vswitch.to_string()).or_default().0 =
            now_ms + Self::PREFIX_RETRY_MS;
    }

    /// A /28 was granted on `vswitch`: its fallback (if any) is over.
    /// Whether one was on.
    pub(super) fn lift_prefixes(&mut self, vswitch: &str) -> bool {
        if let Some(r) = self.prefix_retry.get_mut(vswitch) {
            r.0 = 0;
        }
        self.prefix_inhibit.remove(vswitch).is_some()
    }

    /// A /80 was granted on `vswitch`: its IPv6 fallback (if any) is
    /// over. Whether one was on.
    pub(super) fn lift_v6_prefixes(&mut self, vswitch: &str) -> bool {
        if let Some(r) = self.prefix_retry.get_mut(vswitch) {
            r.1 = 0;
        }
        self.v6_prefix_inhibit.remove(vswitch).is_some()
    }

    /// Whether `vswitch` is on a fallback now: (no /28 room, no /80 to
    /// give), as the last prefix asked there found.
    pub(super) fn on_fallback(&self, vswitch: &str, now_ms: u64) -> (bool, bool) {
        let on = |m: &HashMap<String, u64>| m.get(vswitch).is_some_and(|u| *u > now_ms);
        (
            self.prefix_mode && on(&self.prefix_inhibit),
            self.prefix_mode && self.dual && on(&self.v6_prefix_inhibit),
        )
    }

    /// The fallback deadlines that hold now: (/28, /80), none once a retry
    /// is due.
    fn holding(&self, vswitch: &str, now_ms: u64) -> (Option<u64>, Option<u64>) {
        let (r4, r6) = self.prefix_retry.get(vswitch).copied().unwrap_or_default();
        let held = |m: &HashMap<String, u64>, retry: u64| {
            m.get(vswitch).copied().filter(|_| retry > now_ms)
        };
        (
            held(&self.prefix_inhibit, r4),
            held(&self.v6_prefix_inhibit, r6),
        )
    }

    /// How the next addresses of an ENI on `vswitch` are asked.
    pub(super) fn kind_on(&self, vswitch: &str, now_ms: u64) -> Kind {
        prefix_mode::next_kind(self.prefix_mode, self.holding(vswitch, now_ms).0, now_ms)
    }

    /// Prefix mode: whether a vswitch other than `vswitch` among `ids`
    /// has /28 room, as far as eniipd knows (no fallback holds there).
    pub(super) fn prefix_room_elsewhere<'a>(
        &self,
        vswitch: &str,
        mut ids: impl Iterator<Item = &'a str>,
        now_ms: u64,
    ) -> bool {
        self.prefix_mode && ids.any(|id| id != vswitch && self.kind_on(id, now_ms) == Kind::Prefix)
    }

    /// No IPv6 /80 to give on `vswitch` (found at `now_ms`): its ENIs
    /// without one get single IPv6 addresses until `until_ms`, a /80
    /// tried again every [`Self::PREFIX_RETRY_MS`].
    pub(super) fn inhibit_v6_prefixes(&mut self, vswitch: &str, now_ms: u64, until_ms: u64) {
        self.v6_prefix_inhibit.insert(vswitch.to_string(), until_ms);
        self.prefix_retry.entry(vswitch.to_string()).or_default().1 =
            now_ms + Self::PREFIX_RETRY_MS;
    }

    /// How the next addresses of an ENI on `vswitch` are asked: the kind
    /// of its IPv4, and where their IPv6 come from (dual stack), given
    /// whether it holds a /80 and whether the cloud refused it one. A new
    /// ENI holds none and was refused none.
    pub(super) fn ask_on(
        &self,
        vswitch: &str,
        v6_held: (bool, bool),
        now_ms: u64,
    ) -> (Kind, Option<V6From>) {
        let v6 = prefix_mode::next_v6(
            self.dual,
            self.prefix_mode,
            v6_held,
            self.holding(vswitch, now_ms).1,
            now_ms,
        );
        (
            prefix_mode::kind_with(self.kind_on(vswitch, now_ms), v6),
            v6,
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
        VswState::new(v, prefix_mode, 10, now)
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
        assert_eq!(s.set_free(vec![("b".to_string(), 0)]), Vec::<String>::new());
        assert_eq!(s.switches().inhibited_until("b", 0), Some(5000));
        // Any free address lifts it, and caps the calls at what is free.
        assert_eq!(
            s.set_free(vec![("b".to_string(), 3)]),
            vec!["b".to_string()]
        );
        assert_eq!(s.switches().inhibited_until("b", 0), None, "lifted");
        assert_eq!(s.call_size("b"), 3);
        assert_eq!(
            s.set_free(vec![("b".to_string(), 500)]),
            Vec::<String>::new()
        );
        assert_eq!(s.call_cap("b"), None, "refilled: a call's worth again");
    }

    #[test]
    fn the_last_addresses_are_asked_in_ever_smaller_calls_before_an_inhibit() {
        let mut s = state(false, Instant::now());
        assert_eq!(s.call_size("a"), 10);
        // 4 free: 10 refused, 5 refused, 2 served, 2 served, 1 refused.
        assert_eq!(s.exhausted("a", 10, 1000), Exhaustion::Capped(5));
        assert_eq!(s.exhausted("a", 5, 1000), Exhaustion::Capped(2));
        assert_eq!(s.call_size("a"), 2);
        assert_eq!(s.switches().inhibited_until("a", 0), None, "still usable");
        s.served("a", 1);
        assert_eq!(
            s.call_size("a"),
            2,
            "a smaller call than the cap says nothing"
        );
        s.served("a", 2);
        assert_eq!(s.call_size("a"), 4);
        assert_eq!(s.exhausted("a", 4, 1000), Exhaustion::Capped(2));
        assert_eq!(s.exhausted("a", 2, 1000), Exhaustion::Capped(1));
        assert_eq!(s.exhausted("a", 1, 1000), Exhaustion::Inhibited);
        assert_eq!(s.switches().inhibited_until("a", 0), Some(1000));
        // A stale answer for a bigger call never raises the cap.
        let mut s = state(false, Instant::now());
        s.exhausted("b", 4, 1000);
        assert_eq!(s.exhausted("b", 10, 1000), Exhaustion::Capped(2));
        s.served("b", 2);
        s.served("b", 4);
        s.served("b", 8);
        assert_eq!(s.call_cap("b"), None, "back to a call's worth");
    }

    #[test]
    fn addresses_given_back_lift_the_inhibit_and_raise_the_cap() {
        let mut s = state(false, Instant::now());
        assert_eq!(s.exhausted("a", 1, 1000), Exhaustion::Inhibited);
        assert!(s.gave_back("a", 3));
        assert_eq!(s.switches().inhibited_until("a", 0), None);
        assert_eq!(s.next_wakeup(Instant::now(), 0), None, "no probe left");
        assert_eq!(s.exhausted("b", 4, 1000), Exhaustion::Capped(2));
        assert!(!s.gave_back("b", 6));
        assert_eq!(s.call_size("b"), 6, "at least what was given back");
        s.gave_back("b", 1);
        assert_eq!(s.call_size("b"), 6, "never lowered");
    }

    #[test]
    fn the_prefix_fallback_ends_at_its_deadline() {
        let mut s = state(true, Instant::now());
        assert_eq!(s.kind_on("a", 0), Kind::Prefix);
        s.inhibit_prefixes("a", 0, 100);
        assert_eq!(s.kind_on("a", 99), Kind::Single);
        assert_eq!(s.kind_on("b", 99), Kind::Prefix, "per vswitch");
        assert_eq!(s.kind_on("a", 100), Kind::Prefix);
        let off = state(false, Instant::now());
        assert_eq!(off.kind_on("a", 0), Kind::Single);
    }

    #[test]
    fn without_a_80_to_give_an_eni_gets_single_ipv6_and_single_ipv4_until_the_deadline() {
        let s = state(true, Instant::now());
        assert_eq!(
            s.ask_on("a", (false, false), 0),
            (Kind::Prefix, None),
            "IPv4 stack"
        );
        let mut s = state(true, Instant::now()).dual_stack(true);
        assert_eq!(
            s.ask_on("a", (false, false), 0),
            (Kind::Prefix, Some(V6From::NewPrefix))
        );
        s.inhibit_v6_prefixes("a", 0, 100);
        assert_eq!(
            s.ask_on("a", (false, false), 99),
            (Kind::Single, Some(V6From::Single))
        );
        assert_eq!(
            s.ask_on("a", (true, false), 99),
            (Kind::Prefix, Some(V6From::Prefix)),
            "an ENI holding a /80 goes on with it"
        );
        assert_eq!(
            s.ask_on("b", (false, false), 99),
            (Kind::Prefix, Some(V6From::NewPrefix)),
            "per vswitch"
        );
        assert_eq!(
            s.ask_on("a", (false, true), 100),
            (Kind::Single, Some(V6From::Single)),
            "refused one: its quota"
        );
        assert_eq!(
            s.ask_on("a", (false, false), 100),
            (Kind::Prefix, Some(V6From::NewPrefix))
        );
        // No /28 either: singles of both, the /80 still asked.
        s.inhibit_prefixes("a", 0, 200);
        assert_eq!(
            s.ask_on("a", (false, false), 150),
            (Kind::Single, Some(V6From::NewPrefix))
        );
    }

    #[test]
    fn a_fallback_tries_a_prefix_again_and_a_grant_ends_it() {
        let mut s = state(true, Instant::now()).dual_stack(true);
        let retry = VswState::PREFIX_RETRY_MS;
        s.inhibit_prefixes("a", 1000, 600_000);
        assert_eq!(s.kind_on("a", 1001), Kind::Single);
        assert_eq!(s.on_fallback("a", 1001), (true, false));
        assert!(s.prefix_room_elsewhere("a", ["a", "b"].into_iter(), 1001));
        assert!(!s.prefix_room_elsewhere("b", ["a", "b"].into_iter(), 1001));
        // A retry is due: the next ask tries a /28, still on fallback.
        assert_eq!(s.kind_on("a", 1000 + retry), Kind::Prefix);
        assert_eq!(s.on_fallback("a", 1000 + retry), (true, false));
        // Refused again: single addresses until the next retry.
        s.inhibit_prefixes("a", 1000 + retry, 600_000);
        assert_eq!(s.kind_on("a", 1001 + retry), Kind::Single);
        // Granted: over.
        assert!(s.lift_prefixes("a"));
        assert_eq!(s.kind_on("a", 1002 + retry), Kind::Prefix);
        assert_eq!(s.on_fallback("a", 1002 + retry), (false, false));
        assert!(!s.lift_prefixes("a"));
        // The same for /80s.
        s.inhibit_v6_prefixes("b", 0, 600_000);
        assert_eq!(s.on_fallback("b", 1), (false, true));
        assert_eq!(s.ask_on("b", (false, false), 1).1, Some(V6From::Single));
        assert_eq!(
            s.ask_on("b", (false, false), retry).1,
            Some(V6From::NewPrefix)
        );
        assert!(s.lift_v6_prefixes("b"));
        assert_eq!(s.on_fallback("b", 1), (false, false));
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
