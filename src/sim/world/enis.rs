//! The dispatcher and the ENI actions: create, attach, detach, delete,
//! describe.

use super::*;

impl World {
    /// Runs one action (already authenticated). `Ok` is the answer body
    /// without RequestId.
    pub(crate) fn act(
        &mut self,
        action: &str,
        version: &str,
        p: &Params,
        now: Instant,
    ) -> Result<Value, ApiError> {
        self.settle(now);
        match (version, action) {
            ("2014-05-26", "CreateNetworkInterface") => self.create(p, now),
            ("2014-05-26", "AttachNetworkInterface") => self.attach(p, now),
            ("2014-05-26", "DetachNetworkInterface") => self.detach(p, now),
            ("2014-05-26", "DeleteNetworkInterface") => self.delete(p, now),
            ("2014-05-26", "DescribeNetworkInterfaces") => self.describe(p),
            ("2014-05-26", "AssignPrivateIpAddresses") => self.assign4(p, now),
            ("2014-05-26", "UnassignPrivateIpAddresses") => self.unassign4(p, now),
            ("2014-05-26", "AssignIpv6Addresses") => self.assign6(p, now),
            ("2014-05-26", "UnassignIpv6Addresses") => self.unassign6(p, now),
            ("2014-05-26", "DescribeInstanceTypes") => self.instance_types(p),
            ("2014-05-26", "DescribeInstanceAttribute") => self.instance_attribute(p),
            ("2014-05-26", "DescribeSecurityGroups") => self.security_groups(p),
            ("2014-05-26", "TagResources") => self.tag_resources(p),
            ("2014-05-26", "UntagResources") => self.untag_resources(p),
            ("2014-05-26", "ListTagResources") => self.list_tag_resources(p),
            ("2016-04-28", "DescribeVSwitches") => self.describe_vswitches(p),
            _ => Err(err(
                404,
                "InvalidApi.NotFound",
                format!("Specified api is not found, please check your url and method. ({action}, version {version})"),
            )),
        }
    }

    /// The security groups of a CreateNetworkInterface
    /// (`SecurityGroupId` or `SecurityGroupIds.N`), each one that exists.
    fn create_sgs(&self, p: &Params) -> Result<Vec<String>, ApiError> {
        let mut sgs = list(p, "SecurityGroupIds", 10)?;
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
        if let Some(bad) = sgs.iter().find(|s| **s != self.sg_id) {
            return Err(err(
                404,
                "InvalidSecurityGroupId.NotFound",
                format!("The specified SecurityGroupId \"{bad}\" does not exist."),
            ));
        }
        Ok(sgs)
    }

    pub(super) fn create(&mut self, p: &Params, now: Instant) -> Result<Value, ApiError> {
        self.check_region(p)?;
        let vsw = need(p, "VSwitchId")?.to_string();
        let sgs = self.create_sgs(p)?;
        let asked4 = asked(p, "PrivateIpAddress", "SecondaryPrivateIpAddressCount")?;
        let secondary = asked4.as_ref().map_or(0, Asked::len);
        let prefix_req = Self::prefix_request(p)?;
        if prefix_req.is_some() && secondary > 0 {
            return Err(Self::mixed_prefixes());
        }
        let n_prefixes = prefix_req.as_ref().map_or(0, Asked::len);
        let asked6 = asked(p, "Ipv6Address", "Ipv6AddressCount")?;
        let v6 = asked6.as_ref().map_or(0, Asked::len);
        let primary = p.get("PrimaryIpAddress").filter(|s| !s.is_empty()).cloned();
        let tags = tags(p)?;
        let description = create_description(p)?;
        let name = p.get("NetworkInterfaceName").cloned().unwrap_or_default();
        if self.vswitches.iter().all(|v| v.id != vsw) {
            return Err(err(
                404,
                "InvalidVSwitchId.NotFound",
                format!("The specified VSwitch \"{vsw}\" does not exist."),
            ));
        }
        if v6 > 0
            && self
                .vswitches
                .iter()
                .any(|v| v.id == vsw && v.cidr6.is_none())
        {
            return Err(err(
                403,
                "InvalidVSwitch.Ipv6NotTurnOn",
                format!("The VSwitch \"{vsw}\" does not have IPv6 enabled."),
            ));
        }
        if secondary + n_prefixes + 1 > self.cfg.itype.ipv4_per_eni as usize {
            return Err(err(
                403,
                "InvalidOperation.Ipv4CountExceeded",
                "The number of private IPv4 addresses on the ENI exceeds the upper limit.",
            ));
        }
        // The primary first, then the secondaries, all or nothing.
        let mut v4 = match &primary {
            Some(ip) => self.take_specific(&vsw, std::slice::from_ref(ip))?,
            None => self.take_v4(&vsw, 1)?,
        };
        let more = match &asked4 {
            Some(Asked::List(l)) => self.take_specific(&vsw, l),
            _ => self.take_v4(&vsw, secondary),
        };
        match more {
            Ok(m) => v4.extend(m),
            Err(e) => {
                self.give_v4(&vsw, &v4);
                return Err(e);
            }
        }
        let v4p = match &prefix_req {
            None => Vec::new(),
            Some(req) => match self.take_prefix_request(&vsw, req) {
                Ok(b) => b,
                Err(e) => {
                    self.give_v4(&vsw, &v4);
                    return Err(e);
                }
            },
        };
        let taken6 = match &asked6 {
            Some(Asked::List(l)) => self.take_specific_v6(&vsw, l),
            _ => self.take_v6(&vsw, v6),
        };
        let v6s = match taken6 {
            Ok(v) => v,
            Err(e) => {
                self.give_v4(&vsw, &v4);
                self.give_prefixes(&vsw, &v4p);
                return Err(e);
            }
        };
        let id = self.new_eni_id();
        let mac = self.new_mac();
        let eni = SimEni {
            id: id.clone(),
            mac,
            vswitch: vsw,
            status: EniStatus::Available,
            pending: None,
            instance: None,
            primary_eni: false,
            v4: new_addrs(&v4, now, true),
            v6: new_addrs(&v6s, now, false),
            v4p: new_addrs(&v4p, now, false),
            tags,
            sgs,
            created: crate::util::time::unix_secs(),
            description,
            name,
            attached_since: None,
            detach_started: None,
            detached_from: None,
            deleted_at: None,
        };
        let body = self.eni_json(&eni);
        self.enis.insert(id, eni);
        Ok(body)
    }

    pub(super) fn instance_check(&self, p: &Params) -> Result<(), ApiError> {
        let i = need(p, "InstanceId")?;
        if !self.is_instance(i) {
            return Err(err(
                404,
                "InvalidEcsId.NotFound",
                format!("The specified InstanceId \"{i}\" does not exist."),
            ));
        }
        Ok(())
    }

    pub(super) fn attach(&mut self, p: &Params, now: Instant) -> Result<Value, ApiError> {
        self.check_region(p)?;
        let id = need(p, "NetworkInterfaceId")?.to_string();
        self.instance_check(p)?;
        let e = self.eni(&id)?;
        Self::not_busy(e)?;
        if e.status != EniStatus::Available {
            return Err(Self::state_error("Available", &e.status));
        }
        let instance = need(p, "InstanceId")?.to_string();
        let attached = self
            .enis
            .values()
            .filter(|e| e.deleted_at.is_none() && e.instance.as_deref() == Some(&instance))
            .count();
        if attached >= self.itype_of_instance(&instance).enis as usize {
            return Err(err(
                403,
                "EniPerInstanceLimitExceeded",
                "The number of ENIs attached to the instance has reached the upper limit.",
            ));
        }
        let delay = self.cfg.attach_delay;
        let e = self.eni_mut(&id)?;
        e.instance = Some(instance);
        if delay.is_zero() {
            e.status = EniStatus::InUse;
            e.attached_since = Some(now);
            e.detach_started = None;
        } else {
            e.status = EniStatus::Attaching;
            e.pending = Some((EniStatus::InUse, now + delay));
        }
        Ok(json!({}))
    }

    pub(super) fn detach(&mut self, p: &Params, now: Instant) -> Result<Value, ApiError> {
        self.check_region(p)?;
        let id = need(p, "NetworkInterfaceId")?.to_string();
        self.instance_check(p)?;
        let e = self.eni(&id)?;
        if e.primary_eni {
            return Err(err(
                400,
                "InvalidOperation.DetachPrimaryEniNotAllowed",
                "The primary ENI cannot be detached.",
            ));
        }
        Self::not_busy(e)?;
        if e.status != EniStatus::InUse {
            return Err(Self::state_error("InUse", &e.status));
        }
        let delay = self.cfg.attach_delay;
        let e = self.eni_mut(&id)?;
        e.detach_started = Some(now);
        e.detached_from = e
            .instance
            .clone()
            .zip(e.attached_since)
            .map(|(i, a)| (i, a, now));
        if delay.is_zero() {
            e.status = EniStatus::Available;
            e.instance = None;
        } else {
            e.status = EniStatus::Detaching;
            e.pending = Some((EniStatus::Available, now + delay));
        }
        Ok(json!({}))
    }

    pub(super) fn delete(&mut self, p: &Params, now: Instant) -> Result<Value, ApiError> {
        self.check_region(p)?;
        let id = need(p, "NetworkInterfaceId")?.to_string();
        let e = self.eni(&id)?;
        Self::not_busy(e)?;
        if e.status != EniStatus::Available || e.primary_eni {
            return Err(Self::state_error("Available", &e.status));
        }
        let delay = self.cfg.attach_delay;
        let e = self.eni_mut(&id)?;
        e.status = EniStatus::Deleting;
        e.pending = Some((EniStatus::Other("Gone".into()), now + delay));
        self.settle(now);
        Ok(json!({}))
    }

    pub(super) fn describe(&mut self, p: &Params) -> Result<Value, ApiError> {
        self.check_region(p)?;
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
        let matched: Vec<&SimEni> = self
            .enis
            .values()
            .filter(|e| e.deleted_at.is_none())
            .filter(|e| ids.is_empty() || ids.contains(&e.id))
            .filter(|e| ips.is_empty() || e.live_v4().any(|a| ips.contains(&a.ip.to_string())))
            .filter(|e| tags_match(&tags, &e.tags))
            .filter(|e| status.as_deref().is_none_or(|s| e.status.as_str() == s))
            .filter(|e| {
                instance
                    .as_deref()
                    .is_none_or(|i| e.instance.as_deref() == Some(i))
            })
            .filter(|e| vswitch.as_deref().is_none_or(|v| e.vswitch == v))
            .filter(|_| vpc.as_deref().is_none_or(|v| v == self.vpc_id))
            .filter(|e| {
                eni_type
                    .as_deref()
                    .is_none_or(|t| (t == "Primary") == e.primary_eni)
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
                .map(|e| self.eni_json(e))
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
            .map(|e| self.eni_json(e))
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
    use std::time::Duration;

    use super::super::World;
    use super::*;

    #[test]
    fn metadata_lags_a_detach_as_it_lags_an_attach() {
        let lag = Duration::from_secs(5);
        let mut w = World::for_tests(lag);
        let params = |kv: &[(&str, &str)]| -> Params {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let (inst, sg) = (w.instance_id.clone(), w.sg_id.clone());
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
}
