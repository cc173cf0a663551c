//! The vswitches ([`Vswitches`]) and each one's address book ([`Vsw`]):
//! the offsets of its blocks that are taken, and how many addresses the
//! cloud says are free.
//!
//! Invariants, kept by [`Vsw`]'s methods (nothing else touches its
//! fields): `free` starts at no more than the usable addresses of the
//! block; an address (or a /28's 16) is taken only while `free` and the
//! untaken offsets both allow, all or none of a call's, and its offset is
//! then in `used` until it is given back, which frees it once; a /28 is an
//! aligned block of usable, untaken offsets, and carving one counts down
//! the prefix cap (giving it back does not: the cap counts what the
//! operator still allows). The admin knob may set `free` to anything, as
//! the real count moves with other tenants. Randomness comes in as a seed
//! drawn from the world's generator, so a seeded world takes the same
//! addresses every run.
//!
//! Prefixes take 16 addresses of their vswitch and are carved from its
//! aligned free blocks: single addresses land anywhere, so a vswitch can
//! have free addresses but no free aligned /28. That is fragmentation, and
//! the admin knob `free_prefixes` ([`Vsw::set_prefix_cap`]) makes it as
//! visible as a real, long-used vswitch would. No free /28 answers
//! `InvalidVSwitchId.IpNotEnough` (403, the vswitch-level code Terway
//! knows; no prefix-specific code is published) with a message naming
//! prefixes (documented in eniip-sim(1)).

use std::collections::HashSet;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::params::{err, ApiError, Asked};
use crate::net::{Net4, Net6};
use eniip_util::rand::Rng;

/// Addresses in a prefix.
pub(crate) const PREFIX_SIZE: u64 = 16;

/// A vswitch.
#[derive(Debug)]
pub(crate) struct Vsw {
    /// `vsw-...`
    id: String,
    /// Its zone.
    zone: String,
    /// IPv4 block.
    cidr: Net4,
    /// IPv6 block, if enabled.
    cidr6: Option<Net6>,
    /// AvailableIpAddressCount.
    free: u64,
    /// Offsets in `cidr` taken (by an ENI, or reserved by a prefix).
    used: HashSet<u64>,
    /// Host parts in `cidr6` taken.
    used6: HashSet<u128>,
    /// How many more /28 prefixes may be carved (`None`: as many as aligned
    /// free blocks allow).
    prefix_cap: Option<u64>,
    /// The IPv6 /80s taken, by their index in `cidr6` (the host part
    /// shifted right by 48). Single IPv6 addresses are drawn from the first
    /// two /80s only ([`Vsw::take_v6`]), so /80s are carved from the third
    /// on and the two never overlap.
    used80: HashSet<u64>,
    /// How many more /80s may be carved (`None`: every one the block
    /// holds); the admin knob `free_v6_prefixes`.
    v6_prefix_cap: Option<u64>,
}

/// The /80s of an IPv6 block kept for single addresses (see `used80`).
const SINGLES_80: u64 = 2;

impl Vsw {
    /// A vswitch with nothing taken; `free` defaults to, and is capped at,
    /// the usable addresses of `cidr`.
    fn new(id: &str, zone: &str, cidr: Net4, cidr6: Option<Net6>, free: Option<u64>) -> Vsw {
        let usable = cidr.usable().end - cidr.usable().start;
        Vsw {
            id: id.to_string(),
            zone: zone.to_string(),
            cidr,
            cidr6,
            free: free.unwrap_or(usable).min(usable),
            used: HashSet::new(),
            used6: HashSet::new(),
            prefix_cap: None,
            used80: HashSet::new(),
            v6_prefix_cap: None,
        }
    }

    /// `vsw-...`
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Its zone.
    pub(crate) fn zone(&self) -> &str {
        &self.zone
    }

    /// Its IPv4 block.
    pub(crate) fn cidr(&self) -> Net4 {
        self.cidr
    }

    /// Its IPv6 block, if enabled.
    pub(crate) fn cidr6(&self) -> Option<Net6> {
        self.cidr6
    }

    /// AvailableIpAddressCount.
    pub(crate) fn free(&self) -> u64 {
        self.free
    }

    /// Sets the free count (the admin knob; a restored world's count).
    pub(crate) fn set_free(&mut self, free: u64) {
        self.free = free;
    }

    /// Caps how many more /28s it gives (`None` lifts the cap). `Some(0)`
    /// leaves its free addresses to single assignments only: a fragmented
    /// vswitch.
    pub(crate) fn set_prefix_cap(&mut self, cap: Option<u64>) {
        self.prefix_cap = cap;
    }

    fn not_enough(&self) -> ApiError {
        err(
            403,
            "InvalidVSwitchId.IpNotEnough",
            format!(
                "The specified VSwitch \"{}\" has not enough IpAddress.",
                self.id
            ),
        )
    }

    fn offset_of(&self, ip: Ipv4Addr) -> u64 {
        u64::from(u32::from(ip).wrapping_sub(self.cidr.base))
    }

    /// Takes `n` addresses at random (from `seed`), or none if fewer are
    /// free.
    pub(crate) fn take_v4(&mut self, seed: u64, n: usize) -> Result<Vec<Ipv4Addr>, ApiError> {
        let usable = self.cidr.usable();
        let room = (usable.end - usable.start).saturating_sub(self.used.len() as u64);
        if self.free < n as u64 || room < n as u64 {
            return Err(self.not_enough());
        }
        let span = usable.end - usable.start;
        let mut r = Rng::seeded(seed);
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let mut off = usable.start + r.below(span);
            while self.used.contains(&off) {
                off = usable.start + (off - usable.start + 1) % span;
            }
            self.used.insert(off);
            out.push(self.cidr.at(off));
        }
        self.free -= n as u64;
        Ok(out)
    }

    /// Takes the given addresses, all or none.
    pub(crate) fn take_specific_v4(
        &mut self,
        wanted: &[String],
    ) -> Result<Vec<Ipv4Addr>, ApiError> {
        let usable = self.cidr.usable();
        let offs = places(
            wanted,
            |ip| {
                let off = self.offset_of(ip);
                (self.cidr.contains(ip) && usable.contains(&off)).then_some(off)
            },
            |off| self.used.contains(off),
        )?;
        if self.free < offs.len() as u64 {
            return Err(self.not_enough());
        }
        self.free -= offs.len() as u64;
        Ok(offs
            .into_iter()
            .map(|o| {
                self.used.insert(o);
                self.cidr.at(o)
            })
            .collect())
    }

    /// Gives addresses back (those not taken are ignored).
    pub(crate) fn give_v4(&mut self, ips: &[Ipv4Addr]) {
        for ip in ips {
            if self.used.remove(&self.offset_of(*ip)) {
                self.free += 1;
            }
        }
    }

    fn no_ipv6(&self) -> ApiError {
        err(
            403,
            "InvalidVSwitch.Ipv6NotTurnOn",
            format!("The VSwitch \"{}\" does not have IPv6 enabled.", self.id),
        )
    }

    /// Takes `n` IPv6 addresses at random (from `seed`); refused when the
    /// vswitch has no IPv6 block.
    pub(crate) fn take_v6(&mut self, seed: u64, n: usize) -> Result<Vec<Ipv6Addr>, ApiError> {
        let Some(net) = self.cidr6 else {
            return Err(self.no_ipv6());
        };
        let mut r = Rng::seeded(seed);
        let mut out = Vec::new();
        while out.len() < n {
            let host = u128::from(r.next_u64() >> 16) + 16;
            if self.used6.insert(host) {
                out.push(net.at(host));
            }
        }
        Ok(out)
    }

    /// Takes the given IPv6 addresses, all or none.
    pub(crate) fn take_specific_v6(
        &mut self,
        wanted: &[String],
    ) -> Result<Vec<Ipv6Addr>, ApiError> {
        let Some(net) = self.cidr6 else {
            return Err(self.no_ipv6());
        };
        let host_mask = !(u128::MAX << (128 - net.prefix));
        let hosts = places(
            wanted,
            |ip: Ipv6Addr| {
                let host = u128::from(ip) & host_mask;
                let inside = u128::from(ip) & !host_mask == net.base;
                (inside && host >= 16 && host < host_mask - 16).then_some(host)
            },
            |host| self.used6.contains(host),
        )?;
        Ok(hosts
            .into_iter()
            .map(|h| {
                self.used6.insert(h);
                net.at(h)
            })
            .collect())
    }

    /// How many /80s its IPv6 block holds in all (singles' two included;
    /// 0 without a block).
    fn v6_prefixes_in_block(&self) -> u64 {
        self.cidr6
            .map_or(0, |n| 1u64 << (80 - u32::from(n.prefix)).min(63))
    }

    /// How many IPv6 /80s it can still give: the block's, less the two
    /// kept for single addresses and those taken, within the admin cap.
    /// (AvailableIpAddressCount is the IPv4 count: a /80 leaves it as it
    /// is.)
    pub(crate) fn free_v6_prefixes(&self) -> u64 {
        let n = self
            .v6_prefixes_in_block()
            .saturating_sub(SINGLES_80 + self.used80.len() as u64);
        self.v6_prefix_cap.map_or(n, |c| n.min(c))
    }

    /// Caps how many more /80s it gives (`None`: no cap).
    pub(crate) fn set_v6_prefix_cap(&mut self, cap: Option<u64>) {
        self.v6_prefix_cap = cap;
    }

    fn no_v6_prefix(&self) -> ApiError {
        err(
            403,
            "InvalidVSwitchId.IpNotEnough",
            format!(
                "The specified VSwitch \"{}\" has not enough free IPv6 prefix (/80) blocks.",
                self.id
            ),
        )
    }

    /// The index of the /80 whose network address is `p` in `net`, if it
    /// is one that can be carved.
    fn index80(&self, net: Net6, p: Ipv6Addr) -> Option<u64> {
        let host = host6(net, p);
        let i = (host >> 48) as u64;
        let aligned = host & ((1u128 << 48) - 1) == 0
            && u128::from(p) & !(u128::MAX >> net.prefix) == net.base;
        (aligned && i >= SINGLES_80 && i < self.v6_prefixes_in_block()).then_some(i)
    }

    /// Takes `n` free /80s (from a random one, from `seed`, on, wrapping);
    /// their network addresses. No IPv6 block or no room is refused.
    pub(crate) fn take_v6_prefixes(
        &mut self,
        seed: u64,
        n: usize,
    ) -> Result<Vec<Ipv6Addr>, ApiError> {
        let Some(net) = self.cidr6 else {
            return Err(self.no_ipv6());
        };
        if self.free_v6_prefixes() < n as u64 {
            return Err(self.no_v6_prefix());
        }
        let span = self.v6_prefixes_in_block() - SINGLES_80;
        let mut i = Rng::seeded(seed).next_u64() % span;
        let mut out = Vec::new();
        while out.len() < n {
            let idx = SINGLES_80 + i;
            if self.used80.insert(idx) {
                out.push(net.at(u128::from(idx) << 48));
            }
            i = (i + 1) % span;
        }
        Ok(out)
    }

    /// Takes the named /80s (`x::/80`), all or none.
    pub(crate) fn take_specific_v6_prefixes(
        &mut self,
        wanted: &[String],
    ) -> Result<Vec<Ipv6Addr>, ApiError> {
        let Some(net) = self.cidr6 else {
            return Err(self.no_ipv6());
        };
        if self.free_v6_prefixes() < wanted.len() as u64 {
            return Err(self.no_v6_prefix());
        }
        let bare: Vec<String> = wanted
            .iter()
            .map(|w| w.strip_suffix("/80").unwrap_or("-").to_string())
            .collect();
        let idx = places(
            &bare,
            |p: Ipv6Addr| self.index80(net, p),
            |i| self.used80.contains(i),
        )?;
        self.used80.extend(idx.iter().copied());
        Ok(idx
            .into_iter()
            .map(|i| net.at(u128::from(i) << 48))
            .collect())
    }

    /// Gives /80s (by network address) back.
    pub(crate) fn give_v6_prefixes(&mut self, bases: &[Ipv6Addr]) {
        if let Some(net) = self.cidr6 {
            for p in bases {
                self.used80.remove(&((host6(net, *p) >> 48) as u64));
            }
        }
    }

    /// Gives IPv6 addresses back.
    pub(crate) fn give_v6(&mut self, ips: &[Ipv6Addr]) {
        if let Some(net) = self.cidr6 {
            for ip in ips {
                self.used6.remove(&host6(net, *ip));
            }
        }
    }

    /// Offsets of the aligned /28 blocks with all 16 addresses usable and
    /// untaken, in address order.
    fn free_blocks(&self) -> Vec<u64> {
        let usable = self.cidr.usable();
        (0..self.cidr.size() / PREFIX_SIZE)
            .map(|b| b * PREFIX_SIZE)
            .filter(|s| usable.start <= *s && s + PREFIX_SIZE <= usable.end)
            .filter(|s| (*s..s + PREFIX_SIZE).all(|o| !self.used.contains(&o)))
            .collect()
    }

    /// How many /28s it can still give: aligned free blocks, within its
    /// free count and the admin cap.
    pub(crate) fn free_prefixes(&self) -> u64 {
        let n = (self.free_blocks().len() as u64).min(self.free / PREFIX_SIZE);
        self.prefix_cap.map_or(n, |c| n.min(c))
    }

    fn no_prefix(&self) -> ApiError {
        err(
            403,
            "InvalidVSwitchId.IpNotEnough",
            format!(
                "The specified VSwitch \"{}\" has not enough free IPv4 prefix (/28) blocks.",
                self.id
            ),
        )
    }

    /// Takes `n` free /28s (a random starting block from `seed`, then in
    /// order), all or none; their network addresses.
    pub(crate) fn take_prefixes(&mut self, seed: u64, n: usize) -> Result<Vec<Ipv4Addr>, ApiError> {
        let blocks = self.free_blocks();
        if self.free_prefixes() < n as u64 || blocks.len() < n {
            return Err(self.no_prefix());
        }
        // Deterministic per seed and not always the lowest, as the real
        // allocator's choice is not.
        let start = Rng::seeded(seed).below(blocks.len() as u64) as usize;
        let chosen: Vec<u64> = (0..n).map(|i| blocks[(start + i) % blocks.len()]).collect();
        Ok(self.carve(&chosen))
    }

    /// Takes the given /28s, all or none.
    pub(crate) fn take_specific_prefixes(
        &mut self,
        wanted: &[String],
    ) -> Result<Vec<Ipv4Addr>, ApiError> {
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
            let off = self.offset_of(ip);
            if len != "28" || !self.cidr.contains(ip) || !off.is_multiple_of(PREFIX_SIZE) {
                return Err(bad());
            }
            let usable = self.cidr.usable();
            if off < usable.start || off + PREFIX_SIZE > usable.end {
                return Err(bad());
            }
            if (off..off + PREFIX_SIZE).any(|o| self.used.contains(&o)) || starts.contains(&off) {
                return Err(err(
                    403,
                    "InvalidIp.IpAssigned",
                    format!("The specified IPv4 prefix \"{w}\" overlaps assigned addresses."),
                ));
            }
            starts.push(off);
        }
        if self.prefix_cap.is_some_and(|c| c < starts.len() as u64)
            || self.free < PREFIX_SIZE * starts.len() as u64
        {
            return Err(self.no_prefix());
        }
        Ok(self.carve(&starts))
    }

    fn carve(&mut self, starts: &[u64]) -> Vec<Ipv4Addr> {
        for s in starts {
            self.used.extend(*s..s + PREFIX_SIZE);
        }
        self.free = self.free.saturating_sub(PREFIX_SIZE * starts.len() as u64);
        if let Some(c) = self.prefix_cap.as_mut() {
            *c = c.saturating_sub(starts.len() as u64);
        }
        starts.iter().map(|s| self.cidr.at(*s)).collect()
    }

    /// Gives /28s back (the cap is not restored).
    pub(crate) fn give_prefixes(&mut self, bases: &[Ipv4Addr]) {
        for b in bases {
            let s = self.offset_of(*b);
            for o in s..s + PREFIX_SIZE {
                if self.used.remove(&o) {
                    self.free += 1;
                }
            }
        }
    }

    /// A restored world: nothing is taken until [`Vsw::mark_taken`] says
    /// what its ENIs hold.
    pub(crate) fn forget_taken(&mut self) {
        self.used.clear();
        self.used6.clear();
        self.used80.clear();
    }

    /// A restored world's ENI holds these /80s.
    pub(crate) fn mark_v6_prefixes_taken(&mut self, bases: &[Ipv6Addr]) {
        if let Some(net) = self.cidr6 {
            for p in bases {
                self.used80.insert((host6(net, *p) >> 48) as u64);
            }
        }
    }

    /// A restored world's ENI holds these addresses, IPv6 addresses and
    /// /28s (the free count is restored on its own).
    pub(crate) fn mark_taken(&mut self, v4: &[Ipv4Addr], v6: &[Ipv6Addr], prefixes: &[Ipv4Addr]) {
        for ip in v4 {
            self.used.insert(self.offset_of(*ip));
        }
        for p in prefixes {
            let s = self.offset_of(*p);
            self.used.extend(s..s + PREFIX_SIZE);
        }
        if let Some(net) = self.cidr6 {
            for ip in v6 {
                self.used6.insert(host6(net, *ip));
            }
        }
    }

    /// The taken offsets, in order (to compare a restored world).
    #[cfg(test)]
    pub(crate) fn taken(&self) -> (Vec<u64>, Vec<u128>) {
        let mut v4: Vec<u64> = self.used.iter().copied().collect();
        let mut v6: Vec<u128> = self.used6.iter().copied().collect();
        v4.sort_unstable();
        v6.sort_unstable();
        (v4, v6)
    }
}

/// Where each of `wanted` (addresses in text) is in a vswitch's block:
/// `place` gives it, or `None` outside the block's usable part; `taken`
/// says it is someone's already. The API's answer for the first that does
/// not parse, is outside, taken, or named twice.
fn places<A: std::str::FromStr, P: Copy + PartialEq>(
    wanted: &[String],
    place: impl Fn(A) -> Option<P>,
    taken: impl Fn(&P) -> bool,
) -> Result<Vec<P>, ApiError> {
    let mut out: Vec<P> = Vec::new();
    for w in wanted {
        let ip: A = w.parse().map_err(|_| {
            err(
                403,
                "InvalidIp.Address",
                format!("The specified IP \"{w}\" is not valid."),
            )
        })?;
        let Some(p) = place(ip) else {
            return Err(err(
                403,
                "InvalidVSwitchId.IpInvalid",
                format!("The specified IP \"{w}\" is not in the VSwitch."),
            ));
        };
        if taken(&p) || out.contains(&p) {
            return Err(err(
                403,
                "InvalidIp.IpAssigned",
                format!("The specified IP \"{w}\" is already assigned."),
            ));
        }
        out.push(p);
    }
    Ok(out)
}

/// The host part of `ip` in `net`.
fn host6(net: Net6, ip: Ipv6Addr) -> u128 {
    u128::from(ip) & !(u128::MAX << (128 - net.prefix))
}

/// The vswitches, in configuration order.
#[derive(Debug)]
pub(crate) struct Vswitches {
    list: Vec<Vsw>,
}

impl Vswitches {
    /// The configured vswitches `(id, CIDR, IPv6 CIDR, free)` in `zone`;
    /// at least one, each id once.
    pub(crate) fn new(
        zone: &str,
        specs: &[(String, Net4, Option<Net6>, Option<u64>)],
    ) -> Result<Vswitches, String> {
        if specs.is_empty() {
            return Err("at least one vswitch is needed".into());
        }
        let mut ids = HashSet::new();
        let mut list = Vec::new();
        for (id, cidr, cidr6, free) in specs {
            if !ids.insert(id.clone()) {
                return Err(format!("vswitch {id} is given twice"));
            }
            list.push(Vsw::new(id, zone, *cidr, *cidr6, *free));
        }
        Ok(Vswitches { list })
    }

    /// Every vswitch, in configuration order.
    pub(crate) fn iter(&self) -> std::slice::Iter<'_, Vsw> {
        self.list.iter()
    }

    /// The first configured one (the instances' primary ENIs are on it).
    pub(crate) fn first(&self) -> &Vsw {
        &self.list[0]
    }

    /// The vswitch `id`.
    pub(crate) fn get(&self, id: &str) -> Option<&Vsw> {
        self.list.iter().find(|v| v.id == id)
    }

    /// The vswitch `id`, to change.
    pub(crate) fn get_mut(&mut self, id: &str) -> Option<&mut Vsw> {
        self.list.iter_mut().find(|v| v.id == id)
    }

    /// The vswitch `id`, or the API's answer that it does not exist.
    pub(crate) fn or_404(&mut self, id: &str) -> Result<&mut Vsw, ApiError> {
        self.get_mut(id).ok_or_else(|| {
            err(
                404,
                "InvalidVSwitchId.NotFound",
                format!("The specified VSwitch \"{id}\" does not exist."),
            )
        })
    }

    /// Takes `n` addresses of `id` (the seed drawn from `rng` first,
    /// whatever the answer).
    pub(crate) fn take_v4(
        &mut self,
        rng: &mut Rng,
        id: &str,
        n: usize,
    ) -> Result<Vec<Ipv4Addr>, ApiError> {
        let seed = rng.next_u64();
        self.or_404(id)?.take_v4(seed, n)
    }

    /// Takes `n` IPv6 addresses of `id` (asking for none draws nothing
    /// from `rng` and needs no vswitch).
    pub(crate) fn take_v6(
        &mut self,
        rng: &mut Rng,
        id: &str,
        n: usize,
    ) -> Result<Vec<Ipv6Addr>, ApiError> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let seed = rng.next_u64();
        self.or_404(id)?.take_v6(seed, n)
    }

    /// Takes the /28s a call asks of `id` (a count draws its seed from
    /// `rng` first, whatever the answer).
    pub(crate) fn take_prefixes(
        &mut self,
        rng: &mut Rng,
        id: &str,
        req: &Asked,
    ) -> Result<Vec<Ipv4Addr>, ApiError> {
        match req {
            Asked::Count(n) => {
                let seed = rng.next_u64();
                self.or_404(id)?.take_prefixes(seed, *n)
            }
            Asked::List(l) => self.or_404(id)?.take_specific_prefixes(l),
        }
    }

    /// Takes the /80s a call asks of `id` (a count draws its seed from
    /// `rng` first).
    pub(crate) fn take_v6_prefixes(
        &mut self,
        rng: &mut Rng,
        id: &str,
        req: &Asked,
    ) -> Result<Vec<Ipv6Addr>, ApiError> {
        match req {
            Asked::Count(n) => {
                let seed = rng.next_u64();
                self.or_404(id)?.take_v6_prefixes(seed, *n)
            }
            Asked::List(l) => self.or_404(id)?.take_specific_v6_prefixes(l),
        }
    }

    /// Gives /80s back to `id` (an unknown vswitch takes nothing back).
    pub(crate) fn give_v6_prefixes(&mut self, id: &str, bases: &[Ipv6Addr]) {
        if let Some(v) = self.get_mut(id) {
            v.give_v6_prefixes(bases);
        }
    }

    /// Gives addresses, IPv6 addresses and /28s back to `id` (an unknown
    /// vswitch takes nothing back).
    pub(crate) fn give(
        &mut self,
        id: &str,
        v4: &[Ipv4Addr],
        v6: &[Ipv6Addr],
        prefixes: &[Ipv4Addr],
    ) {
        if let Some(v) = self.get_mut(id) {
            v.give_v4(v4);
            v.give_v6(v6);
            v.give_prefixes(prefixes);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::{Vswitches, PREFIX_SIZE};
    use crate::net::{Net4, Net6};

    fn one(free: Option<u64>) -> Vswitches {
        let v4 = Net4::parse("10.0.0.0/24").unwrap();
        let v6 = Net6::parse("2408:4005:300:ab00::/64").unwrap();
        Vswitches::new("z", &[("vsw-a".into(), v4, Some(v6), free)]).unwrap()
    }

    #[test]
    fn taking_and_giving_back_keeps_the_free_count() {
        let mut s = one(None);
        let v = s.or_404("vsw-a").unwrap();
        let start = v.free();
        assert_eq!(start, 250, "usable addresses of a /24");
        let a = v.take_v4(1, 10).unwrap();
        assert_eq!(v.free(), start - 10);
        let b = v.take_specific_v4(&["10.0.0.200".into()]).unwrap();
        assert_eq!(b, [Ipv4Addr::new(10, 0, 0, 200)]);
        assert!(v.take_specific_v4(&["10.0.0.200".into()]).is_err(), "taken");
        v.give_v4(&a);
        v.give_v4(&a);
        assert_eq!(v.free(), start - 1, "given back once");
        v.give_v4(&b);
        assert_eq!(v.free(), start);
        assert!(s.or_404("vsw-x").is_err());
    }

    #[test]
    fn named_addresses_are_in_the_block_free_and_named_once() {
        let mut s = one(None);
        let v = s.get_mut("vsw-a").unwrap();
        let code = |r: Result<Vec<std::net::Ipv6Addr>, super::ApiError>| r.unwrap_err().code;
        let w = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(code(v.take_specific_v6(&w(&["nope"]))), "InvalidIp.Address");
        assert_eq!(
            code(v.take_specific_v6(&w(&["2408:4005:300:ac00::20"]))),
            "InvalidVSwitchId.IpInvalid"
        );
        assert_eq!(
            code(v.take_specific_v6(&w(&["2408:4005:300:ab00::2"]))),
            "InvalidVSwitchId.IpInvalid",
            "reserved host"
        );
        let a = "2408:4005:300:ab00::20";
        assert_eq!(
            code(v.take_specific_v6(&w(&[a, a]))),
            "InvalidIp.IpAssigned",
            "named twice"
        );
        assert_eq!(v.take_specific_v6(&w(&[a])).unwrap().len(), 1);
        assert_eq!(code(v.take_specific_v6(&w(&[a]))), "InvalidIp.IpAssigned");
        assert!(
            v.take_specific_v4(&w(&["10.0.0.2"])).is_err(),
            "a reserved address"
        );
    }

    #[test]
    fn refused_calls_take_nothing() {
        let mut s = one(Some(5));
        let v = s.get_mut("vsw-a").unwrap();
        assert!(v.take_v4(1, 6).is_err());
        assert!(v
            .take_specific_v4(&["10.0.0.10".into(), "10.0.0.300".into()])
            .is_err());
        assert_eq!(v.free(), 5);
        assert_eq!(v.taken().0.len(), 0);
        assert!(v.take_prefixes(1, 1).is_err(), "5 free: no /28");
    }

    #[test]
    fn prefixes_are_aligned_free_blocks_within_the_cap() {
        let mut s = one(None);
        let v = s.get_mut("vsw-a").unwrap();
        // 256 addresses, the first and last /28 not wholly usable.
        assert_eq!(v.free_prefixes(), 14);
        v.set_prefix_cap(Some(2));
        assert_eq!(v.free_prefixes(), 2);
        let p = v.take_prefixes(3, 2).unwrap();
        assert!(p.iter().all(|b| u32::from(*b) % PREFIX_SIZE as u32 == 0));
        assert_eq!(v.free(), 250 - 32);
        assert_eq!(v.free_prefixes(), 0, "the cap is used up");
        v.give_prefixes(&p);
        assert_eq!(v.free(), 250);
        assert_eq!(v.free_prefixes(), 0, "giving back does not restore the cap");
        v.set_prefix_cap(None);
        let q = v.take_specific_prefixes(&["10.0.0.32/28".into()]).unwrap();
        assert_eq!(q, [Ipv4Addr::new(10, 0, 0, 32)]);
        assert!(
            v.take_specific_v4(&["10.0.0.33".into()]).is_err(),
            "in the /28"
        );
    }

    #[test]
    fn a_restored_book_holds_what_the_enis_hold() {
        let mut s = one(None);
        let v = s.get_mut("vsw-a").unwrap();
        let a = v.take_v4(9, 3).unwrap();
        let b = v.take_v6(9, 2).unwrap();
        let p = v.take_prefixes(9, 1).unwrap();
        let before = v.taken();
        v.forget_taken();
        assert_eq!(v.taken().0.len(), 0);
        v.mark_taken(&a, &b, &p);
        assert_eq!(v.taken(), before);
    }

    #[test]
    fn v6_prefixes_are_80s_of_the_block_apart_from_single_addresses() {
        let mut s = one(None);
        let v = s.or_404("vsw-a").unwrap();
        // A /64 holds 65536 /80s; the first two are the singles'.
        assert_eq!(v.free_v6_prefixes(), 65534);
        let free4 = v.free();
        let singles = v.take_v6(7, 50).unwrap();
        let got = v.take_v6_prefixes(7, 3).unwrap();
        assert_eq!(v.free_v6_prefixes(), 65531);
        assert_eq!(
            v.free(),
            free4,
            "a /80 is not counted in the IPv4 free count"
        );
        let net = u128::from(
            "2408:4005:300:ab00::"
                .parse::<std::net::Ipv6Addr>()
                .unwrap(),
        );
        for p in &got {
            let host = u128::from(*p) - net;
            assert_eq!(host & ((1 << 48) - 1), 0, "{p} is /80-aligned");
            assert!(host >> 48 >= 2, "{p} is past the singles' /80s");
            assert!(singles
                .iter()
                .all(|a| u128::from(*a) >> 48 != u128::from(*p) >> 48));
        }
        // Named: inside the block, aligned, free, past the singles'.
        let code = |r: Result<Vec<std::net::Ipv6Addr>, super::ApiError>| r.unwrap_err().code;
        let w = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            code(v.take_specific_v6_prefixes(&w(&["2408:4005:300:ab00::/80"]))),
            "InvalidVSwitchId.IpInvalid"
        );
        assert_eq!(
            code(v.take_specific_v6_prefixes(&w(&["2408:4005:300:ab00:9:1::/80"]))),
            "InvalidVSwitchId.IpInvalid"
        );
        let taken = format!("{}/80", got[0]);
        assert_eq!(
            code(v.take_specific_v6_prefixes(&w(&[taken.as_str()]))),
            "InvalidIp.IpAssigned"
        );
        assert_eq!(
            v.take_specific_v6_prefixes(&w(&["2408:4005:300:ab00:9::/80"]))
                .unwrap()
                .len(),
            1
        );
        // Given back once; no room is the API's answer for it.
        v.give_v6_prefixes(&got);
        assert_eq!(v.free_v6_prefixes(), 65533);
        v.set_v6_prefix_cap(Some(0));
        assert_eq!(
            code(v.take_v6_prefixes(1, 1)),
            "InvalidVSwitchId.IpNotEnough"
        );
        v.set_v6_prefix_cap(None);
        // No IPv6 block: refused.
        let v4 = Net4::parse("10.0.1.0/24").unwrap();
        let mut s4 = Vswitches::new("z", &[("vsw-b".into(), v4, None, None)]).unwrap();
        let b = s4.or_404("vsw-b").unwrap();
        assert_eq!(b.free_v6_prefixes(), 0);
        assert_eq!(
            code(b.take_v6_prefixes(1, 1)),
            "InvalidVSwitch.Ipv6NotTurnOn"
        );
    }
}
