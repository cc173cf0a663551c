//! An ENI as the world keeps it ([`SimEni`]), and its asynchronous state
//! machine: Attaching -> InUse, Detaching -> Available, Deleting -> gone,
//! each ending `attach_delay` after it began.
//!
//! Invariants, kept by [`SimEni`]'s methods (nothing else touches its
//! fields): at most one transition is in flight (a busy ENI refuses
//! another with `Operation.Conflict`), and each starts only from the
//! status the real API requires; the primary ENI is never detached or
//! deleted and its primary address never unassigned; a deleted ENI keeps
//! its addresses, all marked removed at its deletion, only for the
//! metadata lag, and gives them back to its vswitch exactly once (what
//! [`SimEni::settle`] returns).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::addr::Addrs;
use super::params::{err, ApiError};
use eniip_cloud::EniStatus;

/// What a deleted ENI gives back to its vswitch: (vswitch, addresses,
/// IPv6 addresses, /28 prefixes, IPv6 /80 prefixes).
pub(crate) type Freed = (
    String,
    Vec<Ipv4Addr>,
    Vec<Ipv6Addr>,
    Vec<Ipv4Addr>,
    Vec<Ipv6Addr>,
);

/// What CreateNetworkInterface makes an ENI of.
#[derive(Debug)]
pub(crate) struct NewEni {
    /// Its vswitch.
    pub(crate) vswitch: String,
    /// Its addresses, the primary first.
    pub(crate) v4: Vec<Ipv4Addr>,
    /// Its IPv6 addresses.
    pub(crate) v6: Vec<Ipv6Addr>,
    /// Its /28 prefixes, by network address.
    pub(crate) v4p: Vec<Ipv4Addr>,
    /// Its IPv6 /80 prefixes, by network address.
    pub(crate) v6p: Vec<Ipv6Addr>,
    /// Its tags.
    pub(crate) tags: Vec<(String, String)>,
    /// Its security groups.
    pub(crate) sgs: Vec<String>,
    /// `Description`.
    pub(crate) description: String,
    /// `NetworkInterfaceName`.
    pub(crate) name: String,
}

/// An ENI.
#[derive(Debug)]
pub(crate) struct SimEni {
    id: String,
    mac: String,
    vswitch: String,
    status: EniStatus,
    /// A transition in flight: the status it ends in, and when.
    pending: Option<(EniStatus, Instant)>,
    instance: Option<String>,
    primary_eni: bool,
    v4: Addrs<Ipv4Addr>,
    v6: Addrs<Ipv6Addr>,
    /// IPv4 /28 prefixes by their network address.
    v4p: Addrs<Ipv4Addr>,
    /// IPv6 /80 prefixes by their network address; each takes one slot of
    /// the ENI's IPv6 quota, as an IPv6 address does.
    v6p: Addrs<Ipv6Addr>,
    tags: Vec<(String, String)>,
    sgs: Vec<String>,
    created: u64,
    description: String,
    name: String,
    attached_since: Option<Instant>,
    detach_started: Option<Instant>,
    /// The attachment the last detach ended: (instance, attached since,
    /// detach started). Metadata lags a detach as it lags everything, so
    /// that instance still sees the ENI until the lag has passed its
    /// detach, though the ENI is attached to nothing (or elsewhere) now.
    detached_from: Option<(String, Instant, Instant)>,
    deleted_at: Option<Instant>,
}

fn state_error(want: &str, have: &EniStatus) -> ApiError {
    err(
        400,
        "InvalidOperation.InvalidEniState",
        format!("The operation is not allowed in the current ENI state. Expecting status is \"{want}\" while current status is \"{have}\"."),
    )
}

impl SimEni {
    /// An instance's primary ENI with its primary address, attached since
    /// `since` (created a day before).
    pub(crate) fn primary(
        id: String,
        mac: String,
        vswitch: String,
        instance: &str,
        (ip, sg): (Ipv4Addr, String),
        since: Instant,
    ) -> SimEni {
        SimEni {
            id,
            mac,
            vswitch,
            status: EniStatus::InUse,
            pending: None,
            instance: Some(instance.to_string()),
            primary_eni: true,
            v4: Addrs::added(&[ip], since, true),
            v6: Addrs::none(),
            v4p: Addrs::none(),
            v6p: Addrs::none(),
            tags: Vec::new(),
            sgs: vec![sg],
            created: eniip_util::time::unix_secs().saturating_sub(86_400),
            description: String::new(),
            name: "primary".into(),
            attached_since: Some(since),
            detach_started: None,
            detached_from: None,
            deleted_at: None,
        }
    }

    /// A new, available ENI (CreateNetworkInterface) at `now`.
    pub(crate) fn created(id: String, mac: String, new: NewEni, now: Instant) -> SimEni {
        SimEni {
            id,
            mac,
            vswitch: new.vswitch,
            status: EniStatus::Available,
            pending: None,
            instance: None,
            primary_eni: false,
            v4: Addrs::added(&new.v4, now, true),
            v6: Addrs::added(&new.v6, now, false),
            v4p: Addrs::added(&new.v4p, now, false),
            v6p: Addrs::added(&new.v6p, now, false),
            tags: new.tags,
            sgs: new.sgs,
            created: eniip_util::time::unix_secs(),
            description: new.description,
            name: new.name,
            attached_since: None,
            detach_started: None,
            detached_from: None,
            deleted_at: None,
        }
    }

    /// `eni-...`
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Its MAC.
    pub(crate) fn mac(&self) -> &str {
        &self.mac
    }

    /// Its vswitch.
    pub(crate) fn vswitch(&self) -> &str {
        &self.vswitch
    }

    /// Its status.
    pub(crate) fn status(&self) -> &EniStatus {
        &self.status
    }

    /// The instance it is attached to (or being attached to).
    pub(crate) fn instance(&self) -> Option<&str> {
        self.instance.as_deref()
    }

    /// An instance's primary ENI.
    pub(crate) fn is_primary_eni(&self) -> bool {
        self.primary_eni
    }

    /// Its tags.
    pub(crate) fn tags(&self) -> &[(String, String)] {
        &self.tags
    }

    /// Its security groups.
    pub(crate) fn sgs(&self) -> &[String] {
        &self.sgs
    }

    /// ModifyNetworkInterfaceAttribute: new security groups (when given),
    /// name and description. The primary ENI's groups are the
    /// instance's: refused there as the service refuses it.
    pub(crate) fn modify(
        &mut self,
        sgs: Option<Vec<String>>,
        name: Option<String>,
        description: Option<String>,
    ) -> Result<(), ApiError> {
        if self.status == EniStatus::Deleting {
            return Err(state_error("Available or InUse", &self.status));
        }
        if let Some(sgs) = sgs {
            if self.primary_eni {
                return Err(err(
                    403,
                    "InvalidOperation.InvalidEniType",
                    "The primary network interface's security groups are the instance's; change them with ModifyInstanceAttribute.",
                ));
            }
            self.sgs = sgs;
        }
        if let Some(n) = name {
            self.name = n;
        }
        if let Some(d) = description {
            self.description = d;
        }
        Ok(())
    }

    /// Deleted (kept only for the metadata lag).
    pub(crate) fn deleted(&self) -> bool {
        self.deleted_at.is_some()
    }

    /// Deleted longer than `lag` before `now`: metadata no longer needs
    /// it.
    pub(crate) fn forgotten(&self, now: Instant, lag: Duration) -> bool {
        self.deleted_at.is_some_and(|d| d + lag <= now)
    }

    /// Its primary address.
    pub(crate) fn primary_ip(&self) -> Option<Ipv4Addr> {
        self.v4.primary()
    }

    /// Its live addresses.
    pub(crate) fn live_v4(&self) -> impl Iterator<Item = Ipv4Addr> + '_ {
        self.v4.live_ips()
    }

    /// Its live IPv6 addresses.
    pub(crate) fn live_v6(&self) -> impl Iterator<Item = Ipv6Addr> + '_ {
        self.v6.live_ips()
    }

    /// IPv6 quota slots it uses: every IPv6 address and every /80.
    pub(crate) fn v6_slots(&self) -> usize {
        self.v6.live().count() + self.v6p.live().count()
    }

    /// Its /80s as listed at `t` (metadata lags as for addresses).
    pub(crate) fn v6_prefixes_at(&self, t: Instant) -> Vec<Ipv6Addr> {
        self.v6p.listed_at(t)
    }

    /// Its live /80s, by network address.
    pub(crate) fn live_v6p(&self) -> impl Iterator<Item = Ipv6Addr> + '_ {
        self.v6p.live_ips()
    }

    /// IPv4 quota slots it uses: every address (the primary included) and
    /// every prefix count one.
    pub(crate) fn v4_slots(&self) -> usize {
        self.v4.live().count() + self.v4p.live().count()
    }

    /// Whether metadata at `t` shows it attached to `instance`: attached
    /// by then, its detach not yet begun; or attached there before its
    /// last detach began.
    pub(crate) fn shown_on(&self, instance: &str, t: Instant) -> bool {
        let now = self.instance.as_deref() == Some(instance)
            && self.attached_since.is_some_and(|a| a <= t)
            && self.detach_started.is_none_or(|d| d > t);
        let before = self
            .detached_from
            .as_ref()
            .is_some_and(|(i, a, d)| i == instance && *a <= t && t < *d);
        now || before
    }

    /// Its addresses, IPv6 addresses and /28s as listed at `t`.
    pub(crate) fn addresses_at(&self, t: Instant) -> (Vec<Ipv4Addr>, Vec<Ipv6Addr>, Vec<Ipv4Addr>) {
        (
            self.v4.listed_at(t),
            self.v6.listed_at(t),
            self.v4p.listed_at(t),
        )
    }

    fn not_busy(&self) -> Result<(), ApiError> {
        if self.pending.is_some() {
            return Err(err(403, "Operation.Conflict", "ecs task is conflicted."));
        }
        Ok(())
    }

    /// Refused unless it can be attached now (nothing in flight,
    /// Available).
    pub(crate) fn attachable(&self) -> Result<(), ApiError> {
        self.not_busy()?;
        if self.status != EniStatus::Available {
            return Err(state_error("Available", &self.status));
        }
        Ok(())
    }

    /// Attaches it to `instance`: InUse at once when `delay` is zero,
    /// else Attaching until `now + delay`.
    pub(crate) fn attach(
        &mut self,
        instance: &str,
        now: Instant,
        delay: Duration,
    ) -> Result<(), ApiError> {
        self.attachable()?;
        self.instance = Some(instance.to_string());
        if delay.is_zero() {
            self.status = EniStatus::InUse;
            self.attached_since = Some(now);
            self.detach_started = None;
        } else {
            self.status = EniStatus::Attaching;
            self.pending = Some((EniStatus::InUse, now + delay));
        }
        Ok(())
    }

    /// Detaches it: Available at once when `delay` is zero, else Detaching
    /// until `now + delay`. The primary ENI is refused.
    pub(crate) fn detach(&mut self, now: Instant, delay: Duration) -> Result<(), ApiError> {
        if self.primary_eni {
            return Err(err(
                400,
                "InvalidOperation.DetachPrimaryEniNotAllowed",
                "The primary ENI cannot be detached.",
            ));
        }
        self.not_busy()?;
        if self.status != EniStatus::InUse {
            return Err(state_error("InUse", &self.status));
        }
        self.detach_started = Some(now);
        self.detached_from = self
            .instance
            .clone()
            .zip(self.attached_since)
            .map(|(i, a)| (i, a, now));
        if delay.is_zero() {
            self.status = EniStatus::Available;
            self.instance = None;
        } else {
            self.status = EniStatus::Detaching;
            self.pending = Some((EniStatus::Available, now + delay));
        }
        Ok(())
    }

    /// Deletes it (an Available, secondary ENI): gone `delay` after `now`
    /// (settle it to end a zero delay at once).
    pub(crate) fn delete(&mut self, now: Instant, delay: Duration) -> Result<(), ApiError> {
        self.not_busy()?;
        if self.status != EniStatus::Available || self.primary_eni {
            return Err(state_error("Available", &self.status));
        }
        self.status = EniStatus::Deleting;
        self.pending = Some((EniStatus::Other("Gone".into()), now + delay));
        Ok(())
    }

    /// Refused unless addresses can be assigned or unassigned now.
    pub(crate) fn assignable(&self) -> Result<(), ApiError> {
        self.not_busy()?;
        if !matches!(self.status, EniStatus::Available | EniStatus::InUse) {
            return Err(state_error("Available or InUse", &self.status));
        }
        Ok(())
    }

    /// Adds addresses, IPv6 addresses or /28s (by network address) at
    /// `now` (the caller took them from its vswitch).
    pub(crate) fn add(&mut self, v4: &[Ipv4Addr], v6: &[Ipv6Addr], v4p: &[Ipv4Addr], now: Instant) {
        self.v4.extend(v4, now);
        self.v6.extend(v6, now);
        self.v4p.extend(v4p, now);
    }

    /// Unassigns the named secondary addresses, all or none; those gone
    /// (for the caller to give back to the vswitch).
    pub(crate) fn unassign_v4(
        &mut self,
        wanted: &[String],
        now: Instant,
    ) -> Result<Vec<Ipv4Addr>, ApiError> {
        self.assignable()?;
        // The primary address is never unassigned: named, it is "not
        // assigned" like any stranger.
        self.v4
            .unassign(wanted, |a, s| a.to_string() == s, "IP", now)
    }

    /// Unassigns the named IPv6 addresses, all or none.
    pub(crate) fn unassign_v6(
        &mut self,
        wanted: &[String],
        now: Instant,
    ) -> Result<Vec<Ipv6Addr>, ApiError> {
        self.assignable()?;
        self.v6.unassign(
            wanted,
            |a, s| s.parse::<Ipv6Addr>().ok() == Some(*a),
            "IP",
            now,
        )
    }

    /// Adds /80s (by network address) at `now` (the caller took them from
    /// its vswitch).
    pub(crate) fn add_v6p(&mut self, v6p: &[Ipv6Addr], now: Instant) {
        self.v6p.extend(v6p, now);
    }

    /// Unassigns the named /80s (`x::/80`), all or none.
    pub(crate) fn unassign_v6p(
        &mut self,
        wanted: &[String],
        now: Instant,
    ) -> Result<Vec<Ipv6Addr>, ApiError> {
        self.assignable()?;
        self.v6p.unassign(
            wanted,
            |a, w| {
                w.strip_suffix("/80")
                    .and_then(|s| s.parse::<Ipv6Addr>().ok())
                    == Some(*a)
            },
            "IPv6 prefix",
            now,
        )
    }

    /// Unassigns the named /28s (`a.b.c.d/28`), all or none.
    pub(crate) fn unassign_v4p(
        &mut self,
        wanted: &[String],
        now: Instant,
    ) -> Result<Vec<Ipv4Addr>, ApiError> {
        self.assignable()?;
        self.v4p
            .unassign(wanted, |a, w| format!("{a}/28") == w, "IPv4 prefix", now)
    }

    /// Sets tags (a key already there takes the new value).
    pub(crate) fn tag(&mut self, new: &[(String, String)]) {
        for (k, v) in new {
            match self.tags.iter_mut().find(|(ek, _)| ek == k) {
                Some(t) => t.1 = v.clone(),
                None => self.tags.push((k.clone(), v.clone())),
            }
        }
    }

    /// Removes the tags with these keys, or every tag.
    pub(crate) fn untag(&mut self, keys: &[String], all: bool) {
        self.tags.retain(|(k, _)| !all && !keys.contains(k));
    }

    /// Ends its transition if it is due at `now` and forgets addresses
    /// removed longer than `lag` ago; when that ends its deletion, what it
    /// gives back to its vswitch.
    pub(crate) fn settle(&mut self, now: Instant, lag: Duration) -> Option<Freed> {
        let mut freed = None;
        if let Some((target, at)) = self.pending.clone().filter(|(_, at)| *at <= now) {
            self.pending = None;
            match target {
                EniStatus::InUse => {
                    self.status = EniStatus::InUse;
                    self.attached_since = Some(at);
                    self.detach_started = None;
                }
                EniStatus::Available => {
                    self.status = EniStatus::Available;
                    self.instance = None;
                }
                _ => {
                    self.deleted_at = Some(at);
                    let v4p = self.v4p.remove_all(at);
                    let v4 = self.v4.remove_all(at);
                    let v6 = self.v6.remove_all(at);
                    let v6p = self.v6p.remove_all(at);
                    freed = Some((self.vswitch.clone(), v4, v6, v4p, v6p));
                }
            }
        }
        self.v4.forget(now, lag);
        self.v6.forget(now, lag);
        self.v4p.forget(now, lag);
        self.v6p.forget(now, lag);
        freed
    }

    /// It as DescribeNetworkInterfaces shows it (its vswitch's `zone`, the
    /// account's `vpc_id`).
    pub(crate) fn describe(&self, zone: &str, vpc_id: &str) -> Value {
        let primary = self.primary_ip().map(|a| a.to_string()).unwrap_or_default();
        json!({
            "NetworkInterfaceId": self.id,
            "Status": self.status.as_str(),
            "Type": if self.primary_eni { "Primary" } else { "Secondary" },
            "MacAddress": self.mac,
            "InstanceId": self.instance.clone().unwrap_or_default(),
            "VpcId": vpc_id,
            "VSwitchId": self.vswitch,
            "ZoneId": zone,
            "PrivateIpAddress": primary,
            "CreationTime": eniip_util::time::format_utc(self.created),
            "Description": self.description,
            "NetworkInterfaceName": self.name,
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
            "SecurityGroupIds": {"SecurityGroupId": self.sgs},
            "PrivateIpSets": {"PrivateIpSet": self.v4.live().map(|(ip, primary)| json!({
                "PrivateIpAddress": ip.to_string(),
                "Primary": primary,
                "PrivateDnsName": "",
                "AssociatedPublicIp": {"PublicIpAddress": "", "AllocationId": ""}
            })).collect::<Vec<_>>()},
            "Ipv6Sets": {"Ipv6Set": self.v6.live_ips().map(|ip| json!({"Ipv6Address": ip.to_string()})).collect::<Vec<_>>()},
            "Ipv4PrefixSets": {"Ipv4PrefixSet": self.v4p.live_ips().map(|ip| json!({"Ipv4Prefix": format!("{ip}/28")})).collect::<Vec<_>>()},
            "Ipv6PrefixSets": {"Ipv6PrefixSet": self.v6p.live_ips().map(|p| json!({"Ipv6Prefix": format!("{p}/80")})).collect::<Vec<_>>()},
            "Tags": {"Tag": self.tags.iter().map(|(k, v)| json!({"TagKey": k, "TagValue": v})).collect::<Vec<_>>()},
            "AssociatedPublicIp": {},
            "Attachment": match &self.instance {
                Some(i) => json!({"InstanceId": i, "DeviceIndex": 1, "NetworkCardIndex": 0, "TrunkNetworkInterfaceId": ""}),
                None => json!({}),
            },
        })
    }

    /// It as `GET /__sim/state` shows it.
    pub(crate) fn state_json(&self) -> Value {
        json!({
            "id": self.id, "mac": self.mac, "status": self.status.as_str(),
            "instance_id": self.instance.clone().unwrap_or_default(), "vswitch_id": self.vswitch,
            "primary_ip": self.primary_ip().map(|a| a.to_string()).unwrap_or_default(),
            "private_ips": self.v4.live_ips().map(|a| a.to_string()).collect::<Vec<_>>(),
            "ipv6s": self.v6.live_ips().map(|a| a.to_string()).collect::<Vec<_>>(),
            "ipv4_prefixes": self.v4p.live_ips().map(|a| format!("{a}/28")).collect::<Vec<_>>(),
            "ipv6_prefixes": self.v6p.live_ips().map(|a| format!("{a}/80")).collect::<Vec<_>>(),
            "tags": self.tags.iter().cloned().collect::<BTreeMap<String, String>>(),
            "security_group_ids": self.sgs,
        })
    }

    /// It as a saved world keeps it: a transition in flight as if it had
    /// ended; `None` for one deleted or being deleted (its addresses go
    /// back).
    pub(crate) fn saved(&self) -> Option<Value> {
        let status = match &self.pending {
            Some((target, _)) => target.clone(),
            None => self.status.clone(),
        };
        if self.deleted() || !matches!(status, EniStatus::InUse | EniStatus::Available) {
            return None;
        }
        let instance = match status {
            EniStatus::InUse => self.instance.clone(),
            _ => None,
        };
        Some(json!({
            "id": self.id,
            "mac": self.mac,
            "vswitch": self.vswitch,
            "status": status.as_str(),
            "instance": instance,
            "primary_eni": self.primary_eni,
            "v4": self.v4.live().map(|(ip, primary)| json!([ip.to_string(), primary])).collect::<Vec<_>>(),
            "v6": self.v6.live_ips().map(|a| a.to_string()).collect::<Vec<_>>(),
            "v4p": self.v4p.live_ips().map(|a| a.to_string()).collect::<Vec<_>>(),
            "v6p": self.v6p.live_ips().map(|a| a.to_string()).collect::<Vec<_>>(),
            "tags": self.tags,
            "sgs": self.sgs,
            "created": self.created,
            "description": self.description,
            "name": self.name,
        }))
    }

    /// An ENI of a saved world, its addresses listed since `since`.
    pub(crate) fn from_saved(e: &Value, since: Instant) -> Result<SimEni, String> {
        let text = |v: &Value, what: &str| -> Result<String, String> {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("saved world: {what} is not a string"))
        };
        let id = text(&e["id"], "an ENI id")?;
        let vswitch = text(&e["vswitch"], "an ENI's vswitch")?;
        let status = EniStatus::parse(&text(&e["status"], "an ENI status")?);
        let list = |key: &str| e[key].as_array().cloned().unwrap_or_default();
        let mut v4 = Vec::new();
        for a in list("v4") {
            let ip: Ipv4Addr = text(&a[0], "an address")?
                .parse()
                .map_err(|_| format!("saved ENI {id}: bad address"))?;
            v4.push((ip, a[1].as_bool() == Some(true)));
        }
        let mut v6 = Vec::new();
        for a in list("v6") {
            let ip: Ipv6Addr = text(&a, "an IPv6 address")?
                .parse()
                .map_err(|_| format!("saved ENI {id}: bad IPv6 address"))?;
            v6.push((ip, false));
        }
        let mut v4p = Vec::new();
        for a in list("v4p") {
            let ip: Ipv4Addr = text(&a, "a prefix")?
                .parse()
                .map_err(|_| format!("saved ENI {id}: bad prefix"))?;
            v4p.push((ip, false));
        }
        let mut v6p = Vec::new();
        for a in list("v6p") {
            let ip: Ipv6Addr = text(&a, "an IPv6 prefix")?
                .parse()
                .map_err(|_| format!("saved ENI {id}: bad IPv6 prefix"))?;
            v6p.push((ip, false));
        }
        let attached = status == EniStatus::InUse;
        Ok(SimEni {
            mac: text(&e["mac"], "a MAC")?,
            id,
            vswitch,
            status,
            pending: None,
            instance: e["instance"].as_str().map(str::to_string),
            primary_eni: e["primary_eni"].as_bool() == Some(true),
            v4: Addrs::restored(v4, since),
            v6: Addrs::restored(v6, since),
            v4p: Addrs::restored(v4p, since),
            v6p: Addrs::restored(v6p, since),
            tags: serde_json::from_value(e["tags"].clone()).unwrap_or_default(),
            sgs: serde_json::from_value(e["sgs"].clone()).unwrap_or_default(),
            created: e["created"].as_u64().unwrap_or(0),
            description: e["description"].as_str().unwrap_or("").to_string(),
            name: e["name"].as_str().unwrap_or("").to_string(),
            attached_since: attached.then_some(since),
            detach_started: None,
            detached_from: None,
            deleted_at: None,
        })
    }

    /// What it holds of its vswitch: addresses, IPv6 addresses, /28s.
    pub(crate) fn holdings(&self) -> (Vec<Ipv4Addr>, Vec<Ipv6Addr>, Vec<Ipv4Addr>) {
        (
            self.v4.live_ips().collect(),
            self.v6.live_ips().collect(),
            self.v4p.live_ips().collect(),
        )
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::net::Ipv4Addr;
    use std::time::{Duration, Instant};

    use super::{NewEni, SimEni};
    use eniip_cloud::EniStatus;

    /// `eni-1` on vsw-a with .1 (primary) and .2, and 10.0.0.16/28.
    pub(crate) fn eni(now: Instant) -> SimEni {
        SimEni::created(
            "eni-1".into(),
            "00:16:3e:00:00:01".into(),
            NewEni {
                vswitch: "vsw-a".into(),
                v4: vec![Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2)],
                v6: Vec::new(),
                v4p: vec![Ipv4Addr::new(10, 0, 0, 16)],
                v6p: Vec::new(),
                tags: Vec::new(),
                sgs: vec!["sg-1".into()],
                description: String::new(),
                name: String::new(),
            },
            now,
        )
    }

    #[test]
    fn one_transition_at_a_time_from_the_status_it_needs() {
        let t0 = Instant::now();
        let d = Duration::from_secs(1);
        let mut e = eni(t0);
        assert!(e.detach(t0, d).is_err(), "not attached");
        e.attach("i-1", t0, d).unwrap();
        assert_eq!(e.status(), &EniStatus::Attaching);
        let busy = e.attach("i-1", t0, d).unwrap_err();
        assert_eq!(busy.code, "Operation.Conflict");
        assert!(e.assignable().is_err());
        assert!(!e.shown_on("i-1", t0 + d), "not attached yet");
        assert!(e.settle(t0 + d, Duration::ZERO).is_none());
        assert_eq!(e.status(), &EniStatus::InUse);
        assert!(e.shown_on("i-1", t0 + d));
        assert!(e.delete(t0 + d, d).is_err(), "in use");
        e.detach(t0 + d, Duration::ZERO).unwrap();
        assert_eq!((e.status(), e.instance()), (&EniStatus::Available, None));
    }

    #[test]
    fn the_primary_eni_is_never_detached_or_deleted() {
        let t0 = Instant::now();
        let mut p = SimEni::primary(
            "eni-p".into(),
            "00:16:3e:00:00:02".into(),
            "vsw-a".into(),
            "i-1",
            (Ipv4Addr::new(10, 0, 0, 9), "sg-1".into()),
            t0,
        );
        assert!(p.detach(t0, Duration::ZERO).is_err());
        assert!(p.delete(t0, Duration::ZERO).is_err());
        assert_eq!(p.primary_ip(), Some(Ipv4Addr::new(10, 0, 0, 9)));
        let saved = p.saved().unwrap();
        let back = SimEni::from_saved(&saved, t0).unwrap();
        assert_eq!(back.saved().unwrap(), saved);
    }
}
