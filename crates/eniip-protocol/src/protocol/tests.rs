use super::*;

fn parse(s: &str) -> Result<ClientRequest, AllocError> {
    parse_request(s.as_bytes())
}

#[test]
fn commands_parse_case_insensitively() {
    assert_eq!(parse("PING").unwrap(), ClientRequest::Ping);
    assert_eq!(parse("Version\r").unwrap(), ClientRequest::Version);
    assert_eq!(
        parse("  status  ").unwrap(),
        ClientRequest::Command(Command::Status)
    );
    for name in ["help", "list", "enis", "audit", "metrics", "config", "quit"] {
        assert_eq!(parse(name).unwrap().name(), name);
    }
}

#[test]
fn alloc_arguments() {
    let r = parse("alloc default/web-1 sandbox=abc123 prefer=192.168.0.10").unwrap();
    assert_eq!(
        r,
        ClientRequest::Command(Command::Alloc {
            owner: Owner::parse("default/web-1").unwrap(),
            sandbox: Some(SandboxId::parse("abc123").unwrap()),
            prefer: Some("192.168.0.10".parse().unwrap()),
            attach: None,
            intent: Intent::default(),
        })
    );
    assert_eq!(parse(&r.to_line()).unwrap(), r);
    // eniip-cni's attachment: both keys, with a sandbox, checked.
    let r =
        parse("alloc eni/p sandbox=abc netns=/var/run/netns/cni-1 veth=enip0123456789a").unwrap();
    let ClientRequest::Command(Command::Alloc {
        attach: Some(a), ..
    }) = &r
    else {
        panic!("{r:?}");
    };
    assert_eq!(
        (a.netns.as_str(), a.veth.as_str()),
        ("/var/run/netns/cni-1", "enip0123456789a")
    );
    assert_eq!(parse(&r.to_line()).unwrap(), r);
    for bad in [
        "alloc eni/p netns=/var/run/netns/cni-1 veth=enip0123456789a",
        "alloc eni/p sandbox=abc netns=/var/run/netns/cni-1",
        "alloc eni/p sandbox=abc veth=enip0123456789a",
        "alloc eni/p sandbox=abc netns=relative veth=enip0123456789a",
        "alloc eni/p sandbox=abc netns=/x veth=eth0",
        "release eni/p sandbox=abc netns=/x veth=enip0123456789a",
    ] {
        assert!(parse(bad).is_err(), "{bad}");
    }
    assert!(parse("alloc a sandbox=x sandbox=y").is_err());
    assert!(parse("alloc a prefer=nope").is_err());
    assert!(parse("alloc a colour=blue").is_err());
    assert!(parse("alloc a extra").is_err());
    assert!(parse("release a prefer=10.0.0.1").is_err());
    assert!(parse("show a sandbox=x").is_err());
    assert!(parse("ping extra").is_err());
}

#[test]
fn alloc_carries_what_a_pod_asks() {
    let r =
        parse("alloc eniip/ns/db-0 sandbox=abc vswitch=vsw-bp1x9 ip-stick-time=600 ip-stack=ipv4")
            .unwrap();
    let ClientRequest::Command(Command::Alloc { intent, .. }) = &r else {
        panic!("{r:?}");
    };
    assert_eq!(
        intent,
        &Intent {
            vswitch: Some("vsw-bp1x9".into()),
            stick_s: Some(600),
            ipv4_only: true,
            security_groups: None,
        }
    );
    assert_eq!(parse(&r.to_line()).unwrap(), r);
    // Asking nothing writes nothing: an older eniipd reads the line.
    let plain = parse("alloc a sandbox=x").unwrap();
    assert_eq!(plain.to_line(), "alloc a sandbox=x");
    assert!(intent_args(&Intent::default()).is_empty());
    assert_eq!(
        parse("alloc a ip-stick-time=0").unwrap(),
        ClientRequest::Command(Command::Alloc {
            owner: Owner::parse("a").unwrap(),
            sandbox: None,
            prefer: None,
            attach: None,
            intent: Intent {
                stick_s: Some(0),
                ..Intent::default()
            },
        })
    );
    // A bad value is refused with a message that begins with the
    // argument (eniip-cni names the pod's annotation from it).
    for (bad, begins) in [
        ("alloc a vswitch=eni-1", "vswitch=eni-1 "),
        ("alloc a vswitch=vsw-", "vswitch=vsw- "),
        ("alloc a vswitch=vsw-ABC", "vswitch=vsw-ABC "),
        ("alloc a ip-stick-time=-1", "ip-stick-time=-1 "),
        ("alloc a ip-stick-time=+5", "ip-stick-time=+5 "),
        ("alloc a ip-stick-time=1.5", "ip-stick-time=1.5 "),
        ("alloc a ip-stick-time=604801", "ip-stick-time=604801 "),
        ("alloc a ip-stack=dual", "ip-stack=dual:"),
        ("alloc a ip-stack=IPv4", "ip-stack=IPv4:"),
        ("alloc a security-groups=", "security-groups=:"),
        (
            "alloc a security-groups=sg-a,,sg-b",
            "security-groups=sg-a,,sg-b:",
        ),
        ("alloc a security-groups=web", "security-groups=web:"),
        (
            "alloc a security-groups=sg-1,sg-2,sg-3,sg-4,sg-5,sg-6",
            "security-groups=sg-1,sg-2,sg-3,sg-4,sg-5,sg-6:",
        ),
    ] {
        let e = parse(bad).unwrap_err();
        assert_eq!(e.code, ErrCode::BadRequest, "{bad}");
        assert!(e.message.starts_with(begins), "{bad}: {e}");
    }
    assert!(parse("alloc a ip-stick-time=604800").is_ok());
    // Once each, and on alloc only.
    for bad in [
        "alloc a vswitch=vsw-a vswitch=vsw-b",
        "alloc a ip-stick-time=1 ip-stick-time=1",
        "alloc a ip-stack=ipv4 ip-stack=ipv4",
        "release a vswitch=vsw-a",
        "show a ip-stack=ipv4",
        "alloc a security-groups=sg-a security-groups=sg-a",
        "release a security-groups=sg-a",
    ] {
        let e = parse(bad).unwrap_err();
        assert!(e.message.starts_with("unexpected argument"), "{bad}: {e}");
    }
}

#[test]
fn keep_and_gc() {
    assert_eq!(
        parse("keep abc ns/pod-1").unwrap(),
        ClientRequest::Keep(vec!["abc".into(), "ns/pod-1".into()])
    );
    assert_eq!(parse("keep").unwrap_err().code, ErrCode::BadRequest);
    assert_eq!(parse("keep a|b").unwrap_err().code, ErrCode::BadRequest);
    assert_eq!(
        parse("GC owner-prefix=net1/").unwrap(),
        ClientRequest::Command(Command::Gc {
            owner_prefix: "net1/".into(),
            keep: Vec::new()
        })
    );
    assert_eq!(parse("gc").unwrap_err().code, ErrCode::BadRequest);
    assert_eq!(parse("gc net1/").unwrap_err().code, ErrCode::BadRequest);
    assert!(parse("gc owner-prefix=a owner-prefix=b").is_err());
    assert!(parse("keep x").unwrap().is_mutating());
    assert!(parse("gc owner-prefix=x").unwrap().is_mutating());
}

#[test]
fn owners_are_validated() {
    assert!(parse("alloc").is_err());
    assert!(parse("alloc ns/name:80@x_y-z.w").is_ok());
    assert_eq!(parse("alloc a|b").unwrap_err().code, ErrCode::BadRequest);
    assert_eq!(parse("alloc é").unwrap_err().code, ErrCode::BadRequest);
    let long = "a".repeat(256);
    assert_eq!(
        parse(&format!("alloc {long}")).unwrap_err().code,
        ErrCode::BadRequest
    );
    assert!(parse(&format!("alloc {}", "a".repeat(255))).is_ok());
}

#[test]
fn garbage_is_refused_not_panicked() {
    assert_eq!(
        parse_request(&[0xff, 0xfe]).unwrap_err().code,
        ErrCode::BadRequest
    );
    assert_eq!(
        parse_request(b"ping\x00").unwrap_err().code,
        ErrCode::BadRequest
    );
    assert_eq!(parse_request(b"").unwrap_err().code, ErrCode::BadRequest);
    assert_eq!(
        parse("frobnicate").unwrap_err().code,
        ErrCode::UnknownCommand
    );
    let long = vec![b'a'; MAX_LINE + 1];
    assert_eq!(parse_request(&long).unwrap_err().code, ErrCode::LineTooLong);
}

#[test]
fn replies_render_with_one_final_line() {
    let r = ClientReply::with_data(
        vec!["10.0.0.1 idle - eni-1".into(), "OK sneaky".into()],
        "2",
    );
    let text = r.render();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines.iter().filter(|l| is_final_line(l)).count(), 1);
    assert_eq!(lines[2], "OK 2");
    let e = ClientReply::err(AllocError::new(ErrCode::Cloud, "Throttling.User too\nmany"));
    assert_eq!(e.render(), "ERR cloud Throttling.User too many\n");
    let c = ClientReply::err(AllocError::cloud(
        ErrCode::Cloud,
        "Throttling.User",
        "Request was denied due to user flow control.",
    ));
    assert_eq!(
        c.render(),
        "ERR cloud Throttling.User Request was denied due to user flow control.\n"
    );
    assert_eq!(ClientReply::ok("").render(), "OK\n");
    assert_eq!(
        ClientReply::err(AllocError::bare(ErrCode::NotFound)).render(),
        "ERR not-found\n"
    );
}

/// An ENI as `eni` answers it, without IPv6.
pub(super) fn eni_abc() -> EniInfo {
    EniInfo {
        eni: "eni-abc".into(),
        mac: "00:16:3e:00:00:01".into(),
        vswitch: "vsw-1".into(),
        cidr: "192.168.0.0/22".into(),
        gateway: "192.168.3.253".parse().unwrap(),
        v6: None,
    }
}

#[test]
fn eni_takes_one_cloud_id_and_renders_v6_only_when_known() {
    assert_eq!(
        parse("ENI eni-bp1abc").unwrap(),
        ClientRequest::Command(Command::Eni {
            eni: "eni-bp1abc".into()
        })
    );
    let r = parse("eni eni-1").unwrap();
    assert_eq!(parse(&r.to_line()).unwrap(), r);
    assert!(!r.is_mutating());
    for bad in ["eni", "eni a b", "eni eni/1", "eni eni_1", "eni x=1"] {
        assert_eq!(parse(bad).unwrap_err().code, ErrCode::BadRequest, "{bad}");
    }
    assert_eq!(
        parse(&format!("eni {}", "e".repeat(65))).unwrap_err().code,
        ErrCode::BadRequest
    );

    let mut e = eni_abc();
    let reply = answer_reply(Ok(Answer::Eni(e.clone()))).render();
    assert_eq!(
        reply,
        "OK eni=eni-abc mac=00:16:3e:00:00:01 vswitch=vsw-1 cidr=192.168.0.0/22 gateway=192.168.3.253\n"
    );
    assert_eq!(reply::parse_eni(&eni_text(&e)), Ok(e.clone()));
    e.v6 = Some((
        "2408:4005:3ff:5100::/64".into(),
        "2408:4005:3ff:5100:ffff:ffff:ffff:fff7".parse().unwrap(),
    ));
    let t = eni_text(&e);
    assert!(
        t.ends_with(
            " cidr6=2408:4005:3ff:5100::/64 gateway6=2408:4005:3ff:5100:ffff:ffff:ffff:fff7"
        ),
        "{t}"
    );
    assert_eq!(reply::parse_eni(&t), Ok(e.clone()));
    // A later field is skipped; a half of the IPv6 pair is no pair.
    assert_eq!(reply::parse_eni(&format!("{t} zone=x")), Ok(e.clone()));
    let half = t.split(" gateway6=").next().unwrap();
    assert_eq!(reply::parse_eni(half).unwrap().v6, None);
    let err = reply::parse_eni("eni=eni-1 mac=m").unwrap_err();
    assert_eq!(err.to_string(), "no vswitch=");
}

#[test]
fn final_line_detection() {
    assert!(is_final_line("OK"));
    assert!(is_final_line("OK pong"));
    assert!(is_final_line("ERR busy"));
    assert!(!is_final_line("OKAY"));
    assert!(!is_final_line("ERRORS 1"));
    assert!(!is_final_line(" OK"));
}

#[test]
fn gc_lines_name_the_host_end_when_one_was_recorded() {
    let collected = |veth: Option<&str>, sandbox: Option<&str>| crate::core::Collected {
        ip: "10.0.0.14".parse().unwrap(),
        owner: Owner::parse("batch/job-7").unwrap(),
        sandbox: sandbox.map(|s| SandboxId::parse(s).unwrap()),
        veth: veth.map(String::from),
    };
    let r = answer_reply(Ok(Answer::Collected(vec![
        collected(None, None),
        collected(Some("enip0123456789a"), Some("abc")),
    ])));
    assert_eq!(
        r.render(),
        "10.0.0.14 batch/job-7 -\n10.0.0.14 batch/job-7 abc veth=enip0123456789a\nOK released=2\n"
    );
}

#[test]
fn an_ipv4_only_allocation_is_answered_without_its_ipv6_or_its_prefix() {
    let mut a = Allocation {
        owner: Owner::parse("ns/v4").unwrap(),
        sandbox: None,
        ip: "192.168.0.9".parse().unwrap(),
        ipv6: Some("2408:4005:3ff:5100:1::9".parse().unwrap()),
        ipv6_prefix: Some("2408:4005:3ff:5100:1::/80".parse().unwrap()),
        eni: "eni-abc".into(),
        since_ms: 1,
        gen: crate::core::Generation::NONE,
        attach: None,
        intent: Intent::default(),
    };
    let both = allocation_text(&a, &eni_abc());
    assert!(
        both.contains(" ipv6=2408:4005:3ff:5100:1::9 ipv6prefix=2408:4005:3ff:5100:1::/80 "),
        "{both}"
    );
    a.intent.ipv4_only = true;
    let only4 = allocation_text(&a, &eni_abc());
    assert!(!only4.contains("ipv6"), "{only4}");
}

#[test]
fn a_mistyped_command_is_told_the_one_it_likely_meant() {
    for (typed, meant) in [
        ("stauts", Some("status")),
        ("lsit", Some("list")),
        ("alloc", Some("alloc")),
        ("frobnicate", None),
    ] {
        assert_eq!(super::did_you_mean(typed), meant, "{typed}");
    }
    let e = parse_request(b"STAUTS").unwrap_err();
    assert!(e.to_string().contains("did you mean status?"), "{e}");
}

#[test]
fn alloc_carries_a_security_group_set_canonical_on_the_wire() {
    let r = parse("alloc ns/web-0 sandbox=s1 security-groups=sg-b,sg-a,sg-b").unwrap();
    let ClientRequest::Command(Command::Alloc { intent, .. }) = &r else {
        panic!("{r:?}");
    };
    let set = intent.security_groups.clone().unwrap();
    assert_eq!(set.ids(), ["sg-a", "sg-b"]);
    assert_eq!(
        r.to_line(),
        "alloc ns/web-0 sandbox=s1 security-groups=sg-a,sg-b"
    );
    assert_eq!(
        intent_args(intent),
        vec!["security-groups=sg-a,sg-b".to_string()]
    );
    assert_eq!(parse(&r.to_line()).unwrap(), r);
    // An unknown argument is refused as before: what an older eniipd
    // answers a pod that asks security groups.
    let e = parse("alloc a security-group=sg-a").unwrap_err();
    assert!(
        e.message
            .starts_with("unexpected argument security-group=sg-a"),
        "{e}"
    );
}

#[test]
fn capacity_drain_and_undrain_parse_and_render() {
    assert_eq!(
        parse("capacity").unwrap(),
        ClientRequest::Command(Command::Capacity)
    );
    let drain = parse("DRAIN").unwrap();
    assert_eq!(drain, ClientRequest::Command(Command::Drain(true)));
    assert!(drain.is_mutating(), "drain needs alloc's access");
    let undrain = parse("undrain").unwrap();
    assert_eq!(undrain.name(), "undrain");
    assert!(undrain.is_mutating());
    assert_eq!(parse(&undrain.to_line()).unwrap(), undrain);
    assert!(!parse("capacity").unwrap().is_mutating());
    assert!(parse("drain now").is_err());
    assert_eq!(
        answer_reply(Ok(Answer::Draining(true))).render(),
        "OK draining=yes\n"
    );
    assert_eq!(
        answer_reply(Ok(Answer::Draining(false))).render(),
        "OK draining=no\n"
    );
    let lines = answer_reply(Ok(Answer::Capacity(vec![
        crate::core::CeilingUse {
            ceiling: crate::core::Ceiling::EniSlots,
            used: 9,
            limit: 12,
            rate_milli_per_min: 3000,
            forecast_s: Some(60),
        },
        crate::core::CeilingUse {
            ceiling: crate::core::Ceiling::VSwitch("vsw-a".into()),
            used: 5,
            limit: 1020,
            rate_milli_per_min: -250,
            forecast_s: None,
        },
    ])))
    .render();
    assert_eq!(
        lines,
        "eni_slots used=9 limit=12 rate_per_min=3.00 forecast_s=60\n\
         vswitch vswitch=vsw-a used=5 limit=1020 rate_per_min=-0.25 forecast_s=none\n\
         OK 2\n"
    );
    // The refusals: the ceiling first, the one way every caller makes it.
    let e = AllocError::exhausted(&crate::core::Ceiling::VSwitch("vsw-a".into()), "out");
    assert_eq!(
        ClientReply::err(e).render(),
        "ERR exhausted vswitch vsw-a: out\n"
    );
    assert!(ClientReply::err(AllocError::draining())
        .render()
        .starts_with("ERR draining this node is draining"));
}
