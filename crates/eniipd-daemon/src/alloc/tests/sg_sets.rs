//! Security groups per pod against the in-process fake cloud: ENIs by
//! set, the ceiling, re-purposing, changes out of band, restarts.

use super::*;
use eniip_protocol::core::SecurityGroupSet;

fn set(s: &str) -> SecurityGroupSet {
    SecurityGroupSet::parse(s).unwrap()
}

fn asking(s: &str) -> Intent {
    Intent {
        security_groups: Some(set(s)),
        ..Intent::default()
    }
}

/// 3 usable ENIs of 10 addresses, sets a to d allowed, no warm pool.
fn three_slots() -> (Arc<FakeCloud>, AllocatorOptions) {
    let fake = FakeCloud::new(4, 10, 1000);
    let o = options(
        &fake,
        r#"{"pod_security_groups": ["sg-a", "sg-b", "sg-c", "sg-d"], "min_pool_size": 0, "max_pool_size": 30}"#,
    );
    (fake, o)
}

fn sgs_of(fake: &FakeCloud, eni: &str) -> Vec<String> {
    let mut g = fake
        .enis()
        .into_iter()
        .find(|e| e.id == eni)
        .map(|e| e.sgs)
        .unwrap_or_default();
    g.sort();
    g
}

#[test]
fn each_set_has_its_own_enis_the_fourth_is_refused_then_one_is_repurposed() {
    let (fake, o) = three_slots();
    let (a, journal) = start(&fake, o);
    let mut eni_of = BTreeMap::new();
    for s in ["a", "b", "c"] {
        let got = a
            .alloc_asking(&owner(&format!("p-{s}")), None, asking(&format!("sg-{s}")))
            .unwrap();
        assert_eq!(sgs_of(&fake, &got.eni), [format!("sg-{s}")], "{got:?}");
        assert_eq!(got.intent.security_groups, Some(set(&format!("sg-{s}"))));
        eni_of.insert(s, got.eni);
    }
    let distinct: BTreeSet<&String> = eni_of.values().collect();
    assert_eq!(distinct.len(), 3, "one ENI per set: {eni_of:?}");
    // A second pod of a set is served from its set's ENI.
    let again = a
        .alloc_asking(&owner("p-a2"), None, asking("sg-a"))
        .unwrap();
    assert_eq!(again.eni, eni_of["a"]);
    // A pod asking nothing gets the node's own set: no ENI slot is left
    // and every ENI holds an owner.
    let e = a.alloc(&owner("plain"), None, None).unwrap_err();
    assert_eq!(e.code, ErrCode::Exhausted, "{e}");
    let e = a
        .alloc_asking(&owner("p-d"), None, asking("sg-d"))
        .unwrap_err();
    assert_eq!(e.code, ErrCode::Exhausted, "{e}");
    assert!(
        e.message
            .starts_with("eni_slots: 3 of 3 ENIs serve other security-group sets"),
        "{e}"
    );
    // Once set c's pod is gone, its ENI is re-purposed for d: one modify,
    // no delete, no create.
    let creates = fake.calls("CreateNetworkInterface");
    a.release(&owner("p-c"), None).unwrap();
    let got = a.alloc_asking(&owner("p-d"), None, asking("sg-d")).unwrap();
    assert_eq!(got.eni, eni_of["c"]);
    assert_eq!(sgs_of(&fake, &got.eni), ["sg-d"]);
    assert_eq!(fake.calls("ModifyNetworkInterfaceAttribute"), 1);
    assert_eq!(fake.calls("DeleteNetworkInterface"), 0);
    assert_eq!(fake.calls("CreateNetworkInterface"), creates);
    let enis = a.enis().unwrap();
    let row = enis.iter().find(|e| e.eni == got.eni).unwrap();
    assert_eq!(row.security_groups, Some(set("sg-d")));
    assert!(a.audit().unwrap().is_empty(), "{:?}", a.audit());
    // Durable: the ENI's set and the owner's.
    let st = journal.state.lock();
    assert_eq!(st.eni_sets[&got.eni], ["sg-d"]);
    assert_eq!(
        st.allocations["p-d"].asked.security_groups,
        Some(vec!["sg-d".to_string()])
    );
    drop(st);
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn asks_are_checked_against_pod_security_groups() {
    let (fake, o) = three_slots();
    let (a, _j) = start(&fake, o);
    let e = a
        .alloc_asking(&owner("x"), None, asking("sg-a,sg-zz"))
        .unwrap_err();
    assert_eq!(e.code, ErrCode::BadRequest);
    assert!(e.message.contains("sg-zz"), "{e}");
    assert_eq!(fake.calls("CreateNetworkInterface"), 0, "nothing changed");
    // The node's own set asked explicitly is the node's own.
    let fake2 = FakeCloud::new(4, 10, 1000);
    let (b, _j2) = start(&fake2, options(&fake2, "{}"));
    let e = b
        .alloc_asking(&owner("y"), None, asking("sg-a"))
        .unwrap_err();
    assert!(e.message.contains("pod_security_groups"), "{e}");
    let own = b.alloc_asking(&owner("y"), None, asking("sg-1")).unwrap();
    assert_eq!(own.intent.security_groups, None);
    assert_eq!(sgs_of(&fake2, &own.eni), ["sg-1"]);
    a.shutdown(Instant::now() + Duration::from_secs(5));
    b.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn a_set_changed_out_of_band_serves_no_new_owner_and_audit_names_it() {
    let (fake, mut o) = three_slots();
    o.pool_check_interval = Duration::from_millis(100);
    let (a, _j) = start(&fake, o);
    let first = a.alloc_asking(&owner("a-0"), None, asking("sg-a")).unwrap();
    let eni = first.eni.clone();
    // Idle addresses of its own on it, for the next owners to want.
    for i in 1..4 {
        let o = owner(&format!("tmp-{i}"));
        assert_eq!(a.alloc_asking(&o, None, asking("sg-a")).unwrap().eni, eni);
        a.release(&o, None).unwrap();
    }
    fake.set_eni_security_groups(&eni, &["sg-b".to_string()])
        .unwrap();
    assert!(
        eventually(Duration::from_secs(5), || {
            a.enis()
                .unwrap()
                .iter()
                .any(|e| e.eni == eni && e.security_groups_cloud.is_some())
        }),
        "{:?}",
        a.enis()
    );
    let lines = a.audit().unwrap();
    assert!(lines.iter().any(|l| l.contains(&eni)), "{lines:?}");
    // Neither a pod of the set it was given nor one of the set it shows
    // gets its addresses; its owner keeps its own.
    for (o, s) in [("a-1", "sg-a"), ("b-1", "sg-b")] {
        let got = a.alloc_asking(&owner(o), None, asking(s)).unwrap();
        assert_ne!(got.eni, eni, "{o}");
    }
    assert_eq!(a.show(&owner("a-0")).unwrap().ip, first.ip);
    // Set back: it serves its set again, and audit is clean.
    fake.set_eni_security_groups(&eni, &["sg-a".to_string()])
        .unwrap();
    assert!(eventually(Duration::from_secs(5), || {
        a.enis()
            .unwrap()
            .iter()
            .any(|e| e.eni == eni && e.security_groups_cloud.is_none())
    }));
    assert!(a.audit().unwrap().is_empty(), "{:?}", a.audit());
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn a_restart_keeps_each_enis_set_and_checks_it_against_the_cloud() {
    let (fake, o) = three_slots();
    let (a, journal) = start(&fake, o.clone());
    let got_a = a.alloc_asking(&owner("a-0"), None, asking("sg-a")).unwrap();
    let got_b = a.alloc_asking(&owner("b-0"), None, asking("sg-b")).unwrap();
    for i in 1..4 {
        let o = owner(&format!("tmp-{i}"));
        assert_eq!(
            a.alloc_asking(&o, None, asking("sg-b")).unwrap().eni,
            got_b.eni
        );
        a.release(&o, None).unwrap();
    }
    a.shutdown(Instant::now() + Duration::from_secs(5));
    let persisted = journal.state.lock().clone();
    // Out of band while it was down.
    fake.set_eni_security_groups(&got_b.eni, &["sg-c".to_string()])
        .unwrap();
    let r = recover(&*fake, INSTANCE, "", false, &persisted, None).unwrap();
    let (b, _j) = start_with(&fake, o, r.pool);
    assert_eq!(b.show(&owner("a-0")).unwrap().eni, got_a.eni);
    assert_eq!(
        b.show(&owner("a-0")).unwrap().intent.security_groups,
        Some(set("sg-a"))
    );
    assert_eq!(b.show(&owner("b-0")).unwrap().ip, got_b.ip);
    let a1 = b.alloc_asking(&owner("a-1"), None, asking("sg-a")).unwrap();
    assert_eq!(a1.eni, got_a.eni, "its set's ENI, warm");
    let b1 = b.alloc_asking(&owner("b-1"), None, asking("sg-b")).unwrap();
    assert_ne!(b1.eni, got_b.eni, "changed out of band: serves nobody new");
    let lines = b.audit().unwrap();
    assert!(lines.iter().any(|l| l.contains(&got_b.eni)), "{lines:?}");
    b.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn a_burst_over_three_sets_costs_one_create_per_set_and_full_batches() {
    let fake = FakeCloud::new(8, 30, 1000);
    let mut o = options(
        &fake,
        r#"{"pod_security_groups": ["sg-a", "sg-b", "sg-c"], "min_pool_size": 0, "max_pool_size": 60}"#,
    );
    // The burst is one when its requests come within one aggregation
    // window: the product's 300 ms (the tests' 50 ms is shorter than 60
    // thread starts under qemu-user), the requests let go together.
    o.aggregation_window = Duration::from_millis(300);
    let (a, journal) = start(&fake, o);
    let go = std::sync::Barrier::new(60);
    let got: Vec<Result<Allocation, AllocError>> = std::thread::scope(|s| {
        let (a, go) = (&a, &go);
        let handles: Vec<_> = (0..60)
            .map(|i| {
                let sg = ["sg-a", "sg-b", "sg-c"][i % 3];
                s.spawn(move || {
                    go.wait();
                    a.alloc_asking(&owner(&format!("p-{i}")), None, asking(sg))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, g) in got.iter().enumerate() {
        let g = g.as_ref().unwrap();
        let sg = ["sg-a", "sg-b", "sg-c"][i % 3];
        assert_eq!(sgs_of(&fake, &g.eni), [sg], "p-{i}");
    }
    assert_no_double_hand(&journal);
    let calls = fake.calls("CreateNetworkInterface") + fake.calls("AssignPrivateIpAddresses");
    // 60 addresses, 10 a call: 6 calls at best; one create per set.
    assert!(calls <= 6 + 3, "{calls} calls: {:?}", fake.log());
    assert_eq!(fake.calls("CreateNetworkInterface"), 3, "{:?}", fake.log());
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn each_set_in_use_keeps_its_own_warm_pool() {
    let fake = FakeCloud::new(8, 30, 1000);
    let o = options(
        &fake,
        r#"{"pod_security_groups": ["sg-a", "sg-b"], "min_pool_size": 3, "max_pool_size": 30}"#,
    );
    let (a, _j) = start(&fake, o);
    let first = a.alloc_asking(&owner("a-0"), None, asking("sg-a")).unwrap();
    let idle_on = |eni: &str| {
        fake.enis()
            .into_iter()
            .find(|e| e.id == eni)
            .map_or(0, |e| e.v4.len())
    };
    // The set's own ENI holds its owner and 3 idle addresses beside it.
    assert!(
        eventually(Duration::from_secs(5), || idle_on(&first.eni) > 3),
        "{:?}",
        fake.enis()
    );
    let calls = fake.calls("AssignPrivateIpAddresses") + fake.calls("CreateNetworkInterface");
    for i in 1..3 {
        let got = a
            .alloc_asking(&owner(&format!("a-{i}")), None, asking("sg-a"))
            .unwrap();
        assert_eq!(got.eni, first.eni, "warm, from its set's ENI");
    }
    let after = fake.calls("AssignPrivateIpAddresses") + fake.calls("CreateNetworkInterface");
    assert!(after <= calls + 1, "served warm: {calls} -> {after} calls");
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn a_set_with_no_owner_for_sg_set_idle_s_gives_its_eni_back() {
    let fake = FakeCloud::new(4, 10, 1000);
    let mut o = options(
        &fake,
        r#"{"pod_security_groups": ["sg-a"], "min_pool_size": 0, "max_pool_size": 30, "sg_set_idle_s": 0}"#,
    );
    o.pool_check_interval = Duration::from_millis(100);
    let (a, _j) = start(&fake, o);
    let got = a.alloc_asking(&owner("a-0"), None, asking("sg-a")).unwrap();
    let plain = a.alloc(&owner("plain"), None, None).unwrap();
    let exists = |id: &str| fake.enis().iter().any(|e| e.id == id);
    assert!(exists(&got.eni));
    a.release(&owner("a-0"), None).unwrap();
    a.release(&owner("plain"), None).unwrap();
    assert!(
        eventually(Duration::from_secs(5), || !exists(&got.eni)),
        "{:?}",
        fake.log()
    );
    // The node's own set is not one that idles away.
    assert!(exists(&plain.eni), "{:?}", fake.log());
    a.shutdown(Instant::now() + Duration::from_secs(5));
}
