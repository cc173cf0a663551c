//! Built-in instance types with their ENI limits.
//!
//! Values of Alibaba Cloud's g7 general-purpose family as published in the
//! ECS instance-family documentation (ENIs per instance, private IPv4 and
//! IPv6 addresses per ENI). ecs.g7.2xlarge (4, 15, 15) is also what
//! Terway's fake client returns (reference terway-eniip.md §4.5), which
//! cross-checks the table. Capacity for eniipd is (ENIs - 1) x IPv4 per ENI:
//! small 12, medium 45, large 210.

/// One instance type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InstanceType {
    /// `ecs.g7.xlarge`
    pub(crate) id: &'static str,
    /// Family.
    pub(crate) family: &'static str,
    /// vCPUs.
    pub(crate) cpus: u32,
    /// Memory in GiB.
    pub(crate) memory_gib: u32,
    /// EniQuantity (the primary ENI included).
    pub(crate) enis: u32,
    /// EniPrivateIpAddressQuantity (the primary address included).
    pub(crate) ipv4_per_eni: u32,
    /// EniIpv6AddressQuantity.
    pub(crate) ipv6_per_eni: u32,
}

/// The table.
pub(crate) const TYPES: &[InstanceType] = &[
    InstanceType {
        id: "ecs.g7.large",
        family: "ecs.g7",
        cpus: 2,
        memory_gib: 8,
        enis: 3,
        ipv4_per_eni: 6,
        ipv6_per_eni: 6,
    },
    InstanceType {
        id: "ecs.g7.xlarge",
        family: "ecs.g7",
        cpus: 4,
        memory_gib: 16,
        enis: 4,
        ipv4_per_eni: 15,
        ipv6_per_eni: 15,
    },
    InstanceType {
        id: "ecs.g7.2xlarge",
        family: "ecs.g7",
        cpus: 8,
        memory_gib: 32,
        enis: 4,
        ipv4_per_eni: 15,
        ipv6_per_eni: 15,
    },
    InstanceType {
        id: "ecs.g7.3xlarge",
        family: "ecs.g7",
        cpus: 12,
        memory_gib: 48,
        enis: 8,
        ipv4_per_eni: 15,
        ipv6_per_eni: 15,
    },
    InstanceType {
        id: "ecs.g7.4xlarge",
        family: "ecs.g7",
        cpus: 16,
        memory_gib: 64,
        enis: 8,
        ipv4_per_eni: 30,
        ipv6_per_eni: 30,
    },
    InstanceType {
        id: "ecs.g7.8xlarge",
        family: "ecs.g7",
        cpus: 32,
        memory_gib: 128,
        enis: 8,
        ipv4_per_eni: 30,
        ipv6_per_eni: 30,
    },
];

/// The default (medium) type.
pub const DEFAULT: &str = "ecs.g7.xlarge";
/// A small type.
#[cfg(test)]
pub(crate) const SMALL: &str = "ecs.g7.large";
/// A large type (210 pod addresses).
#[cfg(test)]
pub(crate) const LARGE: &str = "ecs.g7.4xlarge";

/// Looks a type up.
pub(crate) fn find(id: &str) -> Option<&'static InstanceType> {
    TYPES.iter().find(|t| t.id == id)
}

/// The known ids, for error messages.
pub fn known() -> String {
    TYPES.iter().map(|t| t.id).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_medium_large() {
        let cap = |id| {
            let t = find(id).unwrap();
            (t.enis - 1) * t.ipv4_per_eni
        };
        assert_eq!(cap(SMALL), 12);
        assert_eq!(cap(DEFAULT), 45);
        assert!(cap(LARGE) >= 200);
        assert!(find("ecs.nope").is_none());
    }
}
