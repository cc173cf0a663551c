use super::*;
use proptest::prelude::*;

fn id() -> impl Strategy<Value = String> {
    "[A-Za-z0-9._:@/-]{1,40}"
}

fn intent() -> impl Strategy<Value = Intent> {
    (
        proptest::option::of("vsw-[a-z0-9]{1,30}"),
        proptest::option::of(0..=MAX_STICK_S),
        any::<bool>(),
        proptest::option::of(proptest::collection::vec("sg-[a-z0-9]{1,20}", 1..8)),
    )
        .prop_map(|(vswitch, stick_s, ipv4_only, sgs)| Intent {
            vswitch,
            stick_s,
            ipv4_only,
            // At most 5 distinct: a longer list keeps its first 5.
            security_groups: sgs.map(|mut l| {
                l.sort();
                l.dedup();
                l.truncate(crate::core::MAX_SECURITY_GROUPS);
                crate::core::SecurityGroupSet::from_ids(l.iter().map(String::as_str)).unwrap()
            }),
        })
}

fn request() -> impl Strategy<Value = ClientRequest> {
    prop_oneof![
        Just(ClientRequest::Ping),
        Just(ClientRequest::Command(Command::Status)),
        Just(ClientRequest::Command(Command::List)),
        Just(ClientRequest::Quit),
        proptest::collection::vec(id(), 1..5).prop_map(ClientRequest::Keep),
        id().prop_map(|p| ClientRequest::Command(Command::Gc {
            owner_prefix: p,
            keep: Vec::new()
        })),
        (
            id(),
            proptest::option::of(id()),
            proptest::option::of(any::<[u8; 4]>()),
            intent(),
        )
            .prop_map(|(o, s, p, intent)| ClientRequest::Command(Command::Alloc {
                owner: Owner::parse(&o).unwrap(),
                sandbox: s.map(|s| SandboxId::parse(&s).unwrap()),
                prefer: p.map(|b| IpAddr::V4(std::net::Ipv4Addr::from(b))),
                attach: None,
                intent,
            })),
        (
            id(),
            proptest::option::of(id()),
            proptest::option::of(1u64..)
        )
            .prop_map(|(o, s, g)| ClientRequest::Command(Command::Release {
                owner: Owner::parse(&o).unwrap(),
                sandbox: s.map(|s| SandboxId::parse(&s).unwrap()),
                gen: g.map(crate::core::Generation::from_u64),
            })),
        id().prop_map(|o| ClientRequest::Command(Command::Show {
            owner: Owner::parse(&o).unwrap()
        })),
        "eni-[a-z0-9]{1,20}".prop_map(|eni| ClientRequest::Command(Command::Eni { eni })),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Any bytes: a request or an error, never a panic; errors render
    /// as exactly one final line.
    #[test]
    fn never_panics_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..5000)) {
        match parse_request(&bytes) {
            Ok(r) => prop_assert!(parse_request(r.to_line().as_bytes()).is_ok()),
            Err(e) => {
                let text = ClientReply::err(e).render();
                prop_assert_eq!(text.matches('\n').count(), 1);
                prop_assert!(text.starts_with("ERR "));
            }
        }
    }

    /// Printable lines too (closer to what parses).
    #[test]
    fn never_panics_on_text(line in "[ -~]{0,300}") {
        let _ = parse_request(line.as_bytes());
    }

    /// Rendering a request and parsing it gives it back.
    #[test]
    fn round_trip(r in request()) {
        prop_assert_eq!(parse_request(r.to_line().as_bytes()).unwrap(), r);
    }

    /// Whatever the data, a reply has exactly one final line, last.
    #[test]
    fn replies_are_framed(data in proptest::collection::vec("[ -~\n\r\t]{0,60}", 0..8), ok in any::<bool>(), text in "[ -~\n]{0,40}") {
        let outcome = if ok { Ok(text) } else { Err(AllocError::new(ErrCode::Cloud, text)) };
        let rendered = ClientReply { data, outcome }.render();
        let lines: Vec<&str> = rendered.split_terminator('\n').collect();
        prop_assert_eq!(lines.iter().filter(|l| is_final_line(l)).count(), 1);
        prop_assert!(is_final_line(lines.last().unwrap()));
    }

    /// A rendered reply, read back by the client's framer, is the same
    /// data and outcome.
    #[test]
    fn rendered_replies_read_back(data in proptest::collection::vec("[ -~]{0,60}", 0..8), ok in any::<bool>(), text in "[!-~][ -~]{0,40}") {
        let outcome = if ok { Ok(text.trim().to_string()) } else { Err(AllocError::new(ErrCode::Busy, text.trim())) };
        let sent = ClientReply { data, outcome };
        let mut framer = reply::Framer::default();
        let mut got = None;
        for line in sent.render().split_inclusive('\n') {
            prop_assert!(got.is_none(), "a line after the final one");
            got = framer.push(line).unwrap();
        }
        let got = got.unwrap();
        prop_assert_eq!(got.data().len(), sent.data.len());
        match (&sent.outcome, got.outcome()) {
            (Ok(t), Ok(g)) => prop_assert_eq!(t.as_str(), g),
            (Err(e), Err(g)) => prop_assert_eq!((e.code.as_str(), e.message.as_str()), (g.code(), g.message())),
            (s, g) => prop_assert!(false, "sent {:?}, read {:?}", s, g),
        }
    }

    /// The reply parsers read any text without a panic.
    #[test]
    fn reply_parsers_never_panic(text in "[ -~]{0,200}") {
        let _ = reply::parse_allocation(&text);
        let _ = reply::parse_eni(&text);
        let _ = reply::parse_status(&text);
        let _ = reply::parse_released(&text);
        let _ = reply::parse_list_line(&text);
        let _ = reply::parse_eni_line(&text);
        let _ = reply::parse_collected_line(&text);
        let _ = reply::ErrReply::parse(&text);
        let _ = reply::Framer::default().push(&text);
    }
}
