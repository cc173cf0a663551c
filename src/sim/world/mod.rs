//! The emulated cloud: one instance with its primary ENI, vswitches with
//! finite free addresses, ENIs with the asynchronous state machine of the
//! real API, and a log of every address's life so the metadata service can
//! show the world as it was `metadata_lag` ago.
//!
//! State transitions (Attaching -> InUse, Detaching -> Available,
//! Deleting -> gone) are settled lazily, on every access, from the
//! monotonic clock. Everything random comes from one seeded generator.
//!
//! Its parts: [`vswitch`] (a vswitch's address book), [`sim_eni`] (an ENI
//! and its state machine), [`addr`] (an address's life), [`params`] (the
//! parameters and errors every action shares). The actions, by topic, are
//! in `catalog`, `enis`, `ips`, `prefixes` and `tagging`; `persist` saves
//! and restores the world.

use std::collections::{BTreeMap, HashSet};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::net::{Net4, Net6};
use super::types::InstanceType;
use crate::cloud::EniStatus;
use crate::util::rand::Rng;

mod addr;
mod catalog;
mod enis;
mod ips;
mod params;
mod persist;
mod prefixes;
pub(crate) use prefixes::PREFIX_SIZE;
mod sim_eni;
mod tagging;
mod vswitch;

use addr::{new_addrs, Addr};
use params::{asked, int, invalid, list, missing, need, tags, tags_match};
pub(crate) use params::{err, message_of, status_of, ApiError, Asked, Params};
use sim_eni::{Freed, SimEni};
use vswitch::Vsw;

/// Emulator settings the world needs.
#[derive(Debug, Clone)]
pub(crate) struct WorldConfig {
    /// Region id.
    pub(crate) region: String,
    /// Zone id.
    pub(crate) zone: String,
    /// Instance type.
    pub(crate) itype: &'static InstanceType,
    /// Vswitches: (id, CIDR, IPv6 CIDR, free).
    pub(crate) vswitches: Vec<(String, Net4, Option<Net6>, Option<u64>)>,
    /// Async transition time.
    pub(crate) attach_delay: Duration,
    /// Metadata lag.
    pub(crate) metadata_lag: Duration,
}

/// The whole emulated cloud.
#[derive(Debug)]
pub(crate) struct World {
    /// Settings.
    pub(crate) cfg: WorldConfig,
    /// The generator.
    pub(crate) rng: Rng,
    /// Instance id (the first instance: the one of the `ready` line).
    pub(crate) instance_id: String,
    /// Every instance of the account, the first included: (id, type).
    pub(crate) fleet: Vec<(String, &'static InstanceType)>,
    /// VPC id.
    pub(crate) vpc_id: String,
    /// The security group of the instance.
    pub(crate) sg_id: String,
    /// Vswitches in configuration order.
    pub(crate) vswitches: Vec<Vsw>,
    /// ENIs by id (deleted ones linger for the metadata lag).
    pub(crate) enis: BTreeMap<String, SimEni>,
    /// Calls by action.
    pub(crate) calls: BTreeMap<String, u64>,
    /// Authenticated requests per signature version (`v3`, `v1`).
    pub(crate) signatures: BTreeMap<&'static str, u64>,
    /// Calls by action that carried IPv4 prefix parameters.
    pub(crate) prefix_calls: BTreeMap<String, u64>,
    region_prefix: String,
    macs: HashSet<String>,
    created_at: Instant,
}

impl World {
    /// A world with its instance and primary ENI.
    pub(crate) fn new(cfg: WorldConfig, mut rng: Rng) -> Result<World, String> {
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
            vswitches.push(Vsw::new(id, &cfg.zone, *cidr, *cidr6, *free));
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
        let itype = cfg.itype;
        let mut w = World {
            cfg,
            rng,
            fleet: vec![(instance_id.clone(), itype)],
            instance_id,
            vpc_id,
            sg_id,
            vswitches,
            enis: BTreeMap::new(),
            calls: BTreeMap::new(),
            signatures: BTreeMap::new(),
            prefix_calls: BTreeMap::new(),
            region_prefix,
            macs: HashSet::new(),
            created_at: now,
        };
        let first = w.instance_id.clone();
        w.add_primary_eni(&first, now)?;
        Ok(w)
    }

    /// Another instance of the account, of type `itype`, with its primary
    /// ENI on the first vswitch; its id.
    /// A world for unit tests: cn-hangzhou-i, one ecs.g7.xlarge, one
    /// vswitch vsw-1 (192.168.0.0/24), instant transitions, `metadata_lag`,
    /// a seeded generator.
    #[cfg(test)]
    pub(crate) fn for_tests(metadata_lag: Duration) -> World {
        World::new(
            WorldConfig {
                region: "cn-hangzhou".into(),
                zone: "cn-hangzhou-i".into(),
                itype: crate::sim::types::find("ecs.g7.xlarge").unwrap(),
                vswitches: vec![(
                    "vsw-1".into(),
                    Net4::parse("192.168.0.0/24").unwrap(),
                    None,
                    None,
                )],
                attach_delay: Duration::ZERO,
                metadata_lag,
            },
            Rng::seeded(7),
        )
        .unwrap()
    }

    pub(crate) fn add_instance(&mut self, itype: &'static InstanceType) -> Result<String, String> {
        let id = loop {
            let id = format!(
                "i-{}{}",
                self.region_prefix,
                self.rng.hex(9).chars().take(17).collect::<String>()
            );
            if !self.is_instance(&id) {
                break id;
            }
        };
        self.fleet.push((id.clone(), itype));
        self.add_primary_eni(&id, Instant::now())?;
        Ok(id)
    }

    /// Whether `id` is one of the account's instances.
    pub(crate) fn is_instance(&self, id: &str) -> bool {
        self.fleet.iter().any(|(i, _)| i == id)
    }

    /// The type of instance `id` (the first instance's if unknown).
    pub(crate) fn itype_of_instance(&self, id: &str) -> &'static InstanceType {
        self.fleet
            .iter()
            .find(|(i, _)| i == id)
            .map_or(self.cfg.itype, |(_, t)| *t)
    }

    /// The type whose per-ENI limits an ENI has: its instance's, or the
    /// first instance's while it is attached to none.
    fn itype_of(&self, e: &SimEni) -> &'static InstanceType {
        e.instance
            .as_deref()
            .map_or(self.cfg.itype, |i| self.itype_of_instance(i))
    }

    fn add_primary_eni(&mut self, instance: &str, now: Instant) -> Result<(), String> {
        let w = self;
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
            instance: Some(instance.to_string()),
            primary_eni: true,
            v4: vec![Addr {
                ip: ip[0],
                primary: true,
                added: since,
                removed: None,
            }],
            v6: Vec::new(),
            v4p: Vec::new(),
            tags: Vec::new(),
            sgs: vec![w.sg_id.clone()],
            created: crate::util::time::unix_secs().saturating_sub(86_400),
            description: String::new(),
            name: "primary".into(),
            attached_since: Some(since),
            detach_started: None,
            detached_from: None,
            deleted_at: None,
        };
        w.enis.insert(id, eni);
        Ok(())
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
    pub(crate) fn request_id(&mut self) -> String {
        self.rng.uuid().to_ascii_uppercase()
    }

    fn vsw_mut(&mut self, id: &str) -> Option<&mut Vsw> {
        self.vswitches.iter_mut().find(|v| v.id == id)
    }

    fn vsw_or_404(&mut self, vsw: &str) -> Result<&mut Vsw, ApiError> {
        self.vsw_mut(vsw).ok_or_else(|| {
            err(
                404,
                "InvalidVSwitchId.NotFound",
                format!("The specified VSwitch \"{vsw}\" does not exist."),
            )
        })
    }

    fn take_v4(&mut self, vsw: &str, n: usize) -> Result<Vec<Ipv4Addr>, ApiError> {
        let seed = self.rng.next_u64();
        self.vsw_or_404(vsw)?.take_v4(seed, n)
    }

    fn give_v4(&mut self, vsw: &str, ips: &[Ipv4Addr]) {
        if let Some(v) = self.vsw_mut(vsw) {
            v.give_v4(ips);
        }
    }

    fn take_v6(&mut self, vsw: &str, n: usize) -> Result<Vec<Ipv6Addr>, ApiError> {
        // Asking for none draws nothing from the generator and needs no
        // vswitch.
        if n == 0 {
            return Ok(Vec::new());
        }
        let seed = self.rng.next_u64();
        self.vsw_or_404(vsw)?.take_v6(seed, n)
    }

    fn give_v6(&mut self, vsw: &str, ips: &[Ipv6Addr]) {
        if let Some(v) = self.vsw_mut(vsw) {
            v.give_v6(ips);
        }
    }

    /// Applies due transitions and forgets what the metadata lag no longer
    /// needs.
    pub(crate) fn settle(&mut self, now: Instant) {
        let lag = self.cfg.metadata_lag;
        let freed: Vec<Freed> = self
            .enis
            .values_mut()
            .filter_map(|e| e.settle(now, lag))
            .collect();
        for (vsw, v4, v6, v4p) in freed {
            self.give_v4(&vsw, &v4);
            self.give_v6(&vsw, &v6);
            self.give_prefixes(&vsw, &v4p);
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
            // Queue pairs are for RDMA (ERI) interfaces only.
            "QueuePairNumber": 0,
            "SecurityGroupIds": {"SecurityGroupId": e.sgs},
            "PrivateIpSets": {"PrivateIpSet": e.live_v4().map(|a| json!({
                "PrivateIpAddress": a.ip.to_string(),
                "Primary": a.primary,
                "PrivateDnsName": "",
                "AssociatedPublicIp": {"PublicIpAddress": "", "AllocationId": ""}
            })).collect::<Vec<_>>()},
            "Ipv6Sets": {"Ipv6Set": e.live_v6().map(|a| json!({"Ipv6Address": a.ip.to_string()})).collect::<Vec<_>>()},
            "Ipv4PrefixSets": {"Ipv4PrefixSet": e.live_v4p().map(|a| json!({"Ipv4Prefix": format!("{}/28", a.ip)})).collect::<Vec<_>>()},
            "Ipv6PrefixSets": {"Ipv6PrefixSet": []},
            "Tags": {"Tag": e.tags.iter().map(|(k, v)| json!({"TagKey": k, "TagValue": v})).collect::<Vec<_>>()},
            "AssociatedPublicIp": {},
            "Attachment": match &e.instance {
                Some(i) => json!({"InstanceId": i, "DeviceIndex": 1, "NetworkCardIndex": 0, "TrunkNetworkInterfaceId": ""}),
                None => json!({}),
            },
        })
    }

    // ---- views -----------------------------------------------------------

    /// The state as SPEC section 5's `GET /__sim/state`.
    pub(crate) fn state_json(&mut self, now: Instant) -> Value {
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
            "vswitches": self.vswitches.iter().map(|v| {
                let mut j = json!({"id": v.id, "cidr": v.cidr.to_string(), "free": v.free,
                    "free_prefixes": Self::free_prefixes(v), "gateway": v.cidr.gateway().to_string()});
                if let Some(c6) = &v.cidr6 {
                    j["ipv6_cidr"] = json!(c6.to_string());
                    j["ipv6_gateway"] = json!(c6.gateway().to_string());
                }
                j
            }).collect::<Vec<_>>(),
            "enis": self.enis.values().filter(|e| e.deleted_at.is_none()).map(|e| json!({
                "id": e.id, "mac": e.mac, "status": e.status.as_str(),
                "instance_id": e.instance.clone().unwrap_or_default(), "vswitch_id": e.vswitch,
                "primary_ip": e.primary_ip().map(|a| a.to_string()).unwrap_or_default(),
                "private_ips": e.live_v4().map(|a| a.ip.to_string()).collect::<Vec<_>>(),
                "ipv6s": e.live_v6().map(|a| a.ip.to_string()).collect::<Vec<_>>(),
                "ipv4_prefixes": e.live_v4p().map(|a| format!("{}/28", a.ip)).collect::<Vec<_>>(),
                "tags": e.tags.iter().cloned().collect::<BTreeMap<String, String>>(),
            })).collect::<Vec<_>>(),
            "calls": self.calls,
            "signatures": self.signatures,
            "prefix_calls": self.prefix_calls,
        })
    }

    /// ENIs attached to the instance as metadata shows them now (lagging).
    pub(crate) fn metadata_enis(&mut self, now: Instant, instance: &str) -> Vec<MdEni> {
        self.settle(now);
        let t = now
            .checked_sub(self.cfg.metadata_lag)
            .unwrap_or(self.created_at);
        self.enis
            .values()
            .filter(|e| e.shown_on(instance, t))
            .map(|e| {
                let vsw = self.vswitches.iter().find(|v| v.id == e.vswitch);
                MdEni {
                    id: e.id.clone(),
                    mac: e.mac.clone(),
                    primary: e.primary_eni,
                    primary_ip: e.primary_ip(),
                    v4: Addr::listed_at(&e.v4, t),
                    v6: Addr::listed_at(&e.v6, t),
                    v4_prefixes: Addr::listed_at(&e.v4p, t),
                    vswitch: e.vswitch.clone(),
                    cidr: vsw.map(|v| v.cidr),
                    cidr6: vsw.and_then(|v| v.cidr6),
                }
            })
            .collect()
    }

    /// Sets a vswitch's free count.
    pub(crate) fn set_free(&mut self, id: &str, free: u64) -> bool {
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
pub(crate) struct MdEni {
    /// Id.
    pub(crate) id: String,
    /// MAC.
    pub(crate) mac: String,
    /// The primary ENI.
    pub(crate) primary: bool,
    /// Its primary address.
    pub(crate) primary_ip: Option<Ipv4Addr>,
    /// Visible IPv4.
    pub(crate) v4: Vec<Ipv4Addr>,
    /// Visible IPv6.
    pub(crate) v6: Vec<Ipv6Addr>,
    /// Visible IPv4 /28 prefixes (network addresses).
    pub(crate) v4_prefixes: Vec<Ipv4Addr>,
    /// Vswitch.
    pub(crate) vswitch: String,
    /// Vswitch block.
    pub(crate) cidr: Option<Net4>,
    /// Vswitch IPv6 block.
    pub(crate) cidr6: Option<Net6>,
}
