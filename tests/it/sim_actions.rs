//! eniip-sim's actions beyond what eniipd itself calls, as official SDK
//! calls hit them: tags, explicit addresses on create and IPv6 assign,
//! fault messages and headers, the VPC host in VPC errors, the metadata
//! items and the typed fields of the instance descriptions. Driven with
//! eniipd's own signed client (V3), or raw where headers matter.

use std::time::Duration;

use crate::common::{by_id, http_agent};
use crate::openapi_client::{call, client, code, params};
use eniip_cloud::aliyun::AliyunCloud;
use eniip_cloud::metadata::MetadataClient;
use eniip_cloud::rpc::CallOpts;
use eniip_cloud::sign;
use eniip_cloud::CloudErrorKind;
use eniip_sim::{FaultRule, SimOptions, Simulator, VSwitchSpec};
use eniip_util::encoding::percent_encode;
use serde_json::Value;

fn dual_sim() -> Simulator {
    Simulator::start(SimOptions {
        vswitches: vec![
            VSwitchSpec::parse("vsw-dual=10.2.0.0/24,ipv6=2408:4005:300:ab00::/64").unwrap(),
        ],
        attach_delay: Duration::from_millis(20),
        metadata_lag: Duration::ZERO,
        ..SimOptions::default()
    })
    .unwrap()
}

fn instance_vswitch_sg(c: &AliyunCloud, sim: &Simulator) -> (String, String) {
    let a = call(
        c,
        "DescribeInstanceAttribute",
        &[("InstanceId", &sim.instance_id())],
    )
    .unwrap();
    (
        a["VpcAttributes"]["VSwitchId"].as_str().unwrap().into(),
        a["SecurityGroupIds"]["SecurityGroupId"][0]
            .as_str()
            .unwrap()
            .into(),
    )
}

/// Three consecutive addresses `net.N` from `from` on that no ENI of the
/// emulator holds.
fn three_free_v4(sim: &Simulator, net: &str, from: u8) -> [String; 3] {
    let taken = crate::common::sim_held_v4(&sim.state());
    (from..250)
        .map(|n| [0, 1, 2].map(|k| format!("{net}.{}", n + k)))
        .find(|run| run.iter().all(|ip| !taken.contains(ip)))
        .expect("three free addresses")
}

fn free_of(sim: &Simulator, vsw: &str) -> u64 {
    by_id(&sim.state(), "vswitches", vsw)["free"]
        .as_u64()
        .unwrap()
}

fn tags_of(c: &AliyunCloud, eni: &str) -> Vec<(String, String)> {
    let r = call(
        c,
        "ListTagResources",
        &[("ResourceType", "eni"), ("ResourceId.1", eni)],
    )
    .unwrap();
    let mut out: Vec<(String, String)> = r["TagResources"]["TagResource"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            assert_eq!(t["ResourceId"], eni);
            assert_eq!(t["ResourceType"], "eni");
            (
                t["TagKey"].as_str().unwrap().into(),
                t["TagValue"].as_str().unwrap().into(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
// One scenario of calls and their answers, read top to bottom.
#[allow(clippy::too_many_lines)]
fn tag_untag_and_list_enis_with_the_real_errors() {
    let sim = dual_sim();
    let c = client(sim.client_options());
    let (vsw, sg) = instance_vswitch_sg(&c, &sim);
    let eni = call(
        &c,
        "CreateNetworkInterface",
        &[
            ("VSwitchId", &vsw),
            ("SecurityGroupIds.1", &sg),
            ("Tag.1.Key", "creator"),
            ("Tag.1.Value", "test"),
        ],
    )
    .unwrap()["NetworkInterfaceId"]
        .as_str()
        .unwrap()
        .to_string();
    call(
        &c,
        "TagResources",
        &[
            ("ResourceType", "eni"),
            ("ResourceId.1", &eni),
            ("Tag.1.Key", "team"),
            ("Tag.1.Value", "net"),
            ("Tag.2.Key", "creator"),
            ("Tag.2.Value", "retagged"),
        ],
    )
    .unwrap();
    assert_eq!(
        tags_of(&c, &eni),
        vec![
            ("creator".into(), "retagged".into()),
            ("team".into(), "net".into())
        ]
    );
    // The same tags through DescribeNetworkInterfaces.
    let d = call(
        &c,
        "DescribeNetworkInterfaces",
        &[("NetworkInterfaceId.1", &eni)],
    )
    .unwrap();
    assert_eq!(
        d["NetworkInterfaceSets"]["NetworkInterfaceSet"][0]["Tags"]["Tag"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    // Listing by tag finds it; by another value does not.
    let by_tag = call(
        &c,
        "ListTagResources",
        &[
            ("ResourceType", "eni"),
            ("Tag.1.Key", "team"),
            ("Tag.1.Value", "net"),
        ],
    )
    .unwrap();
    assert_eq!(
        by_tag["TagResources"]["TagResource"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let none = call(
        &c,
        "ListTagResources",
        &[
            ("ResourceType", "eni"),
            ("Tag.1.Key", "team"),
            ("Tag.1.Value", "web"),
        ],
    )
    .unwrap();
    assert!(none["TagResources"]["TagResource"]
        .as_array()
        .unwrap()
        .is_empty());
    call(
        &c,
        "UntagResources",
        &[
            ("ResourceType", "eni"),
            ("ResourceId.1", &eni),
            ("TagKey.1", "team"),
        ],
    )
    .unwrap();
    assert_eq!(
        tags_of(&c, &eni),
        vec![("creator".into(), "retagged".into())]
    );

    // Unknown resources, unknown types, malformed keys, the per-resource limit.
    assert_eq!(
        code(call(
            &c,
            "TagResources",
            &[
                ("ResourceType", "eni"),
                ("ResourceId.1", &eni),
                ("ResourceId.2", "eni-bp1nosuchthing00000"),
                ("Tag.1.Key", "k"),
            ],
        )),
        (404, "InvalidResourceId.NotFound".into())
    );
    assert_eq!(tags_of(&c, &eni).len(), 1, "all or nothing");
    for (action, pairs, answer) in [
        (
            "UntagResources",
            [
                ("ResourceType", "eni"),
                ("ResourceId.1", "eni-bp1nosuchthing00000"),
                ("TagKey.1", "k"),
            ],
            (404, "InvalidResourceId.NotFound"),
        ),
        (
            "TagResources",
            [
                ("ResourceType", "bucket"),
                ("ResourceId.1", eni.as_str()),
                ("Tag.1.Key", "k"),
            ],
            (404, "InvalidResourceType.NotFound"),
        ),
        (
            "TagResources",
            [
                ("ResourceType", "eni"),
                ("ResourceId.1", eni.as_str()),
                ("Tag.1.Key", "aliyun:reserved"),
            ],
            (400, "InvalidTagKey.Malformed"),
        ),
    ] {
        assert_eq!(
            code(call(&c, action, &pairs)),
            (answer.0, answer.1.into()),
            "{action} {pairs:?}"
        );
    }
    let keys: Vec<String> = (1..=20).map(|i| format!("k{i}")).collect();
    let mut many: Vec<(String, String)> =
        params(&[("ResourceType", "eni"), ("ResourceId.1", &eni)]);
    for (i, k) in keys.iter().enumerate() {
        many.push((format!("Tag.{}.Key", i + 1), k.clone()));
    }
    let e = c
        .ecs()
        .call("TagResources", &many, CallOpts::default())
        .unwrap_err();
    assert_eq!(
        (e.http_status, e.code.as_deref()),
        (Some(403), Some("OperationDenied.QuotaExceed")),
        "20 new tags on top of one"
    );
    assert_eq!(tags_of(&c, &eni).len(), 1);
    sim.shutdown();
}

#[test]
fn create_and_assign_take_the_addresses_asked_for() {
    let sim = dual_sim();
    let c = client(sim.client_options());
    let (_, sg) = instance_vswitch_sg(&c, &sim);
    let free = free_of(&sim, "vsw-dual");
    // The instance's primary ENI took a random address of the vswitch:
    // ask for three it did not take.
    let [a, b, c3] = three_free_v4(&sim, "10.2.0", 50);
    let created = call(
        &c,
        "CreateNetworkInterface",
        &[
            ("VSwitchId", "vsw-dual"),
            ("SecurityGroupIds.1", &sg),
            ("PrimaryIpAddress", &a),
            ("PrivateIpAddress.1", &b),
            ("PrivateIpAddress.2", &c3),
            ("Ipv6Address.1", "2408:4005:300:ab00::aa"),
        ],
    )
    .unwrap();
    assert_eq!(created["PrivateIpAddress"], a.as_str());
    let v4: Vec<(String, bool)> = created["PrivateIpSets"]["PrivateIpSet"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["PrivateIpAddress"].as_str().unwrap().into(),
                s["Primary"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(v4, vec![(a, true), (b.clone(), false), (c3, false)]);
    assert_eq!(
        created["Ipv6Sets"]["Ipv6Set"][0]["Ipv6Address"],
        "2408:4005:300:ab00::aa"
    );
    assert_eq!(free_of(&sim, "vsw-dual"), free - 3);
    let eni = created["NetworkInterfaceId"].as_str().unwrap().to_string();

    // A taken address (or one outside the vswitch) fails the whole create
    // and leaks nothing.
    for (address, answer) in [
        (("PrivateIpAddress.1", b.as_str()), "InvalidIp.IpAssigned"),
        (
            ("PrimaryIpAddress", "10.9.9.9"),
            "InvalidVSwitchId.IpInvalid",
        ),
    ] {
        let pairs = [
            ("VSwitchId", "vsw-dual"),
            ("SecurityGroupIds.1", sg.as_str()),
            address,
        ];
        assert_eq!(
            code(call(&c, "CreateNetworkInterface", &pairs)),
            (403, answer.into()),
            "{address:?}"
        );
    }
    assert_eq!(free_of(&sim, "vsw-dual"), free - 3);

    // AssignIpv6Addresses with explicit addresses.
    let r = call(
        &c,
        "AssignIpv6Addresses",
        &[
            ("NetworkInterfaceId", &eni),
            ("Ipv6Address.1", "2408:4005:300:ab00::bb"),
            ("Ipv6Address.2", "2408:4005:300:ab00::cc"),
        ],
    )
    .unwrap();
    assert_eq!(
        r["Ipv6Sets"]["Ipv6Address"],
        serde_json::json!(["2408:4005:300:ab00::bb", "2408:4005:300:ab00::cc"])
    );
    for (addr, want) in [
        ("2408:4005:300:ab00::aa", "InvalidIp.IpAssigned"),
        ("2408:4005:300:ffff::1", "InvalidVSwitchId.IpInvalid"),
        ("not-an-address", "InvalidIp.Address"),
    ] {
        assert_eq!(
            code(call(
                &c,
                "AssignIpv6Addresses",
                &[("NetworkInterfaceId", &eni), ("Ipv6Address.1", addr)],
            )),
            (403, want.into()),
            "{addr}"
        );
    }
    assert_eq!(
        code(call(
            &c,
            "AssignIpv6Addresses",
            &[
                ("NetworkInterfaceId", &eni),
                ("Ipv6Address.1", "2408:4005:300:ab00::dd"),
                ("Ipv6AddressCount", "1"),
            ],
        )),
        (400, "InvalidParameter".into())
    );
    sim.shutdown();
}

/// A V1-signed request sent raw, to read the answer's headers.
fn raw_v1(
    sim: &Simulator,
    action: &str,
    version: &str,
    extra: &[(&str, &str)],
) -> (u16, Value, Vec<(String, String)>) {
    let mut query = params(&[
        ("Action", action),
        ("Version", version),
        ("Format", "JSON"),
        ("AccessKeyId", sim.access_key_id()),
        ("SignatureMethod", "HMAC-SHA1"),
        ("SignatureVersion", "1.0"),
        ("SignatureNonce", &eniip_util::rand::uuid()),
        ("Timestamp", &eniip_util::time::now_utc()),
    ]);
    query.extend(params(extra));
    let sig = sign::signature(
        sim.access_key_secret(),
        &sign::string_to_sign("GET", &query),
    );
    query.push(("Signature".into(), sig));
    let q: Vec<String> = query
        .iter()
        .map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v)))
        .collect();
    let mut resp = http_agent()
        .get(&format!("{}/?{}", sim.ecs_url(), q.join("&")))
        .call()
        .unwrap();
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let status = resp.status().as_u16();
    let v = serde_json::from_str(&resp.body_mut().read_to_string().unwrap()).unwrap();
    (status, v, headers)
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

#[test]
fn faults_answer_like_the_service() {
    let sim = dual_sim();
    let region = sim.region_id();
    for (fault_code, status, message) in [
        (
            "Throttling.User",
            400,
            "Request was denied due to user flow control.",
        ),
        (
            "Throttling",
            400,
            "Request was denied due to request throttling.",
        ),
        (
            "InternalError",
            500,
            "The request processing has failed due to some unknown error, exception or failure.",
        ),
        (
            "ServiceUnavailable",
            503,
            "The request has failed due to a temporary failure of the server.",
        ),
    ] {
        sim.clear_faults();
        let mut rule = FaultRule::error("DescribeInstanceTypes", fault_code);
        rule.count = Some(1);
        sim.add_fault(rule);
        let (st, v, h) = raw_v1(
            &sim,
            "DescribeInstanceTypes",
            "2014-05-26",
            &[("RegionId", &region)],
        );
        assert_eq!(st, status, "{fault_code}");
        assert_eq!(v["Code"], fault_code);
        assert_eq!(v["Message"], message);
        assert!(!v.to_string().to_ascii_lowercase().contains("sim"), "{v}");
        let retry_after = header(&h, "x-acs-retry-after");
        if fault_code.starts_with("Throttling") {
            let ms: u64 = retry_after.expect("x-acs-retry-after").parse().unwrap();
            assert!(ms > 0);
            assert!(header(&h, "x-ratelimit-user-api").is_some());
        } else {
            assert!(retry_after.is_none(), "{fault_code}");
        }
    }
    // A VPC error names the VPC host, an ECS error the ECS host.
    let (st, v, _) = raw_v1(
        &sim,
        "DescribeVSwitches",
        "2016-04-28",
        &[("RegionId", "xx-nowhere-1")],
    );
    assert_eq!(st, 404);
    assert_eq!(v["HostId"], format!("vpc.{region}.aliyuncs.com"));
    assert!(v["Recommend"].as_str().unwrap().contains("product=Vpc"));
    let (_, v, _) = raw_v1(
        &sim,
        "DescribeNetworkInterfaces",
        "2014-05-26",
        &[("RegionId", "xx-nowhere-1")],
    );
    assert_eq!(v["HostId"], format!("ecs.{region}.aliyuncs.com"));
    sim.shutdown();
}

#[test]
fn eniipd_waits_what_x_acs_retry_after_says_and_then_succeeds() {
    let sim = dual_sim();
    let c = AliyunCloud::new(sim.client_options());
    let mut rule = FaultRule::error("DescribeInstanceTypes", "Throttling.User");
    rule.count = Some(2);
    sim.add_fault(rule);
    let t0 = std::time::Instant::now();
    let v = call(
        &c,
        "DescribeInstanceTypes",
        &[("InstanceTypes.1", "ecs.g7.xlarge")],
    )
    .unwrap();
    assert_eq!(v["InstanceTypes"]["InstanceType"][0]["EniQuantity"], 4);
    assert_eq!(
        sim.state()["calls"]["DescribeInstanceTypes"].as_u64(),
        Some(3)
    );
    // Two waits of at least the 1000 ms the header asked for.
    assert!(
        t0.elapsed() >= Duration::from_millis(2000),
        "{:?}",
        t0.elapsed()
    );
    sim.shutdown();
}

#[test]
fn metadata_items_and_instance_fields_agree() {
    let sim = dual_sim();
    let c = client(sim.client_options());
    let md = MetadataClient::new(&sim.metadata_url());
    let get = |p: &str| md.get(p).unwrap().unwrap_or_else(|| panic!("{p} missing"));
    let attr = call(
        &c,
        "DescribeInstanceAttribute",
        &[("InstanceId", &sim.instance_id())],
    )
    .unwrap();
    assert_eq!(get("hostname"), attr["HostName"].as_str().unwrap());
    assert_eq!(get("image-id"), attr["ImageId"].as_str().unwrap());
    assert_eq!(
        get("instance/instance-name"),
        attr["InstanceName"].as_str().unwrap()
    );
    assert_eq!(get("serial-number"), attr["SerialNumber"].as_str().unwrap());
    assert_eq!(get("serial-number").len(), 36);
    assert!(get("owner-account-id").parse::<u64>().is_ok());
    assert_eq!(get("network-type"), "vpc");
    let ns = get("dns-conf/nameservers");
    assert!(ns.lines().all(|l| l.parse::<std::net::Ipv4Addr>().is_ok()));
    for item in [
        "hostname",
        "image-id",
        "serial-number",
        "dns-conf/",
        "instance/",
    ] {
        assert!(get("").lines().any(|l| l == item), "{item} not listed");
    }
    assert!(get("instance/").lines().any(|l| l == "instance-name"));

    // The IPv6 VPC block of an ENI on a dual-stack vswitch.
    let (_, sg) = instance_vswitch_sg(&c, &sim);
    let created = call(
        &c,
        "CreateNetworkInterface",
        &[
            ("VSwitchId", "vsw-dual"),
            ("SecurityGroupIds.1", &sg),
            ("Ipv6AddressCount", "1"),
        ],
    )
    .unwrap();
    let eni = created["NetworkInterfaceId"].as_str().unwrap();
    let mac = created["MacAddress"].as_str().unwrap().to_string();
    call(
        &c,
        "AttachNetworkInterface",
        &[
            ("NetworkInterfaceId", eni),
            ("InstanceId", &sim.instance_id()),
        ],
    )
    .unwrap();
    let path = format!("network/interfaces/macs/{mac}/vpc-ipv6-cidr-blocks");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let blocks = loop {
        if let Some(b) = md.get(&path).unwrap() {
            break b;
        }
        assert!(std::time::Instant::now() < deadline, "{path} never showed");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(blocks, "[2408:4005:300:ab00::/56]");

    // Typed fields the official models read, filled.
    let t = call(
        &c,
        "DescribeInstanceTypes",
        &[("InstanceTypes.1", "ecs.g7.xlarge")],
    )
    .unwrap()["InstanceTypes"]["InstanceType"][0]
        .clone();
    for k in [
        "InstanceCategory",
        "PhysicalProcessorModel",
        "InstanceBandwidthRx",
        "InstancePpsRx",
        "NetworkCards",
        "CpuOptions",
        "EnhancedNetwork",
        "SupportedBootModes",
        "MaximumQueueNumberPerEni",
    ] {
        assert!(!t[k].is_null(), "{k}");
    }
    for k in [
        "ImageId",
        "SerialNumber",
        "InstanceChargeType",
        "ExpiredTime",
        "NetworkOptions",
        "DedicatedHostAttribute",
    ] {
        assert!(!attr[k].is_null(), "{k}");
    }
    sim.shutdown();
}

#[test]
fn a_failing_metadata_service_is_named_as_such() {
    let sim = dual_sim();
    let mut rule = FaultRule::error("metadata", "InternalError");
    rule.count = Some(100);
    sim.add_fault(rule);
    let md = MetadataClient::with_timeout(&sim.metadata_url(), Duration::from_secs(2));
    let e = md.get("instance-id").unwrap_err();
    assert_eq!(e.kind, CloudErrorKind::Server);
    // What `ERR cloud <code_or_kind> <message>` shows a client.
    assert_eq!(e.code_or_kind(), "metadata");
    assert!(e.message.contains("metadata service"), "{}", e.message);
    assert!(e.message.contains("HTTP 500"), "{}", e.message);
    // "*" rules are the OpenAPI's: they leave metadata alone.
    sim.clear_faults();
    sim.add_fault(FaultRule::error("*", "InternalError"));
    assert_eq!(md.get("instance-id").unwrap().unwrap(), sim.instance_id());
    sim.shutdown();
}
