//! The real cloud client against eniip-sim over loopback: every action,
//! retries, exhaustion, timeouts, metadata lag, token mode, RAM roles.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use crate::common::first_vswitch;
use eniip_cloud::aliyun::{AliyunCloud, AliyunCloudOptions};
use eniip_cloud::credentials::CredentialSource;
use eniip_cloud::retry::RetryPolicy;
use eniip_cloud::rpc::Timeouts;
use eniip_cloud::sign::SignatureVersion;
use eniip_cloud::{wait, CloudApi, CloudErrorKind, CreateEni, EniQuery, EniStatus};
use eniip_sim::{FaultRule, SimOptions, Simulator, VSwitchSpec};
use eniip_util::Secret;

fn cloud(sim: &Simulator) -> AliyunCloud {
    cloud_with(sim, Timeouts::default(), RetryPolicy::default())
}

fn cloud_with(sim: &Simulator, timeouts: Timeouts, retry: RetryPolicy) -> AliyunCloud {
    AliyunCloud::new(AliyunCloudOptions {
        timeouts,
        retry,
        ..sim.client_options()
    })
}

fn quick() -> SimOptions {
    SimOptions {
        attach_delay: Duration::from_millis(50),
        metadata_lag: Duration::ZERO,
        ..SimOptions::default()
    }
}

fn calls(sim: &Simulator, action: &str) -> u64 {
    sim.state()["calls"][action].as_u64().unwrap_or(0)
}

fn sg(c: &AliyunCloud, sim: &Simulator) -> Vec<String> {
    c.instance_security_groups(&sim.instance_id()).unwrap()
}

#[test]
fn every_action_works() {
    let sim = Simulator::start(quick()).unwrap();
    let c = cloud(&sim);
    let me = sim.instance_id();
    let t = c.instance_type_limits("ecs.g7.xlarge").unwrap();
    assert_eq!(
        (t.eni_quantity, t.ipv4_per_eni, t.ipv6_per_eni),
        (4, 15, 15)
    );
    assert_eq!(
        c.instance_type_limits("ecs.nope").unwrap_err().kind,
        CloudErrorKind::NotFound
    );
    let sgs = sg(&c, &sim);
    assert_eq!(sgs.len(), 1);
    let vs = c
        .describe_vswitches(&[first_vswitch(&sim.state())])
        .unwrap();
    assert_eq!(vs[0].available_ips, 999, "the primary ENI took one");
    let id = c.metadata().identity().unwrap();
    assert_eq!(id.instance_id, me);
    assert_eq!(id.instance_type, "ecs.g7.xlarge");

    let eni = c
        .create_eni(&CreateEni {
            vswitch_id: first_vswitch(&sim.state()),
            security_group_ids: sgs.clone(),
            secondary_ipv4_count: 2,
            ipv6_count: 0,
            ipv6_prefixes: 0,
            tags: vec![("creator".into(), "eniipd".into())],
            description: "test".into(),
        })
        .unwrap();
    assert_eq!(eni.status, EniStatus::Available);
    assert_eq!(eni.private_ips.len(), 3);
    assert_eq!(eni.tags.get("creator").map(String::as_str), Some("eniipd"));
    c.attach_eni(&eni.id, &me).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    wait::wait_eni_status(&c, &eni.id, EniStatus::InUse, deadline).unwrap();
    wait::wait_mac_present(c.metadata(), &eni.mac, deadline).unwrap();
    let md = c.metadata().eni(&eni.mac).unwrap();
    assert_eq!(md.eni_id, eni.id);
    assert_eq!(md.ipv4s.len(), 3);
    assert!(md.gateway.is_some() && md.vswitch_cidr == "192.168.0.0/22");

    let new = c.assign_ipv4(&eni.id, 5).unwrap();
    assert_eq!(new.len(), 5);
    wait::wait_ips_present(c.metadata(), &eni.mac, &new, &[], deadline).unwrap();
    let all = c
        .describe_enis(&EniQuery {
            instance_id: Some(me.clone()),
            ..EniQuery::default()
        })
        .unwrap();
    assert_eq!(all.len(), 2, "primary + ours");
    let ours = all.iter().find(|e| e.id == eni.id).unwrap();
    assert_eq!(ours.private_ips.len(), 8);
    c.unassign_ipv4(&eni.id, &new[..2]).unwrap();
    // Already gone: still success.
    c.unassign_ipv4(&eni.id, &new[..2]).unwrap();
    wait::wait_ips_absent(c.metadata(), &eni.mac, &new[..2], &[], deadline).unwrap();
    // A batch with one address gone and two still there: the cloud refuses
    // the whole call, and the two must still go.
    let before = calls(&sim, "UnassignPrivateIpAddresses");
    c.unassign_ipv4(&eni.id, &new[1..4]).unwrap();
    assert_eq!(calls(&sim, "UnassignPrivateIpAddresses") - before, 4);
    let ours = c
        .describe_enis(&EniQuery {
            eni_ids: vec![eni.id.clone()],
            ..EniQuery::default()
        })
        .unwrap();
    assert_eq!(ours[0].private_ips.len(), 4, "{:?}", ours[0].private_ips);
    assert!(!ours[0].private_ips.iter().any(|a| new[..4].contains(a)));
    // The primary address is refused, not hidden: the allocator never asks.
    c.detach_eni(&eni.id, &me).unwrap();
    wait::wait_eni_status(&c, &eni.id, EniStatus::Available, deadline).unwrap();
    c.delete_eni(&eni.id).unwrap();
    wait::wait_eni_gone(&c, &eni.id, deadline).unwrap();
    c.delete_eni(&eni.id).unwrap();
    c.detach_eni(&eni.id, &me).unwrap();
    assert_eq!(
        c.describe_vswitches(&[first_vswitch(&sim.state())])
            .unwrap()[0]
            .available_ips,
        999
    );
    sim.shutdown();
}

#[test]
fn describe_pages_through_everything() {
    let sim = Simulator::start(quick()).unwrap();
    let c = cloud(&sim);
    let sgs = sg(&c, &sim);
    for _ in 0..13 {
        c.create_eni(&CreateEni {
            vswitch_id: first_vswitch(&sim.state()),
            security_group_ids: sgs.clone(),
            tags: vec![("batch".into(), "p".into())],
            ..CreateEni::default()
        })
        .unwrap();
    }
    let q = EniQuery {
        tags: vec![("batch".into(), "p".into())],
        ..EniQuery::default()
    };
    assert_eq!(c.describe_enis(&q).unwrap().len(), 13);
    // The emulator's pages are honoured (MaxResults 10 here via PageSize-free paging).
    let q = EniQuery {
        status: Some(EniStatus::Available),
        ..EniQuery::default()
    };
    assert_eq!(c.describe_enis(&q).unwrap().len(), 13);
    sim.shutdown();
}

#[test]
fn dual_stack_assigns_ipv6() {
    let sim = Simulator::start(SimOptions {
        vswitches: vec![
            VSwitchSpec::parse("vsw-dual=10.2.0.0/24,ipv6=2408:4005:300:ab00::/64").unwrap(),
        ],
        ..quick()
    })
    .unwrap();
    let c = cloud(&sim);
    let eni = c
        .create_eni(&CreateEni {
            vswitch_id: "vsw-dual".into(),
            security_group_ids: sg(&c, &sim),
            secondary_ipv4_count: 1,
            ipv6_count: 2,
            ..CreateEni::default()
        })
        .unwrap();
    assert_eq!(eni.ipv6s.len(), 2);
    let v6 = c.assign_ipv6(&eni.id, 3).unwrap();
    assert_eq!(v6.len(), 3);
    c.unassign_ipv6(&eni.id, &v6[..1]).unwrap();
    sim.shutdown();
}

#[test]
fn throttling_is_retried_then_succeeds() {
    let sim = Simulator::start(quick()).unwrap();
    let c = cloud(&sim);
    sim.add_fault(FaultRule {
        count: Some(2),
        ..FaultRule::error("DescribeInstanceAttribute", "Throttling.User")
    });
    let t = Instant::now();
    assert_eq!(sg(&c, &sim).len(), 1);
    assert_eq!(
        calls(&sim, "DescribeInstanceAttribute"),
        3,
        "two throttled attempts, then success"
    );
    println!("succeeded after {:?} (TimeLeft honoured)", t.elapsed());
    sim.shutdown();
}

#[test]
fn a_persistent_throttle_ends_in_bounded_time() {
    let sim = Simulator::start(quick()).unwrap();
    let c = cloud_with(
        &sim,
        Timeouts::default(),
        RetryPolicy {
            max_attempts: 4,
            max_elapsed: Duration::from_secs(10),
            ..RetryPolicy::default()
        },
    );
    sim.add_fault(FaultRule::error(
        "AssignPrivateIpAddresses",
        "Throttling.User",
    ));
    let t = Instant::now();
    let e = c.assign_ipv4("eni-whatever", 1).unwrap_err();
    println!("gave up after {:?}: {e}", t.elapsed());
    assert_eq!(e.kind, CloudErrorKind::Throttled);
    assert_eq!(e.attempts, 4);
    assert!(e.to_string().contains("Throttling.User"));
    sim.shutdown();
}

#[test]
fn exhaustion_is_its_own_kind_and_not_retried() {
    let sim = Simulator::start(quick()).unwrap();
    let c = cloud(&sim);
    assert!(sim.set_vswitch_free(&first_vswitch(&sim.state()), 0));
    let e = c
        .create_eni(&CreateEni {
            vswitch_id: first_vswitch(&sim.state()),
            security_group_ids: sg(&c, &sim),
            ..CreateEni::default()
        })
        .unwrap_err();
    assert_eq!(e.kind, CloudErrorKind::Exhausted);
    assert_eq!(e.code.as_deref(), Some("InvalidVSwitchId.IpNotEnough"));
    assert_eq!(e.http_status, Some(403));
    assert!(e.request_id.is_some());
    assert_eq!(calls(&sim, "CreateNetworkInterface"), 1);
    sim.shutdown();
}

#[test]
fn a_stalled_response_is_cut_by_the_timeout() {
    let sim = Simulator::start(quick()).unwrap();
    let c = cloud_with(
        &sim,
        Timeouts::all(Duration::from_millis(500)),
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        },
    );
    sim.add_fault(FaultRule {
        latency_ms: 30_000,
        code: None,
        ..FaultRule::error("DescribeVSwitches", "x")
    });
    let t = Instant::now();
    let e = c
        .describe_vswitches(&[first_vswitch(&sim.state())])
        .unwrap_err();
    assert_eq!(e.kind, CloudErrorKind::Timeout, "{e}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    sim.shutdown();
}

#[test]
fn metadata_shows_assigned_addresses_only_after_the_lag() {
    let sim = Simulator::start(SimOptions {
        metadata_lag: Duration::from_millis(300),
        attach_delay: Duration::from_millis(50),
        ..SimOptions::default()
    })
    .unwrap();
    let c = cloud(&sim);
    let me = sim.instance_id();
    let eni = c
        .create_eni(&CreateEni {
            vswitch_id: first_vswitch(&sim.state()),
            security_group_ids: sg(&c, &sim),
            ..CreateEni::default()
        })
        .unwrap();
    c.attach_eni(&eni.id, &me).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    wait::wait_mac_present(c.metadata(), &eni.mac, deadline).unwrap();
    let new: Vec<Ipv4Addr> = c.assign_ipv4(&eni.id, 3).unwrap();
    let (now, _) = c.metadata().eni_ips(&eni.mac, false).unwrap();
    assert!(
        new.iter().all(|a| !now.contains(a)),
        "visible before the lag: {now:?}"
    );
    let t = Instant::now();
    wait::wait_ips_present(c.metadata(), &eni.mac, &new, &[], deadline).unwrap();
    println!("visible after {:?}", t.elapsed());
    assert!(t.elapsed() >= Duration::from_millis(150));
    sim.shutdown();
}

#[test]
fn token_mode_on_a_hardened_instance() {
    let sim = Simulator::start(SimOptions {
        metadata_hardened: true,
        ..quick()
    })
    .unwrap();
    let plain = ureq::get(&format!(
        "{}/latest/meta-data/instance-id",
        sim.metadata_url()
    ))
    .call();
    assert!(matches!(plain, Err(ureq::Error::StatusCode(403))));
    let c = cloud(&sim);
    assert_eq!(
        c.metadata().identity().unwrap().instance_id,
        sim.instance_id()
    );
    sim.shutdown();
}

#[test]
fn ram_role_credentials_sign_accepted_calls() {
    let sim = Simulator::start(quick()).unwrap();
    let c = AliyunCloud::new(AliyunCloudOptions {
        credentials: CredentialSource::RamRole(None),
        ..sim.client_options()
    });
    assert_eq!(
        c.instance_type_limits("ecs.g7.xlarge")
            .unwrap()
            .eni_quantity,
        4
    );
    sim.shutdown();
}

#[test]
fn a_wrong_secret_is_an_auth_error_without_retries() {
    let sim = Simulator::start(quick()).unwrap();
    for signature_version in [SignatureVersion::V3, SignatureVersion::V1] {
        let c = AliyunCloud::new(AliyunCloudOptions {
            credentials: CredentialSource::Static {
                id: sim.access_key_id().into(),
                secret: Secret::new("wrong-secret-value"),
                token: None,
            },
            signature_version,
            ..sim.client_options()
        });
        let e = c.instance_type_limits("ecs.g7.xlarge").unwrap_err();
        assert_eq!(e.kind, CloudErrorKind::Auth);
        assert_eq!(e.code.as_deref(), Some("SignatureDoesNotMatch"));
        assert_eq!(e.attempts, 1);
        let text = format!("{e} {e:?}");
        assert!(!text.contains("wrong-secret-value"));
        // The server's string to sign is kept for diagnosis, but the key
        // id in it is masked as everywhere else.
        assert!(text.contains("server string to sign is:"), "{text}");
        assert!(
            !text.contains(sim.access_key_id()),
            "{signature_version:?}: {text}"
        );
        if signature_version == SignatureVersion::V1 {
            assert!(
                text.contains(&eniip_util::mask(sim.access_key_id())),
                "{text}"
            );
        }
    }
    sim.shutdown();
}
