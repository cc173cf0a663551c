//! Read-only descriptions: instance types, the instance, security
//! groups, vswitches.
//!
//! [`Catalog`] borrows what they read: the account, the vswitches and the
//! ENIs (an instance's primary ENI).

use serde_json::{json, Value};

use super::account::{Account, OWNER_ID};
use super::eni_table::SimEnis;
use super::params::{err, int, invalid, list, missing, need, ApiError, Params};
use super::vswitch::{Vsw, Vswitches};

/// What a description reads.
pub(super) struct Catalog<'a> {
    pub(super) account: &'a Account,
    pub(super) vswitches: &'a Vswitches,
    pub(super) enis: &'a SimEnis,
}

/// `a` with `b`'s keys added (two `json!` halves: one would pass the
/// macro's recursion limit).
fn merged(mut a: Value, b: Value) -> Value {
    if let (Value::Object(a), Value::Object(b)) = (&mut a, b) {
        a.extend(b);
    }
    a
}

impl Catalog<'_> {
    /// DescribeInstanceTypes.
    pub(super) fn instance_types(&self, p: &Params) -> Result<Value, ApiError> {
        let wanted = list(p, "InstanceTypes", 10)?;
        let items: Vec<Value> = crate::types::TYPES
            .iter()
            .filter(|t| wanted.is_empty() || wanted.iter().any(|w| w == t.id))
            .map(|t| {
                // Figures of the g7 family's published table, scaled by size.
                let gbps = match t.cpus {
                    0..=2 => 2,
                    3..=4 => 3,
                    5..=8 => 5,
                    9..=12 => 8,
                    13..=16 => 10,
                    _ => 16,
                };
                let pps = u64::from(t.cpus) * 225_000;
                let queues = t.cpus.clamp(2, 32);
                let cpu = json!({"InstanceTypeId": t.id, "InstanceTypeFamily": t.family, "InstanceCategory": "General-purpose",
                    "InstanceFamilyLevel": "EnterpriseLevel", "CpuCoreCount": t.cpus, "CpuArchitecture": "X86",
                    "CpuSpeedFrequency": 2.7, "CpuTurboFrequency": 3.5,
                    "PhysicalProcessorModel": "Intel Xeon (Ice Lake) Platinum 8369B",
                    "CpuOptions": {"Core": t.cpus / 2, "ThreadsPerCore": 2, "CoreFactor": 2,
                        "HyperThreadingAdjustable": true, "NestedVirtualizationSupport": false,
                        "SupportedTopologyTypes": {"SupportedTopologyType": ["DiscreteCoreToHyperThreadMappingSupported"]}},
                    "MemorySize": f64::from(t.memory_gib)});
                let network = json!({"GPUAmount": 0, "GPUSpec": "", "GPUMemorySize": 0.0,
                    "LocalStorageAmount": 0, "LocalStorageCapacity": 0, "LocalStorageCategory": "",
                    "DiskQuantity": 17, "NvmeSupport": "required",
                    "EniQuantity": t.enis, "EniPrivateIpAddressQuantity": t.ipv4_per_eni,
                    "EniIpv6AddressQuantity": t.ipv6_per_eni, "EniTotalQuantity": t.enis * 2,
                    "EniTrunkSupported": true, "EriQuantity": 0,
                    "InstanceBandwidthRx": gbps * 1024 * 1024, "InstanceBandwidthTx": gbps * 1024 * 1024,
                    "InstancePpsRx": pps, "InstancePpsTx": pps,
                    "MaximumQueueNumberPerEni": queues, "PrimaryEniQueueNumber": queues,
                    "SecondaryEniQueueNumber": queues.min(2), "TotalEniQueueQuantity": queues * t.enis,
                    "QueuePairNumber": 0, "NetworkCardQuantity": 1,
                    // Burstable (t-family) types only have credits.
                    "BaselineCredit": 0, "InitialCredit": 0,
                    "NetworkCards": {"NetworkCardInfo": [{"NetworkCardIndex": 0}]},
                    "EnhancedNetwork": {"SriovSupport": false, "RssSupport": true, "VfQueueNumberPerEni": 0},
                    "JumboFrameSupport": true, "NetworkEncryptionSupport": false,
                    "NetworkInfo": {"BandwidthWeighting": {"WeightingInfos": {"WeightingInfo": []}}},
                    "SupportedBootModes": {"SupportedBootMode": ["BIOS", "UEFI"]},
                    "SecurityOptions": {"SupportedSecurityFeatures": {"SupportedSecurityFeature": []}, "SecureBootSupport": true},
                    "Clock": {"PtpSupport": false},
                    "Attributes": {"Attribute": []}});
                merged(cpu, network)
            })
            .collect();
        Ok(json!({"NextToken": "", "InstanceTypes": {"InstanceType": items}}))
    }

    /// DescribeInstanceAttribute.
    pub(super) fn instance_attribute(&self, p: &Params) -> Result<Value, ApiError> {
        let i = need(p, "InstanceId")?.to_string();
        if !self.account.is_instance(&i) {
            return Err(err(
                404,
                "InvalidInstanceId.NotFound",
                "The specified InstanceId does not exist.",
            ));
        }
        let itype = self.account.itype_of(Some(&i));
        let primary = self
            .enis
            .all()
            .find(|e| e.is_primary_eni() && e.instance() == Some(i.as_str()));
        let ip = primary
            .and_then(|e| e.primary_ip())
            .map(|a| a.to_string())
            .unwrap_or_default();
        let vsw = primary.map(|e| e.vswitch().to_string()).unwrap_or_default();
        let me = self.account.identity_of(&i);
        let basics = json!({"InstanceId": i, "InstanceName": me.instance_name, "HostName": me.hostname,
            "Description": "", "ImageId": me.image_id, "SerialNumber": me.serial_number,
            "InstanceType": itype.id, "RegionId": self.account.region(), "ZoneId": self.account.zone(),
            "Status": "Running", "StoppedMode": "Not-applicable", "ClusterId": "", "VlanId": "",
            "Cpu": itype.cpus, "Memory": itype.memory_gib * 1024, "InstanceNetworkType": "vpc",
            "CreationTime": day_ago(),
            "ExpiredTime": "2099-12-31T15:59Z", "InstanceChargeType": "PostPaid",
            "InternetChargeType": "PayByTraffic", "InternetMaxBandwidthIn": 10240, "InternetMaxBandwidthOut": 0,
            "IoOptimized": "optimized", "CreditSpecification": "", "EnableJumboFrame": false});
        let network = json!({
            "EnableNetworkEncryption": false,
            "NetworkOptions": {"BandwidthWeighting": "", "EnableJumboFrame": false, "EnableNetworkEncryption": false},
            "SecurityOptions": {"EnableSecureBoot": false},
            "DedicatedHostAttribute": {"DedicatedHostId": "", "DedicatedHostName": ""},
            "SecurityGroupIds": {"SecurityGroupId": [self.account.sg_id()]},
            "VpcAttributes": {"VpcId": self.account.vpc_id(), "VSwitchId": vsw, "NatIpAddress": "", "PrivateIpAddress": {"IpAddress": [ip]}},
            "InnerIpAddress": {"IpAddress": []}, "PublicIpAddress": {"IpAddress": []},
            "EipAddress": {"IpAddress": "", "AllocationId": "", "InternetChargeType": "", "Bandwidth": 0},
            "OperationLocks": {"LockReason": []}});
        Ok(merged(basics, network))
    }

    /// DescribeSecurityGroups: the VPC's groups (the instances' own
    /// first), filtered by `SecurityGroupId`, `SecurityGroupIds` (a JSON
    /// array) and `VpcId`.
    pub(super) fn security_groups(&self, p: &Params) -> Result<Value, ApiError> {
        self.account.check_region(p)?;
        let vpc_id = self.account.vpc_id();
        let mut wanted: Vec<String> = match p.get("SecurityGroupIds").filter(|s| !s.is_empty()) {
            Some(j) => serde_json::from_str(j)
                .map_err(|_| invalid("SecurityGroupIds", "expected a JSON array of ids"))?,
            None => Vec::new(),
        };
        if let Some(one) = p.get("SecurityGroupId").filter(|s| !s.is_empty()) {
            wanted.push(one.clone());
        }
        let vpc = p.get("VpcId").filter(|s| !s.is_empty());
        let own = self.account.sg_id();
        let items: Vec<Value> = self
            .account
            .vpc_sgs()
            .filter(|sg| wanted.is_empty() || wanted.iter().any(|w| w == sg))
            .filter(|_| vpc.is_none_or(|v| v == vpc_id))
            .map(|sg| {
                // ENIs count as they do in a group's EcsCount.
                let members = self
                    .enis
                    .live()
                    .filter(|e| !e.is_primary_eni() && e.sgs().iter().any(|s| s == sg))
                    .count()
                    + if sg == own { self.account.fleet().len() } else { 0 };
                let name = if sg == own { "default".to_string() } else { sg.to_string() };
                json!({"SecurityGroupId": sg, "SecurityGroupName": name, "Description": "",
                "SecurityGroupType": "normal", "VpcId": vpc_id, "ServiceManaged": false, "Tags": {"Tag": []},
                "CreationTime": day_ago(), "ResourceGroupId": "", "ServiceID": 0,
                // A normal group holds 2000.
                "EcsCount": members, "AvailableInstanceAmount": 2000usize.saturating_sub(members),
                "RuleCount": 0, "GroupToGroupRuleCount": 0})
            })
            .collect();
        Ok(
            json!({"RegionId": self.account.region(), "NextToken": "", "TotalCount": items.len(), "PageNumber": 1,
            "PageSize": items.len().max(10), "SecurityGroups": {"SecurityGroup": items}}),
        )
    }

    /// DescribeVSwitches.
    pub(super) fn describe_vswitches(&self, p: &Params) -> Result<Value, ApiError> {
        if p.get("RegionId").is_none_or(String::is_empty)
            && p.get("VpcId").is_none_or(String::is_empty)
        {
            return Err(missing("RegionId"));
        }
        if let Some(r) = p.get("RegionId").filter(|r| !r.is_empty()) {
            if r != self.account.region() {
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
        let vpc_id = self.account.vpc_id();
        let matched: Vec<&Vsw> = self
            .vswitches
            .iter()
            .filter(|v| id.is_none_or(|i| i == v.id()))
            .filter(|v| zone.is_none_or(|z| z == v.zone()))
            .filter(|_| vpc.is_none_or(|x| x == vpc_id))
            .collect();
        let items: Vec<Value> = matched
            .iter()
            .skip((page - 1) * size)
            .take(size)
            .map(|v| {
                json!({"VSwitchId": v.id(), "VpcId": vpc_id, "Status": "Available", "CidrBlock": v.cidr().to_string(),
                    "Ipv6CidrBlock": v.cidr6().map(|c| c.to_string()).unwrap_or_default(), "EnabledIpv6": v.cidr6().is_some(),
                    "ZoneId": v.zone(), "AvailableIpAddressCount": v.free(), "VSwitchName": v.id(), "Description": "",
                    "IsDefault": false, "OwnerId": OWNER_ID, "ResourceGroupId": "", "ShareType": "",
                    "CreationTime": day_ago(), "NetworkAclId": "",
                    "RouteTable": {"RouteTableId": "vtb-sim", "RouteTableType": "System"}, "Tags": {"Tag": []}})
            })
            .collect();
        Ok(
            json!({"TotalCount": matched.len(), "PageNumber": page, "PageSize": size, "VSwitches": {"VSwitch": items}}),
        )
    }
}

/// A creation time a day ago, as the OpenAPI writes it
/// (`2024-05-01T12:00Z`).
fn day_ago() -> String {
    let created = eniip_util::time::unix_secs().saturating_sub(86_400);
    format!("{}Z", &eniip_util::time::format_utc(created)[..16])
}
