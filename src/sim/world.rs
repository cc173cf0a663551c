//! The emulated cloud: one instance with its primary ENI, vswitches with
//! finite free addresses, ENIs with the asynchronous state machine of the
//! real API, and a log of every address's life so the metadata service can
//! show the world as it was `metadata_lag` ago.
//!
//! State transitions (Attaching -> InUse, Detaching -> Available,
//! Deleting -> gone) are settled lazily, on every access, from the
//! monotonic clock. Everything random comes from one seeded generator.

use std::collections::{BTreeMap, HashSet};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::net::{Net4, Net6};
use super::types::InstanceType;
use crate::cloud::EniStatus;
use crate::util::rand::Rng;

/// An error answer of the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// `Code`.
    pub code: String,
    /// `Message`.
    pub message: String,
}

/// Shorthand for an [`ApiError`].
pub fn err(status: u16, code: &str, message: impl Into<String>) -> ApiError {
    ApiError {
        status,
        code: code.into(),
        message: message.into(),
    }
}

/// The real status of an error code (for fault rules without one).
pub fn status_of(code: &str) -> u16 {
    match code {
        "InternalError" => 500,
        "ServiceUnavailable" => 503,
        c if c.starts_with("Throttling") => 400,
        c if c.ends_with(".NotFound") => 404,
        "InvalidVSwitchId.IpNotEnough"
        | "Operation.Conflict"
        | "EniPerInstanceLimitExceeded"
        | "MaxEniCountExceeded" => 403,
        c if c.starts_with("InvalidIp.")
            || c.starts_with("InvalidOperation.Ipv")
            || c.starts_with("Forbidden") =>
        {
            403
        }
        "InvalidOperation.Conflict" => 409,
        _ => 400,
    }
}

/// Request parameters (query and form merged).
pub type Params = BTreeMap<String, String>;

fn missing(name: &str) -> ApiError {
    err(400, "MissingParameter", format!("The input parameter \"{name}\" that is mandatory for processing this request is not supplied."))
}

fn invalid(name: &str, why: &str) -> ApiError {
    err(
        400,
        "InvalidParameter",
        format!("The specified parameter \"{name}\" is not valid: {why}."),
    )
}

fn need<'a>(p: &'a Params, name: &str) -> Result<&'a str, ApiError> {
    p.get(name)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| missing(name))
}

fn int(p: &Params, name: &str, lo: u64, hi: u64) -> Result<Option<u64>, ApiError> {
    match p.get(name) {
        None => Ok(None),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(n) if (lo..=hi).contains(&n) => Ok(Some(n)),
            _ => Err(invalid(
                name,
                &format!("expected an integer from {lo} to {hi}"),
            )),
        },
    }
}

/// `Name.1`, `Name.2`, ... (1-based, at most `max`).
fn list(p: &Params, name: &str, max: usize) -> Result<Vec<String>, ApiError> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let prefix = format!("{name}.");
    for (k, v) in p {
        if let Some(n) = k.strip_prefix(&prefix) {
            match n.parse::<usize>() {
                Ok(i) if (1..=max).contains(&i) => out.push((i, v.clone())),
                _ => return Err(invalid(k, &format!("the index must be from 1 to {max}"))),
            }
        }
    }
    out.sort();
    Ok(out.into_iter().map(|(_, v)| v).collect())
}

fn tags(p: &Params) -> Result<Vec<(String, String)>, ApiError> {
    let mut by_index: BTreeMap<usize, (String, String)> = BTreeMap::new();
    for (k, v) in p {
        let Some(rest) = k.strip_prefix("Tag.") else {
            continue;
        };
        let (n, field) = rest
            .split_once('.')
            .ok_or_else(|| invalid(k, "expected Tag.N.Key or Tag.N.Value"))?;
        let i: usize = n
            .parse()
            .ok()
            .filter(|i| (1..=20).contains(i))
            .ok_or_else(|| invalid(k, "the index must be from 1 to 20"))?;
        let e = by_index.entry(i).or_default();
        match field {
            "Key" => e.0 = v.clone(),
            "Value" => e.1 = v.clone(),
            _ => return Err(invalid(k, "expected Tag.N.Key or Tag.N.Value")),
        }
    }
    let mut out = Vec::new();
    for (i, (k, v)) in by_index {
        let lower = k.to_ascii_lowercase();
        if k.is_empty() || k.len() > 128 || lower.starts_with("aliyun") || lower.starts_with("acs:")
        {
            return Err(err(
                400,
                "InvalidTagKey.Malformed",
                format!("Tag.{i}.Key is not valid."),
            ));
        }
        out.push((k, v));
    }
    Ok(out)
}

/// A vswitch.
#[derive(Debug)]
pub struct Vsw {
    /// `vsw-...`
    pub id: String,
    /// Its zone.
    pub zone: String,
    /// IPv4 block.
    pub cidr: Net4,
    /// IPv6 block, if enabled.
    pub cidr6: Option<Net6>,
    /// AvailableIpAddressCount.
    pub free: u64,
    used: HashSet<u64>,
    used6: HashSet<u128>,
}

/// An address and its life, for the lagging metadata view.
#[derive(Debug, Clone)]
struct Addr<T> {
    ip: T,
    primary: bool,
    added: Instant,
    removed: Option<Instant>,
}

/// An ENI.
#[derive(Debug)]
pub struct SimEni {
    /// `eni-...`
    pub id: String,
    /// MAC.
    pub mac: String,
    /// Vswitch.
    pub vswitch: String,
    status: EniStatus,
    pending: Option<(EniStatus, Instant)>,
    instance: Option<String>,
    primary_eni: bool,
    v4: Vec<Addr<Ipv4Addr>>,
    v6: Vec<Addr<Ipv6Addr>>,
    tags: Vec<(String, String)>,
    sgs: Vec<String>,
    created: u64,
    description: String,
    name: String,
    attached_since: Option<Instant>,
    detach_started: Option<Instant>,
    deleted_at: Option<Instant>,
}

impl SimEni {
    fn live_v4(&self) -> impl Iterator<Item = &Addr<Ipv4Addr>> {
        self.v4.iter().filter(|a| a.removed.is_none())
    }

    fn live_v6(&self) -> impl Iterator<Item = &Addr<Ipv6Addr>> {
        self.v6.iter().filter(|a| a.removed.is_none())
    }

    fn primary_ip(&self) -> Option<Ipv4Addr> {
        self.v4.iter().find(|a| a.primary).map(|a| a.ip)
    }

    fn busy(&self) -> bool {
        self.pending.is_some()
    }
}

/// Emulator settings the world needs.
#[derive(Debug, Clone)]
pub struct WorldConfig {
    /// Region id.
    pub region: String,
    /// Zone id.
    pub zone: String,
    /// Instance type.
    pub itype: &'static InstanceType,
    /// Vswitches: (id, CIDR, IPv6 CIDR, free).
    pub vswitches: Vec<(String, Net4, Option<Net6>, Option<u64>)>,
    /// Async transition time.
    pub attach_delay: Duration,
    /// Metadata lag.
    pub metadata_lag: Duration,
}

/// The whole emulated cloud.
#[derive(Debug)]
pub struct World {
    /// Settings.
    pub cfg: WorldConfig,
    /// The generator.
    pub rng: Rng,
    /// Instance id.
    pub instance_id: String,
    /// VPC id.
    pub vpc_id: String,
    /// The security group of the instance.
    pub sg_id: String,
    /// Vswitches in configuration order.
    pub vswitches: Vec<Vsw>,
    /// ENIs by id (deleted ones linger for the metadata lag).
    pub enis: BTreeMap<String, SimEni>,
    /// Calls by action.
    pub calls: BTreeMap<String, u64>,
    region_prefix: String,
    macs: HashSet<String>,
    created_at: Instant,
}

impl World {
    /// A world with its instance and primary ENI.
    pub fn new(cfg: WorldConfig, mut rng: Rng) -> Result<World, String> {
        if cfg.vswitches.is_empty() {
            return Err("at least one vswitch is needed".into());
        }
        let region_prefix = match cfg.region.as_str() {
            "cn-hangzhou" => "bp".to_string(),
            "cn-beijing" => "2z".to_string(),
            "cn-shanghai" => "uf".to_string(),
            r => r
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .take(2)
                .collect::<String>()
                .to_ascii_lowercase(),
        };
        let mut ids = HashSet::new();
        let mut vswitches = Vec::new();
        for (id, cidr, cidr6, free) in &cfg.vswitches {
            if !ids.insert(id.clone()) {
                return Err(format!("vswitch {id} is given twice"));
            }
            let usable = cidr.usable().end - cidr.usable().start;
            vswitches.push(Vsw {
                id: id.clone(),
                zone: cfg.zone.clone(),
                cidr: *cidr,
                cidr6: *cidr6,
                free: free.unwrap_or(usable).min(usable),
                used: HashSet::new(),
                used6: HashSet::new(),
            });
        }
        let instance_id = format!(
            "i-{region_prefix}{}",
            rng.hex(9).chars().take(17).collect::<String>()
        );
        let vpc_id = format!(
            "vpc-{region_prefix}{}",
            rng.hex(9).chars().take(17).collect::<String>()
        );
        let sg_id = format!(
            "sg-{region_prefix}{}",
            rng.hex(9).chars().take(17).collect::<String>()
        );
        let now = Instant::now();
        let mut w = World {
            cfg,
            rng,
            instance_id,
            vpc_id,
            sg_id,
            vswitches,
            enis: BTreeMap::new(),
            calls: BTreeMap::new(),
            region_prefix,
            macs: HashSet::new(),
            created_at: now,
        };
        let vsw = w.vswitches[0].id.clone();
        let ip = w.take_v4(&vsw, 1).map_err(|e| e.message)?;
        let id = w.new_eni_id();
        let mac = w.new_mac();
        let since = now.checked_sub(Duration::from_secs(3600)).unwrap_or(now);
        let eni = SimEni {
            id: id.clone(),
            mac,
            vswitch: vsw,
            status: EniStatus::InUse,
            pending: None,
            instance: Some(w.instance_id.clone()),
            primary_eni: true,
            v4: vec![Addr {
                ip: ip[0],
                primary: true,
                added: since,
                removed: None,
            }],
            v6: Vec::new(),
            tags: Vec::new(),
            sgs: vec![w.sg_id.clone()],
            created: crate::util::time::unix_secs().saturating_sub(86_400),
            description: String::new(),
            name: "primary".into(),
            attached_since: Some(since),
            detach_started: None,
            deleted_at: None,
        };
        w.enis.insert(id, eni);
        Ok(w)
    }

    fn new_eni_id(&mut self) -> String {
        format!(
            "eni-{}{}",
            self.region_prefix,
            self.rng.hex(9).chars().take(17).collect::<String>()
        )
    }

    fn new_mac(&mut self) -> String {
        loop {
            let b = self.rng.next_u64();
            let mac = format!(
                "00:16:3e:{:02x}:{:02x}:{:02x}",
                (b >> 16) as u8,
                (b >> 8) as u8,
                b as u8
            );
            if self.macs.insert(mac.clone()) {
                return mac;
            }
        }
    }

    /// The request id for a new answer.
    pub fn request_id(&mut self) -> String {
        self.rng.uuid().to_ascii_uppercase()
    }

    fn vsw_mut(&mut self, id: &str) -> Option<&mut Vsw> {
        self.vswitches.iter_mut().find(|v| v.id == id)
    }

    fn take_v4(&mut self, vsw: &str, n: usize) -> Result<Vec<Ipv4Addr>, ApiError> {
        let rng_seed = self.rng.next_u64();
        let v = self.vsw_mut(vsw).ok_or_else(|| {
            err(
                404,
                "InvalidVSwitchId.NotFound",
                format!("The specified VSwitch \"{vsw}\" does not exist."),
            )
        })?;
        let usable = v.cidr.usable();
        let room = (usable.end - usable.start).saturating_sub(v.used.len() as u64);
        if v.free < n as u64 || room < n as u64 {
            return Err(err(
                403,
                "InvalidVSwitchId.IpNotEnough",
                format!("The specified VSwitch \"{vsw}\" has not enough IpAddress."),
            ));
        }
        let span = usable.end - usable.start;
        let mut r = Rng::seeded(rng_seed);
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let mut off = usable.start + r.below(span);
            while v.used.contains(&off) {
                off = usable.start + (off - usable.start + 1) % span;
            }
            v.used.insert(off);
            out.push(v.cidr.at(off));
        }
        v.free -= n as u64;
        Ok(out)
    }

    fn give_v4(&mut self, vsw: &str, ips: &[Ipv4Addr]) {
        if let Some(v) = self.vsw_mut(vsw) {
            for ip in ips {
                let off = u64::from(u32::from(*ip).wrapping_sub(v.cidr.base));
                if v.used.remove(&off) {
                    v.free += 1;
                }
            }
        }
    }

    fn take_v6(&mut self, vsw: &str, n: usize) -> Result<Vec<Ipv6Addr>, ApiError> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let seed = self.rng.next_u64();
        let v = self.vsw_mut(vsw).ok_or_else(|| {
            err(
                404,
                "InvalidVSwitchId.NotFound",
                format!("The specified VSwitch \"{vsw}\" does not exist."),
            )
        })?;
        let Some(net) = v.cidr6 else {
            return Err(err(
                403,
                "InvalidVSwitch.Ipv6NotTurnOn",
                format!("The VSwitch \"{vsw}\" does not have IPv6 enabled."),
            ));
        };
        let mut r = Rng::seeded(seed);
        let mut out = Vec::new();
        while out.len() < n {
            let host = u128::from(r.next_u64() >> 16) + 16;
            if v.used6.insert(host) {
                out.push(net.at(host));
            }
        }
        Ok(out)
    }

    fn give_v6(&mut self, vsw: &str, ips: &[Ipv6Addr]) {
        if let Some(v) = self.vsw_mut(vsw) {
            if let Some(net) = v.cidr6 {
                for ip in ips {
                    let host = u128::from(*ip) & !(u128::MAX << (128 - net.prefix));
                    v.used6.remove(&host);
                }
            }
        }
    }

    /// Applies due transitions and forgets what the metadata lag no longer
    /// needs.
    pub fn settle(&mut self, now: Instant) {
        let lag = self.cfg.metadata_lag;
        let mut freed: Vec<(String, Vec<Ipv4Addr>, Vec<Ipv6Addr>)> = Vec::new();
        for e in self.enis.values_mut() {
            if let Some((target, at)) = e.pending.clone() {
                if at <= now {
                    e.pending = None;
                    match target {
                        EniStatus::InUse => {
                            e.status = EniStatus::InUse;
                            e.attached_since = Some(at);
                            e.detach_started = None;
                        }
                        EniStatus::Available => {
                            e.status = EniStatus::Available;
                            e.instance = None;
                        }
                        _ => {
                            e.deleted_at = Some(at);
                            let v4: Vec<Ipv4Addr> = e.live_v4().map(|a| a.ip).collect();
                            let v6: Vec<Ipv6Addr> = e.live_v6().map(|a| a.ip).collect();
                            for a in e.v4.iter_mut() {
                                a.removed.get_or_insert(at);
                            }
                            for a in e.v6.iter_mut() {
                                a.removed.get_or_insert(at);
                            }
                            freed.push((e.vswitch.clone(), v4, v6));
                        }
                    }
                }
            }
            e.v4.retain(|a| a.removed.is_none_or(|r| r + lag > now));
            e.v6.retain(|a| a.removed.is_none_or(|r| r + lag > now));
        }
        for (vsw, v4, v6) in freed {
            self.give_v4(&vsw, &v4);
            self.give_v6(&vsw, &v6);
        }
        self.enis
            .retain(|_, e| e.deleted_at.is_none_or(|d| d + lag > now));
    }

    fn eni(&self, id: &str) -> Result<&SimEni, ApiError> {
        self.enis
            .get(id)
            .filter(|e| e.deleted_at.is_none())
            .ok_or_else(|| {
                err(
                    404,
                    "InvalidEniId.NotFound",
                    format!("The specified NetworkInterfaceId \"{id}\" does not exist."),
                )
            })
    }

    fn eni_mut(&mut self, id: &str) -> Result<&mut SimEni, ApiError> {
        self.eni(id)?;
        self.enis
            .get_mut(id)
            .ok_or_else(|| err(404, "InvalidEniId.NotFound", "gone"))
    }

    fn check_region(&self, p: &Params) -> Result<(), ApiError> {
        let r = need(p, "RegionId")?;
        if r != self.cfg.region {
            return Err(err(
                404,
                "InvalidRegionId.NotFound",
                format!("The specified RegionId \"{r}\" does not exist."),
            ));
        }
        Ok(())
    }

    fn not_busy(e: &SimEni) -> Result<(), ApiError> {
        if e.busy() {
            return Err(err(403, "Operation.Conflict", "ecs task is conflicted."));
        }
        Ok(())
    }

    fn state_error(want: &str, have: &EniStatus) -> ApiError {
        err(
            400,
            "InvalidOperation.InvalidEniState",
            format!("The operation is not allowed in the current ENI state. Expecting status is \"{want}\" while current status is \"{have}\"."),
        )
    }

    fn eni_json(&self, e: &SimEni) -> Value {
        let primary = e.primary_ip().map(|a| a.to_string()).unwrap_or_default();
        let vsw = self.vswitches.iter().find(|v| v.id == e.vswitch);
        json!({
            "NetworkInterfaceId": e.id,
            "Status": e.status.as_str(),
            "Type": if e.primary_eni { "Primary" } else { "Secondary" },
            "MacAddress": e.mac,
            "InstanceId": e.instance.clone().unwrap_or_default(),
            "VpcId": self.vpc_id,
            "VSwitchId": e.vswitch,
            "ZoneId": vsw.map(|v| v.zone.clone()).unwrap_or_default(),
            "PrivateIpAddress": primary,
            "CreationTime": crate::util::time::format_utc(e.created),
            "Description": e.description,
            "NetworkInterfaceName": e.name,
            "NetworkInterfaceTrafficMode": "Standard",
            "ResourceGroupId": "",
            "OwnerId": "1234567890123456",
            "ServiceID": 0,
            "ServiceManaged": false,
            "DeleteOnRelease": true,
            "SourceDestCheck": false,
            "QueueNumber": 2,
            "SecurityGroupIds": {"SecurityGroupId": e.sgs},
            "PrivateIpSets": {"PrivateIpSet": e.live_v4().map(|a| json!({
                "PrivateIpAddress": a.ip.to_string(),
                "Primary": a.primary,
                "PrivateDnsName": "",
                "AssociatedPublicIp": {"PublicIpAddress": "", "AllocationId": ""}
            })).collect::<Vec<_>>()},
            "Ipv6Sets": {"Ipv6Set": e.live_v6().map(|a| json!({"Ipv6Address": a.ip.to_string()})).collect::<Vec<_>>()},
            "Ipv4PrefixSets": {"Ipv4PrefixSet": []},
            "Ipv6PrefixSets": {"Ipv6PrefixSet": []},
            "Tags": {"Tag": e.tags.iter().map(|(k, v)| json!({"TagKey": k, "TagValue": v})).collect::<Vec<_>>()},
            "AssociatedPublicIp": {},
            "Attachment": match &e.instance {
                Some(i) => json!({"InstanceId": i, "DeviceIndex": 1, "NetworkCardIndex": 0, "TrunkNetworkInterfaceId": ""}),
                None => json!({}),
            },
        })
    }

    /// Runs one action (already authenticated). `Ok` is the answer body
    /// without RequestId.
    pub fn act(
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
            ("2016-04-28", "DescribeVSwitches") => self.describe_vswitches(p),
            _ => Err(err(
                404,
                "InvalidApi.NotFound",
                format!("Specified api is not found, please check your url and method. ({action}, version {version})"),
            )),
        }
    }

    fn create(&mut self, p: &Params, now: Instant) -> Result<Value, ApiError> {
        self.check_region(p)?;
        let vsw = need(p, "VSwitchId")?.to_string();
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
        let secondary = int(p, "SecondaryPrivateIpAddressCount", 1, 10)?.unwrap_or(0) as usize;
        let v6 = int(p, "Ipv6AddressCount", 1, 10)?.unwrap_or(0) as usize;
        let tags = tags(p)?;
        let description = p.get("Description").cloned().unwrap_or_default();
        if !description.is_empty()
            && (description.len() < 2
                || description.len() > 256
                || description.starts_with("http://")
                || description.starts_with("https://"))
        {
            return Err(err(
                400,
                "InvalidDescription.Malformed",
                "The specified description is wrongly formed.",
            ));
        }
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
        let v4 = self.take_v4(&vsw, secondary + 1)?;
        let v6s = match self.take_v6(&vsw, v6) {
            Ok(v) => v,
            Err(e) => {
                self.give_v4(&vsw, &v4);
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
            v4: v4
                .iter()
                .enumerate()
                .map(|(i, ip)| Addr {
                    ip: *ip,
                    primary: i == 0,
                    added: now,
                    removed: None,
                })
                .collect(),
            v6: v6s
                .iter()
                .map(|ip| Addr {
                    ip: *ip,
                    primary: false,
                    added: now,
                    removed: None,
                })
                .collect(),
            tags,
            sgs,
            created: crate::util::time::unix_secs(),
            description,
            name,
            attached_since: None,
            detach_started: None,
            deleted_at: None,
        };
        let body = self.eni_json(&eni);
        self.enis.insert(id, eni);
        Ok(body)
    }

    fn instance_check(&self, p: &Params) -> Result<(), ApiError> {
        let i = need(p, "InstanceId")?;
        if i != self.instance_id {
            return Err(err(
                404,
                "InvalidEcsId.NotFound",
                format!("The specified InstanceId \"{i}\" does not exist."),
            ));
        }
        Ok(())
    }

    fn attach(&mut self, p: &Params, now: Instant) -> Result<Value, ApiError> {
        self.check_region(p)?;
        let id = need(p, "NetworkInterfaceId")?.to_string();
        self.instance_check(p)?;
        let e = self.eni(&id)?;
        Self::not_busy(e)?;
        if e.status != EniStatus::Available {
            return Err(Self::state_error("Available", &e.status));
        }
        let attached = self
            .enis
            .values()
            .filter(|e| e.deleted_at.is_none() && e.instance.as_deref() == Some(&self.instance_id))
            .count();
        if attached >= self.cfg.itype.enis as usize {
            return Err(err(
                403,
                "EniPerInstanceLimitExceeded",
                "The number of ENIs attached to the instance has reached the upper limit.",
            ));
        }
        let delay = self.cfg.attach_delay;
        let instance = self.instance_id.clone();
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

    fn detach(&mut self, p: &Params, now: Instant) -> Result<Value, ApiError> {
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
        if delay.is_zero() {
            e.status = EniStatus::Available;
            e.instance = None;
        } else {
            e.status = EniStatus::Detaching;
            e.pending = Some((EniStatus::Available, now + delay));
        }
        Ok(json!({}))
    }

    fn delete(&mut self, p: &Params, now: Instant) -> Result<Value, ApiError> {
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

    fn describe(&mut self, p: &Params) -> Result<Value, ApiError> {
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
            .filter(|e| {
                tags.iter()
                    .all(|(k, v)| e.tags.iter().any(|(ek, ev)| ek == k && ev == v))
            })
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
            json!({"NextToken": next, "TotalCount": total, "NetworkInterfaceSets": {"NetworkInterfaceSet": items}}),
        )
    }

    fn assignable(&self, id: &str) -> Result<(), ApiError> {
        let e = self.eni(id)?;
        Self::not_busy(e)?;
        if !matches!(e.status, EniStatus::Available | EniStatus::InUse) {
            return Err(Self::state_error("Available or InUse", &e.status));
        }
        Ok(())
    }

    fn assign4(&mut self, p: &Params, now: Instant) -> Result<Value, ApiError> {
        self.check_region(p)?;
        let id = need(p, "NetworkInterfaceId")?.to_string();
        let wanted = list(p, "PrivateIpAddress", 10)?;
        let count = int(p, "SecondaryPrivateIpAddressCount", 1, 10)?;
        let n = match (count, wanted.is_empty()) {
            (Some(n), true) => n as usize,
            (None, false) => wanted.len(),
            (Some(_), false) => {
                return Err(invalid(
                    "SecondaryPrivateIpAddressCount",
                    "give a count or addresses, not both",
                ))
            }
            (None, true) => return Err(missing("SecondaryPrivateIpAddressCount")),
        };
        self.assignable(&id)?;
        let e = self.eni(&id)?;
        if e.live_v4().count() + n > self.cfg.itype.ipv4_per_eni as usize {
            return Err(err(
                403,
                "InvalidOperation.Ipv4CountExceeded",
                "The number of private IPv4 addresses on the ENI exceeds the upper limit.",
            ));
        }
        let vsw = e.vswitch.clone();
        let ips = if wanted.is_empty() {
            self.take_v4(&vsw, n)?
        } else {
            self.take_specific(&vsw, &wanted)?
        };
        let e = self.eni_mut(&id)?;
        e.v4.extend(ips.iter().map(|ip| Addr {
            ip: *ip,
            primary: false,
            added: now,
            removed: None,
        }));
        Ok(
            json!({"AssignedPrivateIpAddressesSet": {"NetworkInterfaceId": id,
            "PrivateIpSet": {"PrivateIpAddress": ips.iter().map(|a| a.to_string()).collect::<Vec<_>>()},
            "Ipv4PrefixSet": {"Ipv4Prefixes": []}}}),
        )
    }

    fn take_specific(&mut self, vsw: &str, wanted: &[String]) -> Result<Vec<Ipv4Addr>, ApiError> {
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

    fn unassign4(&mut self, p: &Params, now: Instant) -> Result<Value, ApiError> {
        self.check_region(p)?;
        let id = need(p, "NetworkInterfaceId")?.to_string();
        let ips = list(p, "PrivateIpAddress", 50)?;
        if ips.is_empty() {
            return Err(missing("PrivateIpAddress.1"));
        }
        self.assignable(&id)?;
        let e = self.eni(&id)?;
        let mut gone = Vec::new();
        for s in &ips {
            match e.live_v4().find(|a| a.ip.to_string() == *s) {
                Some(a) if !a.primary => gone.push(a.ip),
                _ => {
                    return Err(err(
                        403,
                        "InvalidIp.IpUnassigned",
                        format!("The specified IP \"{s}\" is not assigned on this ENI."),
                    ))
                }
            }
        }
        let vsw = e.vswitch.clone();
        let e = self.eni_mut(&id)?;
        for a in
            e.v4.iter_mut()
                .filter(|a| a.removed.is_none() && gone.contains(&a.ip))
        {
            a.removed = Some(now);
        }
        self.give_v4(&vsw, &gone);
        Ok(json!({}))
    }

    fn assign6(&mut self, p: &Params, now: Instant) -> Result<Value, ApiError> {
        self.check_region(p)?;
        let id = need(p, "NetworkInterfaceId")?.to_string();
        let n =
            int(p, "Ipv6AddressCount", 1, 10)?.ok_or_else(|| missing("Ipv6AddressCount"))? as usize;
        self.assignable(&id)?;
        let e = self.eni(&id)?;
        if e.live_v6().count() + n > self.cfg.itype.ipv6_per_eni as usize {
            return Err(err(
                403,
                "InvalidOperation.Ipv6CountExceeded",
                "The number of IPv6 addresses on the ENI exceeds the upper limit.",
            ));
        }
        let vsw = e.vswitch.clone();
        let ips = self.take_v6(&vsw, n)?;
        let e = self.eni_mut(&id)?;
        e.v6.extend(ips.iter().map(|ip| Addr {
            ip: *ip,
            primary: false,
            added: now,
            removed: None,
        }));
        Ok(
            json!({"NetworkInterfaceId": id, "Ipv6Sets": {"Ipv6Address": ips.iter().map(|a| a.to_string()).collect::<Vec<_>>()},
            "Ipv6PrefixSets": {"Ipv6Prefix": []}}),
        )
    }

    fn unassign6(&mut self, p: &Params, now: Instant) -> Result<Value, ApiError> {
        self.check_region(p)?;
        let id = need(p, "NetworkInterfaceId")?.to_string();
        let ips = list(p, "Ipv6Address", 50)?;
        if ips.is_empty() {
            return Err(missing("Ipv6Address.1"));
        }
        self.assignable(&id)?;
        let e = self.eni(&id)?;
        let mut gone = Vec::new();
        for s in &ips {
            match s
                .parse::<Ipv6Addr>()
                .ok()
                .and_then(|ip| e.live_v6().find(|a| a.ip == ip))
            {
                Some(a) => gone.push(a.ip),
                None => {
                    return Err(err(
                        403,
                        "InvalidIp.IpUnassigned",
                        format!("The specified IP \"{s}\" is not assigned on this ENI."),
                    ))
                }
            }
        }
        let vsw = e.vswitch.clone();
        let e = self.eni_mut(&id)?;
        for a in
            e.v6.iter_mut()
                .filter(|a| a.removed.is_none() && gone.contains(&a.ip))
        {
            a.removed = Some(now);
        }
        self.give_v6(&vsw, &gone);
        Ok(json!({}))
    }

    fn instance_types(&mut self, p: &Params) -> Result<Value, ApiError> {
        let wanted = list(p, "InstanceTypes", 10)?;
        let items: Vec<Value> = super::types::TYPES
            .iter()
            .filter(|t| wanted.is_empty() || wanted.iter().any(|w| w == t.id))
            .map(|t| {
                json!({"InstanceTypeId": t.id, "InstanceTypeFamily": t.family, "CpuCoreCount": t.cpus,
                    "MemorySize": f64::from(t.memory_gib), "EniQuantity": t.enis,
                    "EniPrivateIpAddressQuantity": t.ipv4_per_eni, "EniIpv6AddressQuantity": t.ipv6_per_eni,
                    "EniTotalQuantity": t.enis * 2, "EniTrunkSupported": true, "CpuArchitecture": "X86"})
            })
            .collect();
        Ok(json!({"NextToken": "", "InstanceTypes": {"InstanceType": items}}))
    }

    fn instance_attribute(&mut self, p: &Params) -> Result<Value, ApiError> {
        let i = need(p, "InstanceId")?;
        if i != self.instance_id {
            return Err(err(
                404,
                "InvalidInstanceId.NotFound",
                "The specified InstanceId does not exist.",
            ));
        }
        let primary = self.enis.values().find(|e| e.primary_eni);
        let ip = primary
            .and_then(|e| e.primary_ip())
            .map(|a| a.to_string())
            .unwrap_or_default();
        let vsw = primary.map(|e| e.vswitch.clone()).unwrap_or_default();
        Ok(
            json!({"InstanceId": self.instance_id, "InstanceName": "eniip-sim", "InstanceType": self.cfg.itype.id,
            "RegionId": self.cfg.region, "ZoneId": self.cfg.zone, "Status": "Running", "HostName": "eniip-sim",
            "Cpu": self.cfg.itype.cpus, "Memory": self.cfg.itype.memory_gib * 1024, "InstanceNetworkType": "vpc",
            "CreationTime": crate::util::time::format_utc(crate::util::time::unix_secs().saturating_sub(86_400)),
            "SecurityGroupIds": {"SecurityGroupId": [self.sg_id]},
            "VpcAttributes": {"VpcId": self.vpc_id, "VSwitchId": vsw, "NatIpAddress": "", "PrivateIpAddress": {"IpAddress": [ip]}},
            "InnerIpAddress": {"IpAddress": []}, "PublicIpAddress": {"IpAddress": []},
            "EipAddress": {"IpAddress": "", "AllocationId": "", "InternetChargeType": ""}, "OperationLocks": {"LockReason": []}}),
        )
    }

    fn security_groups(&mut self, p: &Params) -> Result<Value, ApiError> {
        self.check_region(p)?;
        let mut wanted: Vec<String> = match p.get("SecurityGroupIds").filter(|s| !s.is_empty()) {
            Some(j) => serde_json::from_str(j)
                .map_err(|_| invalid("SecurityGroupIds", "expected a JSON array of ids"))?,
            None => Vec::new(),
        };
        if let Some(one) = p.get("SecurityGroupId").filter(|s| !s.is_empty()) {
            wanted.push(one.clone());
        }
        let items: Vec<Value> = if wanted.is_empty() || wanted.contains(&self.sg_id) {
            vec![
                json!({"SecurityGroupId": self.sg_id, "SecurityGroupName": "default", "Description": "",
                "SecurityGroupType": "normal", "VpcId": self.vpc_id, "ServiceManaged": false, "Tags": {"Tag": []}}),
            ]
        } else {
            Vec::new()
        };
        Ok(
            json!({"RegionId": self.cfg.region, "NextToken": "", "TotalCount": items.len(), "PageNumber": 1, "PageSize": 10,
            "SecurityGroups": {"SecurityGroup": items}}),
        )
    }

    fn describe_vswitches(&mut self, p: &Params) -> Result<Value, ApiError> {
        if p.get("RegionId").is_none_or(String::is_empty)
            && p.get("VpcId").is_none_or(String::is_empty)
        {
            return Err(missing("RegionId"));
        }
        if let Some(r) = p.get("RegionId").filter(|r| !r.is_empty()) {
            if *r != self.cfg.region {
                return Err(err(
                    404,
                    "InvalidRegionId.NotFound",
                    format!("The specified RegionId \"{r}\" does not exist."),
                ));
            }
        }
        let page = int(p, "PageNumber", 1, 1_000_000)?.unwrap_or(1) as usize;
        let size = int(p, "PageSize", 1, 50)?.unwrap_or(10) as usize;
        let id = p.get("VSwitchId").filter(|s| !s.is_empty());
        let zone = p.get("ZoneId").filter(|s| !s.is_empty());
        let vpc = p.get("VpcId").filter(|s| !s.is_empty());
        let matched: Vec<&Vsw> = self
            .vswitches
            .iter()
            .filter(|v| id.is_none_or(|i| *i == v.id))
            .filter(|v| zone.is_none_or(|z| *z == v.zone))
            .filter(|_| vpc.is_none_or(|x| *x == self.vpc_id))
            .collect();
        let items: Vec<Value> = matched
            .iter()
            .skip((page - 1) * size)
            .take(size)
            .map(|v| {
                json!({"VSwitchId": v.id, "VpcId": self.vpc_id, "Status": "Available", "CidrBlock": v.cidr.to_string(),
                    "Ipv6CidrBlock": v.cidr6.map(|c| c.to_string()).unwrap_or_default(), "EnabledIpv6": v.cidr6.is_some(),
                    "ZoneId": v.zone, "AvailableIpAddressCount": v.free, "VSwitchName": v.id, "Description": "",
                    "IsDefault": false, "OwnerId": 1_234_567_890_123_456u64, "ResourceGroupId": "", "ShareType": "",
                    "RouteTable": {"RouteTableId": "vtb-sim", "RouteTableType": "System"}, "Tags": {"Tag": []}})
            })
            .collect();
        Ok(
            json!({"TotalCount": matched.len(), "PageNumber": page, "PageSize": size, "VSwitches": {"VSwitch": items}}),
        )
    }

    // ---- views -----------------------------------------------------------

    /// The state as SPEC section 5's `GET /__sim/state`.
    pub fn state_json(&mut self, now: Instant) -> Value {
        self.settle(now);
        let primary_mac = self
            .enis
            .values()
            .find(|e| e.primary_eni)
            .map(|e| e.mac.clone())
            .unwrap_or_default();
        json!({
            "instance": {"id": self.instance_id, "type": self.cfg.itype.id, "zone": self.cfg.zone,
                         "region": self.cfg.region, "primary_mac": primary_mac},
            "vswitches": self.vswitches.iter().map(|v| json!({"id": v.id, "cidr": v.cidr.to_string(), "free": v.free})).collect::<Vec<_>>(),
            "enis": self.enis.values().filter(|e| e.deleted_at.is_none()).map(|e| json!({
                "id": e.id, "mac": e.mac, "status": e.status.as_str(),
                "instance_id": e.instance.clone().unwrap_or_default(), "vswitch_id": e.vswitch,
                "primary_ip": e.primary_ip().map(|a| a.to_string()).unwrap_or_default(),
                "private_ips": e.live_v4().map(|a| a.ip.to_string()).collect::<Vec<_>>(),
                "ipv6s": e.live_v6().map(|a| a.ip.to_string()).collect::<Vec<_>>(),
                "tags": e.tags.iter().cloned().collect::<BTreeMap<String, String>>(),
            })).collect::<Vec<_>>(),
            "calls": self.calls,
        })
    }

    /// ENIs attached to the instance as metadata shows them now (lagging).
    pub fn metadata_enis(&mut self, now: Instant) -> Vec<MdEni> {
        self.settle(now);
        let t = now
            .checked_sub(self.cfg.metadata_lag)
            .unwrap_or(self.created_at);
        self.enis
            .values()
            .filter(|e| {
                e.attached_since.is_some_and(|a| a <= t) && e.detach_started.is_none_or(|d| d > t)
            })
            .map(|e| {
                let vsw = self.vswitches.iter().find(|v| v.id == e.vswitch);
                MdEni {
                    id: e.id.clone(),
                    mac: e.mac.clone(),
                    primary: e.primary_eni,
                    primary_ip: e.primary_ip(),
                    v4: e
                        .v4
                        .iter()
                        .filter(|a| a.added <= t && a.removed.is_none_or(|r| r > t))
                        .map(|a| a.ip)
                        .collect(),
                    v6: e
                        .v6
                        .iter()
                        .filter(|a| a.added <= t && a.removed.is_none_or(|r| r > t))
                        .map(|a| a.ip)
                        .collect(),
                    vswitch: e.vswitch.clone(),
                    cidr: vsw.map(|v| v.cidr),
                    cidr6: vsw.and_then(|v| v.cidr6),
                }
            })
            .collect()
    }

    /// Sets a vswitch's free count.
    pub fn set_free(&mut self, id: &str, free: u64) -> bool {
        match self.vsw_mut(id) {
            Some(v) => {
                v.free = free;
                true
            }
            None => false,
        }
    }
}

/// An ENI as metadata shows it.
#[derive(Debug, Clone)]
pub struct MdEni {
    /// Id.
    pub id: String,
    /// MAC.
    pub mac: String,
    /// The primary ENI.
    pub primary: bool,
    /// Its primary address.
    pub primary_ip: Option<Ipv4Addr>,
    /// Visible IPv4.
    pub v4: Vec<Ipv4Addr>,
    /// Visible IPv6.
    pub v6: Vec<Ipv6Addr>,
    /// Vswitch.
    pub vswitch: String,
    /// Vswitch block.
    pub cidr: Option<Net4>,
    /// Vswitch IPv6 block.
    pub cidr6: Option<Net6>,
}
