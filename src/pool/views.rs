//! Read-only views of the pool: replies, counts, listings, the invariant
//! check.

use super::*;

impl PoolState {
    /// `owner`'s allocation and the ENI it is on: what `alloc` and `show`
    /// answer.
    pub(crate) fn allocation_with_eni(&self, owner: &Owner) -> Option<(Allocation, EniInfo)> {
        let a = self.allocation(owner)?;
        let eni = self.eni_info(&a.eni)?;
        Some((a, eni))
    }

    /// A known ENI's link and IPv4 gateway (the pool knows no IPv6
    /// gateway: `v6` is `None`).
    pub(crate) fn eni_info(&self, id: &str) -> Option<EniInfo> {
        let eni = self.enis.get(id)?;
        Some(EniInfo {
            eni: eni.id.clone(),
            mac: eni.mac.clone(),
            vswitch: eni.vswitch.clone(),
            cidr: eni.cidr.clone(),
            gateway: eni.gateway,
            v6: None,
        })
    }

    /// Addresses free for anyone right now.
    pub(crate) fn idle_count(&self) -> usize {
        self.ips
            .values()
            .filter(|ip| ip.state == IpState::Idle && self.allocatable(ip))
            .count()
    }

    /// Addresses (and unpaired IPv6) on one ENI.
    pub(crate) fn ips_on(&self, eni: &str) -> usize {
        self.ips.values().filter(|ip| ip.eni == eni).count()
            + self.unpaired_v6.values().filter(|e| *e == eni).count()
    }

    /// Counters for `status` (pending and capacity are the caller's).
    pub(crate) fn counts(&self) -> StatusCounts {
        let mut c = StatusCounts {
            enis: self.enis.values().filter(|e| !e.gone).count(),
            ips: self.ips.len() + self.unpaired_v6.len(),
            ..StatusCounts::default()
        };
        for ip in self.ips.values() {
            match ip.state {
                IpState::Idle => c.idle += 1,
                IpState::InUse { .. } => c.inuse += 1,
                IpState::Reserved { .. } | IpState::Quarantined { .. } => c.reserved += 1,
                IpState::Cooling { .. } => c.cooling += 1,
                IpState::Invalid { .. } => {}
            }
        }
        c
    }

    /// Counts by state name, invalid included (for metrics).
    pub(crate) fn counts_by_state(&self) -> Vec<(&'static str, u64)> {
        let c = self.counts();
        let invalid = (c.ips - c.idle - c.inuse - c.reserved - c.cooling) as u64;
        vec![
            ("idle", c.idle as u64),
            ("inuse", c.inuse as u64),
            ("reserved", c.reserved as u64),
            ("cooling", c.cooling as u64),
            ("invalid", invalid),
        ]
    }

    /// `list` data.
    pub(crate) fn list(&self) -> Vec<ListEntry> {
        let mut out: Vec<ListEntry> = self
            .ips
            .values()
            .map(|ip| ListEntry {
                ip: IpAddr::V4(ip.v4),
                state: ip.state.name(),
                owner: match &ip.state {
                    IpState::InUse { owner, .. }
                    | IpState::Reserved { owner, .. }
                    | IpState::Cooling { owner, .. } => Some(owner.to_string()),
                    _ => None,
                },
                eni: ip.eni.clone(),
            })
            .collect();
        out.extend(self.unpaired_v6.iter().map(|(v6, eni)| ListEntry {
            ip: IpAddr::V6(*v6),
            state: "invalid",
            owner: None,
            eni: eni.clone(),
        }));
        out
    }

    /// `enis` data for the ENIs that exist (the caller adds ones being
    /// created). In prefix mode, `fallback` says whether a vswitch is out
    /// of /28s for now, and each entry shows how its ENI holds addresses.
    pub(crate) fn eni_entries(
        &self,
        inhibited: impl Fn(&str) -> Option<u64>,
        fallback: Option<&dyn Fn(&str) -> bool>,
    ) -> Vec<EniEntry> {
        self.enis
            .values()
            .filter(|e| !e.gone)
            .map(|e| EniEntry {
                eni: e.id.clone(),
                mac: e.mac.clone(),
                vswitch: e.vswitch.clone(),
                ips: self.ips_on(&e.id),
                pending: e.pending,
                inhibited_until: inhibited(&e.vswitch),
                prefixes: fallback.map(|f| self.prefix_use(e, f(&e.vswitch))),
            })
            .collect()
    }

    /// Per ENI, its addresses in prefixes and single (metrics, prefix
    /// mode).
    pub(crate) fn eni_modes(&self) -> Vec<crate::metrics::EniModeGauge> {
        let mut m: BTreeMap<&str, crate::metrics::EniModeGauge> = self
            .enis
            .values()
            .filter(|e| !e.gone)
            .map(|e| {
                (
                    e.id.as_str(),
                    crate::metrics::EniModeGauge {
                        eni: e.id.clone(),
                        prefixes: e.prefixes.len() as u64,
                        ..Default::default()
                    },
                )
            })
            .collect();
        for ip in self.ips.values() {
            if let Some(g) = m.get_mut(ip.eni.as_str()) {
                if ip.prefix.is_some() {
                    g.in_prefixes += 1;
                } else {
                    g.singles += 1;
                }
            }
        }
        m.into_values().collect()
    }

    /// How an ENI holds its addresses (prefix mode).
    pub(crate) fn prefix_use(&self, e: &PoolEni, fallback: bool) -> PrefixUse {
        PrefixUse {
            prefixes: e.prefixes.len(),
            singles: self.slots_used(&e.id) - e.prefixes.len(),
            fallback,
        }
    }

    /// Every owner and its address.
    pub(crate) fn owners(&self) -> impl Iterator<Item = (&Owner, &Ipv4Addr)> {
        self.owners.iter()
    }

    /// Checks the invariants; `Err` names the first violation.
    pub(crate) fn check(&self) -> Result<(), String> {
        let mut seen_owner: HashMap<&Owner, Ipv4Addr> = HashMap::new();
        for ip in self.ips.values() {
            if !self.enis.contains_key(&ip.eni) {
                return Err(format!("{} is on unknown ENI {}", ip.v4, ip.eni));
            }
            if let Some(p) = ip.prefix {
                let on = self
                    .enis
                    .get(&ip.eni)
                    .is_some_and(|e| e.prefixes.contains(&p));
                if !on || !p.contains(ip.v4) {
                    return Err(format!(
                        "{} is in {p}, which {} does not hold",
                        ip.v4, ip.eni
                    ));
                }
            }
            if let IpState::InUse { owner, .. } = &ip.state {
                if let Some(other) = seen_owner.insert(owner, ip.v4) {
                    return Err(format!("owner {owner} holds {other} and {}", ip.v4));
                }
                if self.owners.get(owner) != Some(&ip.v4) {
                    return Err(format!("owner index disagrees for {owner}"));
                }
            }
        }
        if seen_owner.len() != self.owners.len() {
            return Err("owner index has stale entries".into());
        }
        let mut v6s = std::collections::HashSet::new();
        for v6 in self
            .ips
            .values()
            .filter_map(|ip| ip.v6)
            .chain(self.unpaired_v6.keys().copied())
        {
            if !v6s.insert(v6) {
                return Err(format!("{v6} appears twice"));
            }
        }
        Ok(())
    }

    /// Every IPv6 the pool knows: paired or unpaired.
    pub(crate) fn known_v6(&self) -> std::collections::BTreeSet<Ipv6Addr> {
        self.ips
            .values()
            .filter_map(|ip| ip.v6)
            .chain(self.unpaired_v6.keys().copied())
            .collect()
    }
}
