//! The account ([`Account`]): its region and zone, its instances (the
//! fleet, the first one the instance of the `ready` line), its VPC and
//! its security groups (the instances' own, then the others of the VPC
//! that `--security-group` names), and the ids it hands out in the
//! region's style.
//!
//! Invariants: the fleet is never empty and starts with `instance_id`;
//! an instance id is in it once; the VPC's groups start with the
//! instances' own and hold each id once.

use super::params::{err, need, ApiError, Params};
use crate::types::InstanceType;
use eniip_util::rand::Rng;

/// The account that owns everything (OwnerId, `owner-account-id`).
pub(crate) const OWNER_ID: u64 = 1_234_567_890_123_456;
/// The image the instance runs.
pub(crate) const IMAGE_ID: &str = "aliyun_3_x64_20G_alibase_20240819.vhd";

/// What the instance says about itself, the same in the OpenAPI and in
/// metadata; derived from the instance id, so stable under a seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    /// `iZ<id>Z`, as ECS names hosts by default.
    pub(crate) hostname: String,
    /// Defaults to the hostname, as on ECS.
    pub(crate) instance_name: String,
    /// A UUID.
    pub(crate) serial_number: String,
    /// The image.
    pub(crate) image_id: &'static str,
    /// The account.
    pub(crate) owner_id: u64,
}

/// The account and its instances.
#[derive(Debug)]
pub(crate) struct Account {
    region: String,
    zone: String,
    /// The region's two letters in ids (`bp` for cn-hangzhou).
    region_prefix: String,
    /// The configured instance type: the first instance's, and the one
    /// whose limits an ENI attached to no known instance has.
    itype: &'static InstanceType,
    /// Every instance, the first included: (id, type).
    fleet: Vec<(String, &'static InstanceType)>,
    vpc_id: String,
    sg_id: String,
    /// The VPC's other security groups, each once, none the instances'.
    other_sgs: Vec<String>,
}

impl Account {
    /// An account in `region`/`zone` with one instance of type `itype`
    /// (its id, then the VPC's and the security group's, from `rng`).
    pub(crate) fn new(
        region: &str,
        zone: &str,
        itype: &'static InstanceType,
        rng: &mut Rng,
    ) -> Account {
        let region_prefix = match region {
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
        let mut a = Account {
            region: region.to_string(),
            zone: zone.to_string(),
            region_prefix,
            itype,
            fleet: Vec::new(),
            vpc_id: String::new(),
            sg_id: String::new(),
            other_sgs: Vec::new(),
        };
        let instance = a.new_id("i", rng);
        a.fleet.push((instance, itype));
        a.vpc_id = a.new_id("vpc", rng);
        a.sg_id = a.new_id("sg", rng);
        a
    }

    /// A new id of `kind` (`i`, `eni`, ...) in the region's style.
    pub(crate) fn new_id(&self, kind: &str, rng: &mut Rng) -> String {
        format!(
            "{kind}-{}{}",
            self.region_prefix,
            rng.hex(9).chars().take(17).collect::<String>()
        )
    }

    /// Another instance of type `itype`; its id.
    pub(crate) fn add_instance(&mut self, itype: &'static InstanceType, rng: &mut Rng) -> String {
        let id = loop {
            let id = self.new_id("i", rng);
            if !self.is_instance(&id) {
                break id;
            }
        };
        self.fleet.push((id.clone(), itype));
        id
    }

    /// The region.
    pub(crate) fn region(&self) -> &str {
        &self.region
    }

    /// The zone.
    pub(crate) fn zone(&self) -> &str {
        &self.zone
    }

    /// The first instance (the one of the `ready` line).
    pub(crate) fn instance_id(&self) -> &str {
        &self.fleet[0].0
    }

    /// Every instance: (id, type).
    pub(crate) fn fleet(&self) -> &[(String, &'static InstanceType)] {
        &self.fleet
    }

    /// The VPC.
    pub(crate) fn vpc_id(&self) -> &str {
        &self.vpc_id
    }

    /// The security group of the instances.
    pub(crate) fn sg_id(&self) -> &str {
        &self.sg_id
    }

    /// Adds `ids` to the VPC's security groups (an id it has already is
    /// skipped).
    pub(crate) fn add_sgs<'a>(&mut self, ids: impl IntoIterator<Item = &'a str>) {
        for id in ids {
            if !self.has_sg(id) {
                self.other_sgs.push(id.to_string());
            }
        }
    }

    /// The VPC's security groups: the instances' own first.
    pub(crate) fn vpc_sgs(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.sg_id.as_str()).chain(self.other_sgs.iter().map(String::as_str))
    }

    /// Whether `id` is a security group of the VPC.
    pub(crate) fn has_sg(&self, id: &str) -> bool {
        self.vpc_sgs().any(|s| s == id)
    }

    /// Whether `id` is one of the account's instances.
    pub(crate) fn is_instance(&self, id: &str) -> bool {
        self.fleet.iter().any(|(i, _)| i == id)
    }

    /// The configured instance type.
    pub(crate) fn itype(&self) -> &'static InstanceType {
        self.itype
    }

    /// The type of instance `id` (the configured one if unknown, or for an
    /// ENI attached to none).
    pub(crate) fn itype_of(&self, id: Option<&str>) -> &'static InstanceType {
        id.and_then(|id| self.fleet.iter().find(|(i, _)| i == id))
            .map_or(self.itype, |(_, t)| *t)
    }

    /// Refused unless the call names this region.
    pub(crate) fn check_region(&self, p: &Params) -> Result<(), ApiError> {
        let r = need(p, "RegionId")?;
        if r != self.region {
            return Err(err(
                404,
                "InvalidRegionId.NotFound",
                format!("The specified RegionId \"{r}\" does not exist."),
            ));
        }
        Ok(())
    }

    /// Refused unless the call's `InstanceId` is one of the account's.
    pub(crate) fn check_instance(&self, p: &Params) -> Result<(), ApiError> {
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

    /// An instance's identity, derived from its id.
    pub(crate) fn identity_of(&self, instance: &str) -> Identity {
        let id = instance.trim_start_matches("i-");
        let hostname = format!("iZ{id}Z");
        let hex: String = instance
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
            .chars()
            .chain(std::iter::repeat('0'))
            .take(32)
            .collect();
        let serial_number = format!(
            "{}-{}-{}-{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..32]
        );
        Identity {
            instance_name: hostname.clone(),
            hostname,
            serial_number,
            image_id: IMAGE_ID,
            owner_id: OWNER_ID,
        }
    }

    /// A saved world's instances (the first one first), VPC and security
    /// groups replace these (the configured other groups stay: the saved
    /// ones are added to them); refused (nothing changed) unless the
    /// fleet is as long as this one (each instance has its metadata
    /// listener).
    pub(crate) fn restore(
        &mut self,
        fleet: Vec<(String, &'static InstanceType)>,
        vpc_id: String,
        (sg_id, other_sgs): (String, Vec<String>),
    ) -> Result<(), String> {
        if fleet.len() != self.fleet.len() {
            return Err(format!(
                "the saved world has {} instance(s), {} are configured now",
                fleet.len(),
                self.fleet.len()
            ));
        }
        self.fleet = fleet;
        self.vpc_id = vpc_id;
        self.sg_id = sg_id;
        let configured = std::mem::take(&mut self.other_sgs);
        self.add_sgs(other_sgs.iter().chain(&configured).map(String::as_str));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Account;
    use crate::types;
    use eniip_util::rand::Rng;

    #[test]
    fn ids_in_the_region_style_and_a_fleet_that_starts_with_the_first() {
        let g7 = types::find("ecs.g7.xlarge").unwrap();
        let mut rng = Rng::seeded(1);
        let mut a = Account::new("cn-hangzhou", "cn-hangzhou-i", g7, &mut rng);
        assert!(a.instance_id().starts_with("i-bp"));
        assert!(a.vpc_id().starts_with("vpc-bp") && a.sg_id().starts_with("sg-bp"));
        let other = types::find("ecs.g7.2xlarge").unwrap();
        let second = a.add_instance(other, &mut rng);
        assert_ne!(second, a.instance_id());
        assert_eq!(a.itype_of(Some(&second)).id, other.id);
        assert_eq!(a.itype_of(None).id, g7.id, "the configured one");
        assert_eq!(a.itype_of(Some("i-nope")).id, g7.id);
        assert!(a
            .restore(Vec::new(), "vpc-x".into(), ("sg-x".into(), Vec::new()))
            .is_err());
        assert_eq!(a.fleet().len(), 2);
        let id = a.identity_of("i-bp1");
        assert_eq!(id.hostname, "iZbp1Z");
    }

    #[test]
    fn the_vpc_has_the_instances_group_first_and_each_group_once() {
        let g7 = types::find("ecs.g7.xlarge").unwrap();
        let mut a = Account::new("cn-hangzhou", "cn-hangzhou-i", g7, &mut Rng::seeded(1));
        let own = a.sg_id().to_string();
        a.add_sgs(["sg-a", "sg-b", "sg-a", own.as_str()]);
        assert_eq!(
            a.vpc_sgs().collect::<Vec<_>>(),
            [own.as_str(), "sg-a", "sg-b"]
        );
        assert!(a.has_sg("sg-b") && !a.has_sg("sg-c"));
        // A saved world's groups come back beside the configured ones.
        let fleet = a.fleet().to_vec();
        a.restore(
            fleet,
            "vpc-x".into(),
            ("sg-own".into(), vec!["sg-c".into(), "sg-a".into()]),
        )
        .unwrap();
        assert_eq!(
            a.vpc_sgs().collect::<Vec<_>>(),
            ["sg-own", "sg-c", "sg-a", "sg-b"]
        );
    }
}
