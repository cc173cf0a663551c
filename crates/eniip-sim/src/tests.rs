//! Unit tests of the emulator's pieces.

use super::*;

#[test]
fn vswitch_specs() {
    let s = VSwitchSpec::parse("vsw-a=10.0.0.0/22,ipv6=2408:4005:300:ab00::/64,free=12").unwrap();
    assert_eq!(s.free, Some(12));
    assert!(s.ipv6_cidr.is_some());
    assert_eq!(VSwitchSpec::parse("vsw-b=10.1.0.0/24").unwrap().free, None);
    for bad in [
        "vsw-a",
        "x=10.0.0.0/24",
        "vsw-a=10.0.0.1/24",
        "vsw-a=10.0.0.0/24,free=x",
        "vsw-a=10.0.0.0/24,colour=red",
    ] {
        assert!(VSwitchSpec::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn fault_rules_from_json() {
    let r = FaultRule::from_json(
        &serde_json::json!({"action": "*", "code": "Throttling.User", "count": 2}),
    )
    .unwrap();
    assert_eq!((r.count, r.probability, r.status), (Some(2), 1.0, None));
    let r = FaultRule::from_json(
        &serde_json::json!({"action": "AssignPrivateIpAddresses", "latency_ms": 500}),
    )
    .unwrap();
    assert_eq!(r.code, None);
    for bad in [
        serde_json::json!({"code": "X"}),
        serde_json::json!({"action": "*"}),
        serde_json::json!({"action": "*", "code": "X", "probability": 2}),
        serde_json::json!({"action": "*", "code": "X", "status": 200}),
    ] {
        assert!(FaultRule::from_json(&bad).is_err(), "{bad}");
    }
}

#[test]
fn vpc_block_covers_every_vswitch() {
    let n = |s| Net4::parse(s).unwrap();
    assert_eq!(vpc_cidr(&[n("192.168.0.0/22")]), "192.168.0.0/16");
    assert_eq!(
        vpc_cidr(&[n("10.0.0.0/24"), n("10.1.0.0/24")]),
        "10.0.0.0/15"
    );
}

#[test]
fn non_loopback_listeners_are_refused() {
    let e = Simulator::start(SimOptions {
        listen: "0.0.0.0:0".parse().unwrap(),
        ..SimOptions::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("loopback"));
    let e = Simulator::start(SimOptions {
        instance_type: "ecs.nope".into(),
        ..SimOptions::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("ecs.g7.xlarge"));
}
