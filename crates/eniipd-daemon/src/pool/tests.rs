use super::shrink::{freeable_enis, invalid_to_release, prefix_candidates, shed_candidates};
use super::views::{counts, list};
use std::net::{IpAddr, Ipv4Addr};

use super::choose::pick;
use super::{HoldTimes, PoolState, ReleaseOutcome};
use eniip_cloud::Ipv4Prefix;
use eniip_protocol::core::{Allocation, EniInfo, Intent, Owner, SandboxId};

/// The node's stick time and cool-down (ms); an owner's own stick time
/// may be up to an hour.
fn times(stick_ms: u64, cool_ms: u64) -> HoldTimes {
    HoldTimes {
        stick_ms,
        max_stick_ms: 3_600_000,
        cool_ms,
    }
}

fn add_eni(p: &mut PoolState, id: &str, primary: &str) {
    add_eni_on(p, id, primary, "vsw-1");
}

fn add_eni_on(p: &mut PoolState, id: &str, primary: &str, vswitch: &str) {
    p.add_eni(
        EniInfo {
            eni: id.into(),
            mac: format!("00:16:3e:00:00:{}", &id[id.len() - 2..]),
            vswitch: vswitch.into(),
            cidr: "10.0.0.0/22".into(),
            gateway: "10.0.3.253".parse().unwrap(),
            v6: None,
        },
        primary.parse().unwrap(),
    );
}

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn state(p: &PoolState, a: &str) -> &'static str {
    p.state_of(p.ip(ip(a)).unwrap()).name()
}

/// `10.0.0.<last>` (the parts' tests).
pub(super) fn ip10(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 0, last)
}

pub(super) fn owner(s: &str) -> Owner {
    Owner::parse(s).unwrap()
}

fn pool() -> PoolState {
    let mut p = PoolState::new(false);
    add_eni(&mut p, "eni-01", "10.0.0.10");
    for a in ["10.0.0.10", "10.0.0.11", "10.0.0.12"] {
        p.add_ip("eni-01", ip(a), None);
    }
    p
}

#[test]
fn primary_is_handed_out_last() {
    let mut p = pool();
    let mut got = Vec::new();
    for i in 0..3 {
        let o = owner(&format!("o{i}"));
        let v4 = pick(&p, &o, None, None).unwrap();
        p.take(v4, &o, None, 1, &Default::default()).unwrap();
        got.push(v4);
    }
    assert_eq!(got, vec![ip("10.0.0.11"), ip("10.0.0.12"), ip("10.0.0.10")]);
    assert!(pick(&p, &owner("o3"), None, None).is_none());
    p.check().unwrap();
}

#[test]
fn prefer_and_reservation() {
    let mut p = pool();
    let a = owner("a");
    let v4 = pick(&p, &a, Some("10.0.0.12".parse().unwrap()), None).unwrap();
    assert_eq!(v4, ip("10.0.0.12"));
    p.take(v4, &a, None, 0, &Default::default());
    // Reserved for `a` for 1000 ms, then cooling until 5000.
    let out = p.release(&a, None, None, 100, &times(1000, 5000));
    let ReleaseOutcome::Released { hold: Some(h), .. } = out else {
        panic!("{out:?}")
    };
    assert_eq!((h.reserved_until_ms, h.cooling_until_ms), (1100, 5100));
    let b = owner("b");
    // b may not take a's reserved address even when preferring it.
    assert_ne!(
        pick(&p, &b, Some("10.0.0.12".parse().unwrap()), None),
        Some(ip("10.0.0.12"))
    );
    // a gets it back.
    assert_eq!(pick(&p, &a, None, None), Some(ip("10.0.0.12")));
    // After the reservation, it cools: still a's, not b's.
    assert!(p.settle(1200).is_empty());
    assert_eq!(state(&p, "10.0.0.12"), "cooling");
    assert_eq!(pick(&p, &a, None, None), Some(ip("10.0.0.12")));
    assert_eq!(p.next_expiry(), Some(5100));
    assert_eq!(p.settle(5100), vec![ip("10.0.0.12")]);
    assert_eq!(state(&p, "10.0.0.12"), "idle");
    p.check().unwrap();
}

#[test]
fn sandbox_rules() {
    let mut p = pool();
    let a = owner("a");
    let sx = SandboxId::parse("x").unwrap();
    let sy = SandboxId::parse("y").unwrap();
    let v4 = pick(&p, &a, None, None).unwrap();
    p.take(v4, &a, Some(&sx), 0, &Default::default());
    // A new sandbox of the same owner moves the allocation.
    let moved = p.move_sandbox(&a, Some(&sy)).unwrap();
    assert_eq!(moved.sandbox, Some(sy.clone()));
    assert!(p.move_sandbox(&a, Some(&sy)).is_none());
    // A late release from x changes nothing.
    assert_eq!(
        p.release(&a, Some(&sx), None, 0, &times(0, 0)),
        ReleaseOutcome::SandboxMismatch
    );
    assert!(p.owner_ip(&a).is_some());
    assert!(matches!(
        p.release(&a, Some(&sy), None, 0, &times(0, 0)),
        ReleaseOutcome::Released { hold: None, .. }
    ));
    assert_eq!(
        p.release(&a, None, None, 0, &times(0, 0)),
        ReleaseOutcome::NotHeld
    );
    p.check().unwrap();
}

#[test]
fn shedding_and_freeing_order() {
    let mut p = pool();
    add_eni(&mut p, "eni-02", "10.0.1.10");
    for a in ["10.0.1.10", "10.0.1.11", "10.0.1.12"] {
        p.add_ip("eni-02", ip(a), None);
    }
    let o = owner("busy");
    p.take(ip("10.0.0.11"), &o, None, 0, &Default::default());
    // eni-02 has nothing in use: its secondaries go first; primaries never.
    let shed = shed_candidates(&p, 3);
    assert_eq!(shed[0].0, "eni-02");
    assert_eq!(shed[0].1.len(), 2);
    assert_eq!(shed[1], ("eni-01".to_string(), vec![ip("10.0.0.12")]));
    assert!(freeable_enis(&p).is_empty());
    p.remove_ips(&[ip("10.0.1.11"), ip("10.0.1.12")]);
    assert_eq!(freeable_enis(&p), vec!["eni-02".to_string()]);
    p.enis_mut().asked("eni-02", false);
    assert!(freeable_enis(&p).is_empty());
    p.check().unwrap();
}

#[test]
fn dual_stack_unpaired_is_invalid() {
    let mut p = PoolState::new(true);
    add_eni(&mut p, "eni-01", "10.0.0.10");
    p.add_ip("eni-01", ip("10.0.0.10"), Some("fd00::10".parse().unwrap()));
    p.add_ip("eni-01", ip("10.0.0.11"), None);
    p.add_unpaired_v6("eni-01", "fd00::12".parse().unwrap());
    let c = counts(&p);
    assert_eq!((c.ips, c.idle), (3, 1));
    assert_eq!(list(&p).iter().filter(|e| e.state == "invalid").count(), 2);
    let inv = invalid_to_release(&p);
    assert_eq!(inv.len(), 1);
    assert_eq!(inv[0].1, vec![ip("10.0.0.11")]);
    assert_eq!(inv[0].2.len(), 1);
    p.check().unwrap();
}

#[test]
fn restore_and_quarantine() {
    let mut p = pool();
    let a = Allocation {
        owner: owner("ns/a"),
        sandbox: None,
        ip: ip("10.0.0.11"),
        ipv6: None,
        ipv6_prefix: None,
        eni: "eni-01".into(),
        since_ms: 5,
        gen: eniip_protocol::core::Generation::NONE,
        attach: None,
        intent: Default::default(),
    };
    assert!(p.restore_allocation(&a));
    let gone = Allocation {
        ip: ip("10.9.9.9"),
        ..a.clone()
    };
    assert!(!p.restore_allocation(&gone));
    let h = p.quarantine(ip("10.0.0.12"), 1000).unwrap();
    assert_eq!(h.last_owner, None);
    assert!(
        pick(&p, &owner("x"), Some("10.0.0.12".parse().unwrap()), None) != Some(ip("10.0.0.12"))
    );
    assert_eq!(
        list(&p)
            .iter()
            .find(|e| e.ip == IpAddr::V4(ip("10.0.0.12")))
            .unwrap()
            .state,
        "reserved"
    );
    assert_eq!(p.settle(1000), vec![ip("10.0.0.12")]);
    p.check().unwrap();
}

fn prefix_pool() -> (PoolState, Ipv4Prefix, Ipv4Prefix) {
    let mut p = PoolState::new(false);
    add_eni(&mut p, "eni-01", "10.0.0.10");
    p.add_ip("eni-01", ip("10.0.0.10"), None);
    let a: Ipv4Prefix = "10.0.0.32/28".parse().unwrap();
    let b: Ipv4Prefix = "10.0.0.16/28".parse().unwrap();
    p.add_prefix("eni-01", a);
    p.add_prefix("eni-01", b);
    (p, a, b)
}

#[test]
fn allocation_fills_one_prefix_before_the_next() {
    let (mut p, a, b) = prefix_pool();
    assert_eq!(p.ips().len(), 33);
    assert_eq!(p.slots_used("eni-01"), 2);
    let mut got = Vec::new();
    for i in 0..32 {
        let o = owner(&format!("o{i}"));
        let v4 = pick(&p, &o, None, None).unwrap();
        p.take(v4, &o, None, 1, &Default::default()).unwrap();
        got.push(v4);
        // Once a prefix is started, it is filled first.
        let touched = [a, b]
            .iter()
            .filter(|q| got.iter().any(|x| q.contains(*x)))
            .count();
        assert_eq!(touched, i / 16 + 1, "{got:?}");
    }
    // Then the primary.
    let o = owner("last");
    assert_eq!(pick(&p, &o, None, None), Some(ip("10.0.0.10")));
    p.check().unwrap();
}

#[test]
fn prefixes_go_back_whole_and_never_address_by_address() {
    let (mut p, a, b) = prefix_pool();
    let o = owner("one");
    let v4 = pick(&p, &o, None, None).unwrap();
    p.take(v4, &o, None, 1, &Default::default()).unwrap();
    // Idle prefix members are never shed as single addresses.
    assert!(shed_candidates(&p, 100).is_empty());
    assert!(freeable_enis(&p).is_empty(), "an ENI with prefixes");
    let c = prefix_candidates(&p);
    let held = Ipv4Prefix::containing(v4);
    let other = if held == a { b } else { a };
    assert_eq!(c.len(), 2);
    for q in &c {
        assert_eq!((q.eni.as_str(), q.eni_in_use), ("eni-01", 1));
        assert_eq!(q.reclaimable, q.prefix == other, "{}", q.prefix);
    }
    let reclaimable = |p: &PoolState, q: Ipv4Prefix| {
        prefix_candidates(p)
            .iter()
            .find(|c| c.prefix == q)
            .unwrap()
            .reclaimable
    };
    // Reserved (stick time) is not reclaimable either.
    p.release(&o, None, None, 10, &times(1000, 0));
    assert!(!reclaimable(&p, held));
    p.settle(2000);
    assert!(prefix_candidates(&p).iter().all(|c| c.reclaimable));
    // A prefix in flight back is not offered twice.
    let members: Vec<Ipv4Addr> = other.addresses().collect();
    p.set_releasing(&members, true);
    assert!(!reclaimable(&p, other));
    // Gone: its addresses leave with it.
    p.remove_prefix("eni-01", other);
    p.remove_ips(&members);
    assert_eq!(p.ips().len(), 17);
    assert_eq!(p.slots_used("eni-01"), 1);
    p.check().unwrap();
}

#[test]
fn the_walk_over_every_address_reads_each_state_as_a_lookup_does() {
    let mut p = PoolState::new(true);
    add_eni(&mut p, "eni-01", "10.0.0.10");
    for last in 10..20 {
        let pair = (last % 3 != 0).then(|| format!("fd00::{last}").parse().unwrap());
        p.add_ip("eni-01", ip10(last), pair);
    }
    // In use, kept (reserved, cooling, quarantined), invalid and idle,
    // interleaved in address order.
    for (last, o) in [(11, "a"), (14, "b"), (17, "c"), (19, "d")] {
        p.take(ip10(last), &owner(o), None, 1, &Default::default())
            .unwrap();
    }
    p.release(&owner("b"), None, None, 1, &times(100, 200));
    p.release(&owner("c"), None, None, 1, &times(0, 200));
    p.quarantine(ip10(13), 500).unwrap();
    let walked: Vec<(Ipv4Addr, &str)> = p.states().map(|(ip, s)| (ip.v4(), s.name())).collect();
    let looked: Vec<(Ipv4Addr, &str)> = p
        .ips()
        .iter()
        .map(|ip| (ip.v4(), p.state_of(ip).name()))
        .collect();
    assert_eq!(walked, looked);
    let names: Vec<&str> = walked.iter().map(|(_, n)| *n).collect();
    assert_eq!(
        names,
        [
            "idle", "inuse", "invalid", "reserved", "reserved", "invalid", "idle", "cooling",
            "invalid", "inuse"
        ]
    );
    p.check().unwrap();
}

#[test]
fn a_take_that_would_give_an_owner_two_addresses_or_an_address_two_owners_changes_nothing() {
    let mut p = pool();
    let a = owner("a");
    p.take(ip("10.0.0.11"), &a, None, 1, &Default::default())
        .unwrap();
    assert_eq!(
        p.take(ip("10.0.0.12"), &a, None, 2, &Default::default()),
        None,
        "a holds one"
    );
    assert_eq!(
        p.take(ip("10.0.0.11"), &owner("b"), None, 2, &Default::default()),
        None,
        "it is a's"
    );
    let again = Allocation {
        owner: owner("b"),
        sandbox: None,
        ip: ip("10.0.0.11"),
        ipv6: None,
        ipv6_prefix: None,
        eni: "eni-01".into(),
        since_ms: 3,
        gen: eniip_protocol::core::Generation::NONE,
        attach: None,
        intent: Default::default(),
    };
    assert!(!p.restore_allocation(&again), "a restored owner too");
    assert_eq!(p.owner_ip(&a).map(|x| x.v4()), Some(ip("10.0.0.11")));
    assert_eq!(p.allocation(&owner("b")), None);
    p.check().unwrap();
}

#[test]
fn addresses_come_only_on_known_enis_and_leave_with_their_holders() {
    let mut p = pool();
    p.add_ip("eni-99", ip("10.0.9.1"), None);
    p.add_unpaired_v6("eni-99", "fd00::99".parse().unwrap());
    p.add_prefix("eni-99", "10.0.9.16/28".parse().unwrap());
    assert_eq!((p.ips().len(), p.ips().unpaired_len()), (3, 0));
    p.check().unwrap();
    // An owned address that leaves takes its owner and attachment along;
    // a kept one its hold.
    let (a, b) = (owner("a"), owner("b"));
    p.take(ip("10.0.0.11"), &a, None, 1, &Default::default())
        .unwrap();
    p.take(ip("10.0.0.12"), &b, None, 1, &Default::default())
        .unwrap();
    p.release(&b, None, None, 1, &times(1000, 0));
    p.remove_ips(&[ip("10.0.0.11"), ip("10.0.0.12")]);
    assert_eq!(p.allocation(&a), None);
    assert_eq!(p.next_expiry(), None, "no hold on an address that left");
    p.check().unwrap();
}

/// Two ENIs, `eni-01` on vsw-1 (10.0.0.10-12) and `eni-02` on vsw-2
/// (10.0.1.10-12), everything idle.
fn two_vswitches() -> PoolState {
    let mut p = pool();
    add_eni_on(&mut p, "eni-02", "10.0.1.10", "vsw-2");
    for a in ["10.0.1.10", "10.0.1.11", "10.0.1.12"] {
        p.add_ip("eni-02", ip(a), None);
    }
    p
}

#[test]
fn an_owner_that_asks_a_vswitch_gets_an_address_there_or_none() {
    let mut p = two_vswitches();
    let a = owner("a");
    // The best idle address overall is on eni-01 (it sorts first); on
    // vsw-2 it is eni-02's best.
    assert_eq!(pick(&p, &a, None, None), Some(ip("10.0.0.11")));
    assert_eq!(pick(&p, &a, None, Some("vsw-2")), Some(ip("10.0.1.11")));
    assert_eq!(pick(&p, &a, None, Some("vsw-3")), None, "no ENI there");
    // `prefer` counts only on the vswitch asked.
    let want = Some("10.0.0.12".parse().unwrap());
    assert_eq!(pick(&p, &a, want, Some("vsw-2")), Some(ip("10.0.1.11")));
    assert_eq!(pick(&p, &a, want, Some("vsw-1")), Some(ip("10.0.0.12")));
    // A reservation on another vswitch is passed over (and stays).
    p.take(ip("10.0.0.12"), &a, None, 0, &Intent::default())
        .unwrap();
    p.release(&a, None, None, 0, &times(60_000, 0));
    assert_eq!(pick(&p, &a, None, None), Some(ip("10.0.0.12")));
    assert_eq!(pick(&p, &a, None, Some("vsw-2")), Some(ip("10.0.1.11")));
    assert_eq!(state(&p, "10.0.0.12"), "reserved");
    // The last idle address of vsw-2 is a primary: still handed out.
    for (n, last) in ["10.0.1.11", "10.0.1.12"].iter().enumerate() {
        let o = owner(&format!("b{n}"));
        p.take(ip(last), &o, None, 1, &Intent::default()).unwrap();
    }
    assert_eq!(pick(&p, &a, None, Some("vsw-2")), Some(ip("10.0.1.10")));
    let c = owner("c");
    p.take(ip("10.0.1.10"), &c, None, 1, &Intent::default())
        .unwrap();
    assert_eq!(pick(&p, &a, None, Some("vsw-2")), None);
    p.check().unwrap();
}

#[test]
fn an_owners_newer_hold_supersedes_its_older_one_and_says_so() {
    let mut p = two_vswitches();
    let a = owner("a");
    let keep = times(60_000, 0);
    p.take(ip("10.0.0.11"), &a, None, 0, &Intent::default())
        .unwrap();
    let out = p.release(&a, None, None, 0, &keep);
    assert!(
        matches!(
            out,
            ReleaseOutcome::Released {
                superseded: None,
                ..
            }
        ),
        "{out:?}"
    );
    // Asked elsewhere, it takes another address; its reservation stays
    // until its next release, which supersedes it.
    p.take(ip("10.0.1.11"), &a, None, 1, &Intent::default())
        .unwrap();
    assert_eq!(state(&p, "10.0.0.11"), "reserved");
    let out = p.release(&a, None, None, 2, &keep);
    let ReleaseOutcome::Released {
        hold: Some(h),
        superseded,
        ..
    } = out
    else {
        panic!("{out:?}")
    };
    assert_eq!(h.ip, ip("10.0.1.11"));
    assert_eq!(superseded, Some(ip("10.0.0.11")), "to be cleared on disk");
    assert_eq!(state(&p, "10.0.0.11"), "idle");
    // Nothing kept (no stick time, no cool-down): nothing superseded.
    p.take(ip("10.0.0.12"), &a, None, 3, &Intent::default())
        .unwrap();
    let out = p.release(&a, None, None, 4, &times(0, 0));
    assert!(
        matches!(
            out,
            ReleaseOutcome::Released {
                hold: None,
                superseded: None,
                ..
            }
        ),
        "{out:?}"
    );
    assert_eq!(state(&p, "10.0.1.11"), "reserved");
    p.check().unwrap();
}

#[test]
fn a_release_keeps_the_address_for_the_owners_own_stick_time() {
    let mut p = pool();
    let (a, b, c) = (owner("a"), owner("b"), owner("c"));
    let asks = |s: u64| Intent {
        stick_s: Some(s),
        ..Intent::default()
    };
    let taken = p.take(ip("10.0.0.11"), &a, None, 0, &asks(600)).unwrap();
    assert_eq!(taken.intent.stick_s, Some(600), "the record carries it");
    p.take(ip("10.0.0.12"), &b, None, 0, &asks(0)).unwrap();
    p.take(ip("10.0.0.10"), &c, None, 0, &asks(86_400)).unwrap();
    // The node keeps nothing; a keeps 600 s, b asked none, c more than
    // the maximum (an hour) allows.
    let until = |out: ReleaseOutcome| match out {
        ReleaseOutcome::Released { hold, .. } => hold.map(|h| h.reserved_until_ms),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        until(p.release(&a, None, None, 1_000, &times(0, 0))),
        Some(601_000)
    );
    assert_eq!(
        until(p.release(&b, None, None, 1_000, &times(60_000, 0))),
        None
    );
    assert_eq!(
        until(p.release(&c, None, None, 1_000, &times(0, 0))),
        Some(3_601_000)
    );
    assert_eq!(pick(&p, &a, None, None), Some(ip("10.0.0.11")));
    assert_eq!(state(&p, "10.0.0.12"), "idle");
    p.check().unwrap();
}

#[test]
fn a_held_allocation_keeps_the_newest_stick_time_asked() {
    let mut p = pool();
    let a = owner("a");
    p.take(ip("10.0.0.11"), &a, None, 0, &Intent::default())
        .unwrap();
    let again = p.restick(&a, 300).expect("changed: written again");
    assert_eq!(again.intent.stick_s, Some(300));
    assert!(p.restick(&a, 300).is_none(), "the same: nothing to write");
    assert!(p.restick(&owner("b"), 300).is_none(), "b holds nothing");
    assert_eq!(p.allocation(&a).unwrap().intent.stick_s, Some(300));
}

#[test]
fn an_ipv4_only_owner_is_answered_no_ipv6_and_its_pair_stays_with_it() {
    let mut p = PoolState::new(true);
    add_eni(&mut p, "eni-01", "10.0.0.10");
    let v6 = |s: &str| -> std::net::Ipv6Addr { s.parse().unwrap() };
    p.add_ip("eni-01", ip("10.0.0.10"), Some(v6("fd00::10")));
    p.add_ip("eni-01", ip("10.0.0.11"), Some(v6("fd00::11")));
    let a = owner("a");
    let only4 = Intent {
        ipv4_only: true,
        ..Intent::default()
    };
    let got = p.take(ip("10.0.0.11"), &a, None, 0, &only4).unwrap();
    assert_eq!(got.ipv6, Some(v6("fd00::11")), "the pair is recorded");
    assert_eq!(got.owner_ipv6(), None, "and not answered");
    // Nobody else can have the IPv6 half: it goes with the IPv4.
    assert_eq!(
        pick(&p, &owner("b"), Some(IpAddr::V6(v6("fd00::11"))), None),
        Some(ip("10.0.0.10"))
    );
    // A restart restores it as it was.
    let mut q = PoolState::new(true);
    add_eni(&mut q, "eni-01", "10.0.0.10");
    q.add_ip("eni-01", ip("10.0.0.11"), Some(v6("fd00::11")));
    assert!(q.restore_allocation(&got));
    assert_eq!(q.allocation(&a), Some(got));
}

/// A dual-stack pool whose ENI holds a /80 and three addresses without a
/// single IPv6 of the cloud's.
fn carving_pool() -> (PoolState, eniip_cloud::Ipv6Prefix) {
    let mut p = PoolState::new(true);
    add_eni(&mut p, "eni-01", "10.0.0.10");
    let p80: eniip_cloud::Ipv6Prefix = "fd00:0:0:1:7::/80".parse().unwrap();
    p.add_v6_prefix("eni-01", p80);
    for a in ["10.0.0.10", "10.0.0.11", "10.0.0.12"] {
        p.add_ip("eni-01", ip(a), None);
    }
    (p, p80)
}

#[test]
fn a_carved_ipv6_comes_with_the_take_leaves_with_the_owner_and_comes_back_for_it() {
    let (mut p, p80) = carving_pool();
    let c = counts(&p);
    assert_eq!(
        (c.ips, c.idle),
        (3, 3),
        "no address without a pair is invalid"
    );
    let a = p
        .take(
            ip("10.0.0.11"),
            &owner("ns/web-0"),
            None,
            1,
            &Intent::default(),
        )
        .unwrap();
    let b6 = a.ipv6.expect("a carved IPv6");
    assert!(p80.contains(b6) && a.ipv6_prefix == Some(p80));
    let b = p
        .take(
            ip("10.0.0.12"),
            &owner("ns/web-1"),
            None,
            1,
            &Intent::default(),
        )
        .unwrap();
    assert_ne!(b.ipv6, a.ipv6);
    p.check().unwrap();
    // Released with no stick time: idle, its carved IPv6 gone with it.
    assert!(matches!(
        p.release(&owner("ns/web-0"), None, None, 2, &times(0, 0)),
        ReleaseOutcome::Released { .. }
    ));
    assert_eq!(p.ip(ip("10.0.0.11")).unwrap().v6(), None);
    p.check().unwrap();
    // The same owner on another address of the ENI: the same IPv6.
    let again = p
        .take(
            ip("10.0.0.10"),
            &owner("ns/web-0"),
            None,
            3,
            &Intent::default(),
        )
        .unwrap();
    assert_eq!(again.ipv6, Some(b6), "a reused owner gets its IPv6 back");
    // Kept for its owner by a stick time: the IPv6 stays with the hold.
    let ReleaseOutcome::Released { hold, .. } =
        p.release(&owner("ns/web-0"), None, None, 4, &times(100, 0))
    else {
        panic!("released");
    };
    let hold = hold.expect("a reservation");
    assert_eq!((hold.ipv6, hold.ipv6_prefix), (Some(b6), Some(p80)));
    assert_eq!(p.ip(ip("10.0.0.10")).unwrap().v6(), Some(b6));
    p.check().unwrap();
    // Another owner never gets it while it is held.
    let other = p
        .take(
            ip("10.0.0.11"),
            &owner("ns/other"),
            None,
            5,
            &Intent::default(),
        )
        .unwrap();
    assert_ne!(other.ipv6, Some(b6));
    assert_eq!(p.settle(200), vec![ip("10.0.0.10")]);
    assert_eq!(p.ip(ip("10.0.0.10")).unwrap().v6(), None, "idle again");
    p.check().unwrap();
}

#[test]
fn a_restart_restores_each_recorded_carved_pair_and_hold() {
    let (mut p, p80) = carving_pool();
    let a = p
        .take(ip("10.0.0.11"), &owner("ns/a"), None, 1, &Intent::default())
        .unwrap();
    p.take(ip("10.0.0.12"), &owner("ns/b"), None, 1, &Intent::default())
        .unwrap();
    let ReleaseOutcome::Released { hold, .. } =
        p.release(&owner("ns/b"), None, None, 2, &times(1000, 0))
    else {
        panic!("released");
    };
    let hold = hold.unwrap();
    // A pool rebuilt from the cloud (the /80 first) and the state files.
    let (mut q, _) = carving_pool();
    assert!(q.restore_allocation(&a));
    assert!(q.restore_hold(&hold, 3));
    assert_eq!(q.allocation(&owner("ns/a")), Some(a.clone()));
    assert_eq!(q.ip(ip("10.0.0.12")).unwrap().v6(), hold.ipv6);
    q.check().unwrap();
    // ns/b comes back within its stick time: the same pair.
    let b = q
        .take(ip("10.0.0.12"), &owner("ns/b"), None, 4, &Intent::default())
        .unwrap();
    assert_eq!((b.ipv6, b.ipv6_prefix), (hold.ipv6, Some(p80)));
    // A new owner never gets one that is held.
    let c = q
        .take(ip("10.0.0.10"), &owner("ns/c"), None, 5, &Intent::default())
        .unwrap();
    assert!(c.ipv6 != a.ipv6 && c.ipv6 != b.ipv6 && c.ipv6.is_some());
    q.check().unwrap();
}

#[test]
fn a_granted_address_an_owner_holds_on_a_deleted_eni_stays_its_and_is_not_counted() {
    // The t3_eni_reuse path: eni-01 is deleted behind eniipd's back while
    // a holds .11; the vswitch gives .11 to a new ENI, as its primary.
    for dual in [false, true] {
        let mut p = PoolState::new(dual);
        add_eni(&mut p, "eni-01", "10.0.0.10");
        let v6 = |s: &str| s.parse::<std::net::Ipv6Addr>().unwrap();
        p.add_ip("eni-01", ip("10.0.0.11"), dual.then(|| v6("fd00::11")));
        let a = owner("a");
        p.take(ip("10.0.0.11"), &a, None, 1, &Default::default())
            .unwrap();
        assert_eq!(p.forget_deleted("eni-01"), 1);
        add_eni(&mut p, "eni-02", "10.0.0.11");
        let pairs = [v6("fd00::21"), v6("fd00::22")];
        let granted = p.add_granted(
            "eni-02",
            &[ip("10.0.0.11"), ip("10.0.0.12")],
            if dual { &pairs } else { &[] },
        );
        assert_eq!(granted, 1, "dual={dual}: only .12 can be handed out");
        let held = p.owner_ip(&a).unwrap();
        assert_eq!((held.eni(), held.lost()), ("eni-01", true), "dual={dual}");
        assert_eq!(held.v6(), dual.then(|| v6("fd00::11")));
        assert_eq!(
            p.ips().unpaired_len(),
            0,
            "dual={dual}: nothing to give back"
        );
        assert_eq!(pick(&p, &owner("b"), None, None), Some(ip("10.0.0.12")));
        p.check().unwrap();
    }
}
