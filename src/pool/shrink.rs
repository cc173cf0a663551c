//! What the pool can give back to the cloud: idle secondaries to shed,
//! whole idle prefixes, invalid addresses, ENIs holding nothing but their
//! idle primary. A prefix's address is never given back on its own: the
//! cloud would answer that it is not a secondary address of the ENI, and
//! the /28 would stay assigned while the pool forgot its addresses.

use super::*;

impl PoolState {
    /// Chooses up to `n` idle secondary addresses to give back to the cloud,
    /// from the ENIs with the fewest addresses in use first (so whole ENIs
    /// drain), grouped by ENI.
    pub(crate) fn shed_candidates(&self, n: usize) -> Vec<(String, Vec<Ipv4Addr>)> {
        if n == 0 {
            return Vec::new();
        }
        let inuse = self.inuse_by_eni();
        let mut idle: Vec<&PoolIp> = self
            .ips
            .values()
            .filter(|ip| {
                ip.state == IpState::Idle
                    && !ip.primary
                    && ip.prefix.is_none()
                    && self.allocatable(ip)
            })
            .collect();
        idle.sort_by_key(|ip| {
            (
                inuse.get(ip.eni.as_str()).copied().unwrap_or(0),
                ip.eni.clone(),
                std::cmp::Reverse(ip.v4),
            )
        });
        let mut grouped: Vec<(String, Vec<Ipv4Addr>)> = Vec::new();
        for ip in idle.into_iter().take(n) {
            match grouped.last_mut() {
                Some((eni, v)) if *eni == ip.eni => v.push(ip.v4),
                _ => grouped.push((ip.eni.clone(), vec![ip.v4])),
            }
        }
        grouped
    }

    /// The IPv6 pairs of these addresses (dual stack).
    pub(crate) fn pairs_of(&self, v4s: &[Ipv4Addr]) -> Vec<Ipv6Addr> {
        v4s.iter()
            .filter_map(|a| self.ips.get(a).and_then(|ip| ip.v6))
            .collect()
    }

    /// Invalid secondary addresses (with their IPv6 pairs) and unpaired
    /// IPv6 to unassign, by ENI.
    pub(crate) fn invalid_to_release(&self) -> Vec<(String, Vec<Ipv4Addr>, Vec<Ipv6Addr>)> {
        let mut by_eni: BTreeMap<String, (Vec<Ipv4Addr>, Vec<Ipv6Addr>)> = BTreeMap::new();
        for ip in self.ips.values() {
            if matches!(ip.state, IpState::Invalid { .. })
                && !ip.primary
                && !ip.releasing
                && ip.prefix.is_none()
            {
                let e = by_eni.entry(ip.eni.clone()).or_default();
                e.0.push(ip.v4);
                e.1.extend(ip.v6);
            }
        }
        for (v6, eni) in &self.unpaired_v6 {
            by_eni.entry(eni.clone()).or_default().1.push(*v6);
        }
        by_eni
            .into_iter()
            .filter(|(eni, _)| {
                self.enis
                    .get(eni)
                    .is_some_and(|e| e.phase == EniPhase::Ready)
            })
            .map(|(eni, (v4, v6))| (eni, v4, v6))
            .collect()
    }

    /// ENIs holding nothing but their idle primary address, with nothing in
    /// flight: they can be detached and deleted.
    pub(crate) fn freeable_enis(&self) -> Vec<String> {
        self.enis
            .values()
            .filter(|e| {
                e.phase == EniPhase::Ready && e.pending == 0 && !e.gone && e.prefixes.is_empty()
            })
            .filter(|e| {
                let mut on = self.ips.values().filter(|ip| ip.eni == e.id);
                matches!(
                    (on.next(), on.next()),
                    (Some(ip), None) if ip.primary && ip.state == IpState::Idle && !ip.releasing
                ) && !self.unpaired_v6.values().any(|x| *x == e.id)
            })
            .map(|e| e.id.clone())
            .collect()
    }

    /// Every prefix of a ready ENI, as a shrink sees it: its ENI, the
    /// addresses in use on that ENI, and whether all 16 are idle (past any
    /// reservation or cool-down) with nothing in flight.
    pub(crate) fn prefix_candidates(&self) -> Vec<(String, Ipv4Prefix, usize, bool)> {
        let inuse = self.inuse_by_eni();
        let mut out = Vec::new();
        for e in self.enis.values() {
            if e.phase != EniPhase::Ready || e.gone {
                continue;
            }
            for p in &e.prefixes {
                let reclaimable = p.addresses().all(|a| {
                    self.ips.get(&a).is_some_and(|ip| {
                        ip.eni == e.id && ip.state == IpState::Idle && !ip.releasing && !ip.lost
                    })
                });
                let n = inuse.get(e.id.as_str()).copied().unwrap_or(0);
                out.push((e.id.clone(), *p, n, reclaimable));
            }
        }
        out
    }
}
