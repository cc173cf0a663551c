//! eniipd's cloud client with IPv4 prefixes against eniip-sim over
//! loopback: create with prefixes, assign, describe, unassign (gone is
//! success), and a vswitch without a free /28 failing as exhaustion of
//! prefixes only, while single addresses still come.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::Duration;

use crate::common::{by_id, first_vswitch};
use eniip_cloud::aliyun::AliyunCloud;
use eniip_cloud::{CloudApi, CloudErrorKind, CreateEni, EniQuery, Ipv4Prefix};
use eniip_sim::{FaultRule, SimOptions, Simulator};

fn cloud(sim: &Simulator) -> AliyunCloud {
    AliyunCloud::new(sim.client_options())
}

/// ecs.g7.large: 6 IPv4 slots per ENI.
fn sim() -> Simulator {
    Simulator::start(SimOptions {
        instance_type: "ecs.g7.large".into(),
        attach_delay: Duration::ZERO,
        metadata_lag: Duration::ZERO,
        ..SimOptions::default()
    })
    .unwrap()
}

fn req(c: &AliyunCloud, sim: &Simulator, secondary: usize) -> CreateEni {
    CreateEni {
        vswitch_id: first_vswitch(&sim.state()),
        security_group_ids: c.instance_security_groups(&sim.instance_id()).unwrap(),
        secondary_ipv4_count: secondary,
        ipv6_count: 0,
        ipv6_prefixes: 0,
        tags: vec![("creator".into(), "test".into())],
        description: "prefix test".into(),
    }
}

fn sim_prefixes(sim: &Simulator, eni: &str) -> BTreeSet<String> {
    by_id(&sim.state(), "enis", eni)["ipv4_prefixes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect()
}

fn described(c: &AliyunCloud, eni: &str) -> BTreeSet<Ipv4Prefix> {
    let enis = c
        .describe_enis(&EniQuery {
            eni_ids: vec![eni.to_string()],
            ..EniQuery::default()
        })
        .unwrap();
    assert_eq!(enis.len(), 1);
    enis[0].ipv4_prefixes.iter().copied().collect()
}

fn strs(s: &BTreeSet<Ipv4Prefix>) -> BTreeSet<String> {
    s.iter().map(|p| p.to_string()).collect()
}

#[test]
fn create_assign_describe_and_unassign_prefixes() {
    let sim = sim();
    let c = cloud(&sim);
    let eni = c.create_eni_with_prefixes(&req(&c, &sim, 0), 2).unwrap();
    assert_eq!(eni.ipv4_prefixes.len(), 2);
    // Prefix addresses are not single addresses: only the primary is.
    assert_eq!(eni.private_ips.len(), 1);
    let primary = eni.primary_ip.unwrap();
    assert!(eni.ipv4_prefixes.iter().all(|p| !p.contains(primary)));

    let more = c.assign_ipv4_prefixes(&eni.id, 3).unwrap();
    assert_eq!(more.len(), 3);
    let all: BTreeSet<Ipv4Prefix> = eni.ipv4_prefixes.iter().chain(&more).copied().collect();
    assert_eq!(all.len(), 5);
    assert_eq!(described(&c, &eni.id), all);
    assert_eq!(sim_prefixes(&sim, &eni.id), strs(&all));
    let addresses: BTreeSet<Ipv4Addr> = all.iter().flat_map(|p| p.addresses()).collect();
    assert_eq!(addresses.len(), 80);

    // The quota is full (primary + 5): a per-ENI limit, not exhaustion.
    let e = c.assign_ipv4_prefixes(&eni.id, 1).unwrap_err();
    assert_eq!(e.kind, CloudErrorKind::LimitExceeded, "{e}");

    // Unassign two; a batch holding one already gone still frees the rest.
    c.unassign_ipv4_prefixes(&eni.id, &more[..1]).unwrap();
    c.unassign_ipv4_prefixes(&eni.id, &more).unwrap();
    let left: BTreeSet<Ipv4Prefix> = eni.ipv4_prefixes.iter().copied().collect();
    assert_eq!(described(&c, &eni.id), left);
    assert_eq!(sim_prefixes(&sim, &eni.id), strs(&left));
    // Gone again is success, and nothing is nothing.
    c.unassign_ipv4_prefixes(&eni.id, &more).unwrap();
    c.unassign_ipv4_prefixes(&eni.id, &[]).unwrap();

    // Prefixes and addresses never travel in one create.
    let e = c
        .create_eni_with_prefixes(&req(&c, &sim, 1), 1)
        .unwrap_err();
    assert_eq!(e.kind, CloudErrorKind::Api);
}

#[test]
fn no_free_28_is_exhaustion_of_prefixes_only() {
    let sim = sim();
    let c = cloud(&sim);
    let eni = c.create_eni(&req(&c, &sim, 0)).unwrap();
    assert!(sim.set_vswitch_free_prefixes(&first_vswitch(&sim.state()), Some(0)));
    let before = sim.state()["calls"]["AssignPrivateIpAddresses"]
        .as_u64()
        .unwrap_or(0);
    let e = c.assign_ipv4_prefixes(&eni.id, 2).unwrap_err();
    assert_eq!(e.kind, CloudErrorKind::PrefixExhausted, "{e}");
    assert!(!e.is_exhausted());
    assert_eq!(e.code.as_deref(), Some("InvalidVSwitchId.IpNotEnough"));
    // Not retried: one call.
    assert_eq!(
        sim.state()["calls"]["AssignPrivateIpAddresses"]
            .as_u64()
            .unwrap_or(0),
        before + 1
    );
    let e = c
        .create_eni_with_prefixes(&req(&c, &sim, 0), 1)
        .unwrap_err();
    assert_eq!(e.kind, CloudErrorKind::PrefixExhausted, "{e}");
    // Single addresses still come from the same vswitch.
    assert_eq!(c.assign_ipv4(&eni.id, 2).unwrap().len(), 2);
    // An empty vswitch is plain exhaustion for addresses.
    sim.set_vswitch_free(&first_vswitch(&sim.state()), 0);
    let e = c.assign_ipv4(&eni.id, 1).unwrap_err();
    assert_eq!(e.kind, CloudErrorKind::Exhausted);
}

#[test]
fn a_retried_prefix_assign_assigns_once() {
    let sim = sim();
    let c = cloud(&sim);
    let eni = c.create_eni(&req(&c, &sim, 0)).unwrap();
    // The first attempt is refused with a server error; the retry (same
    // ClientToken) assigns exactly the prefixes asked, once.
    sim.add_fault(FaultRule {
        count: Some(1),
        ..FaultRule::error("AssignPrivateIpAddresses", "InternalError")
    });
    let got = c.assign_ipv4_prefixes(&eni.id, 2).unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(
        described(&c, &eni.id),
        got.iter().copied().collect::<BTreeSet<_>>()
    );
}
