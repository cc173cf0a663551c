//! Holds: reservations (`ip_stick_time`), cool-downs (`ip_cooldown`) and
//! the quarantine after a state rebuild; restoring them and the owners
//! from the state files; ending them when their time is up.

use super::*;

impl PoolState {
    /// Restores an allocation from the state file.
    pub(crate) fn restore_allocation(&mut self, a: &Allocation) -> bool {
        match self.ips.get(&a.ip) {
            Some(ip) if ip.eni == a.eni || a.eni.is_empty() => {}
            _ => return false,
        }
        let (owner, sandbox) = (a.owner.clone(), a.sandbox.clone());
        if let Some(v6) = a.ipv6 {
            if let Some(ip) = self.ips.get_mut(&a.ip) {
                if ip.v6.is_none() {
                    ip.v6 = Some(v6);
                    self.unpaired_v6.remove(&v6);
                }
            }
        }
        if let Some(at) = &a.attach {
            self.attachments
                .insert(owner.clone(), (sandbox.clone(), at.clone()));
        }
        self.set_state(
            a.ip,
            IpState::InUse {
                owner,
                sandbox,
                since_ms: a.since_ms,
            },
        );
        true
    }

    /// Restores a reservation / cool-down / quarantine from the state file.
    pub(crate) fn restore_hold(&mut self, h: &Hold, now_ms: u64) -> bool {
        match self.ips.get(&h.ip) {
            Some(ip) if matches!(ip.state, IpState::Idle) => {}
            _ => return false,
        }
        let state = match &h.last_owner {
            None if h.reserved_until_ms > now_ms => IpState::Quarantined {
                until_ms: h.reserved_until_ms,
            },
            None => return false,
            Some(owner) => {
                let owner = owner.clone();
                if h.reserved_until_ms > now_ms {
                    IpState::Reserved {
                        owner,
                        until_ms: h.reserved_until_ms,
                        cool_until_ms: h.cooling_until_ms,
                    }
                } else if h.cooling_until_ms > now_ms {
                    IpState::Cooling {
                        owner,
                        until_ms: h.cooling_until_ms,
                    }
                } else {
                    return false;
                }
            }
        };
        self.set_state(h.ip, state);
        true
    }

    /// Puts an idle address in quarantine until `until_ms`.
    pub(crate) fn quarantine(&mut self, v4: Ipv4Addr, until_ms: u64) -> Option<Hold> {
        let ip = self.ips.get(&v4)?;
        if ip.state != IpState::Idle {
            return None;
        }
        let hold = Hold {
            ip: v4,
            ipv6: ip.v6,
            eni: ip.eni.clone(),
            last_owner: None,
            reserved_until_ms: until_ms,
            cooling_until_ms: 0,
        };
        self.set_state(v4, IpState::Quarantined { until_ms });
        Some(hold)
    }

    /// Ends expired holds. Returns the addresses that became idle (their
    /// hold records can be cleared).
    pub(crate) fn settle(&mut self, now_ms: u64) -> Vec<Ipv4Addr> {
        let mut freed = Vec::new();
        let mut cooled = Vec::new();
        for ip in self.ips.values() {
            match &ip.state {
                IpState::Reserved {
                    owner,
                    until_ms,
                    cool_until_ms,
                } if *until_ms <= now_ms => {
                    if *cool_until_ms > now_ms {
                        cooled.push((ip.v4, owner.clone(), *cool_until_ms));
                    } else {
                        freed.push(ip.v4);
                    }
                }
                IpState::Cooling { until_ms, .. } | IpState::Quarantined { until_ms }
                    if *until_ms <= now_ms =>
                {
                    freed.push(ip.v4);
                }
                _ => {}
            }
        }
        for (v4, owner, until_ms) in cooled {
            self.set_state(v4, IpState::Cooling { owner, until_ms });
        }
        for v4 in &freed {
            self.set_state(*v4, IpState::Idle);
        }
        freed
    }

    /// The earliest hold expiry, if any (so the caller can wake then).
    pub(crate) fn next_expiry(&self) -> Option<u64> {
        self.ips
            .values()
            .filter_map(|ip| match &ip.state {
                IpState::Reserved { until_ms, .. }
                | IpState::Cooling { until_ms, .. }
                | IpState::Quarantined { until_ms } => Some(*until_ms),
                _ => None,
            })
            .min()
    }
}
