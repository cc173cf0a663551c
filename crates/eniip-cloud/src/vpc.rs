//! VPC actions (API version 2016-04-28): DescribeVSwitches.

use super::error::CloudError;
use super::json as jv;
use super::rpc::{CallOpts, RpcClient};
use super::VSwitch;

/// DescribeVSwitches for each id (PageNumber/PageSize paging).
pub(crate) fn describe_vswitches(
    c: &RpcClient,
    ids: &[String],
) -> Result<Vec<VSwitch>, CloudError> {
    let mut out = Vec::new();
    for id in ids {
        for page in 1..=100u32 {
            let p = vec![
                ("VSwitchId".to_string(), id.clone()),
                ("PageNumber".to_string(), page.to_string()),
                ("PageSize".to_string(), "50".to_string()),
            ];
            let v = c.call("DescribeVSwitches", &p, CallOpts::default())?;
            let items = jv::list(&v, &["VSwitches", "VSwitch"]);
            let n = items.len();
            for s in items {
                let cidr6 = jv::s(s, "Ipv6CidrBlock");
                out.push(VSwitch {
                    id: jv::s(s, "VSwitchId"),
                    zone_id: jv::s(s, "ZoneId"),
                    cidr: jv::s(s, "CidrBlock"),
                    ipv6_cidr: (!cidr6.is_empty()).then_some(cidr6),
                    available_ips: jv::u(s, "AvailableIpAddressCount"),
                });
            }
            let total = jv::u(&v, "TotalCount") as usize;
            if n < 50 || out.len() >= total {
                break;
            }
        }
    }
    Ok(out)
}
