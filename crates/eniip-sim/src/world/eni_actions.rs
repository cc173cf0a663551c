//! The ENI actions: create, attach, detach, delete, describe, modify
//! (security groups, name, description).
//!
//! [`EniActions`] borrows the parts they touch: the account (region,
//! instances, security group), the vswitches an ENI's addresses come from
//! and go back to, and the ENIs.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::account::Account;
use super::eni_table::SimEnis;
use super::params::{
    asked, err, int, invalid, list, missing, mixed_prefixes, mixed_v6_prefixes, need,
    prefix_request, tags, tags_match, v6_prefix_request, ApiError, Asked, Params,
};
use super::sim_eni::{NewEni, SimEni};
use super::vswitch::Vswitches;
use eniip_cloud::EniStatus;
use eniip_util::rand::Rng;

/// What a create took of its vswitch.
struct Taken {
    /// Addresses, the primary first.
    v4: Vec<Ipv4Addr>,
    /// /28s by network address.
    v4p: Vec<Ipv4Addr>,
    /// IPv6 addresses.
    v6: Vec<Ipv6Addr>,
    /// IPv6 /80s by network address.
    v6p: Vec<Ipv6Addr>,
}

/// The parts an ENI action touches.
pub(super) struct EniActions<'a> {
    pub(super) account: &'a Account,
    pub(super) rng: &'a mut Rng,
    pub(super) vswitches: &'a mut Vswitches,
    pub(super) enis: &'a mut SimEnis,
    /// How long an attach, detach or delete takes.
    pub(super) attach_delay: Duration,
    /// How long metadata lags (a deleted ENI lingers that long).
    pub(super) metadata_lag: Duration,
}

impl EniActions<'_> {
    /// The security groups of a CreateNetworkInterface
    /// (`SecurityGroupId` or `SecurityGroupIds.N`, not both).
    fn create_sgs(&self, p: &Params) -> Result<Vec<String>, ApiError> {
        let mut sgs = list(p, "SecurityGroupIds", MAX_SG_INDEX)?;
        if let Some(sg) = p.get("SecurityGroupId").filter(|s| !s.is_empty()) {
            if !sgs.is_empty() {
                return Err(invalid(
                    "SecurityGroupId",
                    "give SecurityGroupId or SecurityGroupIds.N, not both",
                ));
            }
            sgs.push(sg.clone());
        }
        if sgs.is_empty() {
            return Err(missing("SecurityGroupId"));
        }
        self.check_sgs("SecurityGroupIds", sgs)
    }

    /// A set of security groups an ENI may be in: each once, at most
    /// [`MAX_SGS_PER_ENI`], every one a group of the VPC (the service's
    /// codes: `InstanceSecurityGroupLimitExceeded` for too many,
    /// `InvalidSecurityGroupId.NotFound` for one the VPC does not have).
    fn check_sgs(&self, name: &str, sgs: Vec<String>) -> Result<Vec<String>, ApiError> {
        if let Some(i) = (1..sgs.len()).find(|&i| sgs[..i].contains(&sgs[i])) {
            return Err(invalid(
                &format!("{name}.{}", i + 1),
                &format!("security group {} is given twice", sgs[i]),
            ));
        }
        if sgs.len() > MAX_SGS_PER_ENI {
            return Err(err(
                400,
                "InstanceSecurityGroupLimitExceeded",
                "Exceeding the allowed amount of security groups that an instance can be in.",
            ));
        }
        if let Some(bad) = sgs.iter().find(|s| !self.account.has_sg(s)) {
            return Err(err(
                404,
                "InvalidSecurityGroupId.NotFound",
                format!("The specified SecurityGroupId \"{bad}\" does not exist."),
            ));
        }
        Ok(sgs)
    }

    /// ModifyNetworkInterfaceAttribute: an ENI's security groups
    /// (`SecurityGroupId.N`: the whole new set), name and description;
    /// all checked before anything changes.
    pub(super) fn modify(&mut self, p: &Params) -> Result<Value, ApiError> {
        self.account.check_region(p)?;
        let id = need(p, "NetworkInterfaceId")?.to_string();
        let given = list(p, "SecurityGroupId", MAX_SG_INDEX)?;
        let sgs = match given.is_empty() {
            true => None,
            false => Some(self.check_sgs("SecurityGroupId", given)?),
        };
        let name = match p.get("NetworkInterfaceName").filter(|s| !s.is_empty()) {
            Some(n) if !name_ok(n) => {
                return Err(invalid(
                    "NetworkInterfaceName",
                    "2 to 128 characters, starting with a letter, not with http:// or https://",
                ))
            }
            n => n.cloned(),
        };
        let description = match p.get("Description").filter(|s| !s.is_empty()) {
            Some(_) => Some(create_description(p)?),
            None => None,
        };
        self.enis.get_mut(&id)?.modify(sgs, name, description)?;
        Ok(json!({}))
    }

    /// CreateNetworkInterface: the primary address, then the secondaries
    /// or the /28s, then the IPv6 addresses, all or none.
    pub(super) fn create(&mut self, p: &Params, now: Instant) -> Result<Value, ApiError> {
        self.account.check_region(p)?;
        let vsw = need(p, "VSwitchId")?.to_string();
        let sgs = self.create_sgs(p)?;
        let asked4 = asked(p, "PrivateIpAddress", "SecondaryPrivateIpAddressCount")?;
        let secondary = asked4.as_ref().map_or(0, Asked::len);
        let prefix_req = prefix_request(p)?;
        if prefix_req.is_some() && secondary > 0 {
            return Err(mixed_prefixes());
        }
        let n_prefixes = prefix_req.as_ref().map_or(0, Asked::len);
        let asked6 = asked(p, "Ipv6Address", "Ipv6AddressCount")?;
        let v6p_req = v6_prefix_request(p)?;
        if v6p_req.is_some() && asked6.is_some() {
            return Err(mixed_v6_prefixes());
        }
        let v6 = asked6.as_ref().map_or(0, Asked::len) + v6p_req.as_ref().map_or(0, Asked::len);
        let primary = p.get("PrimaryIpAddress").filter(|s| !s.is_empty()).cloned();
        let tags = tags(p)?;
        let description = create_description(p)?;
        let name = p.get("NetworkInterfaceName").cloned().unwrap_or_default();
        let Some(zone) = self.vswitches.get(&vsw).map(|v| v.zone().to_string()) else {
            return Err(err(
                404,
                "InvalidVSwitchId.NotFound",
                format!("The specified VSwitch \"{vsw}\" does not exist."),
            ));
        };
        if v6 > 0
            && self
                .vswitches
                .get(&vsw)
                .is_some_and(|v| v.cidr6().is_none())
        {
            return Err(err(
                403,
                "InvalidVSwitch.Ipv6NotTurnOn",
                format!("The VSwitch \"{vsw}\" does not have IPv6 enabled."),
            ));
        }
        if secondary + n_prefixes + 1 > self.account.itype().ipv4_per_eni as usize {
            return Err(err(
                403,
                "InvalidOperation.Ipv4CountExceeded",
                "The number of private IPv4 addresses on the ENI exceeds the upper limit.",
            ));
        }
        if v6 > self.account.itype().ipv6_per_eni as usize {
            return Err(err(
                403,
                "InvalidOperation.Ipv6CountExceeded",
                "The number of IPv6 addresses on the ENI exceeds the upper limit.",
            ));
        }
        let mut taken = self.take_for_create(&vsw, (primary, asked4), prefix_req, asked6)?;
        if let Some(req) = &v6p_req {
            match self.vswitches.take_v6_prefixes(self.rng, &vsw, req) {
                Ok(b) => taken.v6p = b,
                Err(e) => {
                    self.vswitches.give(&vsw, &taken.v4, &taken.v6, &taken.v4p);
                    return Err(e);
                }
            }
        }
        let id = self.account.new_id("eni", self.rng);
        let mac = self.enis.new_mac(self.rng);
        let eni = SimEni::created(
            id,
            mac,
            NewEni {
                vswitch: vsw,
                v4: taken.v4,
                v6: taken.v6,
                v4p: taken.v4p,
                v6p: taken.v6p,
                tags,
                sgs,
                description,
                name,
            },
            now,
        );
        let body = eni.describe(&zone, self.account.vpc_id());
        self.enis.insert(eni);
        Ok(body)
    }

    /// The addresses, /28s and IPv6 addresses a create asks of `vsw`: all,
    /// or none (what was taken before a refusal goes back).
    fn take_for_create(
        &mut self,
        vsw: &str,
        (primary, asked4): (Option<String>, Option<Asked>),
        prefixes: Option<Asked>,
        asked6: Option<Asked>,
    ) -> Result<Taken, ApiError> {
        let mut v4 = match &primary {
            Some(ip) => self
                .vswitches
                .or_404(vsw)?
                .take_specific_v4(std::slice::from_ref(ip))?,
            None => self.vswitches.take_v4(self.rng, vsw, 1)?,
        };
        let more = match &asked4 {
            Some(Asked::List(l)) => self
                .vswitches
                .or_404(vsw)
                .and_then(|v| v.take_specific_v4(l)),
            Some(Asked::Count(n)) => self.vswitches.take_v4(self.rng, vsw, *n),
            None => self.vswitches.take_v4(self.rng, vsw, 0),
        };
        match more {
            Ok(m) => v4.extend(m),
            Err(e) => {
                self.vswitches.give(vsw, &v4, &[], &[]);
                return Err(e);
            }
        }
        let v4p = match &prefixes {
            None => Vec::new(),
            Some(req) => match self.vswitches.take_prefixes(self.rng, vsw, req) {
                Ok(b) => b,
                Err(e) => {
                    self.vswitches.give(vsw, &v4, &[], &[]);
                    return Err(e);
                }
            },
        };
        let taken6 = match &asked6 {
            Some(Asked::List(l)) => self
                .vswitches
                .or_404(vsw)
                .and_then(|v| v.take_specific_v6(l)),
            Some(Asked::Count(n)) => self.vswitches.take_v6(self.rng, vsw, *n),
            None => self.vswitches.take_v6(self.rng, vsw, 0),
        };
        match taken6 {
            Ok(v6) => Ok(Taken {
                v4,
                v4p,
                v6,
                v6p: Vec::new(),
            }),
            Err(e) => {
                self.vswitches.give(vsw, &v4, &[], &v4p);
                Err(e)
            }
        }
    }

    /// AttachNetworkInterface: refused beyond the instance type's ENIs.
    pub(super) fn attach(&mut self, p: &Params, now: Instant) -> Result<Value, ApiError> {
        self.account.check_region(p)?;
        let id = need(p, "NetworkInterfaceId")?.to_string();
        self.account.check_instance(p)?;
        self.enis.get(&id)?.attachable()?;
        let instance = need(p, "InstanceId")?.to_string();
        let itype = self.account.itype_of(Some(&instance));
        if self.enis.attached_to(&instance) >= itype.enis as usize {
            return Err(err(
                403,
                "EniPerInstanceLimitExceeded",
                "The number of ENIs attached to the instance has reached the upper limit.",
            ));
        }
        self.enis
            .get_mut(&id)?
            .attach(&instance, now, self.attach_delay)?;
        Ok(json!({}))
    }

    /// DetachNetworkInterface.
    pub(super) fn detach(&mut self, p: &Params, now: Instant) -> Result<Value, ApiError> {
        self.account.check_region(p)?;
        let id = need(p, "NetworkInterfaceId")?.to_string();
        self.account.check_instance(p)?;
        self.enis.get_mut(&id)?.detach(now, self.attach_delay)?;
        Ok(json!({}))
    }

    /// DeleteNetworkInterface: with no attach delay, gone (and its
    /// addresses back in its vswitch) at once.
    pub(super) fn delete(&mut self, p: &Params, now: Instant) -> Result<Value, ApiError> {
        self.account.check_region(p)?;
        let id = need(p, "NetworkInterfaceId")?.to_string();
        self.enis.get_mut(&id)?.delete(now, self.attach_delay)?;
        for (vsw, v4, v6, v4p, v6p) in self.enis.settle(now, self.metadata_lag) {
            self.vswitches.give(&vsw, &v4, &v6, &v4p);
            self.vswitches.give_v6_prefixes(&vsw, &v6p);
        }
        Ok(json!({}))
    }

    /// DescribeNetworkInterfaces, with its filters and both ways of paging.
    pub(super) fn describe(&mut self, p: &Params) -> Result<Value, ApiError> {
        self.account.check_region(p)?;
        let ids = list(p, "NetworkInterfaceId", 100)?;
        let ips = list(p, "PrivateIpAddress", 100)?;
        let tags = tags(p)?;
        let status = p.get("Status").filter(|s| !s.is_empty()).cloned();
        if let Some(s) = &status {
            if matches!(EniStatus::parse(s), EniStatus::Other(_)) {
                return Err(invalid(
                    "Status",
                    "expected Available, Attaching, InUse, Detaching or Deleting",
                ));
            }
        }
        let filter = |k: &str| p.get(k).filter(|s| !s.is_empty()).cloned();
        let (instance, vswitch, eni_type, primary_ip, vpc) = (
            filter("InstanceId"),
            filter("VSwitchId"),
            filter("Type"),
            filter("PrimaryIpAddress"),
            filter("VpcId"),
        );
        let sg = filter("SecurityGroupId");
        let vpc_id = self.account.vpc_id();
        let matched: Vec<&SimEni> = self
            .enis
            .live()
            .filter(|e| ids.is_empty() || ids.iter().any(|i| i == e.id()))
            .filter(|e| ips.is_empty() || e.live_v4().any(|a| ips.contains(&a.to_string())))
            .filter(|e| tags_match(&tags, e.tags()))
            .filter(|e| status.as_deref().is_none_or(|s| e.status().as_str() == s))
            .filter(|e| instance.as_deref().is_none_or(|i| e.instance() == Some(i)))
            .filter(|e| vswitch.as_deref().is_none_or(|v| e.vswitch() == v))
            .filter(|_| vpc.as_deref().is_none_or(|v| v == vpc_id))
            .filter(|e| sg.as_deref().is_none_or(|g| e.sgs().iter().any(|s| s == g)))
            .filter(|e| {
                eni_type
                    .as_deref()
                    .is_none_or(|t| (t == "Primary") == e.is_primary_eni())
            })
            .filter(|e| {
                primary_ip
                    .as_deref()
                    .is_none_or(|ip| e.primary_ip().map(|a| a.to_string()).as_deref() == Some(ip))
            })
            .collect();
        let total = matched.len();
        if p.contains_key("PageNumber") || p.contains_key("PageSize") {
            let page = int(p, "PageNumber", 1, 1_000_000)?.unwrap_or(1) as usize;
            let size = int(p, "PageSize", 1, 1000)?.unwrap_or(10) as usize;
            let items: Vec<Value> = matched
                .iter()
                .skip((page - 1) * size)
                .take(size)
                .map(|e| self.describe_one(e))
                .collect();
            return Ok(
                json!({"TotalCount": total, "PageNumber": page, "PageSize": size,
                "NetworkInterfaceSets": {"NetworkInterfaceSet": items}}),
            );
        }
        let max = match p.get("MaxResults") {
            None => 10,
            Some(v) => v
                .trim()
                .parse::<usize>()
                .map_err(|_| invalid("MaxResults", "expected an integer"))?
                .clamp(10, 500),
        };
        let start = match p.get("NextToken").filter(|s| !s.is_empty()) {
            None => 0,
            Some(t) => t
                .strip_prefix("nt-")
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| *n <= total)
                .ok_or_else(|| invalid("NextToken", "unknown token"))?,
        };
        let end = (start + max).min(total);
        let items: Vec<Value> = matched[start..end]
            .iter()
            .map(|e| self.describe_one(e))
            .collect();
        let next = if end < total {
            format!("nt-{end}")
        } else {
            String::new()
        };
        Ok(
            json!({"NextToken": next, "TotalCount": total, "PageNumber": start / max + 1, "PageSize": max,
                "NetworkInterfaceSets": {"NetworkInterfaceSet": items}}),
        )
    }

    /// One ENI as DescribeNetworkInterfaces shows it.
    fn describe_one(&self, e: &SimEni) -> Value {
        let zone = self.vswitches.get(e.vswitch()).map_or("", |v| v.zone());
        e.describe(zone, self.account.vpc_id())
    }
}

/// The most security groups an ENI can be in (ModifyNetworkInterfaceAttribute:
/// "Valid values of N: 1, 2, 3, 4, and 5").
pub(crate) const MAX_SGS_PER_ENI: usize = 5;

/// The highest index of a `SecurityGroupIds.N` the emulator reads: the
/// quota an account can be raised to (16); beyond [`MAX_SGS_PER_ENI`]
/// the answer is the service's limit error, beyond this one a malformed
/// parameter.
const MAX_SG_INDEX: usize = 16;

/// A `NetworkInterfaceName` as the service takes it: 2 to 128
/// characters, a letter first, not a URL.
fn name_ok(n: &str) -> bool {
    (2..=128).contains(&n.chars().count())
        && n.chars().next().is_some_and(char::is_alphabetic)
        && !n.starts_with("http://")
        && !n.starts_with("https://")
}

/// The `Description` of a CreateNetworkInterface, as the real service
/// checks it (2 to 256 characters, not a URL).
fn create_description(p: &Params) -> Result<String, ApiError> {
    let d = p.get("Description").cloned().unwrap_or_default();
    if !d.is_empty()
        && (d.len() < 2 || d.len() > 256 || d.starts_with("http://") || d.starts_with("https://"))
    {
        return Err(err(
            400,
            "InvalidDescription.Malformed",
            "The specified description is wrongly formed.",
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::super::{Params, World};

    #[test]
    fn metadata_lags_a_detach_as_it_lags_an_attach() {
        let lag = Duration::from_secs(5);
        let mut w = World::for_tests(lag, 7);
        let params = |kv: &[(&str, &str)]| -> Params {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let inst = w.account().instance_id().to_string();
        let sg = w.account().sg_id().to_string();
        let t0 = Instant::now();
        let made = w
            .act(
                "CreateNetworkInterface",
                "2014-05-26",
                &params(&[
                    ("RegionId", "cn-hangzhou"),
                    ("VSwitchId", "vsw-1"),
                    ("SecurityGroupId", &sg),
                ]),
                t0,
            )
            .unwrap();
        let id = made["NetworkInterfaceId"].as_str().unwrap().to_string();
        let on = params(&[
            ("RegionId", "cn-hangzhou"),
            ("NetworkInterfaceId", &id),
            ("InstanceId", &inst),
        ]);
        w.act("AttachNetworkInterface", "2014-05-26", &on, t0)
            .unwrap();
        let mut shown = |at: Instant| w.metadata_enis(at, &inst).iter().any(|e| e.id == id);
        assert!(!shown(t0 + Duration::from_secs(1)), "an attach lags");
        assert!(shown(t0 + Duration::from_secs(6)));
        let t1 = t0 + Duration::from_secs(10);
        w.act("DetachNetworkInterface", "2014-05-26", &on, t1)
            .unwrap();
        let mut shown = |at: Instant| w.metadata_enis(at, &inst).iter().any(|e| e.id == id);
        assert!(shown(t1 + Duration::from_secs(1)), "a detach lags too");
        assert!(!shown(t1 + Duration::from_secs(6)));
        // Attached again: shown once the lag has passed that attach.
        let t2 = t1 + Duration::from_secs(20);
        w.act("AttachNetworkInterface", "2014-05-26", &on, t2)
            .unwrap();
        let mut shown = |at: Instant| w.metadata_enis(at, &inst).iter().any(|e| e.id == id);
        assert!(!shown(t2 + Duration::from_secs(1)));
        assert!(shown(t2 + Duration::from_secs(6)));
    }

    fn params(kv: &[(&str, &str)]) -> Params {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Creates an ENI on vsw-1 with `sgs` as `SecurityGroupIds.N`.
    fn create(w: &mut World, sgs: &[&str]) -> Result<String, String> {
        let mut kv = vec![
            ("RegionId".to_string(), "cn-hangzhou".to_string()),
            ("VSwitchId".to_string(), "vsw-1".to_string()),
        ];
        for (i, sg) in sgs.iter().enumerate() {
            kv.push((format!("SecurityGroupIds.{}", i + 1), sg.to_string()));
        }
        let p: Params = kv.into_iter().collect();
        w.act("CreateNetworkInterface", "2014-05-26", &p, Instant::now())
            .map(|v| v["NetworkInterfaceId"].as_str().unwrap().to_string())
            .map_err(|e| e.code)
    }

    fn modify(w: &mut World, id: &str, sgs: &[&str]) -> Result<(), String> {
        let mut kv = vec![
            ("RegionId".to_string(), "cn-hangzhou".to_string()),
            ("NetworkInterfaceId".to_string(), id.to_string()),
        ];
        for (i, sg) in sgs.iter().enumerate() {
            kv.push((format!("SecurityGroupId.{}", i + 1), sg.to_string()));
        }
        let p: Params = kv.into_iter().collect();
        w.act(
            "ModifyNetworkInterfaceAttribute",
            "2014-05-26",
            &p,
            Instant::now(),
        )
        .map(|_| ())
        .map_err(|e| e.code)
    }

    fn described_sgs(w: &mut World, id: &str) -> Vec<String> {
        let v = w
            .act(
                "DescribeNetworkInterfaces",
                "2014-05-26",
                &params(&[("RegionId", "cn-hangzhou"), ("NetworkInterfaceId.1", id)]),
                Instant::now(),
            )
            .unwrap();
        serde_json::from_value(
            v["NetworkInterfaceSets"]["NetworkInterfaceSet"][0]["SecurityGroupIds"]
                ["SecurityGroupId"]
                .clone(),
        )
        .unwrap()
    }

    #[test]
    fn an_eni_is_created_in_any_set_of_the_vpcs_groups_and_no_other() {
        let mut w = World::for_tests(Duration::ZERO, 7);
        let own = w.account().sg_id().to_string();
        let id = create(&mut w, &["sg-b", "sg-a"]).unwrap();
        assert_eq!(described_sgs(&mut w, &id), ["sg-b", "sg-a"], "as given");
        let id2 = create(&mut w, &[&own, "sg-a", "sg-b", "sg-c"]).unwrap();
        assert_eq!(described_sgs(&mut w, &id2).len(), 4);
        assert_eq!(
            create(&mut w, &["sg-a", "sg-nope"]).unwrap_err(),
            "InvalidSecurityGroupId.NotFound"
        );
        let six = ["sg-a", "sg-b", "sg-c", &own, "sg-d", "sg-e"];
        assert_eq!(
            create(&mut w, &six).unwrap_err(),
            "InstanceSecurityGroupLimitExceeded",
            "at most 5, before whether each exists"
        );
        assert_eq!(
            create(&mut w, &["sg-a", "sg-a"]).unwrap_err(),
            "InvalidParameter"
        );
        // The older single SecurityGroupId, and not both forms at once.
        let one = params(&[
            ("RegionId", "cn-hangzhou"),
            ("VSwitchId", "vsw-1"),
            ("SecurityGroupId", "sg-c"),
        ]);
        let made = w
            .act("CreateNetworkInterface", "2014-05-26", &one, Instant::now())
            .unwrap();
        assert_eq!(
            made["SecurityGroupIds"]["SecurityGroupId"],
            serde_json::json!(["sg-c"])
        );
        let mut both = one.clone();
        both.insert("SecurityGroupIds.1".into(), "sg-a".into());
        let e = w
            .act(
                "CreateNetworkInterface",
                "2014-05-26",
                &both,
                Instant::now(),
            )
            .unwrap_err();
        assert_eq!(e.code, "InvalidParameter");
        // Refused creates took nothing.
        let state = w.state_json(Instant::now());
        assert_eq!(state["enis"].as_array().unwrap().len(), 4, "primary + 3");
    }

    #[test]
    fn modify_replaces_the_whole_set_and_checks_it_as_create_does() {
        let mut w = World::for_tests(Duration::ZERO, 7);
        let id = create(&mut w, &["sg-a", "sg-b"]).unwrap();
        modify(&mut w, &id, &["sg-c"]).unwrap();
        assert_eq!(described_sgs(&mut w, &id), ["sg-c"]);
        assert_eq!(
            modify(&mut w, &id, &["sg-a", "sg-zzz"]).unwrap_err(),
            "InvalidSecurityGroupId.NotFound"
        );
        assert_eq!(
            modify(
                &mut w,
                &id,
                &["sg-a", "sg-b", "sg-c", "sg-d", "sg-e", "sg-f"]
            )
            .unwrap_err(),
            "InstanceSecurityGroupLimitExceeded"
        );
        assert_eq!(
            described_sgs(&mut w, &id),
            ["sg-c"],
            "a refusal changes nothing"
        );
        assert_eq!(
            modify(&mut w, "eni-nope", &["sg-a"]).unwrap_err(),
            "InvalidEniId.NotFound"
        );
        let primary = w.state_json(Instant::now())["enis"][0]["id"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            modify(&mut w, &primary, &["sg-a"]).unwrap_err(),
            "InvalidOperation.InvalidEniType"
        );
        // Name and description, without the groups.
        let named = params(&[
            ("RegionId", "cn-hangzhou"),
            ("NetworkInterfaceId", &id),
            ("NetworkInterfaceName", "pods-a"),
            ("Description", "for pods"),
        ]);
        w.act(
            "ModifyNetworkInterfaceAttribute",
            "2014-05-26",
            &named,
            Instant::now(),
        )
        .unwrap();
        let mut bad = named.clone();
        bad.insert("NetworkInterfaceName".into(), "9lives".into());
        let e = w
            .act(
                "ModifyNetworkInterfaceAttribute",
                "2014-05-26",
                &bad,
                Instant::now(),
            )
            .unwrap_err();
        assert_eq!(e.code, "InvalidParameter");
        let v = w
            .act(
                "DescribeNetworkInterfaces",
                "2014-05-26",
                &params(&[("RegionId", "cn-hangzhou"), ("SecurityGroupId", "sg-c")]),
                Instant::now(),
            )
            .unwrap();
        let set = &v["NetworkInterfaceSets"]["NetworkInterfaceSet"];
        assert_eq!(set.as_array().unwrap().len(), 1, "filtered by group");
        assert_eq!(set[0]["NetworkInterfaceName"], "pods-a");
        assert_eq!(set[0]["Description"], "for pods");
        assert_eq!(
            set[0]["SecurityGroupIds"]["SecurityGroupId"],
            serde_json::json!(["sg-c"])
        );
    }

    #[test]
    fn groups_are_in_the_state_and_survive_a_saved_world() {
        let mut w = World::for_tests(Duration::ZERO, 7);
        let id = create(&mut w, &["sg-a", "sg-b"]).unwrap();
        let state = w.state_json(Instant::now());
        let eni = state["enis"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == id.as_str())
            .unwrap();
        assert_eq!(
            eni["security_group_ids"],
            serde_json::json!(["sg-a", "sg-b"])
        );
        let own = w.account().sg_id().to_string();
        assert_eq!(
            state["enis"][0]["security_group_ids"],
            serde_json::json!([own])
        );
        let saved = w.saved();
        let mut other = World::new(
            super::super::WorldConfig {
                security_groups: Vec::new(),
                ..test_config()
            },
            eniip_util::rand::Rng::seeded(9),
        )
        .unwrap();
        other.restore(&saved).unwrap();
        assert_eq!(described_sgs(&mut other, &id), ["sg-a", "sg-b"]);
        // The VPC's groups came back with it: a new ENI can use them.
        create(&mut other, &["sg-c"]).unwrap();
        let groups = other
            .act(
                "DescribeSecurityGroups",
                "2014-05-26",
                &params(&[("RegionId", "cn-hangzhou")]),
                Instant::now(),
            )
            .unwrap();
        let ids: Vec<&str> = groups["SecurityGroups"]["SecurityGroup"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["SecurityGroupId"].as_str().unwrap())
            .collect();
        assert_eq!(ids, [own.as_str(), "sg-a", "sg-b", "sg-c"]);
    }

    fn test_config() -> super::super::WorldConfig {
        super::super::WorldConfig {
            region: "cn-hangzhou".into(),
            zone: "cn-hangzhou-i".into(),
            itype: crate::types::find("ecs.g7.xlarge").unwrap(),
            vswitches: vec![(
                "vsw-1".into(),
                crate::net::Net4::parse("192.168.0.0/24").unwrap(),
                None,
                None,
            )],
            attach_delay: Duration::ZERO,
            metadata_lag: Duration::ZERO,
            security_groups: Vec::new(),
        }
    }
}
