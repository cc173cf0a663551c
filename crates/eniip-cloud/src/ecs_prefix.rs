//! IPv4 prefixes (/28, 16 addresses) on ENIs: the ECS calls that assign,
//! unassign and create with them (the type is the domain's,
//! [`eniip_protocol::core::Ipv4Prefix`]); and the IPv6 /80 an ENI holds in dual
//! stack ([`eniip_protocol::core::Ipv6Prefix`]), assigned with AssignIpv6Addresses
//! (it goes back only with its ENI, so it is never unassigned here).
//!
//! Prefixes and single addresses never travel in one call (the API refuses
//! it). A call carrying prefixes that the vswitch cannot serve fails with
//! [`CloudErrorKind::PrefixExhausted`], never `Exhausted`: the service
//! answers `InvalidVSwitchId.IpNotEnough` for it as far as public material
//! shows, and a vswitch without a free /28 may still have single addresses,
//! so the caller falls back instead of inhibiting the vswitch.

use super::ecs;
use super::json as jv;
use super::rpc::{CallOpts, RpcClient};
use super::{CloudError, CloudErrorKind, CreateEni, Eni, Ipv4Prefix, Ipv6Prefix};

/// Reclassifies a failed prefix call: no room for a prefix is exhaustion of
/// prefixes only.
fn prefix_kind(e: CloudError) -> CloudError {
    if e.kind == CloudErrorKind::Exhausted {
        e.with_kind(CloudErrorKind::PrefixExhausted)
    } else {
        e
    }
}

/// AssignPrivateIpAddresses with `Ipv4PrefixCount` (1 to 10); returns the
/// new prefixes. Carries a ClientToken, so a retried call cannot assign
/// twice.
pub(crate) fn assign_ipv4_prefixes(
    c: &RpcClient,
    eni: &str,
    count: usize,
) -> Result<Vec<Ipv4Prefix>, CloudError> {
    let answer = [
        "AssignedPrivateIpAddressesSet",
        "Ipv4PrefixSet",
        "Ipv4Prefixes",
    ];
    let asked = ("Ipv4PrefixCount", count);
    ecs::assign(
        c,
        "AssignPrivateIpAddresses",
        eni,
        asked,
        &answer,
        ecs::parse_prefix,
    )
    .map_err(prefix_kind)
}

/// AssignIpv6Addresses with `Ipv6PrefixCount` (1 to 10); returns the new
/// /80s (`Ipv6PrefixSets.Ipv6Prefix`, a list of strings in this answer).
/// No room for one in the vswitch's IPv6 block is
/// [`CloudErrorKind::PrefixExhausted`]; the ENI's IPv6 quota full is
/// [`CloudErrorKind::LimitExceeded`]. Carries a ClientToken.
pub(crate) fn assign_ipv6_prefixes(
    c: &RpcClient,
    eni: &str,
    count: usize,
) -> Result<Vec<Ipv6Prefix>, CloudError> {
    const A: &str = "AssignIpv6Addresses";
    let p = vec![
        ("NetworkInterfaceId".to_string(), eni.to_string()),
        ("Ipv6PrefixCount".to_string(), count.to_string()),
    ];
    let v = c.call(A, &p, CallOpts::ONCE).map_err(prefix_kind)?;
    jv::strings(&v, &["Ipv6PrefixSets", "Ipv6Prefix"])
        .iter()
        .map(|s| ecs::parse_v6_prefix(A, s))
        .collect()
}

/// UnassignPrivateIpAddresses with `Ipv4Prefix.N`; a prefix (or ENI)
/// already gone is success, batches refused for one gone prefix are retried
/// one by one (as for addresses).
pub(crate) fn unassign_ipv4_prefixes(
    c: &RpcClient,
    eni: &str,
    prefixes: &[Ipv4Prefix],
) -> Result<(), CloudError> {
    if prefixes.is_empty() {
        return Ok(());
    }
    ecs::unassign(c, "UnassignPrivateIpAddresses", "Ipv4Prefix", eni, prefixes)
}

/// CreateNetworkInterface with `Ipv4PrefixCount` prefixes besides its
/// primary address (then `req.secondary_ipv4_count` must be 0: the API
/// refuses both in one call, and so does this, before any request), and
/// `Ipv6PrefixCount` when `req.ipv6_prefixes` asks /80s. No room for a
/// prefix of either is [`CloudErrorKind::PrefixExhausted`].
pub(crate) fn create_network_interface_with_prefixes(
    c: &RpcClient,
    req: &CreateEni,
    prefixes: usize,
) -> Result<Eni, CloudError> {
    const A: &str = "CreateNetworkInterface";
    if prefixes == 0 && req.ipv6_prefixes == 0 {
        return ecs::create_network_interface(c, req);
    }
    if prefixes > 0 && req.secondary_ipv4_count > 0 {
        return Err(CloudError::new(
            CloudErrorKind::Api,
            A,
            "prefixes and secondary addresses cannot be asked in one call",
        ));
    }
    let extra: Vec<(String, String)> = (prefixes > 0)
        .then(|| ("Ipv4PrefixCount".to_string(), prefixes.to_string()))
        .into_iter()
        .collect();
    ecs::create_network_interface_with(c, req, &extra).map_err(prefix_kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json as jv;
    use std::net::Ipv4Addr;

    #[test]
    fn parses_and_prints_aligned_28s_only() {
        let p: Ipv4Prefix = "10.0.1.16/28".parse().unwrap();
        assert_eq!(p.to_string(), "10.0.1.16/28");
        assert_eq!(p.base(), Ipv4Addr::new(10, 0, 1, 16));
        for bad in [
            "10.0.1.17/28",
            "10.0.1.16/27",
            "10.0.1.16",
            "x/28",
            "10.0.1.16/",
        ] {
            assert!(bad.parse::<Ipv4Prefix>().is_err(), "{bad}");
        }
        assert_eq!(
            " 10.0.1.32/28 ".parse::<Ipv4Prefix>().unwrap().to_string(),
            "10.0.1.32/28"
        );
    }

    #[test]
    fn describe_and_assign_answers_parse() {
        let v: serde_json::Value = serde_json::from_str(
            r#"{"NetworkInterfaceId":"eni-1","PrivateIpAddress":"10.0.0.5",
                "Ipv4PrefixSets":{"Ipv4PrefixSet":[{"Ipv4Prefix":"10.0.0.16/28"},{"Ipv4Prefix":"10.0.0.48/28"}]}}"#,
        )
        .unwrap();
        let e = ecs::eni_from_json("DescribeNetworkInterfaces", &v).unwrap();
        assert_eq!(
            e.ipv4_prefixes,
            vec![
                "10.0.0.16/28".parse::<Ipv4Prefix>().unwrap(),
                "10.0.0.48/28".parse().unwrap()
            ]
        );
        assert_eq!(e.private_ips, vec![Ipv4Addr::new(10, 0, 0, 5)]);
        // Absent, null or empty sets are no prefixes.
        for body in [
            r#"{"NetworkInterfaceId":"eni-2"}"#,
            r#"{"NetworkInterfaceId":"eni-2","Ipv4PrefixSets":null}"#,
            r#"{"NetworkInterfaceId":"eni-2","Ipv4PrefixSets":{"Ipv4PrefixSet":[]}}"#,
        ] {
            let v: serde_json::Value = serde_json::from_str(body).unwrap();
            let e = ecs::eni_from_json("DescribeNetworkInterfaces", &v).unwrap();
            assert!(e.ipv4_prefixes.is_empty(), "{body}");
        }
        // A prefix this build cannot read is skipped (logged), the ENI and
        // its other prefixes kept: a describe must not fail on it.
        let v: serde_json::Value = serde_json::from_str(
            r#"{"NetworkInterfaceId":"eni-3","Ipv4PrefixSets":{"Ipv4PrefixSet":[
                {"Ipv4Prefix":"10.0.0.0/27"},{"Ipv4Prefix":"10.0.0.64/28"}]}}"#,
        )
        .unwrap();
        let e = ecs::eni_from_json("DescribeNetworkInterfaces", &v).unwrap();
        assert_eq!(e.ipv4_prefixes, vec!["10.0.0.64/28".parse().unwrap()]);
        let a: serde_json::Value = serde_json::from_str(
            r#"{"RequestId":"R","AssignedPrivateIpAddressesSet":{"NetworkInterfaceId":"eni-1",
                "PrivateIpSet":{"PrivateIpAddress":[]},"Ipv4PrefixSet":{"Ipv4Prefixes":["10.0.0.64/28"]}}}"#,
        )
        .unwrap();
        assert_eq!(
            jv::strings(
                &a,
                &[
                    "AssignedPrivateIpAddressesSet",
                    "Ipv4PrefixSet",
                    "Ipv4Prefixes"
                ]
            ),
            vec!["10.0.0.64/28".to_string()]
        );
    }

    #[test]
    fn ipv6_prefixes_read_in_both_shapes_the_api_answers() {
        // DescribeNetworkInterfaces and CreateNetworkInterface: objects.
        let v: serde_json::Value = serde_json::from_str(
            r#"{"NetworkInterfaceId":"eni-1","Ipv6PrefixSets":{"Ipv6PrefixSet":[
                {"Ipv6Prefix":"2408:4005:3ab:100:1::/80"},{"Ipv6Prefix":"2408::/64"}]}}"#,
        )
        .unwrap();
        let e = ecs::eni_from_json("DescribeNetworkInterfaces", &v).unwrap();
        assert_eq!(
            e.ipv6_prefixes,
            vec!["2408:4005:3ab:100:1::/80".parse::<Ipv6Prefix>().unwrap()],
            "another length is skipped, not fatal"
        );
        assert!(e.ipv6s.is_empty());
        for body in [
            r#"{"NetworkInterfaceId":"eni-2"}"#,
            r#"{"NetworkInterfaceId":"eni-2","Ipv6PrefixSets":{"Ipv6PrefixSet":[]}}"#,
            r#"{"NetworkInterfaceId":"eni-2","Ipv6PrefixSets":null}"#,
        ] {
            let v: serde_json::Value = serde_json::from_str(body).unwrap();
            let e = ecs::eni_from_json("DescribeNetworkInterfaces", &v).unwrap();
            assert!(e.ipv6_prefixes.is_empty(), "{body}");
        }
        // AssignIpv6Addresses: a list of strings.
        let a: serde_json::Value = serde_json::from_str(
            r#"{"RequestId":"R","NetworkInterfaceId":"eni-1","Ipv6Sets":{"Ipv6Address":[]},
                "Ipv6PrefixSets":{"Ipv6Prefix":["2408:4005:3ab:100:7::/80"]}}"#,
        )
        .unwrap();
        assert_eq!(
            jv::strings(&a, &["Ipv6PrefixSets", "Ipv6Prefix"]),
            vec!["2408:4005:3ab:100:7::/80".to_string()]
        );
    }

    #[test]
    fn sixteen_addresses_and_containment() {
        let p: Ipv4Prefix = "192.168.0.240/28".parse().unwrap();
        let a: Vec<Ipv4Addr> = p.addresses().collect();
        assert_eq!(a.len(), 16);
        assert_eq!(a[0], Ipv4Addr::new(192, 168, 0, 240));
        assert_eq!(a[15], Ipv4Addr::new(192, 168, 0, 255));
        assert!(a.iter().all(|x| p.contains(*x)));
        assert!(!p.contains(Ipv4Addr::new(192, 168, 1, 0)));
        assert!(!p.contains(Ipv4Addr::new(192, 168, 0, 239)));
        assert_eq!(Ipv4Prefix::containing(Ipv4Addr::new(192, 168, 0, 250)), p);
    }

    #[test]
    fn no_room_for_a_prefix_is_its_own_kind() {
        let e = CloudError::api(
            "AssignPrivateIpAddresses",
            403,
            "InvalidVSwitchId.IpNotEnough",
            "no /28",
            None,
        );
        assert_eq!(e.kind, CloudErrorKind::Exhausted);
        let e = prefix_kind(e);
        assert_eq!(e.kind, CloudErrorKind::PrefixExhausted);
        assert!(!e.is_exhausted());
        assert!(e.is_prefix_exhausted());
        // The code stays the service's, for operators.
        assert_eq!(e.code.as_deref(), Some("InvalidVSwitchId.IpNotEnough"));
        // Other failures keep their kind.
        let t = CloudError::api(
            "AssignPrivateIpAddresses",
            400,
            "Throttling.User",
            "x",
            None,
        );
        assert_eq!(prefix_kind(t).kind, CloudErrorKind::Throttled);
        // A prefix-specific code, should the service have one, is too.
        assert_eq!(
            super::super::error::classify(403, "InvalidVSwitchId.Ipv4PrefixNotEnough"),
            CloudErrorKind::PrefixExhausted
        );
    }
}
