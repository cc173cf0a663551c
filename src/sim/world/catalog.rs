//! Read-only descriptions: instance types, the instance, security
//! groups, vswitches.

use super::*;

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

/// `a` with `b`'s keys added (two `json!` halves: one would pass the
/// macro's recursion limit).
fn merged(mut a: Value, b: Value) -> Value {
    if let (Value::Object(a), Value::Object(b)) = (&mut a, b) {
        a.extend(b);
    }
    a
}

impl World {
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

    pub(super) fn instance_types(&mut self, p: &Params) -> Result<Value, ApiError> {
        let wanted = list(p, "InstanceTypes", 10)?;
        let items: Vec<Value> = crate::sim::types::TYPES
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

    pub(super) fn instance_attribute(&mut self, p: &Params) -> Result<Value, ApiError> {
        let i = need(p, "InstanceId")?.to_string();
        if !self.is_instance(&i) {
            return Err(err(
                404,
                "InvalidInstanceId.NotFound",
                "The specified InstanceId does not exist.",
            ));
        }
        let itype = self.itype_of_instance(&i);
        let primary = self
            .enis
            .values()
            .find(|e| e.primary_eni && e.instance.as_deref() == Some(i.as_str()));
        let ip = primary
            .and_then(|e| e.primary_ip())
            .map(|a| a.to_string())
            .unwrap_or_default();
        let vsw = primary.map(|e| e.vswitch.clone()).unwrap_or_default();
        let me = self.identity_of(&i);
        let basics = json!({"InstanceId": i, "InstanceName": me.instance_name, "HostName": me.hostname,
            "Description": "", "ImageId": me.image_id, "SerialNumber": me.serial_number,
            "InstanceType": itype.id, "RegionId": self.cfg.region, "ZoneId": self.cfg.zone,
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
            "SecurityGroupIds": {"SecurityGroupId": [self.sg_id]},
            "VpcAttributes": {"VpcId": self.vpc_id, "VSwitchId": vsw, "NatIpAddress": "", "PrivateIpAddress": {"IpAddress": [ip]}},
            "InnerIpAddress": {"IpAddress": []}, "PublicIpAddress": {"IpAddress": []},
            "EipAddress": {"IpAddress": "", "AllocationId": "", "InternetChargeType": "", "Bandwidth": 0},
            "OperationLocks": {"LockReason": []}});
        Ok(merged(basics, network))
    }

    pub(super) fn security_groups(&mut self, p: &Params) -> Result<Value, ApiError> {
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
                "SecurityGroupType": "normal", "VpcId": self.vpc_id, "ServiceManaged": false, "Tags": {"Tag": []},
                "CreationTime": day_ago(), "ResourceGroupId": "", "ServiceID": 0,
                // The one instance; a normal group holds 2000.
                "EcsCount": 1, "AvailableInstanceAmount": 1999,
                "RuleCount": 0, "GroupToGroupRuleCount": 0}),
            ]
        } else {
            Vec::new()
        };
        Ok(
            json!({"RegionId": self.cfg.region, "NextToken": "", "TotalCount": items.len(), "PageNumber": 1, "PageSize": 10,
            "SecurityGroups": {"SecurityGroup": items}}),
        )
    }

    pub(super) fn describe_vswitches(&mut self, p: &Params) -> Result<Value, ApiError> {
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
    let created = crate::util::time::unix_secs().saturating_sub(86_400);
    format!("{}Z", &crate::util::time::format_utc(created)[..16])
}
