//! Read-only descriptions: instance types, the instance, security
//! groups, vswitches.

use super::*;

impl World {
    pub(super) fn instance_types(&mut self, p: &Params) -> Result<Value, ApiError> {
        let wanted = list(p, "InstanceTypes", 10)?;
        let items: Vec<Value> = crate::sim::types::TYPES
            .iter()
            .filter(|t| wanted.is_empty() || wanted.iter().any(|w| w == t.id))
            .map(|t| {
                json!({"InstanceTypeId": t.id, "InstanceTypeFamily": t.family, "CpuCoreCount": t.cpus,
                    "MemorySize": f64::from(t.memory_gib), "EniQuantity": t.enis,
                    "EniPrivateIpAddressQuantity": t.ipv4_per_eni, "EniIpv6AddressQuantity": t.ipv6_per_eni,
                    "EniTotalQuantity": t.enis * 2, "EniTrunkSupported": true, "CpuArchitecture": "X86"})
            })
            .collect();
        Ok(json!({"NextToken": "", "InstanceTypes": {"InstanceType": items}}))
    }

    pub(super) fn instance_attribute(&mut self, p: &Params) -> Result<Value, ApiError> {
        let i = need(p, "InstanceId")?;
        if i != self.instance_id {
            return Err(err(
                404,
                "InvalidInstanceId.NotFound",
                "The specified InstanceId does not exist.",
            ));
        }
        let primary = self.enis.values().find(|e| e.primary_eni);
        let ip = primary
            .and_then(|e| e.primary_ip())
            .map(|a| a.to_string())
            .unwrap_or_default();
        let vsw = primary.map(|e| e.vswitch.clone()).unwrap_or_default();
        Ok(
            json!({"InstanceId": self.instance_id, "InstanceName": "eniip-sim", "InstanceType": self.cfg.itype.id,
            "RegionId": self.cfg.region, "ZoneId": self.cfg.zone, "Status": "Running", "HostName": "eniip-sim",
            "Cpu": self.cfg.itype.cpus, "Memory": self.cfg.itype.memory_gib * 1024, "InstanceNetworkType": "vpc",
            "CreationTime": crate::util::time::format_utc(crate::util::time::unix_secs().saturating_sub(86_400)),
            "SecurityGroupIds": {"SecurityGroupId": [self.sg_id]},
            "VpcAttributes": {"VpcId": self.vpc_id, "VSwitchId": vsw, "NatIpAddress": "", "PrivateIpAddress": {"IpAddress": [ip]}},
            "InnerIpAddress": {"IpAddress": []}, "PublicIpAddress": {"IpAddress": []},
            "EipAddress": {"IpAddress": "", "AllocationId": "", "InternetChargeType": ""}, "OperationLocks": {"LockReason": []}}),
        )
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
                "SecurityGroupType": "normal", "VpcId": self.vpc_id, "ServiceManaged": false, "Tags": {"Tag": []}}),
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
                    "IsDefault": false, "OwnerId": 1_234_567_890_123_456u64, "ResourceGroupId": "", "ShareType": "",
                    "RouteTable": {"RouteTableId": "vtb-sim", "RouteTableType": "System"}, "Tags": {"Tag": []}})
            })
            .collect();
        Ok(
            json!({"TotalCount": matched.len(), "PageNumber": page, "PageSize": size, "VSwitches": {"VSwitch": items}}),
        )
    }
}
