//! Assigning and unassigning IPv4 and IPv6 addresses.

use super::*;

impl World {
    pub(super) fn assignable(&self, id: &str) -> Result<(), ApiError> {
        let e = self.eni(id)?;
        Self::not_busy(e)?;
        if !matches!(e.status, EniStatus::Available | EniStatus::InUse) {
            return Err(Self::state_error("Available or InUse", &e.status));
        }
        Ok(())
    }

    pub(super) fn assign4(&mut self, p: &Params, now: Instant) -> Result<Value, ApiError> {
        self.check_region(p)?;
        let id = need(p, "NetworkInterfaceId")?.to_string();
        let asked4 = asked(p, "PrivateIpAddress", "SecondaryPrivateIpAddressCount")?;
        if let Some(req) = Self::prefix_request(p)? {
            if asked4.is_some() {
                return Err(Self::mixed_prefixes());
            }
            return self.assign_prefixes(&id, req, now);
        }
        let asked4 = asked4.ok_or_else(|| missing("SecondaryPrivateIpAddressCount"))?;
        let n = asked4.len();
        self.assignable(&id)?;
        let e = self.eni(&id)?;
        if Self::v4_slots(e) + n > self.itype_of(e).ipv4_per_eni as usize {
            return Err(err(
                403,
                "InvalidOperation.Ipv4CountExceeded",
                "The number of private IPv4 addresses on the ENI exceeds the upper limit.",
            ));
        }
        let vsw = e.vswitch.clone();
        let ips = match &asked4 {
            Asked::List(l) => self.take_specific(&vsw, l)?,
            Asked::Count(n) => self.take_v4(&vsw, *n)?,
        };
        let e = self.eni_mut(&id)?;
        e.v4.extend(new_addrs(&ips, now, false));
        Ok(
            json!({"AssignedPrivateIpAddressesSet": {"NetworkInterfaceId": id,
            "PrivateIpSet": {"PrivateIpAddress": ips.iter().map(|a| a.to_string()).collect::<Vec<_>>()},
            "Ipv4PrefixSet": {"Ipv4Prefixes": []}}}),
        )
    }

    pub(super) fn take_specific(
        &mut self,
        vsw: &str,
        wanted: &[String],
    ) -> Result<Vec<Ipv4Addr>, ApiError> {
        let v = self
            .vsw_mut(vsw)
            .ok_or_else(|| err(404, "InvalidVSwitchId.NotFound", vsw.to_string()))?;
        let mut offs = Vec::new();
        for w in wanted {
            let ip: Ipv4Addr = w.parse().map_err(|_| {
                err(
                    403,
                    "InvalidIp.Address",
                    format!("The specified IP \"{w}\" is not valid."),
                )
            })?;
            let off = u64::from(u32::from(ip).wrapping_sub(v.cidr.base));
            if !v.cidr.contains(ip) || !v.cidr.usable().contains(&off) {
                return Err(err(
                    403,
                    "InvalidVSwitchId.IpInvalid",
                    format!("The specified IP \"{w}\" is not in the VSwitch."),
                ));
            }
            if v.used.contains(&off) || offs.contains(&off) {
                return Err(err(
                    403,
                    "InvalidIp.IpAssigned",
                    format!("The specified IP \"{w}\" is already assigned."),
                ));
            }
            offs.push(off);
        }
        if v.free < offs.len() as u64 {
            return Err(err(
                403,
                "InvalidVSwitchId.IpNotEnough",
                format!("The specified VSwitch \"{vsw}\" has not enough IpAddress."),
            ));
        }
        v.free -= offs.len() as u64;
        Ok(offs
            .into_iter()
            .map(|o| {
                v.used.insert(o);
                v.cidr.at(o)
            })
            .collect())
    }

    /// Takes the given IPv6 addresses from a vswitch, all or none.
    pub(super) fn take_specific_v6(
        &mut self,
        vsw: &str,
        wanted: &[String],
    ) -> Result<Vec<Ipv6Addr>, ApiError> {
        let v = self
            .vsw_mut(vsw)
            .ok_or_else(|| err(404, "InvalidVSwitchId.NotFound", vsw.to_string()))?;
        let Some(net) = v.cidr6 else {
            return Err(err(
                403,
                "InvalidVSwitch.Ipv6NotTurnOn",
                format!("The VSwitch \"{vsw}\" does not have IPv6 enabled."),
            ));
        };
        let host_mask = !(u128::MAX << (128 - net.prefix));
        let mut hosts = Vec::new();
        for w in wanted {
            let ip: Ipv6Addr = w.parse().map_err(|_| {
                err(
                    403,
                    "InvalidIp.Address",
                    format!("The specified IP \"{w}\" is not valid."),
                )
            })?;
            let host = u128::from(ip) & host_mask;
            if u128::from(ip) & !host_mask != net.base || host < 16 || host >= host_mask - 16 {
                return Err(err(
                    403,
                    "InvalidVSwitchId.IpInvalid",
                    format!("The specified IP \"{w}\" is not in the VSwitch."),
                ));
            }
            if v.used6.contains(&host) || hosts.contains(&host) {
                return Err(err(
                    403,
                    "InvalidIp.IpAssigned",
                    format!("The specified IP \"{w}\" is already assigned."),
                ));
            }
            hosts.push(host);
        }
        Ok(hosts
            .into_iter()
            .map(|h| {
                v.used6.insert(h);
                net.at(h)
            })
            .collect())
    }

    pub(super) fn unassign4(&mut self, p: &Params, now: Instant) -> Result<Value, ApiError> {
        self.check_region(p)?;
        let id = need(p, "NetworkInterfaceId")?.to_string();
        let ips = list(p, "PrivateIpAddress", 50)?;
        let prefixes = list(p, "Ipv4Prefix", 10)?;
        if !prefixes.is_empty() {
            if !ips.is_empty() {
                return Err(Self::mixed_prefixes());
            }
            return self.unassign_prefixes(&id, &prefixes, now);
        }
        if ips.is_empty() {
            return Err(missing("PrivateIpAddress.1"));
        }
        self.assignable(&id)?;
        let e = self.eni(&id)?;
        // The primary address is never unassigned: named, it is "not
        // assigned" like any stranger.
        let gone = Addr::assigned(
            &e.v4,
            &ips,
            |a, s| !a.primary && a.ip.to_string() == s,
            "IP",
        )?;
        let vsw = e.vswitch.clone();
        Addr::remove(&mut self.eni_mut(&id)?.v4, &gone, now);
        self.give_v4(&vsw, &gone);
        Ok(json!({}))
    }

    pub(super) fn assign6(&mut self, p: &Params, now: Instant) -> Result<Value, ApiError> {
        self.check_region(p)?;
        let id = need(p, "NetworkInterfaceId")?.to_string();
        let asked6 = asked(p, "Ipv6Address", "Ipv6AddressCount")?
            .ok_or_else(|| missing("Ipv6AddressCount"))?;
        let n = asked6.len();
        self.assignable(&id)?;
        let e = self.eni(&id)?;
        if e.live_v6().count() + n > self.itype_of(e).ipv6_per_eni as usize {
            return Err(err(
                403,
                "InvalidOperation.Ipv6CountExceeded",
                "The number of IPv6 addresses on the ENI exceeds the upper limit.",
            ));
        }
        let vsw = e.vswitch.clone();
        let ips = match &asked6 {
            Asked::List(l) => self.take_specific_v6(&vsw, l)?,
            Asked::Count(n) => self.take_v6(&vsw, *n)?,
        };
        let e = self.eni_mut(&id)?;
        e.v6.extend(new_addrs(&ips, now, false));
        Ok(
            json!({"NetworkInterfaceId": id, "Ipv6Sets": {"Ipv6Address": ips.iter().map(|a| a.to_string()).collect::<Vec<_>>()},
            "Ipv6PrefixSets": {"Ipv6Prefix": []}}),
        )
    }

    pub(super) fn unassign6(&mut self, p: &Params, now: Instant) -> Result<Value, ApiError> {
        self.check_region(p)?;
        let id = need(p, "NetworkInterfaceId")?.to_string();
        let ips = list(p, "Ipv6Address", 50)?;
        if ips.is_empty() {
            return Err(missing("Ipv6Address.1"));
        }
        self.assignable(&id)?;
        let e = self.eni(&id)?;
        let names = |a: &Addr<Ipv6Addr>, s: &str| s.parse::<Ipv6Addr>().ok() == Some(a.ip);
        let gone = Addr::assigned(&e.v6, &ips, names, "IP")?;
        let vsw = e.vswitch.clone();
        Addr::remove(&mut self.eni_mut(&id)?.v6, &gone, now);
        self.give_v6(&vsw, &gone);
        Ok(json!({}))
    }
}
