//! eniip-sim at the wire level, with a hand-made signing client.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{first_vswitch, http, http_agent};
use eniip_cloud::sign;
use eniip_sim::{SimOptions, Simulator};
use eniip_util::encoding::percent_encode;
use serde_json::Value;

struct Raw<'a> {
    sim: &'a Simulator,
    secret: String,
}

impl Raw<'_> {
    fn params(
        &self,
        action: &str,
        extra: &[(&str, &str)],
        nonce: &str,
        ts: &str,
    ) -> Vec<(String, String)> {
        let mut p: Vec<(String, String)> = vec![
            ("Action".into(), action.into()),
            (
                "Version".into(),
                if action == "DescribeVSwitches" {
                    "2016-04-28"
                } else {
                    "2014-05-26"
                }
                .into(),
            ),
            ("Format".into(), "JSON".into()),
            ("AccessKeyId".into(), self.sim.access_key_id().into()),
            ("SignatureMethod".into(), "HMAC-SHA1".into()),
            ("SignatureVersion".into(), "1.0".into()),
            ("SignatureNonce".into(), nonce.into()),
            ("Timestamp".into(), ts.into()),
            ("RegionId".into(), self.sim.region_id()),
        ];
        p.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        p
    }

    fn send(&self, method: &str, mut p: Vec<(String, String)>) -> (u16, Value) {
        let sts = sign::string_to_sign(method, &p);
        p.push(("Signature".into(), sign::signature(&self.secret, &sts)));
        let q: Vec<String> = p
            .iter()
            .map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v)))
            .collect();
        let url = format!("{}/?{}", self.sim.ecs_url(), q.join("&"));
        let agent = http_agent();
        let mut resp = if method == "GET" {
            agent.get(&url).call()
        } else {
            agent.post(&url).send_empty()
        }
        .unwrap();
        let status = resp.status().as_u16();
        let v: Value = serde_json::from_str(&resp.body_mut().read_to_string().unwrap()).unwrap();
        (status, v)
    }

    fn call(&self, action: &str, extra: &[(&str, &str)]) -> (u16, Value) {
        let p = self.params(
            action,
            extra,
            &eniip_util::rand::uuid(),
            &eniip_util::time::now_utc(),
        );
        self.send("POST", p)
    }
}

fn raw(sim: &Simulator) -> Raw<'_> {
    Raw {
        sim,
        secret: sim.access_key_secret().into(),
    }
}

#[test]
fn a_wrong_secret_gets_the_exact_message_the_sdks_parse() {
    let sim = Simulator::start(SimOptions::default()).unwrap();
    let mut r = raw(&sim);
    r.secret = "wrong".into();
    let p = r.params(
        "DescribeInstanceTypes",
        &[],
        "n-1",
        &eniip_util::time::now_utc(),
    );
    let expected_sts = sign::string_to_sign("GET", &p);
    let (status, v) = r.send("GET", p);
    assert_eq!(status, 400);
    assert_eq!(v["Code"], "SignatureDoesNotMatch");
    assert_eq!(
        v["Message"].as_str().unwrap(),
        format!("Specified signature is not matched with our calculation. server string to sign is:{expected_sts}")
    );
    for k in ["RequestId", "HostId", "Recommend"] {
        assert!(v[k].is_string(), "{k} in {v}");
    }
    let mut r = raw(&sim);
    r.secret = sim.access_key_secret().into();
    let mut p = r.params(
        "DescribeInstanceTypes",
        &[],
        "n-2",
        &eniip_util::time::now_utc(),
    );
    p.retain(|(k, _)| k != "AccessKeyId");
    p.push(("AccessKeyId".into(), "LTAIunknown".into()));
    let (status, v) = r.send("GET", p);
    assert_eq!(
        (status, v["Code"].as_str()),
        (404, Some("InvalidAccessKeyId.NotFound"))
    );
    sim.shutdown();
}

#[test]
fn nonce_reuse_and_stale_timestamps_are_refused() {
    let sim = Simulator::start(SimOptions::default()).unwrap();
    let r = raw(&sim);
    let now = eniip_util::time::now_utc();
    let (s, _) = r.send(
        "GET",
        r.params("DescribeInstanceTypes", &[], "same-nonce", &now),
    );
    assert_eq!(s, 200);
    let (s, v) = r.send(
        "GET",
        r.params("DescribeInstanceTypes", &[], "same-nonce", &now),
    );
    assert_eq!((s, v["Code"].as_str()), (400, Some("SignatureNonceUsed")));
    let old = eniip_util::time::format_utc(eniip_util::time::unix_secs() - 3600);
    let (s, v) = r.send("GET", r.params("DescribeInstanceTypes", &[], "n-old", &old));
    assert_eq!(
        (s, v["Code"].as_str()),
        (400, Some("InvalidTimeStamp.Expired"))
    );
    let (s, v) = r.send(
        "GET",
        r.params("DescribeInstanceTypes", &[], "n-bad", "yesterday"),
    );
    assert_eq!(
        (s, v["Code"].as_str()),
        (400, Some("InvalidTimeStamp.Format"))
    );
    sim.shutdown();
}

#[test]
fn client_token_replays_and_detects_mismatches() {
    let sim = Simulator::start(SimOptions::default()).unwrap();
    let r = raw(&sim);
    let vsw = first_vswitch(&sim.state());
    let sg = {
        let (_, v) = r.call(
            "DescribeInstanceAttribute",
            &[("InstanceId", &sim.instance_id())],
        );
        v["SecurityGroupIds"]["SecurityGroupId"][0]
            .as_str()
            .unwrap()
            .to_string()
    };
    let args = [
        ("VSwitchId", vsw.as_str()),
        ("SecurityGroupIds.1", sg.as_str()),
        ("ClientToken", "tok-1"),
    ];
    let (s1, a) = r.call("CreateNetworkInterface", &args);
    let (s2, b) = r.call("CreateNetworkInterface", &args);
    assert_eq!((s1, s2), (200, 200));
    assert_eq!(
        a["NetworkInterfaceId"], b["NetworkInterfaceId"],
        "replayed, not created twice"
    );
    assert_eq!(sim.state()["enis"].as_array().unwrap().len(), 2);
    let (s, v) = r.call(
        "CreateNetworkInterface",
        &[
            ("VSwitchId", vsw.as_str()),
            ("SecurityGroupIds.1", sg.as_str()),
            ("SecondaryPrivateIpAddressCount", "2"),
            ("ClientToken", "tok-1"),
        ],
    );
    assert_eq!(
        (s, v["Code"].as_str()),
        (400, Some("IdempotentParameterMismatch"))
    );
    sim.shutdown();
}

#[test]
fn eni_state_machine_and_limits() {
    let sim = Simulator::start(SimOptions {
        attach_delay: Duration::from_secs(2),
        instance_type: "ecs.g7.large".into(),
        vswitches: vec![eniip_sim::VSwitchSpec::parse("vsw-x=10.9.0.0/24,free=4").unwrap()],
        ..SimOptions::default()
    })
    .unwrap();
    let r = raw(&sim);
    let me = sim.instance_id();
    let sg = {
        let (_, v) = r.call("DescribeInstanceAttribute", &[("InstanceId", &me)]);
        v["SecurityGroupIds"]["SecurityGroupId"][0]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (s, v) = r.call(
        "CreateNetworkInterface",
        &[
            ("VSwitchId", "vsw-x"),
            ("SecurityGroupId", &sg),
            ("SecondaryPrivateIpAddressCount", "1"),
        ],
    );
    assert_eq!(s, 200, "{v}");
    let eni = v["NetworkInterfaceId"].as_str().unwrap().to_string();
    assert_eq!(
        sim.state()["vswitches"][0]["free"],
        1,
        "4 - primary ENI - 2"
    );
    let (s, _) = r.call(
        "AttachNetworkInterface",
        &[("NetworkInterfaceId", &eni), ("InstanceId", &me)],
    );
    assert_eq!(s, 200);
    let (s, v) = r.call(
        "AssignPrivateIpAddresses",
        &[
            ("NetworkInterfaceId", &eni),
            ("SecondaryPrivateIpAddressCount", "1"),
        ],
    );
    assert_eq!(
        (s, v["Code"].as_str()),
        (403, Some("Operation.Conflict")),
        "mid-attach"
    );
    let (_, v) = r.call(
        "DescribeNetworkInterfaces",
        &[("NetworkInterfaceId.1", &eni)],
    );
    assert_eq!(
        v["NetworkInterfaceSets"]["NetworkInterfaceSet"][0]["Status"],
        "Attaching"
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (_, v) = r.call(
            "DescribeNetworkInterfaces",
            &[("NetworkInterfaceId.1", &eni)],
        );
        if v["NetworkInterfaceSets"]["NetworkInterfaceSet"][0]["Status"] == "InUse" {
            break;
        }
        assert!(Instant::now() < deadline, "never InUse");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (s, v) = r.call(
        "AssignPrivateIpAddresses",
        &[
            ("NetworkInterfaceId", &eni),
            ("SecondaryPrivateIpAddressCount", "2"),
        ],
    );
    assert_eq!(
        (s, v["Code"].as_str()),
        (403, Some("InvalidVSwitchId.IpNotEnough"))
    );
    let (s, v) = r.call(
        "AssignPrivateIpAddresses",
        &[
            ("NetworkInterfaceId", &eni),
            ("SecondaryPrivateIpAddressCount", "11"),
        ],
    );
    assert_eq!((s, v["Code"].as_str()), (400, Some("InvalidParameter")));
    let (_, v) = r.call(
        "DescribeNetworkInterfaces",
        &[("NetworkInterfaceId.1", &eni)],
    );
    let primary = v["NetworkInterfaceSets"]["NetworkInterfaceSet"][0]["PrivateIpAddress"]
        .as_str()
        .unwrap()
        .to_string();
    let (s, v) = r.call(
        "UnassignPrivateIpAddresses",
        &[
            ("NetworkInterfaceId", &eni),
            ("PrivateIpAddress.1", &primary),
        ],
    );
    assert_eq!(
        (s, v["Code"].as_str()),
        (403, Some("InvalidIp.IpUnassigned"))
    );
    let (s, v) = r.call("DeleteNetworkInterface", &[("NetworkInterfaceId", &eni)]);
    assert_eq!(
        (s, v["Code"].as_str()),
        (400, Some("InvalidOperation.InvalidEniState"))
    );
    assert!(v["Message"]
        .as_str()
        .unwrap()
        .contains("Expecting status is \"Available\" while current status is \"InUse\""));
    let primary_eni = sim.state()["enis"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] != eni.as_str())
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (s, v) = r.call(
        "DetachNetworkInterface",
        &[("NetworkInterfaceId", &primary_eni), ("InstanceId", &me)],
    );
    assert_eq!(
        (s, v["Code"].as_str()),
        (400, Some("InvalidOperation.DetachPrimaryEniNotAllowed"))
    );
    let (s, v) = r.call(
        "AttachNetworkInterface",
        &[("NetworkInterfaceId", "eni-nope"), ("InstanceId", &me)],
    );
    assert_eq!(
        (s, v["Code"].as_str()),
        (404, Some("InvalidEniId.NotFound"))
    );
    sim.shutdown();
}

#[test]
fn admin_faults_state_and_vswitch() {
    let sim = Simulator::start(SimOptions::default()).unwrap();
    let r = raw(&sim);
    let admin = |method: &str, path: &str, body: &str| {
        http(method, &format!("{}{path}", sim.ecs_url()), body)
    };
    let (s, body) = admin("GET", "/__sim/state", "");
    assert_eq!(s, 200);
    let st: Value = serde_json::from_str(&body).unwrap();
    for k in ["id", "type", "zone", "region", "primary_mac"] {
        assert!(st["instance"][k].is_string(), "instance.{k}");
    }
    let e = &st["enis"][0];
    for k in [
        "id",
        "mac",
        "status",
        "instance_id",
        "vswitch_id",
        "primary_ip",
    ] {
        assert!(e[k].is_string(), "eni.{k}");
    }
    assert!(e["private_ips"]
        .as_array()
        .unwrap()
        .contains(&e["primary_ip"]));
    assert!(e["ipv6s"].is_array() && e["tags"].is_object() && st["calls"].is_object());
    assert!(st["vswitches"][0]["free"].is_u64());

    let (s, _) = admin(
        "POST",
        "/__sim/faults",
        r#"{"action":"DescribeInstanceTypes","code":"InternalError","count":1}"#,
    );
    assert_eq!(s, 200);
    let (s, v) = r.call("DescribeInstanceTypes", &[]);
    assert_eq!((s, v["Code"].as_str()), (500, Some("InternalError")));
    assert_eq!(r.call("DescribeInstanceTypes", &[]).0, 200, "count 1 spent");
    admin(
        "POST",
        "/__sim/faults",
        r#"{"action":"*","code":"Throttling.User","probability":0.5}"#,
    );
    let refused = (0..40)
        .filter(|_| r.call("DescribeInstanceTypes", &[]).0 != 200)
        .count();
    assert!(
        (5..=35).contains(&refused),
        "probability 0.5 gave {refused}/40"
    );
    assert_eq!(admin("DELETE", "/__sim/faults", "").0, 200);
    assert_eq!(r.call("DescribeInstanceTypes", &[]).0, 200);
    assert_eq!(
        sim.state()["calls"]["DescribeInstanceTypes"]
            .as_u64()
            .unwrap(),
        43
    );
    assert_eq!(admin("POST", "/__sim/faults", "{not json").0, 400);
    assert_eq!(admin("POST", "/__sim/faults", r#"{"action":"*"}"#).0, 400);
    let vsw = first_vswitch(&st);
    assert_eq!(
        admin(
            "POST",
            "/__sim/vswitch",
            &format!(r#"{{"id":"{vsw}","free":7}}"#)
        )
        .0,
        200
    );
    assert_eq!(sim.state()["vswitches"][0]["free"], 7);
    assert_eq!(
        admin("POST", "/__sim/vswitch", r#"{"id":"vsw-none","free":7}"#).0,
        404
    );
    sim.shutdown();
}

#[test]
fn garbage_gets_4xx_and_the_emulator_keeps_serving() {
    let sim = Simulator::start(SimOptions::default()).unwrap();
    let addr = sim.ecs_url().trim_start_matches("http://").to_string();
    for junk in [
        &b"GET /?%zz HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"GET /?Action=DescribeInstanceTypes HTTP/1.1\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\n\xff\xfe\x00\x01",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 tls hello\r\n\r\n",
        b"GET /other HTTP/1.1\r\n\r\n",
        b"DELETE / HTTP/1.1\r\n\r\n",
    ] {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(junk).unwrap();
        let mut out = String::new();
        let mut line = String::new();
        let mut br = BufReader::new(&mut s);
        br.read_line(&mut line).unwrap();
        out.push_str(&line);
        assert!(out.starts_with("HTTP/1.1 4"), "{junk:?} -> {out}");
    }
    let r = raw(&sim);
    let (s, v) = r.call("AssignPrivateIpAddresses", &[]);
    assert_eq!((s, v["Code"].as_str()), (400, Some("MissingParameter")));
    let (s, v) = r.call("NoSuchAction", &[]);
    assert_eq!((s, v["Code"].as_str()), (404, Some("InvalidApi.NotFound")));
    let (s, v) = r.call("DescribeNetworkInterfaces", &[("MaxResults", "abc")]);
    assert_eq!((s, v["Code"].as_str()), (400, Some("InvalidParameter")));
    assert_eq!(r.call("DescribeInstanceTypes", &[]).0, 200);
    sim.shutdown();
}

#[test]
fn metadata_token_rules() {
    let sim = Simulator::start(SimOptions::default()).unwrap();
    let md = sim.metadata_url();
    let agent = http_agent();
    let put = |ttl: &str, xff: bool| {
        let mut r = agent
            .put(&format!("{md}/latest/api/token"))
            .header("X-aliyun-ecs-metadata-token-ttl-seconds", ttl);
        if xff {
            r = r.header("X-Forwarded-For", "1.2.3.4");
        }
        let mut resp = r.send_empty().unwrap();
        (
            resp.status().as_u16(),
            resp.body_mut().read_to_string().unwrap(),
        )
    };
    assert_eq!(put("0", false).0, 400);
    assert_eq!(put("21601", false).0, 400);
    assert_eq!(put("60", true).0, 403);
    let (s, token) = put("60", false);
    assert_eq!(s, 200);
    let get = |tok: Option<&str>, path: &str| {
        let mut r = agent.get(&format!("{md}/latest/meta-data/{path}"));
        if let Some(t) = tok {
            r = r.header("X-aliyun-ecs-metadata-token", t);
        }
        let mut resp = r.call().unwrap();
        (
            resp.status().as_u16(),
            resp.body_mut().read_to_string().unwrap(),
        )
    };
    assert_eq!(get(Some(&token), "instance-id"), (200, sim.instance_id()));
    assert_eq!(get(Some("bogus"), "instance-id").0, 401);
    assert_eq!(
        get(None, "instance-id").0,
        200,
        "plain mode allowed unless hardened"
    );
    assert_eq!(get(None, "no/such/item").0, 404);
    let (_, macs) = get(None, "network/interfaces/macs/");
    let mac = macs
        .lines()
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    let (s, ips) = get(
        None,
        &format!("network/interfaces/macs/{mac}/private-ipv4s"),
    );
    assert_eq!(s, 200);
    assert!(serde_json::from_str::<Vec<String>>(&ips).is_ok(), "{ips}");
    assert_eq!(
        get(None, &format!("network/interfaces/macs/{mac}/ipv6s")).0,
        404
    );
    assert_eq!(
        get(None, &format!("network/interfaces/macs/{mac}/gateway")).1,
        "192.168.3.253"
    );
    let (s, role) = get(None, "ram/security-credentials/");
    assert_eq!((s, role.as_str()), (200, "EniipdSimRole"));
    let (s, creds) = get(None, "ram/security-credentials/EniipdSimRole");
    assert_eq!(s, 200);
    let c: Value = serde_json::from_str(&creds).unwrap();
    assert_eq!(c["Code"], "Success");
    assert!(c["AccessKeyId"].as_str().unwrap().starts_with("STS."));
    sim.shutdown();
}

#[test]
fn the_binary_prints_the_ready_line_with_no_flags_and_stops_on_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_eniip-sim"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[0], "ready");
    assert!(words[1].starts_with("ecs=http://127.0.0.1:"), "{line}");
    assert!(words[2].starts_with("vpc=http://127.0.0.1:"), "{line}");
    assert!(words[3].starts_with("metadata=http://127.0.0.1:"), "{line}");
    assert!(
        words[4].starts_with("instance=i-") && words[5] == "region=cn-hangzhou",
        "{line}"
    );
    let md = words[3].trim_start_matches("metadata=");
    let id = ureq::get(&format!("{md}/latest/meta-data/instance-id"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    assert_eq!(format!("instance={id}"), words[4]);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let started = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            assert!(st.success());
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut rest = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut rest)
        .unwrap();
    assert_eq!(rest, "", "nothing but the ready line on stdout");
    let out = Command::new(env!("CARGO_BIN_EXE_eniip-sim"))
        .arg("--bogus")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(env!("CARGO_BIN_EXE_eniip-sim"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains(eniip_sim::DEFAULT_ACCESS_KEY_SECRET));
}

#[test]
fn deterministic_under_a_seed() {
    let a = Simulator::start(SimOptions {
        seed: Some(7),
        ..SimOptions::default()
    })
    .unwrap();
    let b = Simulator::start(SimOptions {
        seed: Some(7),
        ..SimOptions::default()
    })
    .unwrap();
    assert_eq!(a.instance_id(), b.instance_id());
    assert_eq!(a.state()["enis"], b.state()["enis"]);
    a.shutdown();
    b.shutdown();
}
