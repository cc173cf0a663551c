//! Assigning and unassigning IPv4 addresses, IPv6 addresses and IPv4 /28
//! prefixes.
//!
//! A prefix takes one slot of the ENI's IPv4 quota, the primary address
//! included, and 16 addresses of its vswitch (see [`super::vswitch`]).
//! Assumptions where public material is silent (documented in
//! eniip-sim(1)): an unknown prefix in `Ipv4Prefix.N` of an unassign
//! answers `InvalidIp.IpUnassigned` like an unknown address; mixing
//! prefixes and single addresses in one call is `InvalidParameter`.
//!
//! [`AddressActions`] borrows the parts these touch: the account (region,
//! instance types), the vswitches and the ENIs.

use std::net::Ipv6Addr;
use std::time::Instant;

use serde_json::{json, Value};

use super::account::Account;
use super::eni_table::SimEnis;
use super::params::{
    asked, err, list, missing, mixed_prefixes, mixed_v6_prefixes, need, prefix_request,
    v6_prefix_request, ApiError, Asked, Params,
};
use super::vswitch::Vswitches;
use eniip_util::rand::Rng;

/// The parts an address action touches.
pub(super) struct AddressActions<'a> {
    pub(super) account: &'a Account,
    pub(super) rng: &'a mut Rng,
    pub(super) vswitches: &'a mut Vswitches,
    pub(super) enis: &'a mut SimEnis,
}

fn v4_exceeded() -> ApiError {
    err(
        403,
        "InvalidOperation.Ipv4CountExceeded",
        "The number of private IPv4 addresses on the ENI exceeds the upper limit.",
    )
}

impl AddressActions<'_> {
    /// AssignPrivateIpAddresses: secondary addresses, or /28s.
    pub(super) fn assign4(&mut self, p: &Params, now: Instant) -> Result<Value, ApiError> {
        self.account.check_region(p)?;
        let id = need(p, "NetworkInterfaceId")?.to_string();
        let asked4 = asked(p, "PrivateIpAddress", "SecondaryPrivateIpAddressCount")?;
        if let Some(req) = prefix_request(p)? {
            if asked4.is_some() {
                return Err(mixed_prefixes());
            }
            return self.assign_prefixes(&id, &req, now);
        }
        let asked4 = asked4.ok_or_else(|| missing("SecondaryPrivateIpAddressCount"))?;
        let e = self.enis.get(&id)?;
        e.assignable()?;
        if e.v4_slots() + asked4.len() > self.account.itype_of(e.instance()).ipv4_per_eni as usize {
            return Err(v4_exceeded());
        }
        let vsw = e.vswitch().to_string();
        let ips = match &asked4 {
            Asked::List(l) => self.vswitches.or_404(&vsw)?.take_specific_v4(l)?,
            Asked::Count(n) => self.vswitches.take_v4(self.rng, &vsw, *n)?,
        };
        self.enis.get_mut(&id)?.add(&ips, &[], &[], now);
        Ok(
            json!({"AssignedPrivateIpAddressesSet": {"NetworkInterfaceId": id,
            "PrivateIpSet": {"PrivateIpAddress": ips.iter().map(|a| a.to_string()).collect::<Vec<_>>()},
            "Ipv4PrefixSet": {"Ipv4Prefixes": []}}}),
        )
    }

    /// UnassignPrivateIpAddresses: secondary addresses, or /28s, all or
    /// none.
    pub(super) fn unassign4(&mut self, p: &Params, now: Instant) -> Result<Value, ApiError> {
        self.account.check_region(p)?;
        let id = need(p, "NetworkInterfaceId")?.to_string();
        let ips = list(p, "PrivateIpAddress", 50)?;
        let prefixes = list(p, "Ipv4Prefix", 10)?;
        if !prefixes.is_empty() {
            if !ips.is_empty() {
                return Err(mixed_prefixes());
            }
            let e = self.enis.get_mut(&id)?;
            let gone = e.unassign_v4p(&prefixes, now)?;
            let vsw = e.vswitch().to_string();
            self.vswitches.give(&vsw, &[], &[], &gone);
            return Ok(json!({}));
        }
        if ips.is_empty() {
            return Err(missing("PrivateIpAddress.1"));
        }
        let e = self.enis.get_mut(&id)?;
        let gone = e.unassign_v4(&ips, now)?;
        let vsw = e.vswitch().to_string();
        self.vswitches.give(&vsw, &gone, &[], &[]);
        Ok(json!({}))
    }

    /// AssignIpv6Addresses.
    pub(super) fn assign6(&mut self, p: &Params, now: Instant) -> Result<Value, ApiError> {
        self.account.check_region(p)?;
        let id = need(p, "NetworkInterfaceId")?.to_string();
        let v6p_req = v6_prefix_request(p)?;
        let asked6 = asked(p, "Ipv6Address", "Ipv6AddressCount")?;
        if v6p_req.is_some() && asked6.is_some() {
            return Err(mixed_v6_prefixes());
        }
        if let Some(req) = v6p_req {
            return self.assign_v6_prefixes(&id, &req, now);
        }
        let asked6 = asked6.ok_or_else(|| missing("Ipv6AddressCount"))?;
        let e = self.enis.get(&id)?;
        e.assignable()?;
        if e.v6_slots() + asked6.len() > self.account.itype_of(e.instance()).ipv6_per_eni as usize {
            return Err(err(
                403,
                "InvalidOperation.Ipv6CountExceeded",
                "The number of IPv6 addresses on the ENI exceeds the upper limit.",
            ));
        }
        let vsw = e.vswitch().to_string();
        let ips = match &asked6 {
            Asked::List(l) => self.vswitches.or_404(&vsw)?.take_specific_v6(l)?,
            Asked::Count(n) => self.vswitches.take_v6(self.rng, &vsw, *n)?,
        };
        self.enis.get_mut(&id)?.add(&[], &ips, &[], now);
        Ok(
            json!({"NetworkInterfaceId": id, "Ipv6Sets": {"Ipv6Address": ips.iter().map(|a| a.to_string()).collect::<Vec<_>>()},
            "Ipv6PrefixSets": {"Ipv6Prefix": []}}),
        )
    }

    /// AssignIpv6Addresses with `Ipv6PrefixCount` or `Ipv6Prefix.N`: a /80
    /// takes one slot of the ENI's IPv6 quota. The answer lists the /80s
    /// as strings (`Ipv6PrefixSets.Ipv6Prefix`), unlike Describe.
    fn assign_v6_prefixes(
        &mut self,
        id: &str,
        req: &Asked,
        now: Instant,
    ) -> Result<Value, ApiError> {
        let e = self.enis.get(id)?;
        e.assignable()?;
        if e.v6_slots() + req.len() > self.account.itype_of(e.instance()).ipv6_per_eni as usize {
            return Err(err(
                403,
                "InvalidOperation.Ipv6CountExceeded",
                "The number of IPv6 addresses on the ENI exceeds the upper limit.",
            ));
        }
        let vsw = e.vswitch().to_string();
        let bases = self.vswitches.take_v6_prefixes(self.rng, &vsw, req)?;
        self.enis.get_mut(id)?.add_v6p(&bases, now);
        Ok(
            json!({"NetworkInterfaceId": id, "Ipv6Sets": {"Ipv6Address": []},
            "Ipv6PrefixSets": {"Ipv6Prefix": bases.iter().map(|b| format!("{b}/80")).collect::<Vec<_>>()}}),
        )
    }

    /// UnassignIpv6Addresses (`Ipv6Address.N`, `Ipv6Prefix.N` or both),
    /// all or none.
    pub(super) fn unassign6(&mut self, p: &Params, now: Instant) -> Result<Value, ApiError> {
        self.account.check_region(p)?;
        let id = need(p, "NetworkInterfaceId")?.to_string();
        let ips = list(p, "Ipv6Address", 50)?;
        let prefixes = list(p, "Ipv6Prefix", 10)?;
        if ips.is_empty() && prefixes.is_empty() {
            return Err(missing("Ipv6Address.1"));
        }
        let e = self.enis.get_mut(&id)?;
        e.assignable()?;
        // All or none across both lists: the /80s are taken off first,
        // and only when every address named is there too.
        if !ips.is_empty() {
            let live: Vec<Ipv6Addr> = e.live_v6().collect();
            if let Some(w) = ips
                .iter()
                .find(|w| !w.parse::<Ipv6Addr>().is_ok_and(|a| live.contains(&a)))
            {
                return Err(err(
                    403,
                    "InvalidIp.IpUnassigned",
                    format!("The specified IP \"{w}\" is not assigned on this ENI."),
                ));
            }
        }
        let gone_p = if prefixes.is_empty() {
            Vec::new()
        } else {
            e.unassign_v6p(&prefixes, now)?
        };
        let gone = if ips.is_empty() {
            Vec::new()
        } else {
            e.unassign_v6(&ips, now)?
        };
        let vsw = e.vswitch().to_string();
        self.vswitches.give(&vsw, &[], &gone, &[]);
        self.vswitches.give_v6_prefixes(&vsw, &gone_p);
        Ok(json!({}))
    }

    /// AssignPrivateIpAddresses with `Ipv4PrefixCount` or `Ipv4Prefix.N`.
    fn assign_prefixes(&mut self, id: &str, req: &Asked, now: Instant) -> Result<Value, ApiError> {
        let e = self.enis.get(id)?;
        e.assignable()?;
        if e.v4_slots() + req.len() > self.account.itype_of(e.instance()).ipv4_per_eni as usize {
            return Err(v4_exceeded());
        }
        let vsw = e.vswitch().to_string();
        let bases = self.vswitches.take_prefixes(self.rng, &vsw, req)?;
        self.enis.get_mut(id)?.add(&[], &[], &bases, now);
        Ok(
            json!({"AssignedPrivateIpAddressesSet": {"NetworkInterfaceId": id,
            "PrivateIpSet": {"PrivateIpAddress": []},
            "Ipv4PrefixSet": {"Ipv4Prefixes": bases.iter().map(|b| format!("{b}/28")).collect::<Vec<_>>()}}}),
        )
    }
}
