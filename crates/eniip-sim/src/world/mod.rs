//! The emulated cloud: one account with its instances, vswitches with
//! finite free addresses, ENIs with the asynchronous state machine of the
//! real API, and a log of every address's life so the metadata service can
//! show the world as it was `metadata_lag` ago.
//!
//! State transitions (Attaching -> InUse, Detaching -> Available,
//! Deleting -> gone) are settled lazily, on every access, from the
//! monotonic clock. Everything random comes from one seeded generator.
//!
//! [`World`] is made of parts, each a type with private fields that keeps
//! its own invariant (in its doc, with its unit tests): [`account`] (the
//! region, the instances, the VPC and security group, the ids),
//! [`vswitch`] (each vswitch's address book: free counts and taken
//! offsets), [`eni_table`] (the ENIs by id), [`sim_eni`] (an ENI and its
//! state machine) with [`addr`] (an address's life). The actions, by
//! topic, borrow the parts they touch as views (`eni_actions`,
//! `address_actions`: addresses and /28s, `catalog`: read-only descriptions,
//! `tagging`); [`params`] holds the parameters and errors every action
//! shares, `persist` saves and reads the world. Only this file implements
//! [`World`]: it builds the views, dispatches the actions and settles the
//! parts together (a deleted ENI's addresses go back to its vswitch).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::net::{Net4, Net6};
use super::types::InstanceType;
use eniip_util::rand::Rng;

mod account;
mod addr;
mod address_actions;
mod catalog;
mod eni_actions;
mod eni_table;
mod params;
mod persist;
mod sim_eni;
mod tagging;
mod vswitch;

pub(crate) use account::Account;
use address_actions::AddressActions;
use catalog::Catalog;
use eni_actions::EniActions;
use eni_table::SimEnis;
pub(crate) use params::{err, message_of, status_of, ApiError, Params};
use sim_eni::SimEni;
use tagging::Tagging;
pub(crate) use vswitch::Vswitches;

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
    /// The VPC's security groups beside the instances' own.
    pub(crate) security_groups: Vec<String>,
}

/// Calls the OpenAPI side counted (`GET /__sim/state` shows them).
#[derive(Debug, Default)]
struct Calls {
    /// By action.
    by_action: BTreeMap<String, u64>,
    /// Authenticated requests per signature version (`v3`, `v1`).
    signatures: BTreeMap<&'static str, u64>,
    /// By action, those that carried IPv4 prefix parameters.
    with_prefixes: BTreeMap<String, u64>,
}

/// The whole emulated cloud.
#[derive(Debug)]
pub(crate) struct World {
    attach_delay: Duration,
    metadata_lag: Duration,
    rng: Rng,
    account: Account,
    vswitches: Vswitches,
    enis: SimEnis,
    calls: Calls,
    created_at: Instant,
}

impl World {
    /// A world with its instance and primary ENI.
    pub(crate) fn new(cfg: WorldConfig, mut rng: Rng) -> Result<World, String> {
        let vswitches = Vswitches::new(&cfg.zone, &cfg.vswitches)?;
        let mut account = Account::new(&cfg.region, &cfg.zone, cfg.itype, &mut rng);
        account.add_sgs(cfg.security_groups.iter().map(String::as_str));
        let now = Instant::now();
        let mut w = World {
            attach_delay: cfg.attach_delay,
            metadata_lag: cfg.metadata_lag,
            rng,
            account,
            vswitches,
            enis: SimEnis::default(),
            calls: Calls::default(),
            created_at: now,
        };
        let first = w.account.instance_id().to_string();
        w.add_primary_eni(&first, now)?;
        Ok(w)
    }

    /// A world for unit tests: cn-hangzhou-i, one ecs.g7.xlarge, one
    /// vswitch vsw-1 (192.168.0.0/24), security groups sg-a, sg-b and
    /// sg-c beside the instance's own, instant transitions,
    /// `metadata_lag`, a generator seeded with `seed`.
    #[cfg(test)]
    pub(crate) fn for_tests(metadata_lag: Duration, seed: u64) -> World {
        World::new(
            WorldConfig {
                region: "cn-hangzhou".into(),
                zone: "cn-hangzhou-i".into(),
                itype: crate::types::find("ecs.g7.xlarge").unwrap(),
                vswitches: vec![(
                    "vsw-1".into(),
                    Net4::parse("192.168.0.0/24").unwrap(),
                    None,
                    None,
                )],
                attach_delay: Duration::ZERO,
                metadata_lag,
                security_groups: vec!["sg-a".into(), "sg-b".into(), "sg-c".into()],
            },
            Rng::seeded(seed),
        )
        .unwrap()
    }

    /// Another instance of the account, of type `itype`, with its primary
    /// ENI on the first vswitch; its id.
    pub(crate) fn add_instance(&mut self, itype: &'static InstanceType) -> Result<String, String> {
        let id = self.account.add_instance(itype, &mut self.rng);
        self.add_primary_eni(&id, Instant::now())?;
        Ok(id)
    }

    fn add_primary_eni(&mut self, instance: &str, now: Instant) -> Result<(), String> {
        let vsw = self.vswitches.first().id().to_string();
        let ip = self
            .vswitches
            .take_v4(&mut self.rng, &vsw, 1)
            .map_err(|e| e.message)?;
        let id = self.account.new_id("eni", &mut self.rng);
        let mac = self.enis.new_mac(&mut self.rng);
        let since = now.checked_sub(Duration::from_secs(3600)).unwrap_or(now);
        let sg = self.account.sg_id().to_string();
        self.enis
            .insert(SimEni::primary(id, mac, vsw, instance, (ip[0], sg), since));
        Ok(())
    }

    /// The account: its region, instances, VPC and security group.
    pub(crate) fn account(&self) -> &Account {
        &self.account
    }

    /// The vswitches.
    #[cfg(test)]
    pub(crate) fn vswitches(&self) -> &Vswitches {
        &self.vswitches
    }

    /// The generator everything random comes from.
    pub(crate) fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    /// The request id for a new answer.
    pub(crate) fn request_id(&mut self) -> String {
        self.rng.uuid().to_ascii_uppercase()
    }

    /// Counts an authenticated call to `action` signed with `signature`
    /// (`v3`, `v1`), and whether it carried IPv4 prefix parameters.
    pub(crate) fn count_call(&mut self, action: &str, signature: &'static str, prefixes: bool) {
        *self.calls.by_action.entry(action.to_string()).or_default() += 1;
        if prefixes {
            *self
                .calls
                .with_prefixes
                .entry(action.to_string())
                .or_default() += 1;
        }
        *self.calls.signatures.entry(signature).or_default() += 1;
    }

    /// Sets the metadata lag (the admin knob).
    pub(crate) fn set_metadata_lag(&mut self, lag: Duration) {
        self.metadata_lag = lag;
    }

    /// Applies due transitions (a deleted ENI's addresses go back to its
    /// vswitch) and forgets what the metadata lag no longer needs.
    pub(crate) fn settle(&mut self, now: Instant) {
        for (vsw, v4, v6, v4p, v6p) in self.enis.settle(now, self.metadata_lag) {
            self.vswitches.give(&vsw, &v4, &v6, &v4p);
            self.vswitches.give_v6_prefixes(&vsw, &v6p);
        }
    }

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
            ("2014-05-26", "CreateNetworkInterface") => self.eni_actions().create(p, now),
            ("2014-05-26", "AttachNetworkInterface") => self.eni_actions().attach(p, now),
            ("2014-05-26", "DetachNetworkInterface") => self.eni_actions().detach(p, now),
            ("2014-05-26", "DeleteNetworkInterface") => self.eni_actions().delete(p, now),
            ("2014-05-26", "DescribeNetworkInterfaces") => self.eni_actions().describe(p),
            ("2014-05-26", "ModifyNetworkInterfaceAttribute") => self.eni_actions().modify(p),
            ("2014-05-26", "AssignPrivateIpAddresses") => self.address_actions().assign4(p, now),
            ("2014-05-26", "UnassignPrivateIpAddresses") => {
                self.address_actions().unassign4(p, now)
            }
            ("2014-05-26", "AssignIpv6Addresses") => self.address_actions().assign6(p, now),
            ("2014-05-26", "UnassignIpv6Addresses") => self.address_actions().unassign6(p, now),
            ("2014-05-26", "DescribeInstanceTypes") => self.catalog().instance_types(p),
            ("2014-05-26", "DescribeInstanceAttribute") => self.catalog().instance_attribute(p),
            ("2014-05-26", "DescribeSecurityGroups") => self.catalog().security_groups(p),
            ("2014-05-26", "TagResources") => self.tagging().tag_resources(p),
            ("2014-05-26", "UntagResources") => self.tagging().untag_resources(p),
            ("2014-05-26", "ListTagResources") => self.tagging().list_tag_resources(p),
            ("2016-04-28", "DescribeVSwitches") => self.catalog().describe_vswitches(p),
            _ => Err(err(
                404,
                "InvalidApi.NotFound",
                format!("Specified api is not found, please check your url and method. ({action}, version {version})"),
            )),
        }
    }

    // ---- the views the actions borrow ----------------------------------------

    fn eni_actions(&mut self) -> EniActions<'_> {
        EniActions {
            account: &self.account,
            rng: &mut self.rng,
            vswitches: &mut self.vswitches,
            enis: &mut self.enis,
            attach_delay: self.attach_delay,
            metadata_lag: self.metadata_lag,
        }
    }

    fn address_actions(&mut self) -> AddressActions<'_> {
        AddressActions {
            account: &self.account,
            rng: &mut self.rng,
            vswitches: &mut self.vswitches,
            enis: &mut self.enis,
        }
    }

    fn catalog(&self) -> Catalog<'_> {
        Catalog {
            account: &self.account,
            vswitches: &self.vswitches,
            enis: &self.enis,
        }
    }

    fn tagging(&mut self) -> Tagging<'_> {
        Tagging {
            account: &self.account,
            enis: &mut self.enis,
        }
    }

    // ---- views -----------------------------------------------------------

    /// The state as SPEC section 5's `GET /__sim/state`.
    pub(crate) fn state_json(&mut self, now: Instant) -> Value {
        self.settle(now);
        let primary_mac = self
            .enis
            .all()
            .find(|e| e.is_primary_eni())
            .map(|e| e.mac().to_string())
            .unwrap_or_default();
        let a = &self.account;
        json!({
            "instance": {"id": a.instance_id(), "type": a.itype().id, "zone": a.zone(),
                         "region": a.region(), "primary_mac": primary_mac},
            "vswitches": self.vswitches.iter().map(|v| {
                let mut j = json!({"id": v.id(), "cidr": v.cidr().to_string(), "free": v.free(),
                    "free_prefixes": v.free_prefixes(), "free_v6_prefixes": v.free_v6_prefixes(), "gateway": v.cidr().gateway().to_string()});
                if let Some(c6) = v.cidr6() {
                    j["ipv6_cidr"] = json!(c6.to_string());
                    j["ipv6_gateway"] = json!(c6.gateway().to_string());
                }
                j
            }).collect::<Vec<_>>(),
            "enis": self.enis.live().map(SimEni::state_json).collect::<Vec<_>>(),
            "calls": self.calls.by_action,
            // Both versions always, so a count of 0 is said, not absent.
            "signatures": {
                "v1": self.calls.signatures.get("v1").copied().unwrap_or(0),
                "v3": self.calls.signatures.get("v3").copied().unwrap_or(0),
            },
            "prefix_calls": self.calls.with_prefixes,
        })
    }

    /// ENIs attached to the instance as metadata shows them now (lagging).
    pub(crate) fn metadata_enis(&mut self, now: Instant, instance: &str) -> Vec<MdEni> {
        self.settle(now);
        let t = now
            .checked_sub(self.metadata_lag)
            .unwrap_or(self.created_at);
        self.enis
            .all()
            .filter(|e| e.shown_on(instance, t))
            .map(|e| {
                let vsw = self.vswitches.get(e.vswitch());
                let (v4, v6, v4_prefixes) = e.addresses_at(t);
                MdEni {
                    id: e.id().to_string(),
                    mac: e.mac().to_string(),
                    primary: e.is_primary_eni(),
                    primary_ip: e.primary_ip(),
                    v4,
                    v6,
                    v4_prefixes,
                    v6_prefixes: e.v6_prefixes_at(t),
                    vswitch: e.vswitch().to_string(),
                    cidr: vsw.map(|v| v.cidr()),
                    cidr6: vsw.and_then(|v| v.cidr6()),
                }
            })
            .collect()
    }

    /// Sets a vswitch's free count; false if the vswitch is unknown.
    pub(crate) fn set_free(&mut self, id: &str, free: u64) -> bool {
        match self.vswitches.get_mut(id) {
            Some(v) => {
                v.set_free(free);
                true
            }
            None => false,
        }
    }

    /// Caps how many more IPv6 /80s a vswitch gives (`None` lifts the
    /// cap); false if the vswitch is unknown.
    pub(crate) fn set_free_v6_prefixes(&mut self, id: &str, cap: Option<u64>) -> bool {
        match self.vswitches.get_mut(id) {
            Some(v) => {
                v.set_v6_prefix_cap(cap);
                true
            }
            None => false,
        }
    }

    /// Caps how many more /28s a vswitch gives (`None` lifts the cap);
    /// false if the vswitch is unknown.
    pub(crate) fn set_free_prefixes(&mut self, id: &str, cap: Option<u64>) -> bool {
        match self.vswitches.get_mut(id) {
            Some(v) => {
                v.set_prefix_cap(cap);
                true
            }
            None => false,
        }
    }

    // ---- saved worlds ------------------------------------------------------

    /// The world as JSON, to save (see `persist`).
    pub(crate) fn saved(&self) -> Value {
        persist::save(&self.account, &self.vswitches, &self.enis)
    }

    /// Replaces the instances and their ENIs with a saved world. The
    /// vswitches must be the configured ones; their taken addresses are
    /// rebuilt from the ENIs and their free counts restored. Refused
    /// whole: nothing changes unless all of it is read.
    pub(crate) fn restore(&mut self, saved: &Value) -> Result<(), String> {
        let loaded = persist::load(
            saved,
            &self.vswitches,
            self.account.itype(),
            self.metadata_lag,
        )?;
        self.account.restore(
            loaded.fleet,
            loaded.vpc_id,
            (loaded.sg_id, loaded.other_sgs),
        )?;
        for id in self
            .vswitches
            .iter()
            .map(|v| v.id().to_string())
            .collect::<Vec<_>>()
        {
            if let Some(v) = self.vswitches.get_mut(&id) {
                v.forget_taken();
            }
        }
        for e in &loaded.enis {
            let (v4, v6, v4p) = e.holdings();
            if let Some(v) = self.vswitches.get_mut(e.vswitch()) {
                v.mark_taken(&v4, &v6, &v4p);
                v.mark_v6_prefixes_taken(&e.live_v6p().collect::<Vec<_>>());
            }
        }
        for (id, free) in loaded.free {
            self.set_free(&id, free);
        }
        self.enis = SimEnis::restored(loaded.enis);
        Ok(())
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
    /// Visible IPv6 /80 prefixes (network addresses).
    pub(crate) v6_prefixes: Vec<Ipv6Addr>,
    /// Vswitch.
    pub(crate) vswitch: String,
    /// Vswitch block.
    pub(crate) cidr: Option<Net4>,
    /// Vswitch IPv6 block.
    pub(crate) cidr6: Option<Net6>,
}
