//! eniip-sim's IPv4 prefixes: aligned /28s of the vswitch assigned,
//! described, counted against the ENI's quota and given back; refused when
//! mixed with single addresses; fragmentation set through the admin
//! endpoint (free addresses, no /28); prefixes in `/__sim/state` and in
//! metadata. Driven with eniipd's own signed client, raw calls.

use std::net::Ipv4Addr;
use std::time::Duration;

use crate::common::{by_id, http};
use crate::openapi_client::{call, client, code};
use eniip_cloud::aliyun::AliyunCloud;
use eniip_cloud::CloudError;
use eniip_sim::{SimOptions, Simulator, VSwitchSpec};
use serde_json::Value;

const VSW: &str = "vsw-pfx";

/// ecs.g7.large: 6 IPv4 per ENI, so 5 prefixes beside the primary.
fn sim() -> Simulator {
    Simulator::start(SimOptions {
        instance_type: "ecs.g7.large".into(),
        vswitches: vec![VSwitchSpec::parse(&format!("{VSW}=10.3.0.0/22")).unwrap()],
        attach_delay: Duration::ZERO,
        metadata_lag: Duration::ZERO,
        ..SimOptions::default()
    })
    .unwrap()
}

fn sg(c: &AliyunCloud, sim: &Simulator) -> String {
    let a = call(
        c,
        "DescribeInstanceAttribute",
        &[("InstanceId", &sim.instance_id())],
    )
    .unwrap();
    a["SecurityGroupIds"]["SecurityGroupId"][0]
        .as_str()
        .unwrap()
        .into()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn vsw_state(sim: &Simulator) -> Value {
    by_id(&sim.state(), "vswitches", VSW)
}

fn eni_state(sim: &Simulator, id: &str) -> Value {
    by_id(&sim.state(), "enis", id)
}

/// A /28 string is aligned, inside the vswitch, and its 16 addresses are
/// all in the vswitch's usable range.
fn check_prefix(p: &str) -> u32 {
    let (a, len) = p.split_once('/').unwrap();
    assert_eq!(len, "28", "{p}");
    let base = u32::from(a.parse::<Ipv4Addr>().unwrap());
    assert_eq!(base % 16, 0, "{p} is not aligned");
    let vsw = u32::from(Ipv4Addr::new(10, 3, 0, 0));
    assert!(base >= vsw + 3 && base + 16 <= vsw + 1024 - 3, "{p}");
    base
}

fn create(c: &AliyunCloud, sg: &str, extra: &[(&str, &str)]) -> Result<Value, CloudError> {
    let mut p = vec![("VSwitchId", VSW), ("SecurityGroupIds.1", sg)];
    p.extend_from_slice(extra);
    call(c, "CreateNetworkInterface", &p)
}

#[test]
fn prefixes_are_assigned_described_counted_and_given_back() {
    let sim = sim();
    let c = client(sim.client_options());
    let sg = sg(&c, &sim);
    let free0 = vsw_state(&sim)["free"].as_u64().unwrap();
    let eni = create(&c, &sg, &[("Ipv4PrefixCount", "2")]).unwrap();
    let id = eni["NetworkInterfaceId"].as_str().unwrap().to_string();
    let created: Vec<String> = eni["Ipv4PrefixSets"]["Ipv4PrefixSet"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["Ipv4Prefix"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(created.len(), 2);
    // The primary and two /28s leave the vswitch.
    assert_eq!(vsw_state(&sim)["free"].as_u64().unwrap(), free0 - 1 - 32);

    let r = call(
        &c,
        "AssignPrivateIpAddresses",
        &[("NetworkInterfaceId", &id), ("Ipv4PrefixCount", "3")],
    )
    .unwrap();
    let set = &r["AssignedPrivateIpAddressesSet"];
    assert_eq!(set["NetworkInterfaceId"], id.as_str());
    let assigned = strings(&set["Ipv4PrefixSet"]["Ipv4Prefixes"]);
    assert_eq!(assigned.len(), 3, "{r}");
    assert!(strings(&set["PrivateIpSet"]["PrivateIpAddress"]).is_empty());

    // Five distinct aligned blocks; none holds the primary address.
    let mut all: Vec<String> = created.iter().chain(&assigned).cloned().collect();
    let primary = u32::from(
        eni["PrivateIpAddress"]
            .as_str()
            .unwrap()
            .parse::<Ipv4Addr>()
            .unwrap(),
    );
    for p in &all {
        let b = check_prefix(p);
        assert!(!(b..b + 16).contains(&primary), "{p} holds the primary");
    }
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 5);

    // Described as the SDKs read it, and listed in the admin state.
    let d = call(
        &c,
        "DescribeNetworkInterfaces",
        &[("NetworkInterfaceId.1", &id)],
    )
    .unwrap();
    let mut described: Vec<String> = d["NetworkInterfaceSets"]["NetworkInterfaceSet"][0]
        ["Ipv4PrefixSets"]["Ipv4PrefixSet"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["Ipv4Prefix"].as_str().unwrap().to_string())
        .collect();
    described.sort();
    assert_eq!(described, all);
    let mut listed = strings(&eni_state(&sim, &id)["ipv4_prefixes"]);
    listed.sort();
    assert_eq!(listed, all);

    // Quota: primary + 5 prefixes = 6 = EniPrivateIpAddressQuantity; one
    // more prefix or one more address is over it.
    for extra in [
        ("Ipv4PrefixCount", "1"),
        ("SecondaryPrivateIpAddressCount", "1"),
    ] {
        assert_eq!(
            code(call(
                &c,
                "AssignPrivateIpAddresses",
                &[("NetworkInterfaceId", &id), extra],
            )),
            (403, "InvalidOperation.Ipv4CountExceeded".into()),
            "{extra:?}"
        );
    }

    // Given back: the 16 addresses return to the vswitch, the prefix
    // leaves the ENI; a second unassign of it is the not-assigned answer.
    let free1 = vsw_state(&sim)["free"].as_u64().unwrap();
    call(
        &c,
        "UnassignPrivateIpAddresses",
        &[("NetworkInterfaceId", &id), ("Ipv4Prefix.1", &assigned[0])],
    )
    .unwrap();
    assert_eq!(vsw_state(&sim)["free"].as_u64().unwrap(), free1 + 16);
    assert!(!strings(&eni_state(&sim, &id)["ipv4_prefixes"]).contains(&assigned[0]));
    assert_eq!(
        code(call(
            &c,
            "UnassignPrivateIpAddresses",
            &[("NetworkInterfaceId", &id), ("Ipv4Prefix.1", &assigned[0])],
        )),
        (403, "InvalidIp.IpUnassigned".into())
    );
    // The freed slot takes a single address now (mixing on one ENI is
    // allowed, only not in one call).
    call(
        &c,
        "AssignPrivateIpAddresses",
        &[
            ("NetworkInterfaceId", &id),
            ("SecondaryPrivateIpAddressCount", "1"),
        ],
    )
    .unwrap();

    // Calls carrying prefixes are counted apart: the create, the assign
    // and the over-quota probe with a prefix, the two unassigns (the
    // single-address calls are not).
    let pc = &sim.state()["prefix_calls"];
    assert_eq!(pc["CreateNetworkInterface"], 1, "{pc}");
    assert_eq!(pc["AssignPrivateIpAddresses"], 2, "{pc}");
    assert_eq!(pc["UnassignPrivateIpAddresses"], 2, "{pc}");
    // Deleting the ENI gives every block back.
    call(&c, "DeleteNetworkInterface", &[("NetworkInterfaceId", &id)]).unwrap();
    assert_eq!(vsw_state(&sim)["free"].as_u64().unwrap(), free0);
}

#[test]
fn prefixes_and_addresses_are_never_mixed_in_one_call() {
    let sim = sim();
    let c = client(sim.client_options());
    let sg = sg(&c, &sim);
    let bad = (400, "InvalidParameter".to_string());
    assert_eq!(
        code(create(
            &c,
            &sg,
            &[
                ("Ipv4PrefixCount", "1"),
                ("SecondaryPrivateIpAddressCount", "1")
            ]
        )),
        bad
    );
    let id = create(&c, &sg, &[]).unwrap()["NetworkInterfaceId"]
        .as_str()
        .unwrap()
        .to_string();
    let id = id.as_str();
    for params in [
        vec![
            ("Ipv4PrefixCount", "1"),
            ("SecondaryPrivateIpAddressCount", "1"),
        ],
        vec![("Ipv4PrefixCount", "1"), ("PrivateIpAddress.1", "10.3.1.9")],
        vec![("Ipv4PrefixCount", "1"), ("Ipv4Prefix.1", "10.3.1.0/28")],
        vec![("Ipv4PrefixCount", "11")],
        vec![("Ipv4PrefixCount", "0")],
        vec![("Ipv4Prefix.1", "10.3.1.8/28")],
        vec![("Ipv4Prefix.1", "10.3.1.0/27")],
        vec![("Ipv4Prefix.1", "10.9.0.0/28")],
    ] {
        let mut p = vec![("NetworkInterfaceId", id)];
        p.extend(params.iter().copied());
        assert_eq!(
            code(call(&c, "AssignPrivateIpAddresses", &p)),
            bad,
            "{params:?}"
        );
    }
    // An explicit block is honoured: one no ENI's address falls in (the
    // primaries are drawn at random from the vswitch).
    let used: Vec<std::net::Ipv4Addr> = call(&c, "DescribeNetworkInterfaces", &[]).unwrap()
        ["NetworkInterfaceSets"]["NetworkInterfaceSet"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| {
            e["PrivateIpSets"]["PrivateIpSet"]
                .as_array()
                .unwrap()
                .clone()
        })
        .filter_map(|a| a["PrivateIpAddress"].as_str()?.parse().ok())
        .collect();
    let base = (0u8..=240)
        .step_by(16)
        .map(|b| std::net::Ipv4Addr::new(10, 3, 1, b))
        .find(|b| {
            !used.iter().any(|u| {
                u.octets()[..3] == b.octets()[..3] && u.octets()[3] & 0xf0 == b.octets()[3]
            })
        })
        .unwrap();
    let block = format!("{base}/28");
    let inside = std::net::Ipv4Addr::new(10, 3, 1, base.octets()[3] + 5).to_string();
    let r = call(
        &c,
        "AssignPrivateIpAddresses",
        &[("NetworkInterfaceId", id), ("Ipv4Prefix.1", &block)],
    )
    .unwrap();
    assert_eq!(
        strings(&r["AssignedPrivateIpAddressesSet"]["Ipv4PrefixSet"]["Ipv4Prefixes"]),
        vec![block.clone()]
    );
    // Taken: the same block again, or an address inside it.
    let (_, taken) = code(call(
        &c,
        "AssignPrivateIpAddresses",
        &[("NetworkInterfaceId", id), ("Ipv4Prefix.1", &block)],
    ));
    assert_eq!(taken, "InvalidIp.IpAssigned");
    let (_, taken) = code(call(
        &c,
        "AssignPrivateIpAddresses",
        &[("NetworkInterfaceId", id), ("PrivateIpAddress.1", &inside)],
    ));
    assert_eq!(taken, "InvalidIp.IpAssigned");
    // Unassign refuses mixing too.
    assert_eq!(
        code(call(
            &c,
            "UnassignPrivateIpAddresses",
            &[
                ("NetworkInterfaceId", id),
                ("Ipv4Prefix.1", &block),
                ("PrivateIpAddress.1", &inside)
            ],
        )),
        bad
    );
}

fn admin_post(sim: &Simulator, body: &str) -> u16 {
    http("POST", &format!("{}/__sim/vswitch", sim.ecs_url()), body).0
}

#[test]
fn a_fragmented_vswitch_has_addresses_but_no_prefix() {
    let sim = sim();
    let c = client(sim.client_options());
    let sg = sg(&c, &sim);
    let id = create(&c, &sg, &[]).unwrap()["NetworkInterfaceId"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(vsw_state(&sim)["free_prefixes"].as_u64().unwrap() > 10);
    assert_eq!(
        admin_post(&sim, &format!(r#"{{"id":"{VSW}","free_prefixes":0}}"#)),
        200
    );
    let v = vsw_state(&sim);
    assert_eq!(v["free_prefixes"], 0);
    assert!(v["free"].as_u64().unwrap() > 900);
    let no_prefix = (403, "InvalidVSwitchId.IpNotEnough".to_string());
    assert_eq!(
        code(call(
            &c,
            "AssignPrivateIpAddresses",
            &[("NetworkInterfaceId", &id), ("Ipv4PrefixCount", "1")],
        )),
        no_prefix
    );
    assert_eq!(
        code(create(&c, &sg, &[("Ipv4PrefixCount", "1")])),
        no_prefix
    );
    // Single addresses still come.
    call(
        &c,
        "AssignPrivateIpAddresses",
        &[
            ("NetworkInterfaceId", &id),
            ("SecondaryPrivateIpAddressCount", "2"),
        ],
    )
    .unwrap();
    // A cap of 1 gives exactly one more; null lifts it.
    assert_eq!(
        admin_post(&sim, &format!(r#"{{"id":"{VSW}","free_prefixes":1}}"#)),
        200
    );
    assert_eq!(
        code(call(
            &c,
            "AssignPrivateIpAddresses",
            &[("NetworkInterfaceId", &id), ("Ipv4PrefixCount", "2")],
        )),
        no_prefix
    );
    call(
        &c,
        "AssignPrivateIpAddresses",
        &[("NetworkInterfaceId", &id), ("Ipv4PrefixCount", "1")],
    )
    .unwrap();
    assert_eq!(vsw_state(&sim)["free_prefixes"], 0);
    assert_eq!(
        admin_post(&sim, &format!(r#"{{"id":"{VSW}","free_prefixes":null}}"#)),
        200
    );
    assert!(vsw_state(&sim)["free_prefixes"].as_u64().unwrap() > 0);
    // Real fragmentation: free addresses below 16 leave no /28 either.
    assert_eq!(
        admin_post(&sim, &format!(r#"{{"id":"{VSW}","free":15}}"#)),
        200
    );
    assert_eq!(vsw_state(&sim)["free_prefixes"], 0);
    // Bad bodies and unknown vswitches.
    assert_eq!(admin_post(&sim, &format!(r#"{{"id":"{VSW}"}}"#)), 400);
    assert_eq!(
        admin_post(&sim, &format!(r#"{{"id":"{VSW}","free_prefixes":"x"}}"#)),
        400
    );
    assert_eq!(
        admin_post(&sim, r#"{"id":"vsw-nope","free_prefixes":0}"#),
        404
    );
}

#[test]
fn metadata_lists_prefixes_as_assumed() {
    let sim = sim();
    let c = client(sim.client_options());
    let sg = sg(&c, &sim);
    let eni = create(&c, &sg, &[("Ipv4PrefixCount", "1")]).unwrap();
    let id = eni["NetworkInterfaceId"].as_str().unwrap().to_string();
    let mac = eni["MacAddress"].as_str().unwrap().to_string();
    call(
        &c,
        "AttachNetworkInterface",
        &[
            ("NetworkInterfaceId", &id),
            ("InstanceId", &sim.instance_id()),
        ],
    )
    .unwrap();
    let prefix = eni["Ipv4PrefixSets"]["Ipv4PrefixSet"][0]["Ipv4Prefix"]
        .as_str()
        .unwrap()
        .to_string();
    let get = |path: &str| -> (u16, String) {
        let url = format!(
            "{}/latest/meta-data/network/interfaces/macs/{path}",
            sim.metadata_url()
        );
        http("GET", &url, "")
    };
    let (status, listing) = get(&format!("{mac}/"));
    assert_eq!(status, 200);
    assert!(listing.lines().any(|l| l == "ipv4-prefixes"), "{listing}");
    let (status, body) = get(&format!("{mac}/ipv4-prefixes"));
    assert_eq!(status, 200);
    let list: Vec<String> = serde_json::from_str(&body).unwrap();
    assert_eq!(list, vec![prefix]);
    // The primary ENI holds none: not listed, 404.
    let primary_mac = sim.state()["instance"]["primary_mac"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(get(&format!("{primary_mac}/ipv4-prefixes")).0, 404);
}
