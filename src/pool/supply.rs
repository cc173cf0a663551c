//! Addresses coming from and going back to the cloud: what a grant adds,
//! what an unassign's result removes, the ENIs' pending counts, and the
//! withdrawal of addresses the cloud no longer has. An address an owner
//! holds is never removed here: it is marked lost (kept for its owner
//! until released, never handed out again).

use super::*;

impl PoolState {
    /// Adds the addresses `eni` was granted, paired by position in dual
    /// stack (an IPv6 beyond the IPv4 is unpaired: invalid, given back by
    /// the next sweep). Returns how many can be handed out.
    pub(crate) fn add_granted(&mut self, eni: &str, v4: &[Ipv4Addr], v6: &[Ipv6Addr]) -> usize {
        let mut valid = 0;
        for (i, a) in v4.iter().enumerate() {
            let pair = if self.dual { v6.get(i).copied() } else { None };
            self.add_ip(eni, *a, pair);
            if !self.dual || pair.is_some() {
                valid += 1;
            }
        }
        if self.dual {
            for b in v6.iter().skip(v4.len()) {
                self.add_unpaired_v6(eni, *b);
            }
        }
        valid
    }

    /// A call for `tickets` addresses on `eni` ended: they no longer count
    /// as pending on it (nor as pending in prefixes, if they were).
    pub(crate) fn settle_pending(&mut self, eni: &str, tickets: usize, in_prefixes: bool) {
        if let Some(e) = self.enis.get_mut(eni) {
            e.pending = e.pending.saturating_sub(tickets);
            if in_prefixes {
                e.pending_in_prefixes = e.pending_in_prefixes.saturating_sub(tickets);
            }
        }
    }

    /// An unassign of `asked` on `eni` ended and the cloud took back
    /// `gone`: those leave the pool (a /28 with its addresses), and an ENI
    /// that gave something back is no longer at its limit. The pair of an
    /// IPv4 that left stays if its own unassign did not happen: unpaired
    /// now, it goes back with the next sweep. Returns the asked addresses
    /// that stay (no longer releasing).
    pub(crate) fn unassigned(
        &mut self,
        eni: &str,
        asked: &[Ipv4Addr],
        gone: &Gone,
    ) -> Vec<Ipv4Addr> {
        for p in &gone.prefixes {
            self.remove_prefix(eni, *p);
        }
        for b in self.pairs_of(&gone.v4) {
            if !gone.v6.contains(&b) {
                self.add_unpaired_v6(eni, b);
            }
        }
        self.remove_ips(&gone.v4);
        for b in &gone.v6 {
            self.unpaired_v6.remove(b);
        }
        let kept: Vec<Ipv4Addr> = asked
            .iter()
            .filter(|a| !gone.v4.contains(a))
            .copied()
            .collect();
        self.set_releasing(&kept, false);
        if !gone.is_empty() {
            if let Some(e) = self.enis.get_mut(eni) {
                e.at_limit = false;
            }
        }
        kept
    }

    /// Whether an owner holds `v4`.
    pub(crate) fn is_held(&self, v4: Ipv4Addr) -> bool {
        self.ips
            .get(&v4)
            .is_some_and(|ip| matches!(ip.state, IpState::InUse { .. }))
    }

    /// Every allocation is an IPv4+IPv6 pair.
    pub(crate) fn dual(&self) -> bool {
        self.dual
    }

    /// The cloud no longer has `v4`: an idle address leaves the pool, an
    /// owned one is marked lost (its owner keeps it until it releases it).
    pub(crate) fn withdraw(&mut self, v4: Ipv4Addr) {
        match self.ips.get(&v4).map(|ip| &ip.state) {
            Some(IpState::InUse { .. }) => self.mark_lost(v4),
            Some(_) => self.remove_ips(&[v4]),
            None => {}
        }
    }

    /// The allocations `gc` releases: owners starting with `prefix` whose
    /// owner and sandbox are both absent from `keep`.
    pub(crate) fn collectable(
        &self,
        prefix: &str,
        keep: &[String],
    ) -> Vec<(Owner, Option<SandboxId>)> {
        let keep: BTreeSet<&str> = keep.iter().map(String::as_str).collect();
        self.owners()
            .filter(|(o, _)| o.as_str().starts_with(prefix))
            .filter_map(|(o, v4)| match &self.ips.get(v4)?.state {
                IpState::InUse { sandbox, .. } => Some((o.clone(), sandbox.clone())),
                _ => None,
            })
            .filter(|(o, sb)| {
                !keep.contains(o.as_str())
                    && !sb.as_ref().is_some_and(|s| keep.contains(s.as_str()))
            })
            .collect()
    }
}

/// What an unassign took back from one ENI.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Gone {
    /// IPv4 addresses (a /28's among them).
    pub(crate) v4: Vec<Ipv4Addr>,
    /// IPv6 addresses.
    pub(crate) v6: Vec<Ipv6Addr>,
    /// Whole /28 prefixes.
    pub(crate) prefixes: Vec<Ipv4Prefix>,
}

impl Gone {
    /// Nothing was taken back.
    pub(crate) fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }
}
