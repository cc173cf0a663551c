//! The world saved to a file and restored from it, so that a demo
//! (`eniipd --simulate --state-dir DIR`) keeps its emulated cloud across
//! restarts: the same instance, vswitches and ENIs with their addresses
//! and tags. Transitions in flight are saved as if they had ended; the
//! metadata lag starts afresh (restored addresses are visible at once).
//!
//! [`save`] renders the parts; [`load`] reads and checks a saved world
//! whole, and [`super::World::restore`] applies it only once it is read.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::account::Account;
use super::eni_table::SimEnis;
use super::sim_eni::SimEni;
use super::vswitch::Vswitches;
use crate::types::{self, InstanceType};

const VERSION: u64 = 1;

/// The world as JSON (see the module doc).
pub(super) fn save(account: &Account, vswitches: &Vswitches, enis: &SimEnis) -> Value {
    json!({
        "version": VERSION,
        "instance_id": account.instance_id(),
        "fleet": account.fleet().iter().map(|(id, t)| json!([id, t.id])).collect::<Vec<_>>(),
        "vpc_id": account.vpc_id(),
        "sg_id": account.sg_id(),
        "security_groups": account.vpc_sgs().skip(1).collect::<Vec<_>>(),
        "vswitches": vswitches.iter().map(|v| json!({
            "id": v.id(),
            "free": v.free(),
        })).collect::<Vec<_>>(),
        "enis": enis.all().filter_map(SimEni::saved).collect::<Vec<_>>(),
    })
}

/// A saved world, read and checked.
#[derive(Debug)]
pub(super) struct Loaded {
    /// The instances, the first one first.
    pub(super) fleet: Vec<(String, &'static InstanceType)>,
    /// The VPC.
    pub(super) vpc_id: String,
    /// The instances' security group.
    pub(super) sg_id: String,
    /// The VPC's other security groups (none in a world saved before
    /// they were kept).
    pub(super) other_sgs: Vec<String>,
    /// The ENIs, each on a configured vswitch.
    pub(super) enis: Vec<SimEni>,
    /// Free counts of configured vswitches.
    pub(super) free: Vec<(String, u64)>,
}

/// Reads a saved world: its vswitches must be the configured ones (its
/// instances as many, checked where they are replaced); `itype` is the
/// configured instance type (a world saved before fleets has one instance
/// of it); restored addresses are listed since before `metadata_lag`.
pub(super) fn load(
    saved: &Value,
    vswitches: &Vswitches,
    itype: &'static InstanceType,
    metadata_lag: Duration,
) -> Result<Loaded, String> {
    if saved["version"].as_u64() != Some(VERSION) {
        return Err(format!("unknown saved-world version {}", saved["version"]));
    }
    let text = |v: &Value, what: &str| -> Result<String, String> {
        v.as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("saved world: {what} is not a string"))
    };
    let configured: HashSet<&str> = vswitches.iter().map(|v| v.id()).collect();
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
        .checked_sub(metadata_lag + Duration::from_secs(1))
        .unwrap_or(now);
    let mut enis = Vec::new();
    for e in saved["enis"].as_array().cloned().unwrap_or_default() {
        let e = SimEni::from_saved(&e, since)?;
        if !configured.contains(e.vswitch()) {
            return Err(format!(
                "saved ENI {} is on unknown vswitch {}",
                e.id(),
                e.vswitch()
            ));
        }
        enis.push(e);
    }
    if !enis.iter().any(SimEni::is_primary_eni) {
        return Err("the saved world has no primary ENI".into());
    }
    let instance_id = text(&saved["instance_id"], "instance_id")?;
    let fleet = saved_fleet(saved, &instance_id, itype)?;
    let mut other_sgs = Vec::new();
    for sg in saved["security_groups"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        other_sgs.push(text(&sg, "a security group id")?);
    }
    let free = saved_vsw
        .iter()
        .filter_map(|v| Some((v["id"].as_str()?.to_string(), v["free"].as_u64()?)))
        .collect();
    Ok(Loaded {
        fleet,
        vpc_id: text(&saved["vpc_id"], "vpc_id")?,
        sg_id: text(&saved["sg_id"], "sg_id")?,
        other_sgs,
        enis,
        free,
    })
}

/// The saved instances (a world saved before fleets: its one instance).
fn saved_fleet(
    saved: &Value,
    instance_id: &str,
    itype: &'static InstanceType,
) -> Result<Vec<(String, &'static InstanceType)>, String> {
    let Some(list) = saved["fleet"].as_array() else {
        return Ok(vec![(instance_id.to_string(), itype)]);
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
    Ok(fleet)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::super::World;

    fn world() -> World {
        World::for_tests(Duration::ZERO, 7)
    }

    #[test]
    fn a_saved_world_comes_back_whole() {
        let w = world();
        let saved = w.saved();
        let mut again = world();
        // Another world (other ids) becomes the saved one.
        let mut other = World::for_tests(Duration::ZERO, 8);
        assert_ne!(other.account().instance_id(), w.account().instance_id());
        other.restore(&saved).unwrap();
        assert_eq!(other.account().instance_id(), w.account().instance_id());
        // The metadata service serves the fleet: the restored instance
        // must be in it, with its primary ENI.
        assert_eq!(other.account().fleet()[0].0, w.account().instance_id());
        assert!(other.account().is_instance(w.account().instance_id()));
        assert_eq!(other.saved(), saved);
        let book = |w: &World| {
            let v = w.vswitches().first();
            (v.free(), v.taken())
        };
        assert_eq!(book(&other), book(&w));
        // A saved world for other vswitches is refused, and nothing changes.
        let mut bad = saved.clone();
        bad["vswitches"][0]["id"] = "vsw-other".into();
        let before = again.saved();
        assert!(again.restore(&bad).is_err());
        assert_eq!(again.saved(), before);
    }

    #[test]
    fn a_saved_world_that_does_not_read_whole_changes_nothing() {
        let saved = World::for_tests(Duration::ZERO, 8).saved();
        let mut w = world();
        let before = w.saved();
        for (key, bad) in [("sg_id", json!(7)), ("vpc_id", json!(null))] {
            let mut s = saved.clone();
            s[key] = bad;
            let e = w.restore(&s).unwrap_err();
            assert!(e.contains(key), "{e}");
            assert_eq!(w.saved(), before, "{key}: nothing replaced");
        }
    }
}
