//! What the OpenAPI said about this instance at the last start that asked
//! it (`instance.json`): its type's ENI limits and its security groups.
//! Neither changes while the instance runs, so a restart reads them here
//! and asks the OpenAPI nothing before it is ready.
//!
//! Only a cache: a file that is missing, unreadable or for another
//! instance is ignored (the daemon then asks the OpenAPI, as at a first
//! start), never an error.

use std::path::Path;

use serde::{Deserialize, Serialize};

use eniip_cloud::{InstanceIdentity, InstanceTypeLimits};

use crate::store::write_atomic;

/// The file in the state directory.
pub(super) const INSTANCE_FILE: &str = "instance.json";

/// The instance's facts from the OpenAPI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct InstanceFacts {
    /// The instance they were read for.
    pub(super) instance_id: String,
    /// Its type (DescribeInstanceTypes was asked for this one).
    pub(super) instance_type: String,
    /// `EniQuantity`.
    pub(super) eni_quantity: u32,
    /// `EniPrivateIpAddressQuantity`.
    pub(super) ipv4_per_eni: u32,
    /// `EniIpv6AddressQuantity`.
    pub(super) ipv6_per_eni: u32,
    /// The instance's security groups (DescribeInstanceAttribute); empty
    /// when the configuration names them.
    pub(super) security_groups: Vec<String>,
}

impl InstanceFacts {
    /// The facts of `limits` and `security_groups` for `identity`.
    pub(super) fn new(
        identity: &InstanceIdentity,
        limits: &InstanceTypeLimits,
        security_groups: &[String],
    ) -> InstanceFacts {
        InstanceFacts {
            instance_id: identity.instance_id.clone(),
            instance_type: limits.instance_type.clone(),
            eni_quantity: limits.eni_quantity,
            ipv4_per_eni: limits.ipv4_per_eni,
            ipv6_per_eni: limits.ipv6_per_eni,
            security_groups: security_groups.to_vec(),
        }
    }

    /// True when these facts are about the instance `identity` describes
    /// (same id, same type: a resized instance is asked again).
    pub(super) fn describe(&self, identity: &InstanceIdentity) -> bool {
        self.instance_id == identity.instance_id && self.instance_type == identity.instance_type
    }

    /// The type's limits.
    pub(super) fn limits(&self) -> InstanceTypeLimits {
        InstanceTypeLimits {
            instance_type: self.instance_type.clone(),
            eni_quantity: self.eni_quantity,
            ipv4_per_eni: self.ipv4_per_eni,
            ipv6_per_eni: self.ipv6_per_eni,
        }
    }
}

/// The facts kept in `dir`, if a readable file is there (why not, when
/// there is a file that cannot be used).
pub(super) fn load(dir: &Path) -> Result<Option<InstanceFacts>, String> {
    let path = dir.join(INSTANCE_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Keeps `facts` in `dir`, atomically and durably.
pub(super) fn save(dir: &Path, facts: &InstanceFacts) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(facts).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    write_atomic(dir, INSTANCE_FILE, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(id: &str, ty: &str) -> InstanceIdentity {
        InstanceIdentity {
            instance_id: id.into(),
            instance_type: ty.into(),
            ..InstanceIdentity::default()
        }
    }

    #[test]
    fn kept_facts_come_back_and_say_which_instance_they_describe() {
        let dir = std::env::temp_dir().join(format!("eniipd-instance-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(load(&dir), Ok(None));
        let limits = InstanceTypeLimits {
            instance_type: "ecs.g7.large".into(),
            eni_quantity: 3,
            ipv4_per_eni: 6,
            ipv6_per_eni: 6,
        };
        let me = identity("i-1", "ecs.g7.large");
        let facts = InstanceFacts::new(&me, &limits, &["sg-1".into()]);
        save(&dir, &facts).unwrap();
        let back = load(&dir).unwrap().unwrap();
        assert_eq!(back, facts);
        assert_eq!(back.limits(), limits);
        assert!(back.describe(&me));
        assert!(!back.describe(&identity("i-2", "ecs.g7.large")));
        assert!(!back.describe(&identity("i-1", "ecs.g7.xlarge")));
        std::fs::write(dir.join(INSTANCE_FILE), b"{not json").unwrap();
        let err = load(&dir).unwrap_err();
        assert!(err.contains(INSTANCE_FILE), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
