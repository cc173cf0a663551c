//! The world saved to a file and restored from it, so that a demo
//! (`eniipd --simulate --state-dir DIR`) keeps its emulated cloud across
//! restarts: the same instance, vswitches and ENIs with their addresses
//! and tags. Transitions in flight are saved as if they had ended; the
//! metadata lag starts afresh (restored addresses are visible at once).

use std::collections::{BTreeMap, HashSet};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{Addr, SimEni, World};
use crate::cloud::EniStatus;
use crate::sim::types::{self, InstanceType};

const VERSION: u64 = 1;

impl World {
    /// The world as JSON (see the module doc).
    pub(crate) fn saved(&self) -> Value {
        let mut vsw: BTreeMap<String, (u64, Vec<u64>)> = BTreeMap::new();
        for v in &self.vswitches {
            vsw.insert(v.id.clone(), (v.free, Vec::new()));
        }
        let mut enis = Vec::new();
        for e in self.enis.values() {
            let status = match &e.pending {
                Some((target, _)) => target.clone(),
                None => e.status.clone(),
            };
            // Deleted (or being deleted): its addresses go back.
            if e.deleted_at.is_some() || !matches!(status, EniStatus::InUse | EniStatus::Available)
            {
                continue;
            }
            let instance = match status {
                EniStatus::InUse => e.instance.clone(),
                _ => None,
            };
            enis.push(json!({
                "id": e.id,
                "mac": e.mac,
                "vswitch": e.vswitch,
                "status": status.as_str(),
                "instance": instance,
                "primary_eni": e.primary_eni,
                "v4": e.live_v4().map(|a| json!([a.ip.to_string(), a.primary])).collect::<Vec<_>>(),
                "v6": e.live_v6().map(|a| a.ip.to_string()).collect::<Vec<_>>(),
                "v4p": e.live_v4p().map(|a| a.ip.to_string()).collect::<Vec<_>>(),
                "tags": e.tags,
                "sgs": e.sgs,
                "created": e.created,
                "description": e.description,
                "name": e.name,
            }));
        }
        json!({
            "version": VERSION,
            "instance_id": self.instance_id,
            "fleet": self.fleet.iter().map(|(id, t)| json!([id, t.id])).collect::<Vec<_>>(),
            "vpc_id": self.vpc_id,
            "sg_id": self.sg_id,
            "vswitches": self.vswitches.iter().map(|v| json!({
                "id": v.id,
                "free": v.free,
            })).collect::<Vec<_>>(),
            "enis": enis,
        })
    }

    /// Replaces the instance and its ENIs with a saved world. The
    /// vswitches must be the configured ones; their used addresses are
    /// rebuilt from the ENIs and their free counts restored.
    pub(crate) fn restore(&mut self, saved: &Value) -> Result<(), String> {
        if saved["version"].as_u64() != Some(VERSION) {
            return Err(format!("unknown saved-world version {}", saved["version"]));
        }
        let text = |v: &Value, what: &str| -> Result<String, String> {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("saved world: {what} is not a string"))
        };
        let configured: HashSet<&str> = self.vswitches.iter().map(|v| v.id.as_str()).collect();
        let saved_vsw = saved["vswitches"].as_array().cloned().unwrap_or_default();
        for v in &saved_vsw {
            let id = text(&v["id"], "a vswitch id")?;
            if !configured.contains(id.as_str()) {
                return Err(format!(
                    "the saved world has vswitch {id}, which is not configured now"
                ));
            }
        }
        let now = Instant::now();
        let since = now
            .checked_sub(self.cfg.metadata_lag + Duration::from_secs(1))
            .unwrap_or(now);
        let mut enis = BTreeMap::new();
        let mut macs = HashSet::new();
        let mut used4: Vec<(String, Ipv4Addr)> = Vec::new();
        let mut used6: Vec<(String, Ipv6Addr)> = Vec::new();
        let mut used_p: Vec<(String, Ipv4Addr)> = Vec::new();
        for e in saved["enis"].as_array().cloned().unwrap_or_default() {
            let id = text(&e["id"], "an ENI id")?;
            let vswitch = text(&e["vswitch"], "an ENI's vswitch")?;
            if !configured.contains(vswitch.as_str()) {
                return Err(format!("saved ENI {id} is on unknown vswitch {vswitch}"));
            }
            let status = EniStatus::parse(&text(&e["status"], "an ENI status")?);
            let addr = |ip, primary| Addr {
                ip,
                primary,
                added: since,
                removed: None,
            };
            let mut v4 = Vec::new();
            for a in e["v4"].as_array().cloned().unwrap_or_default() {
                let ip: Ipv4Addr = text(&a[0], "an address")?
                    .parse()
                    .map_err(|_| format!("saved ENI {id}: bad address"))?;
                used4.push((vswitch.clone(), ip));
                v4.push(addr(ip, a[1].as_bool() == Some(true)));
            }
            let mut v6 = Vec::new();
            for a in e["v6"].as_array().cloned().unwrap_or_default() {
                let ip: Ipv6Addr = text(&a, "an IPv6 address")?
                    .parse()
                    .map_err(|_| format!("saved ENI {id}: bad IPv6 address"))?;
                used6.push((vswitch.clone(), ip));
                v6.push(Addr {
                    ip,
                    primary: false,
                    added: since,
                    removed: None,
                });
            }
            let mut v4p = Vec::new();
            for a in e["v4p"].as_array().cloned().unwrap_or_default() {
                let ip: Ipv4Addr = text(&a, "a prefix")?
                    .parse()
                    .map_err(|_| format!("saved ENI {id}: bad prefix"))?;
                used_p.push((vswitch.clone(), ip));
                v4p.push(addr(ip, false));
            }
            let tags: Vec<(String, String)> =
                serde_json::from_value(e["tags"].clone()).unwrap_or_default();
            let sgs: Vec<String> = serde_json::from_value(e["sgs"].clone()).unwrap_or_default();
            let mac = text(&e["mac"], "a MAC")?;
            macs.insert(mac.clone());
            let attached = status == EniStatus::InUse;
            enis.insert(
                id.clone(),
                SimEni {
                    id,
                    mac,
                    vswitch,
                    status,
                    pending: None,
                    instance: e["instance"].as_str().map(str::to_string),
                    primary_eni: e["primary_eni"].as_bool() == Some(true),
                    v4,
                    v6,
                    v4p,
                    tags,
                    sgs,
                    created: e["created"].as_u64().unwrap_or(0),
                    description: e["description"].as_str().unwrap_or("").to_string(),
                    name: e["name"].as_str().unwrap_or("").to_string(),
                    attached_since: attached.then_some(since),
                    detach_started: None,
                    detached_from: None,
                    deleted_at: None,
                },
            );
        }
        if !enis.values().any(|e| e.primary_eni) {
            return Err("the saved world has no primary ENI".into());
        }
        let instance_id = text(&saved["instance_id"], "instance_id")?;
        let fleet = self.saved_fleet(saved, &instance_id)?;
        // Everything checked: replace.
        for v in &mut self.vswitches {
            v.used.clear();
            v.used6.clear();
        }
        self.enis = enis;
        self.macs = macs;
        self.instance_id = instance_id;
        self.fleet = fleet;
        self.vpc_id = text(&saved["vpc_id"], "vpc_id")?;
        self.sg_id = text(&saved["sg_id"], "sg_id")?;
        for (vsw, ip) in used4 {
            self.mark_used_v4(&vsw, ip);
        }
        for (vsw, ip) in used6 {
            self.mark_used_v6(&vsw, ip);
        }
        for (vsw, p) in used_p {
            for i in 0..super::PREFIX_SIZE as u32 {
                self.mark_used_v4(&vsw, Ipv4Addr::from(u32::from(p) + i));
            }
        }
        for v in saved_vsw {
            let id = v["id"].as_str().unwrap_or_default().to_string();
            if let (Some(free), Some(vs)) = (v["free"].as_u64(), self.vsw_mut(&id)) {
                vs.free = free;
            }
        }
        Ok(())
    }

    /// The saved instances (a world saved before fleets: its one
    /// instance), which must be as many as the ones configured now: each
    /// has its metadata listener already.
    fn saved_fleet(
        &self,
        saved: &Value,
        instance_id: &str,
    ) -> Result<Vec<(String, &'static InstanceType)>, String> {
        let Some(list) = saved["fleet"].as_array() else {
            return Ok(vec![(instance_id.to_string(), self.cfg.itype)]);
        };
        let mut fleet = Vec::new();
        for i in list {
            let (Some(id), Some(t)) = (i[0].as_str(), i[1].as_str()) else {
                return Err("saved world: a fleet entry is not [id, type]".into());
            };
            let itype = types::find(t)
                .ok_or_else(|| format!("saved world: instance {id} has unknown type {t}"))?;
            fleet.push((id.to_string(), itype));
        }
        if fleet.first().map(|(id, _)| id.as_str()) != Some(instance_id) {
            return Err("saved world: the fleet does not start with instance_id".into());
        }
        if fleet.len() != self.fleet.len() {
            return Err(format!(
                "the saved world has {} instance(s), {} are configured now",
                fleet.len(),
                self.fleet.len()
            ));
        }
        Ok(fleet)
    }

    fn mark_used_v4(&mut self, vsw: &str, ip: Ipv4Addr) {
        if let Some(v) = self.vsw_mut(vsw) {
            let off = u64::from(u32::from(ip).wrapping_sub(v.cidr.base));
            v.used.insert(off);
        }
    }

    fn mark_used_v6(&mut self, vsw: &str, ip: Ipv6Addr) {
        if let Some(v) = self.vsw_mut(vsw) {
            if let Some(net) = v.cidr6 {
                v.used6
                    .insert(u128::from(ip) & !(u128::MAX << (128 - net.prefix)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::World;
    use crate::util::rand::Rng;

    fn world() -> World {
        World::for_tests(std::time::Duration::ZERO)
    }

    #[test]
    fn a_saved_world_comes_back_whole() {
        let w = world();
        let saved = w.saved();
        let mut again = world();
        // Another world (other ids) becomes the saved one.
        let mut other = World::new(again.cfg.clone(), Rng::seeded(8)).unwrap();
        assert_ne!(other.instance_id, w.instance_id);
        other.restore(&saved).unwrap();
        assert_eq!(other.instance_id, w.instance_id);
        // The metadata service serves the fleet: the restored instance
        // must be in it, with its primary ENI.
        assert_eq!(other.fleet[0].0, w.instance_id);
        assert!(other.is_instance(&w.instance_id));
        assert_eq!(other.saved(), saved);
        assert_eq!(other.vswitches[0].free, w.vswitches[0].free);
        assert_eq!(other.vswitches[0].used, w.vswitches[0].used);
        // A saved world for other vswitches is refused, and nothing changes.
        let mut bad = saved.clone();
        bad["vswitches"][0]["id"] = "vsw-other".into();
        let before = again.saved();
        assert!(again.restore(&bad).is_err());
        assert_eq!(again.saved(), before);
    }
}
