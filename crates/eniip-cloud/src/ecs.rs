//! ECS actions (API version 2014-05-26): typed requests and responses.
//!
//! Responses are read through [`jv`], which tolerates what real answers
//! contain: `null`, `{}`, `[]` or a missing key wherever a value or a list
//! is expected (`"Tags": {"Tag": null}`, `"Ipv6Set": []`,
//! `"AssociatedPublicIp": {}`, a missing `AssignedPrivateIpAddressesSet`),
//! numbers sent as strings, and a single object where a list is expected.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use serde_json::Value;

use super::error::{CloudError, CloudErrorKind};
use super::json as jv;
use super::rpc::{CallOpts, RpcClient};
use super::{CreateEni, Eni, EniQuery, EniStatus, InstanceTypeLimits, Ipv4Prefix, Ipv6Prefix};

/// A prefix in an answer.
pub(super) fn parse_prefix(action: &str, s: &str) -> Result<Ipv4Prefix, CloudError> {
    s.parse().map_err(|why: String| {
        CloudError::new(
            CloudErrorKind::Decode,
            action,
            format!("the answer holds {why}"),
        )
    })
}

/// An IPv6 /80 prefix in an answer.
pub(super) fn parse_v6_prefix(action: &str, s: &str) -> Result<Ipv6Prefix, CloudError> {
    s.parse().map_err(|why: String| {
        CloudError::new(
            CloudErrorKind::Decode,
            action,
            format!("the answer holds {why}"),
        )
    })
}

fn decode(action: &str, what: String) -> CloudError {
    CloudError::new(CloudErrorKind::Decode, action, what)
}

fn parse_v4(action: &str, s: &str) -> Result<Ipv4Addr, CloudError> {
    s.trim()
        .parse()
        .map_err(|_| decode(action, format!("{s:?} is not an IPv4 address")))
}

fn parse_v6(action: &str, s: &str) -> Result<Ipv6Addr, CloudError> {
    s.trim()
        .parse()
        .map_err(|_| decode(action, format!("{s:?} is not an IPv6 address")))
}

/// Adds `Name.N` parameters (1-based).
pub(crate) fn repeated(
    params: &mut Vec<(String, String)>,
    name: &str,
    values: impl IntoIterator<Item = impl ToString>,
) {
    for (i, v) in values.into_iter().enumerate() {
        params.push((format!("{name}.{}", i + 1), v.to_string()));
    }
}

/// Adds `Tag.N.Key` / `Tag.N.Value` parameters.
pub(crate) fn tags(params: &mut Vec<(String, String)>, tags: &[(String, String)]) {
    for (i, (k, v)) in tags.iter().enumerate() {
        params.push((format!("Tag.{}.Key", i + 1), k.clone()));
        params.push((format!("Tag.{}.Value", i + 1), v.clone()));
    }
}

/// One `NetworkInterfaceSet` item (or a CreateNetworkInterface answer) as
/// an [`Eni`].
pub(crate) fn eni_from_json(action: &str, v: &Value) -> Result<Eni, CloudError> {
    let id = jv::s(v, "NetworkInterfaceId");
    if id.is_empty() {
        return Err(decode(
            action,
            "an answer without NetworkInterfaceId".into(),
        ));
    }
    let mut private_ips = Vec::new();
    let mut primary_ip = None;
    for item in jv::list(v, &["PrivateIpSets", "PrivateIpSet"]) {
        let ip = parse_v4(action, &jv::s(item, "PrivateIpAddress"))?;
        if jv::b(item, "Primary") {
            primary_ip = Some(ip);
        }
        private_ips.push(ip);
    }
    let top_primary = jv::s(v, "PrivateIpAddress");
    if !top_primary.is_empty() {
        let p = parse_v4(action, &top_primary)?;
        primary_ip = Some(p);
        if !private_ips.contains(&p) {
            private_ips.insert(0, p);
        }
    }
    let mut ipv6s = Vec::new();
    for item in jv::list(v, &["Ipv6Sets", "Ipv6Set"]) {
        let s = match item {
            Value::String(s) => s.clone(),
            _ => jv::s(item, "Ipv6Address"),
        };
        if !s.is_empty() {
            ipv6s.push(parse_v6(action, &s)?);
        }
    }
    let mut ipv4_prefixes = Vec::new();
    for item in jv::list(v, &["Ipv4PrefixSets", "Ipv4PrefixSet"]) {
        let s = match item {
            Value::String(s) => s.clone(),
            _ => jv::s(item, "Ipv4Prefix"),
        };
        // Tolerated, not fatal: one prefix this build cannot read (another
        // length, a future form) must not make every describe fail and
        // stop a daemon that serves single addresses (debug: a reconcile
        // would repeat it every period).
        match parse_prefix(action, &s) {
            Ok(p) => ipv4_prefixes.push(p),
            Err(e) if !s.is_empty() => log::debug!("{id}: IPv4 prefix ignored: {e}"),
            Err(_) => {}
        }
    }
    let mut ipv6_prefixes = Vec::new();
    for item in jv::list(v, &["Ipv6PrefixSets", "Ipv6PrefixSet"]) {
        let s = match item {
            Value::String(s) => s.clone(),
            _ => jv::s(item, "Ipv6Prefix"),
        };
        // Tolerated as IPv4 prefixes are (another length is skipped).
        match parse_v6_prefix(action, &s) {
            Ok(p) => ipv6_prefixes.push(p),
            Err(e) if !s.is_empty() => log::debug!("{id}: IPv6 prefix ignored: {e}"),
            Err(_) => {}
        }
    }
    let mut tags = BTreeMap::new();
    for t in jv::list(v, &["Tags", "Tag"]) {
        let k = jv::s(t, "TagKey");
        let k = if k.is_empty() { jv::s(t, "Key") } else { k };
        let val = jv::s(t, "TagValue");
        let val = if val.is_empty() {
            jv::s(t, "Value")
        } else {
            val
        };
        if !k.is_empty() {
            tags.insert(k, val);
        }
    }
    let instance = jv::s(v, "InstanceId");
    let instance = if instance.is_empty() {
        v.get("Attachment")
            .map(|a| jv::s(a, "InstanceId"))
            .unwrap_or_default()
    } else {
        instance
    };
    let eni_type = jv::s(v, "Type");
    let created = jv::s(v, "CreationTime");
    Ok(Eni {
        id,
        mac: jv::s(v, "MacAddress"),
        status: EniStatus::parse(&jv::s(v, "Status")),
        eni_type: if eni_type.is_empty() {
            "Secondary".into()
        } else {
            eni_type
        },
        instance_id: (!instance.is_empty()).then_some(instance),
        vswitch_id: jv::s(v, "VSwitchId"),
        zone_id: jv::s(v, "ZoneId"),
        primary_ip,
        private_ips,
        ipv6s,
        ipv4_prefixes,
        ipv6_prefixes,
        security_group_ids: jv::strings(v, &["SecurityGroupIds", "SecurityGroupId"]),
        tags,
        created_at: eniip_util::time::parse_rfc3339(&created),
    })
}

/// CreateNetworkInterface (with its initial addresses, tags and a ClientToken).
pub(crate) fn create_network_interface(c: &RpcClient, req: &CreateEni) -> Result<Eni, CloudError> {
    create_network_interface_with(c, req, &[])
}

/// CreateNetworkInterface with more parameters (the prefix form, see
/// [`super::ecs_prefix`]).
pub(crate) fn create_network_interface_with(
    c: &RpcClient,
    req: &CreateEni,
    extra: &[(String, String)],
) -> Result<Eni, CloudError> {
    const A: &str = "CreateNetworkInterface";
    let mut p = vec![
        ("VSwitchId".to_string(), req.vswitch_id.clone()),
        ("Description".to_string(), req.description.clone()),
        ("InstanceType".to_string(), "Secondary".to_string()),
    ];
    repeated(&mut p, "SecurityGroupIds", &req.security_group_ids);
    if req.secondary_ipv4_count > 0 {
        p.push((
            "SecondaryPrivateIpAddressCount".into(),
            req.secondary_ipv4_count.to_string(),
        ));
    }
    if req.ipv6_prefixes > 0 {
        // The API takes a count of /80s or of addresses, not both.
        p.push(("Ipv6PrefixCount".into(), req.ipv6_prefixes.to_string()));
    } else if req.ipv6_count > 0 {
        p.push(("Ipv6AddressCount".into(), req.ipv6_count.to_string()));
    }
    tags(&mut p, &req.tags);
    p.extend_from_slice(extra);
    let v = c.call(A, &p, CallOpts::ONCE)?;
    eni_from_json(A, &v)
}

/// The parameters of an attach or a detach.
fn eni_and_instance(eni: &str, instance: &str) -> Vec<(String, String)> {
    vec![
        ("NetworkInterfaceId".to_string(), eni.to_string()),
        ("InstanceId".to_string(), instance.to_string()),
    ]
}

/// AttachNetworkInterface.
pub(crate) fn attach_network_interface(
    c: &RpcClient,
    eni: &str,
    instance: &str,
) -> Result<(), CloudError> {
    c.call(
        "AttachNetworkInterface",
        &eni_and_instance(eni, instance),
        CallOpts::default(),
    )
    .map(|_| ())
}

/// DetachNetworkInterface; an ENI or instance already gone is success.
pub(crate) fn detach_network_interface(
    c: &RpcClient,
    eni: &str,
    instance: &str,
) -> Result<(), CloudError> {
    c.call(
        "DetachNetworkInterface",
        &eni_and_instance(eni, instance),
        CallOpts::done_if(&["InvalidEniId.NotFound", "InvalidEcsId.NotFound"]),
    )
    .map(|_| ())
}

/// DeleteNetworkInterface; an ENI already gone is success.
pub(crate) fn delete_network_interface(c: &RpcClient, eni: &str) -> Result<(), CloudError> {
    let p = vec![("NetworkInterfaceId".to_string(), eni.to_string())];
    c.call(
        "DeleteNetworkInterface",
        &p,
        CallOpts::done_if(&["InvalidEniId.NotFound"]),
    )
    .map(|_| ())
}

/// ModifyNetworkInterfaceAttribute with `SecurityGroupId.N`: the ENI's
/// security groups become exactly `ids` (the service replaces the list).
pub(crate) fn modify_security_groups(
    c: &RpcClient,
    eni: &str,
    ids: &[String],
) -> Result<(), CloudError> {
    let mut p = vec![("NetworkInterfaceId".to_string(), eni.to_string())];
    repeated(&mut p, "SecurityGroupId", ids);
    c.call("ModifyNetworkInterfaceAttribute", &p, CallOpts::default())
        .map(|_| ())
}

/// DescribeNetworkInterfaces, every page (MaxResults 500 + NextToken).
pub(crate) fn describe_network_interfaces(
    c: &RpcClient,
    q: &EniQuery,
) -> Result<Vec<Eni>, CloudError> {
    const A: &str = "DescribeNetworkInterfaces";
    let mut out = Vec::new();
    // At most 100 ids per request.
    let id_chunks: Vec<&[String]> = if q.eni_ids.is_empty() {
        vec![&[][..]]
    } else {
        q.eni_ids.chunks(100).collect()
    };
    for ids in id_chunks {
        let mut base = Vec::new();
        repeated(&mut base, "NetworkInterfaceId", ids);
        if let Some(i) = &q.instance_id {
            base.push(("InstanceId".into(), i.clone()));
        }
        if let Some(s) = &q.status {
            base.push(("Status".into(), s.as_str().to_string()));
        }
        tags(&mut base, &q.tags);
        base.push(("MaxResults".into(), "500".into()));
        each_page(c, A, &base, 1000, |v| {
            let items = jv::list(v, &["NetworkInterfaceSets", "NetworkInterfaceSet"]);
            let full = items.len() >= 500;
            for item in items {
                out.push(eni_from_json(A, item)?);
            }
            Ok(full)
        })?;
    }
    Ok(out)
}

/// `action` with `base`, page after page (`NextToken`), at most `pages`
/// of them: `read` takes each answer and says whether a next page may
/// follow (a short page is the last, whatever its token says).
fn each_page(
    c: &RpcClient,
    action: &str,
    base: &[(String, String)],
    pages: usize,
    mut read: impl FnMut(&Value) -> Result<bool, CloudError>,
) -> Result<(), CloudError> {
    let mut next = String::new();
    for _ in 0..pages {
        let mut p = base.to_vec();
        if !next.is_empty() {
            p.push(("NextToken".into(), next.clone()));
        }
        let v = c.call(action, &p, CallOpts::default())?;
        let more = read(&v)?;
        next = jv::s(&v, "NextToken");
        if next.is_empty() || !more {
            break;
        }
    }
    Ok(())
}

/// AssignPrivateIpAddresses with a count; returns the new addresses.
pub(crate) fn assign_private_ip_addresses(
    c: &RpcClient,
    eni: &str,
    count: usize,
) -> Result<Vec<Ipv4Addr>, CloudError> {
    let asked = ("SecondaryPrivateIpAddressCount", count);
    let answer = [
        "AssignedPrivateIpAddressesSet",
        "PrivateIpSet",
        "PrivateIpAddress",
    ];
    assign(c, "AssignPrivateIpAddresses", eni, asked, &answer, parse_v4)
}

/// An assign call on `eni` that asks for a count of things (`asked`: the
/// count's field and the count) and answers them as a list of strings at
/// `answer`, each read by `parse`. It carries a ClientToken
/// ([`CallOpts::ONCE`]), so a retried call cannot assign twice.
pub(super) fn assign<T>(
    c: &RpcClient,
    action: &str,
    eni: &str,
    (field, count): (&str, usize),
    answer: &[&str],
    parse: fn(&str, &str) -> Result<T, CloudError>,
) -> Result<Vec<T>, CloudError> {
    let p = vec![
        ("NetworkInterfaceId".to_string(), eni.to_string()),
        (field.to_string(), count.to_string()),
    ];
    let v = c.call(action, &p, CallOpts::ONCE)?;
    jv::strings(&v, answer)
        .iter()
        .map(|s| parse(action, s))
        .collect()
}

/// UnassignPrivateIpAddresses; an address (or ENI) already gone is success.
/// eniipd never unassigns a primary address, so `InvalidIp.IpUnassigned`
/// (also the answer for a primary) cannot hide a mistake.
pub(crate) fn unassign_private_ip_addresses(
    c: &RpcClient,
    eni: &str,
    ips: &[Ipv4Addr],
) -> Result<(), CloudError> {
    unassign(
        c,
        "UnassignPrivateIpAddresses",
        "PrivateIpAddress",
        eni,
        ips,
    )
}

/// An unassign call is all or nothing: one address already gone refuses
/// the whole batch with `InvalidIp.IpUnassigned`. Only a single address's
/// refusal proves it gone, so a refused batch is retried one by one rather
/// than taken as success for addresses that are still there.
pub(super) fn unassign<T: ToString>(
    c: &RpcClient,
    action: &str,
    field: &str,
    eni: &str,
    ips: &[T],
) -> Result<(), CloudError> {
    const GONE: &str = "InvalidIp.IpUnassigned";
    let call = |batch: &[T]| {
        let mut p = vec![("NetworkInterfaceId".to_string(), eni.to_string())];
        repeated(&mut p, field, batch.iter().map(ToString::to_string));
        c.call(action, &p, CallOpts::done_if(&["InvalidEniId.NotFound"]))
            .map(|_| ())
    };
    match call(ips) {
        Err(e) if e.code.as_deref() == Some(GONE) && ips.len() > 1 => {
            log::debug!(
                "{action}: a batch of {} was refused ({GONE}); one by one",
                ips.len()
            );
            for ip in ips {
                match call(std::slice::from_ref(ip)) {
                    Err(e) if e.code.as_deref() == Some(GONE) => {}
                    other => other?,
                }
            }
            Ok(())
        }
        Err(e) if e.code.as_deref() == Some(GONE) => Ok(()),
        other => other,
    }
}

/// AssignIpv6Addresses with a count.
pub(crate) fn assign_ipv6_addresses(
    c: &RpcClient,
    eni: &str,
    count: usize,
) -> Result<Vec<Ipv6Addr>, CloudError> {
    let answer = ["Ipv6Sets", "Ipv6Address"];
    let asked = ("Ipv6AddressCount", count);
    assign(c, "AssignIpv6Addresses", eni, asked, &answer, parse_v6)
}

/// UnassignIpv6Addresses; already gone is success (see [`unassign`]).
pub(crate) fn unassign_ipv6_addresses(
    c: &RpcClient,
    eni: &str,
    ips: &[Ipv6Addr],
) -> Result<(), CloudError> {
    unassign(c, "UnassignIpv6Addresses", "Ipv6Address", eni, ips)
}

/// DescribeInstanceTypes for the given types (every page).
pub(crate) fn describe_instance_types(
    c: &RpcClient,
    types: &[String],
) -> Result<Vec<InstanceTypeLimits>, CloudError> {
    const A: &str = "DescribeInstanceTypes";
    let mut base = Vec::new();
    repeated(&mut base, "InstanceTypes", types);
    base.push(("MaxResults".into(), "100".into()));
    let mut out = Vec::new();
    each_page(c, A, &base, 100, |v| {
        for t in jv::list(v, &["InstanceTypes", "InstanceType"]) {
            out.push(InstanceTypeLimits {
                instance_type: jv::s(t, "InstanceTypeId"),
                eni_quantity: jv::u(t, "EniQuantity") as u32,
                ipv4_per_eni: jv::u(t, "EniPrivateIpAddressQuantity") as u32,
                ipv6_per_eni: jv::u(t, "EniIpv6AddressQuantity") as u32,
            });
        }
        Ok(true)
    })?;
    Ok(out)
}

/// DescribeInstanceAttribute: the instance's security groups.
pub(crate) fn describe_instance_attribute(
    c: &RpcClient,
    instance: &str,
) -> Result<Vec<String>, CloudError> {
    let p = vec![("InstanceId".to_string(), instance.to_string())];
    let v = c.call("DescribeInstanceAttribute", &p, CallOpts::default())?;
    Ok(jv::strings(&v, &["SecurityGroupIds", "SecurityGroupId"]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DESCRIBE: &str = r#"{
      "RequestId": "R", "NextToken": "", "TotalCount": 1, "PageNumber": 1, "PageSize": 10,
      "NetworkInterfaceSets": {"NetworkInterfaceSet": [ {
          "NetworkInterfaceId": "eni-1", "Status": "InUse", "Type": "Secondary", "MacAddress": "00:16:3e:09:6b:f6",
          "InstanceId": "i-1", "VpcId": "vpc-1", "VSwitchId": "vsw-1", "ZoneId": "cn-hangzhou-g",
          "PrivateIpAddress": "172.16.226.33", "CreationTime": "2019-04-15T09:43:45Z",
          "SecurityGroupIds": {"SecurityGroupId": ["sg-1"]},
          "PrivateIpSets": {"PrivateIpSet": [ {"PrivateIpAddress": "172.16.226.33", "Primary": true,
                                               "AssociatedPublicIp": {"PublicIpAddress": "", "AllocationId": ""}},
                                              {"PrivateIpAddress": "172.16.226.34", "Primary": false} ]},
          "Ipv6Sets": {"Ipv6Set": [ {"Ipv6Address": "2408:4005:300::1"} ]},
          "Ipv4PrefixSets": {"Ipv4PrefixSet": []},
          "Tags": {"Tag": [ {"TagKey": "creator", "TagValue": "eniipd"} ]},
          "AssociatedPublicIp": {},
          "Attachment": {"InstanceId": "i-1", "DeviceIndex": 1}
      } ]}}"#;

    #[test]
    fn describe_sample_parses() {
        let v: Value = serde_json::from_str(DESCRIBE).unwrap();
        let items = jv::list(&v, &["NetworkInterfaceSets", "NetworkInterfaceSet"]);
        let e = eni_from_json("D", items[0]).unwrap();
        assert_eq!(e.id, "eni-1");
        assert_eq!(e.status, EniStatus::InUse);
        assert_eq!(e.private_ips.len(), 2);
        assert_eq!(e.primary_ip, Some("172.16.226.33".parse().unwrap()));
        assert_eq!(e.ipv6s.len(), 1);
        assert_eq!(e.security_group_ids, vec!["sg-1"]);
        assert_eq!(e.tags.get("creator").map(String::as_str), Some("eniipd"));
        assert_eq!(e.created_at, Some(1_555_321_425));
    }

    #[test]
    fn null_empty_and_missing_are_tolerated() {
        for body in [
            r#"{"NetworkInterfaceId":"eni-2","Tags":{"Tag":null},"Ipv6Sets":{"Ipv6Set":[]},"PrivateIpSets":null,"SecurityGroupIds":{}}"#,
            r#"{"NetworkInterfaceId":"eni-2","Tags":[],"Ipv6Sets":{},"SecurityGroupIds":null,"Attachment":null}"#,
            r#"{"NetworkInterfaceId":"eni-2"}"#,
        ] {
            let v: Value = serde_json::from_str(body).unwrap();
            let e = eni_from_json("D", &v).unwrap();
            assert!(
                e.tags.is_empty()
                    && e.ipv6s.is_empty()
                    && e.private_ips.is_empty()
                    && e.security_group_ids.is_empty()
            );
            assert_eq!(e.eni_type, "Secondary");
            assert_eq!(e.instance_id, None);
        }
        // Member ENIs carry the instance only in Attachment.
        let v: Value = serde_json::from_str(
            r#"{"NetworkInterfaceId":"eni-3","InstanceId":"","Attachment":{"InstanceId":"i-9"}}"#,
        )
        .unwrap();
        assert_eq!(
            eni_from_json("D", &v).unwrap().instance_id.as_deref(),
            Some("i-9")
        );
        // A single object where a list is expected.
        let v: Value = serde_json::from_str(r#"{"NetworkInterfaceId":"eni-4","PrivateIpSets":{"PrivateIpSet":{"PrivateIpAddress":"10.0.0.1","Primary":"true"}}}"#).unwrap();
        assert_eq!(
            eni_from_json("D", &v).unwrap().primary_ip,
            Some("10.0.0.1".parse().unwrap())
        );
        assert!(eni_from_json("D", &serde_json::json!({})).is_err());
        assert!(eni_from_json(
            "D",
            &serde_json::json!({"NetworkInterfaceId":"x","PrivateIpAddress":"nope"})
        )
        .is_err());
    }

    #[test]
    fn assign_answers() {
        let v: Value = serde_json::from_str(
            r#"{"RequestId":"R","AssignedPrivateIpAddressesSet":{"NetworkInterfaceId":"eni-1","PrivateIpSet":{"PrivateIpAddress":["192.168.0.12","192.168.0.13"]}}}"#,
        )
        .unwrap();
        assert_eq!(
            jv::strings(
                &v,
                &[
                    "AssignedPrivateIpAddressesSet",
                    "PrivateIpSet",
                    "PrivateIpAddress"
                ]
            )
            .len(),
            2
        );
        let old: Value = serde_json::from_str(r#"{"RequestId":"R"}"#).unwrap();
        assert!(jv::strings(
            &old,
            &[
                "AssignedPrivateIpAddressesSet",
                "PrivateIpSet",
                "PrivateIpAddress"
            ]
        )
        .is_empty());
        let v6: Value = serde_json::from_str(
            r#"{"RequestId":"R","Ipv6Sets":{"Ipv6Address":["2408::1","2408::2"]}}"#,
        )
        .unwrap();
        assert_eq!(jv::strings(&v6, &["Ipv6Sets", "Ipv6Address"]).len(), 2);
    }

    #[test]
    fn instance_type_fields_tolerate_strings() {
        let v: Value = serde_json::from_str(
            r#"{"InstanceTypes":{"InstanceType":[{"InstanceTypeId":"ecs.g7.xlarge","EniQuantity":4,"EniPrivateIpAddressQuantity":"15","EniIpv6AddressQuantity":null}]}}"#,
        )
        .unwrap();
        let t = jv::list(&v, &["InstanceTypes", "InstanceType"])[0];
        assert_eq!(
            (
                jv::u(t, "EniQuantity"),
                jv::u(t, "EniPrivateIpAddressQuantity"),
                jv::u(t, "EniIpv6AddressQuantity")
            ),
            (4, 15, 0)
        );
    }

    #[test]
    fn repeated_and_tag_params() {
        let mut p = Vec::new();
        repeated(&mut p, "SecurityGroupIds", ["sg-a", "sg-b"]);
        tags(&mut p, &[("creator".into(), "eniipd".into())]);
        assert_eq!(p[1], ("SecurityGroupIds.2".to_string(), "sg-b".to_string()));
        assert_eq!(p[3], ("Tag.1.Value".to_string(), "eniipd".to_string()));
    }
}
