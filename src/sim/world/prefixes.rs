//! IPv4 prefixes: aligned /28 blocks of a vswitch on an ENI.
//!
//! A prefix takes 16 addresses of its vswitch (all usable, none taken) and
//! one slot of the ENI's IPv4 quota, the primary address included. Single
//! addresses land anywhere in the vswitch, so a vswitch can have free
//! addresses but no free aligned /28: that is fragmentation, and the admin
//! knob `free_prefixes` (see [`World::set_free_prefixes`]) makes it as
//! visible as a real, long-used vswitch would.
//!
//! Assumptions where public material is silent (documented in
//! eniip-sim(1)): no free /28 answers `InvalidVSwitchId.IpNotEnough` (403,
//! the vswitch-level code Terway knows; no prefix-specific code is
//! published) with a message naming prefixes; an unknown prefix in
//! `Ipv4Prefix.N` of an unassign answers `InvalidIp.IpUnassigned` like an
//! unknown address; mixing prefixes and single addresses in one call is
//! `InvalidParameter`.

use super::*;

/// Addresses in a prefix.
pub(crate) const PREFIX_SIZE: u64 = 16;

impl World {
    /// The prefix parameters of a call, if any; both forms at once is
    /// refused as the real API does.
    pub(super) fn prefix_request(p: &Params) -> Result<Option<Asked>, ApiError> {
        asked(p, "Ipv4Prefix", "Ipv4PrefixCount")
    }

    /// The answer to a call that mixes prefixes and single addresses.
    pub(super) fn mixed_prefixes() -> ApiError {
        invalid(
            "Ipv4Prefix",
            "IPv4 prefixes and private IP addresses cannot be given in one call",
        )
    }

    /// IPv4 quota slots an ENI uses: every address (the primary included)
    /// and every prefix count one.
    pub(super) fn v4_slots(e: &SimEni) -> usize {
        e.live_v4().count() + e.live_v4p().count()
    }

    /// Offsets of the aligned /28 blocks of a vswitch with all 16 addresses
    /// usable and untaken, in address order.
    fn free_blocks(v: &Vsw) -> Vec<u64> {
        let usable = v.cidr.usable();
        (0..v.cidr.size() / PREFIX_SIZE)
            .map(|b| b * PREFIX_SIZE)
            .filter(|s| usable.start <= *s && s + PREFIX_SIZE <= usable.end)
            .filter(|s| (*s..s + PREFIX_SIZE).all(|o| !v.used.contains(&o)))
            .collect()
    }

    /// How many /28s a vswitch can still give: aligned free blocks, within
    /// its free count and the admin cap.
    pub(super) fn free_prefixes(v: &Vsw) -> u64 {
        let n = (Self::free_blocks(v).len() as u64).min(v.free / PREFIX_SIZE);
        v.prefix_cap.map_or(n, |c| n.min(c))
    }

    fn no_prefix(vsw: &str) -> ApiError {
        err(
            403,
            "InvalidVSwitchId.IpNotEnough",
            format!(
                "The specified VSwitch \"{vsw}\" has not enough free IPv4 prefix (/28) blocks."
            ),
        )
    }

    /// Takes `n` free /28s, all or none; returns their network addresses.
    pub(super) fn take_prefixes(&mut self, vsw: &str, n: usize) -> Result<Vec<Ipv4Addr>, ApiError> {
        let seed = self.rng.next_u64();
        let v = self.vsw_or_404(vsw)?;
        let blocks = Self::free_blocks(v);
        if Self::free_prefixes(v) < n as u64 || blocks.len() < n {
            return Err(Self::no_prefix(vsw));
        }
        // A random starting block, then in order: deterministic per seed
        // and not always the lowest, as the real allocator's choice is not.
        let start = Rng::seeded(seed).below(blocks.len() as u64) as usize;
        let chosen: Vec<u64> = (0..n).map(|i| blocks[(start + i) % blocks.len()]).collect();
        Ok(Self::mark_prefixes(v, &chosen))
    }

    fn mark_prefixes(v: &mut Vsw, starts: &[u64]) -> Vec<Ipv4Addr> {
        for s in starts {
            v.used.extend(*s..s + PREFIX_SIZE);
        }
        v.free = v.free.saturating_sub(PREFIX_SIZE * starts.len() as u64);
        if let Some(c) = v.prefix_cap.as_mut() {
            *c = c.saturating_sub(starts.len() as u64);
        }
        starts.iter().map(|s| v.cidr.at(*s)).collect()
    }

    /// Takes the given /28s, all or none.
    fn take_specific_prefixes(
        &mut self,
        vsw: &str,
        wanted: &[String],
    ) -> Result<Vec<Ipv4Addr>, ApiError> {
        let v = self.vsw_or_404(vsw)?;
        let mut starts = Vec::new();
        for w in wanted {
            let bad = || {
                err(
                    400,
                    "InvalidParameter",
                    format!("The specified parameter \"Ipv4Prefix\" \"{w}\" is not a /28 block of the VSwitch."),
                )
            };
            let (a, len) = w.split_once('/').ok_or_else(bad)?;
            let ip: Ipv4Addr = a.parse().map_err(|_| bad())?;
            let off = u64::from(u32::from(ip).wrapping_sub(v.cidr.base));
            if len != "28" || !v.cidr.contains(ip) || off % PREFIX_SIZE != 0 {
                return Err(bad());
            }
            let usable = v.cidr.usable();
            if off < usable.start || off + PREFIX_SIZE > usable.end {
                return Err(bad());
            }
            if (off..off + PREFIX_SIZE).any(|o| v.used.contains(&o)) || starts.contains(&off) {
                return Err(err(
                    403,
                    "InvalidIp.IpAssigned",
                    format!("The specified IPv4 prefix \"{w}\" overlaps assigned addresses."),
                ));
            }
            starts.push(off);
        }
        if v.prefix_cap.is_some_and(|c| c < starts.len() as u64)
            || v.free < PREFIX_SIZE * starts.len() as u64
        {
            return Err(Self::no_prefix(vsw));
        }
        Ok(Self::mark_prefixes(v, &starts))
    }

    pub(super) fn take_prefix_request(
        &mut self,
        vsw: &str,
        req: &Asked,
    ) -> Result<Vec<Ipv4Addr>, ApiError> {
        match req {
            Asked::Count(n) => self.take_prefixes(vsw, *n),
            Asked::List(l) => self.take_specific_prefixes(vsw, l),
        }
    }

    /// Gives /28s back to their vswitch (the cap is not restored: it
    /// counts what the operator still allows to be carved).
    pub(super) fn give_prefixes(&mut self, vsw: &str, bases: &[Ipv4Addr]) {
        if let Some(v) = self.vsw_mut(vsw) {
            for b in bases {
                let s = u64::from(u32::from(*b).wrapping_sub(v.cidr.base));
                for o in s..s + PREFIX_SIZE {
                    if v.used.remove(&o) {
                        v.free += 1;
                    }
                }
            }
        }
    }

    /// AssignPrivateIpAddresses with `Ipv4PrefixCount` or `Ipv4Prefix.N`.
    pub(super) fn assign_prefixes(
        &mut self,
        id: &str,
        req: Asked,
        now: Instant,
    ) -> Result<Value, ApiError> {
        self.assignable(id)?;
        let e = self.eni(id)?;
        if Self::v4_slots(e) + req.len() > self.itype_of(e).ipv4_per_eni as usize {
            return Err(err(
                403,
                "InvalidOperation.Ipv4CountExceeded",
                "The number of private IPv4 addresses on the ENI exceeds the upper limit.",
            ));
        }
        let vsw = e.vswitch.clone();
        let bases = self.take_prefix_request(&vsw, &req)?;
        let e = self.eni_mut(id)?;
        e.v4p.extend(new_addrs(&bases, now, false));
        Ok(
            json!({"AssignedPrivateIpAddressesSet": {"NetworkInterfaceId": id,
            "PrivateIpSet": {"PrivateIpAddress": []},
            "Ipv4PrefixSet": {"Ipv4Prefixes": bases.iter().map(|b| format!("{b}/28")).collect::<Vec<_>>()}}}),
        )
    }

    /// UnassignPrivateIpAddresses with `Ipv4Prefix.N`, all or none.
    pub(super) fn unassign_prefixes(
        &mut self,
        id: &str,
        wanted: &[String],
        now: Instant,
    ) -> Result<Value, ApiError> {
        self.assignable(id)?;
        let e = self.eni(id)?;
        let names = |a: &Addr<Ipv4Addr>, w: &str| format!("{}/28", a.ip) == w;
        let gone = Addr::assigned(&e.v4p, wanted, names, "IPv4 prefix")?;
        let vsw = e.vswitch.clone();
        Addr::remove(&mut self.eni_mut(id)?.v4p, &gone, now);
        self.give_prefixes(&vsw, &gone);
        Ok(json!({}))
    }

    /// Caps how many more /28s a vswitch gives (`None` lifts the cap);
    /// false if the vswitch is unknown. `Some(0)` leaves its free addresses
    /// to single assignments only: a fragmented vswitch.
    pub(crate) fn set_free_prefixes(&mut self, id: &str, cap: Option<u64>) -> bool {
        match self.vsw_mut(id) {
            Some(v) => {
                v.prefix_cap = cap;
                true
            }
            None => false,
        }
    }
}
