//! Unit tests of the CNI contract's types: parsing, versions, results.

use super::*;

fn conf(s: &str) -> Result<NetConf, CniError> {
    NetConf::parse(s.as_bytes(), Command::Add)
}

#[test]
fn a_minimal_config_takes_the_defaults() {
    let c = conf(r#"{"cniVersion":"1.0.0","name":"eni","type":"eniip-cni"}"#).unwrap();
    assert_eq!(c.socket, PathBuf::from(DEFAULT_SOCKET));
    assert_eq!(c.mtu, 1500);
    assert_eq!(c.name, "eni");
}

#[test]
fn errors_name_the_key() {
    for (json, key, code_) in [
        (
            r#"{"cniVersion":"1.0.0","name":"e","mtu":"x"}"#,
            "mtu",
            code::INVALID_CONFIG,
        ),
        (
            r#"{"cniVersion":"1.0.0","name":"e","mtu":100}"#,
            "mtu",
            code::INVALID_CONFIG,
        ),
        (
            r#"{"cniVersion":"1.0.0","name":"e","socket":"rel"}"#,
            "socket",
            code::INVALID_CONFIG,
        ),
        (
            r#"{"cniVersion":"1.0.0","name":"a/b"}"#,
            "name",
            code::INVALID_CONFIG,
        ),
        (r#"{"cniVersion":"1.0.0"}"#, "name", code::INVALID_CONFIG),
        (r#"{"name":"e"}"#, "cniVersion", code::INVALID_CONFIG),
        (
            r#"{"cniVersion":"0.3.1","name":"e"}"#,
            "cniVersion",
            code::INCOMPATIBLE_VERSION,
        ),
        (
            r#"{"cniVersion":"1.2.0","name":"e"}"#,
            "cniVersion",
            code::INCOMPATIBLE_VERSION,
        ),
        (
            r#"{"cniVersion":"1.0.0","name":"e","dns":3}"#,
            "dns",
            code::INVALID_CONFIG,
        ),
    ] {
        let e = conf(json).unwrap_err();
        assert_eq!(e.code, code_, "{json}: {e}");
        assert!(e.msg.contains(key), "{json}: {e}");
    }
    let e = NetConf::parse(b"{not json", Command::Add).unwrap_err();
    assert_eq!(e.code, code::DECODE);
    let e = NetConf::parse(br#"{"cniVersion":"1.1.0","name":"e"}"#, Command::Gc).unwrap_err();
    assert!(e.msg.contains("cni.dev/valid-attachments"), "{e}");
    for v in ["0.4.0", "1.0.0"] {
        for cmd in [Command::Status, Command::Gc] {
            let json =
                format!(r#"{{"cniVersion":"{v}","name":"e","cni.dev/valid-attachments":[]}}"#);
            let e = NetConf::parse(json.as_bytes(), cmd).unwrap_err();
            assert_eq!(e.code, code::INCOMPATIBLE_VERSION, "{v} {cmd:?}: {e}");
        }
    }
}

#[test]
fn every_spoken_version_parses_with_cni_versions_alongside() {
    for v in SUPPORTED_VERSIONS {
        for cmd in [Command::Add, Command::Del, Command::Check] {
            let json = format!(
                r#"{{"cniVersion":"{v}","cniVersions":["0.4.0","1.0.0","1.1.0"],"name":"e"}}"#
            );
            let c = NetConf::parse(json.as_bytes(), cmd).unwrap();
            assert_eq!(c.cni_version, v);
        }
    }
}

fn result() -> CniResult {
    let ip = |a: &str| IpConfig {
        version: None,
        address: a.into(),
        gateway: None,
        interface: Some(1),
    };
    CniResult {
        cni_version: String::new(),
        interfaces: vec![],
        ips: vec![ip("192.168.0.7/32"), ip("2408:4005:3ff:5100::5/128")],
        routes: vec![],
        dns: Value::Null,
    }
}

#[test]
fn results_are_rendered_in_the_callers_version() {
    let r: Value = serde_json::to_value(result().for_version("0.4.0")).unwrap();
    assert_eq!(r["cniVersion"], "0.4.0");
    assert_eq!(r["ips"][0]["version"], "4");
    assert_eq!(r["ips"][1]["version"], "6");
    for v in ["1.0.0", "1.1.0"] {
        let r: Value = serde_json::to_value(result().for_version(v)).unwrap();
        assert_eq!(r["cniVersion"], v);
        assert!(r["ips"][0].get("version").is_none(), "{r}");
    }
    // A 0.4.0 prevResult gives its addresses like a 1.0.0 one.
    let prev = serde_json::to_value(result().for_version("0.4.0")).unwrap();
    assert_eq!(
        CniResult::ipv4_of(&prev),
        Some(Ipv4Addr::new(192, 168, 0, 7))
    );
    assert!(CniResult::ipv6_of(&prev).is_some());
}

#[test]
fn valid_attachments_parse() {
    let c = NetConf::parse(
        br#"{"cniVersion":"1.1.0","name":"e","cni.dev/valid-attachments":[{"containerID":"abc","ifname":"eth0"}]}"#,
        Command::Gc,
    )
    .unwrap();
    assert_eq!(
        c.valid_attachments,
        vec![Attachment {
            container_id: "abc".into(),
            ifname: "eth0".into()
        }]
    );
}

#[test]
fn env_and_cni_args() {
    let vars: HashMap<&str, &str> = [
        ("CNI_CONTAINERID", "c1"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_NETNS", "/run/netns/x"),
        (
            "CNI_ARGS",
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-1",
        ),
    ]
    .into_iter()
    .collect();
    let e = Env::from_vars(Command::Add, |k| vars.get(k).map(|s| s.to_string())).unwrap();
    assert_eq!(e.args["K8S_POD_NAME"], "web-1");
    assert_eq!(e.netns, Some(PathBuf::from("/run/netns/x")));
    let e = Env::from_vars(Command::Add, |k| {
        (k != "CNI_NETNS")
            .then(|| vars.get(k).map(|s| s.to_string()))
            .flatten()
    })
    .unwrap_err();
    assert_eq!(e.code, code::INVALID_ENV);
    // DEL works without a netns (it may be gone).
    assert!(Env::from_vars(Command::Del, |k| {
        (k != "CNI_NETNS")
            .then(|| vars.get(k).map(|s| s.to_string()))
            .flatten()
    })
    .is_ok());
}

#[test]
fn previous_results_give_their_address() {
    let v: Value = serde_json::from_str(
        r#"{"ips":[{"address":"192.168.0.7/32","gateway":"169.254.1.1","interface":1}]}"#,
    )
    .unwrap();
    assert_eq!(CniResult::ipv4_of(&v), Some(Ipv4Addr::new(192, 168, 0, 7)));
    assert_eq!(CniResult::ipv6_of(&v), None);
    let v: Value = serde_json::from_str(
        r#"{"ips":[{"address":"2408:4005:3ff:5100::5/128","gateway":"fe80::1"},
                   {"address":"192.168.0.7/32","gateway":"169.254.1.1"}]}"#,
    )
    .unwrap();
    assert_eq!(CniResult::ipv4_of(&v), Some(Ipv4Addr::new(192, 168, 0, 7)));
    assert_eq!(
        CniResult::ipv6_of(&v),
        Some("2408:4005:3ff:5100::5".parse().unwrap())
    );
}

#[test]
fn interface_names_the_kernel_would_refuse_are_refused_first() {
    for bad in [
        "",
        ".",
        "..",
        "a/b",
        "eth:0",
        "eth\t0",
        "eth\n0",
        "eth 0",
        "e\u{0}",
        "x".repeat(16).as_str(),
    ] {
        assert!(!valid_ifname(bad), "{bad:?}");
        let vars: HashMap<&str, &str> = [
            ("CNI_CONTAINERID", "c1"),
            ("CNI_IFNAME", bad),
            ("CNI_NETNS", "/run/netns/x"),
        ]
        .into_iter()
        .collect();
        for cmd in [Command::Add, Command::Del, Command::Check] {
            let r = Env::from_vars(cmd, |k| vars.get(k).map(|s| s.to_string()));
            // An empty name is "not set"; every other one is named.
            let e = r.unwrap_err();
            assert_eq!(e.code, code::INVALID_ENV, "{bad:?} {e}");
        }
    }
    for good in ["eth0", "net1", "x".repeat(15).as_str(), "e-1.2_x"] {
        assert!(valid_ifname(good), "{good:?}");
    }
}
