//! Event orderings too narrow to hit reliably through threads, driven
//! directly on an actor.

use std::net::{IpAddr, Ipv4Addr};

use super::*;
use crate::alloc::capacity::{self, PoolSizes};
use crate::alloc::fake::{FakeCloud, MemJournal, INSTANCE};
use crate::alloc::mailbox::{CloudEniView, ReadyEni};
use crate::alloc::prefix_mode::Kind;
use crate::config::RawConfig;
use crate::pool::choose::pick;
use crate::pool::PoolIp;
use demand::Ask;
use eniip_cloud::{CloudError, CloudErrorKind, Ipv4Prefix};
use eniip_protocol::core::EniInfo;
use eniip_protocol::core::Owner;

pub(super) const ENI: &str = "eni-0001";

pub(super) fn ip(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 0, last)
}

/// `ENI`'s link: vsw-a (10.0.0.0/24, gateway .253).
pub(super) fn link(id: &str) -> EniInfo {
    EniInfo {
        eni: id.into(),
        mac: "00:16:3e:00:00:01".into(),
        vswitch: "vsw-a".into(),
        cidr: "10.0.0.0/24".into(),
        gateway: ip(253),
        v6: None,
    }
}

/// `ENI` on vsw-a (10.0.0.0/24, gateway .253, primary .1), no address
/// known yet.
pub(super) fn one_empty_eni(dual: bool) -> PoolState {
    let mut pool = PoolState::new(dual);
    pool.add_eni(link(ENI), ip(1));
    pool
}

/// [`one_empty_eni`] holding .1 to .4, all idle.
pub(super) fn one_eni_pool() -> PoolState {
    let mut pool = one_empty_eni(false);
    for last in 1..=4 {
        pool.add_ip(ENI, ip(last), None);
    }
    pool
}

fn actor() -> Actor {
    actor_with(Semaphore::new(3))
}

fn actor_with(op_sem: Semaphore) -> Actor {
    actor_of("{}", op_sem)
}

fn actor_of(config: &str, op_sem: Semaphore) -> Actor {
    let fake = FakeCloud::new(4, 15, 1000);
    let cfg = RawConfig::parse(config).unwrap().validate().unwrap();
    let cap = capacity::compute(&fake.limits, &cfg, PoolSizes::of(&cfg), &mut Vec::new());
    let mut opts = AllocatorOptions::new(&cfg, INSTANCE, vec!["vsw-a".into()], Vec::new(), cap);
    // Fixed pool sizes: these tests look at the parts, not the target.
    opts.adaptive_pool = false;
    let pool = one_eni_pool();
    let (events_tx, _) = crossbeam_channel::bounded(16);
    let (fatal_tx, _) = crossbeam_channel::bounded(16);
    let (requests_tx, _) = crossbeam_channel::bounded(16);
    Actor::new(
        Arc::new(opts),
        fake,
        Arc::new(MemJournal::default()),
        pool,
        op_sem,
        Senders {
            events: events_tx,
            fatal: fatal_tx,
            requests: requests_tx,
        },
    )
}

fn entries(a: &Actor) -> Vec<eniip_protocol::core::EniEntry> {
    views::eni_entries(&a.pool, &a.vsw, &a.inflight, a.cap.prefix_mode, unix_ms())
}

/// An unassign of `asked` on `ENI` ended; the cloud took `gone` back.
fn unassigned(asked: &[Ipv4Addr], gone: &[Ipv4Addr], error: Option<CloudError>) -> Event {
    Event::Unassigned {
        eni: ENI.into(),
        v4: asked.to_vec(),
        gone_v4: gone.to_vec(),
        gone_v6: Vec::new(),
        gone_prefixes: Vec::new(),
        error,
    }
}

fn view(v4: &[Ipv4Addr]) -> CloudEniView {
    CloudEniView {
        eni: ReadyEni {
            link: link(ENI),
            primary_ip: ip(1),
            v4: v4.to_vec(),
            v6: Vec::new(),
            prefixes: Vec::new(),
            prefix_fallback: false,
            v6_prefixes: Vec::new(),
            v6_prefix_fallback: false,
        },
        in_metadata: true,
    }
}

#[test]
fn a_cloud_view_older_than_an_unassign_does_not_bring_its_addresses_back() {
    let mut a = actor();
    // The maintenance thread reads the cloud...
    let started = Instant::now();
    let stale = view(&[ip(1), ip(2), ip(3), ip(4)]);
    // ...then an unassign of two idle addresses ends...
    a.pool.set_releasing(&[ip(3), ip(4)], true);
    a.on_event(unassigned(&[ip(3), ip(4)], &[ip(3), ip(4)], None));
    // ...and only then does the old view arrive.
    a.on_event(Event::Reconcile {
        started,
        enis: vec![stale],
        detached: None,
    });
    let held: Vec<Ipv4Addr> = a.pool.ips().iter().map(PoolIp::v4).collect();
    assert_eq!(held, [ip(1), ip(2)], "gone addresses came back");

    // A view taken after the change is acted on: an address the cloud
    // granted whose answer was lost is adopted, one it lost is dropped.
    std::thread::sleep(Duration::from_millis(2));
    a.on_event(Event::Reconcile {
        started: Instant::now(),
        enis: vec![view(&[ip(1), ip(5)])],
        detached: None,
    });
    let held: Vec<Ipv4Addr> = a.pool.ips().iter().map(PoolIp::v4).collect();
    assert_eq!(held, [ip(1), ip(5)]);
}

#[test]
fn a_cloud_view_older_than_a_free_does_not_adopt_the_eni_again() {
    let mut a = actor();
    let started = Instant::now();
    let stale = view(&[ip(1)]);
    a.on_event(Event::EniFreed {
        eni: ENI.into(),
        result: Ok(()),
    });
    assert_eq!(a.pool.enis().len(), 0);
    a.on_event(Event::Reconcile {
        started,
        enis: vec![stale],
        detached: None,
    });
    assert_eq!(a.pool.enis().len(), 0, "a deleted ENI was adopted");
    assert_eq!(a.pool.ips().len(), 0);
}

#[test]
fn a_waiter_blocked_on_an_operation_slot_is_planned_again_soon() {
    let ops = Semaphore::new(1);
    let mut a = actor_with(ops.clone());
    // Every address taken, so the next alloc needs a new ENI.
    for last in 1..=4 {
        let (tx, _rx) = crossbeam_channel::bounded(1);
        a.clients()
            .alloc(Ask::plain(&format!("o/{last}"), tx), None);
    }
    // A sweep holds the only operation slot.
    let sweep = ops.try_acquire().unwrap();
    let (tx, _rx) = crossbeam_channel::bounded(1);
    a.clients().alloc(Ask::plain("o/new", tx), None);
    let later = Instant::now() + a.opts.aggregation_window + Duration::from_millis(1);
    a.step(later);
    assert_eq!(a.demand.waiting(), 1);
    assert_eq!(a.inflight.len(), 0, "no slot, so no create");
    // The sweep ends without telling the actor: it must look again
    // soon, not at the next maintenance pass minutes away.
    drop(sweep);
    let wake = a.next_wakeup(later);
    assert!(wake <= later + REPLAN, "{:?}", wake - later);
}

#[test]
fn an_eni_detached_behind_our_back_is_withdrawn_and_readopted_when_back() {
    let mut a = actor();
    let (tx, _rx) = crossbeam_channel::bounded(1);
    a.clients().alloc(Ask::plain("o/1", tx), None);
    let held = a.pool.owner_ip(&Owner::parse("o/1").unwrap()).unwrap().v4();
    // The cloud no longer lists the ENI as attached (it still exists).
    a.on_event(Event::Reconcile {
        started: Instant::now(),
        enis: Vec::new(),
        detached: Some(vec![ENI.into()]),
    });
    assert_eq!(a.pool.ips().len(), 1, "idle addresses leave the pool");
    assert!(
        a.pool.ip(held).unwrap().lost(),
        "the owned one is never handed out again"
    );
    assert!(
        a.pool.eni(ENI).unwrap().at_limit(),
        "nothing more is asked of it"
    );
    let other = Owner::parse("o/2").unwrap();
    assert_eq!(
        pick(&a.pool, &other, None, None),
        None,
        "nothing from a vanished ENI"
    );
    // It is attached again: its addresses come back as idle.
    a.on_event(Event::Reconcile {
        started: Instant::now(),
        enis: vec![view(&[ip(1), ip(2), ip(3), ip(4)])],
        detached: None,
    });
    assert!(!a.pool.eni(ENI).unwrap().at_limit());
    assert_eq!(a.pool.ips().len(), 4);
    assert!(!a.pool.ip(held).unwrap().lost());
    assert!(pick(&a.pool, &other, None, None).is_some());
}

#[test]
fn an_eni_deleted_behind_our_back_frees_its_slot_and_is_forgotten_once_released() {
    let mut a = actor();
    let o1 = Owner::parse("o/1").unwrap();
    let (tx, _rx) = crossbeam_channel::bounded(1);
    a.clients().alloc(Ask::plain(o1.as_str(), tx), None);
    let held = a.pool.owner_ip(&o1).unwrap().v4();
    let slots = a.inflight.eni_slots();
    // Neither attached nor detached: the ENI is gone from the cloud.
    a.on_event(Event::Reconcile {
        started: Instant::now(),
        enis: Vec::new(),
        detached: Some(Vec::new()),
    });
    assert_eq!(a.inflight.eni_slots(), slots + 1, "its slot is free again");
    assert!(entries(&a).is_empty(), "not listed as a managed ENI");
    assert_eq!(a.status_counts().enis, 0);
    assert_eq!(a.pool.ips().len(), 1, "only the owned address is kept");
    assert!(a.pool.ip(held).unwrap().lost());
    assert_eq!(a.pool.owner_ip(&o1).map(PoolIp::v4), Some(held));
    // The vswitch gives the held address to a new ENI: it is not
    // adopted (two owners) while o/1 holds it.
    let mut new = view(&[ip(9), held]);
    new.eni.link.eni = "eni-0002".into();
    new.eni.primary_ip = ip(9);
    a.on_event(Event::Reconcile {
        started: Instant::now(),
        enis: vec![new.clone()],
        detached: Some(Vec::new()),
    });
    assert_eq!(a.pool.ip(held).unwrap().eni(), ENI, "still the old owner's");
    assert!(
        pick(
            &a.pool,
            &Owner::parse("o/2").unwrap(),
            Some(IpAddr::V4(held)),
            None
        ) != Some(held)
    );
    // Released: the deleted ENI is forgotten, and the next pass adopts
    // the address on its new ENI.
    let (tx, _rx) = crossbeam_channel::bounded(1);
    a.clients().release(o1, None, None, tx.into());
    a.step(Instant::now());
    assert!(!a.pool.enis().contains(ENI), "forgotten");
    std::thread::sleep(Duration::from_millis(2));
    a.on_event(Event::Reconcile {
        started: Instant::now(),
        enis: vec![new],
        detached: Some(Vec::new()),
    });
    assert_eq!(a.pool.ip(held).unwrap().eni(), "eni-0002");
    assert!(a.pool.check().is_ok(), "{:?}", a.pool.check());
}

fn prefix_view(v4: &[Ipv4Addr], prefixes: &[&str]) -> CloudEniView {
    let mut v = view(v4);
    v.eni.prefixes = prefixes.iter().map(|p| p.parse().unwrap()).collect();
    v
}

#[test]
fn a_prefix_whose_assign_answer_was_lost_is_adopted_and_one_the_cloud_lost_dropped() {
    let mut a = actor_of(r#"{"ip_prefix": true}"#, Semaphore::new(3));
    let p1: Ipv4Prefix = "10.0.0.16/28".parse().unwrap();
    let p2: Ipv4Prefix = "10.0.0.32/28".parse().unwrap();
    // The cloud granted p1 but the answer never came back.
    let base = [ip(1), ip(2), ip(3), ip(4)];
    a.on_event(Event::Reconcile {
        started: Instant::now(),
        enis: vec![prefix_view(&base, &["10.0.0.16/28"])],
        detached: None,
    });
    assert!(a.pool.eni(ENI).unwrap().prefixes().contains(&p1));
    assert_eq!(a.pool.ips().len(), 4 + 16);
    assert!(p1
        .addresses()
        .all(|x| a.pool.ip(x).unwrap().prefix() == Some(p1)));
    // Its members are never shed one by one; idle and whole, the
    // prefix goes back whole.
    assert!(crate::pool::shrink::shed_candidates(&a.pool, 100)
        .iter()
        .all(|(_, v)| v.iter().all(|x| !p1.contains(*x))));
    // p2 is known locally but the cloud no longer has it: dropped with
    // its addresses, an owned one kept for its owner and never handed
    // out again.
    a.pool.add_prefix(ENI, p2);
    let o = Owner::parse("o/p2").unwrap();
    a.pool.take(p2.base(), &o, None, 1, &Default::default());
    std::thread::sleep(Duration::from_millis(2));
    a.on_event(Event::Reconcile {
        started: Instant::now(),
        enis: vec![prefix_view(&base, &["10.0.0.16/28"])],
        detached: None,
    });
    assert!(!a.pool.eni(ENI).unwrap().prefixes().contains(&p2));
    assert_eq!(a.pool.ips().len(), 4 + 16 + 1);
    assert!(a.pool.ip(p2.base()).unwrap().lost());
    assert!(a.pool.check().is_ok(), "{:?}", a.pool.check());
    // A view read before a prefix went back does not bring it back.
    let started = Instant::now();
    let members: Vec<Ipv4Addr> = p1.addresses().collect();
    a.pool.set_releasing(&members, true);
    a.on_event(Event::Unassigned {
        eni: ENI.into(),
        v4: members.clone(),
        gone_v4: members.clone(),
        gone_v6: Vec::new(),
        gone_prefixes: vec![p1],
        error: None,
    });
    a.on_event(Event::Reconcile {
        started,
        enis: vec![prefix_view(&base, &["10.0.0.16/28"])],
        detached: None,
    });
    assert!(
        !a.pool.eni(ENI).unwrap().prefixes().contains(&p1),
        "a gone prefix came back"
    );
    assert!(members.iter().all(|x| a.pool.ip(*x).is_none()));
}

#[test]
fn no_free_slash_28_turns_the_next_demand_into_single_addresses() {
    let mut a = actor_of(r#"{"ip_prefix": true}"#, Semaphore::new(3));
    let now_ms = unix_ms();
    assert_eq!(a.vsw.kind_on("vsw-a", now_ms), Kind::Prefix);
    // 15 IPv4 per ENI: 14 slots beside the primary, 3 used by singles.
    assert_eq!(a.planning().eni_room(ENI, now_ms), 11 * 16);
    let (tx, rx) = crossbeam_channel::bounded(1);
    let w = a.demand.push(Ask::plain("o/w", tx), Instant::now());
    let t = a.demand.new_ticket(Some(w), "vsw-a");
    for _ in 0..16 {
        a.pool.enis_mut().asked(ENI, true);
    }
    assert_eq!(
        a.planning().eni_room(ENI, now_ms),
        10 * 16,
        "16 in flight take a slot"
    );
    a.on_event(Event::Assigned {
        eni: ENI.into(),
        tickets: vec![t],
        prefixes: Some(Vec::new()),
        v4: Vec::new(),
        v6: Vec::new(),
        v6_prefixes: Vec::new(),
        v6_refused: false,
        error: Some(CloudError::new(
            CloudErrorKind::PrefixExhausted,
            "InvalidVSwitchId.IpNotEnough",
            "no free /28",
        )),
    });
    // The waiter is not failed: it is planned again, as singles.
    assert!(rx.try_recv().is_err());
    assert_eq!(a.demand.waiting(), 1);
    assert_eq!(a.demand.ticket_of(w), None);
    assert_eq!(a.vsw.kind_on("vsw-a", unix_ms()), Kind::Single);
    let e = a.pool.eni(ENI).unwrap();
    assert_eq!((e.pending(), e.pending_in_prefixes()), (15, 15));
    assert_eq!(
        a.planning().eni_room(ENI, unix_ms()),
        11 - 1,
        "one slot for 15 in flight"
    );
    assert_eq!(entries(&a)[0].prefixes.map(|p| p.mode()), Some("single"));
    // Once the inhibit has passed, prefixes again.
    assert_eq!(a.vsw.kind_on("vsw-a", unix_ms() + 601_000), Kind::Prefix);
}

#[test]
fn a_create_refused_for_a_limit_fails_its_waiters_instead_of_asking_again() {
    let mut a = actor();
    let (tx, rx) = crossbeam_channel::bounded(1);
    let w = a.demand.push(Ask::plain("o/limit", tx), Instant::now());
    let t = a.demand.new_ticket(Some(w), "vsw-a");
    let slots = a.inflight.create_slots().unwrap();
    let (op, _op_permit) = a.inflight.begin_create(slots, "vsw-a".into(), 1, vec![t]);
    // No ENI exists to mark at its limit: planning the waiter again would
    // ask the same create again at once, in a loop.
    a.on_event(Event::EniFailed {
        op,
        error: CloudError::new(
            CloudErrorKind::LimitExceeded,
            "CreateNetworkInterface",
            "too many addresses",
        ),
        leaked: None,
    });
    let answer = rx.try_recv().expect("the waiter is answered");
    let err = answer.expect_err("with an error");
    assert_eq!(err.code, ErrCode::Cloud, "{err:?}");
    assert_eq!(a.demand.waiting(), 0);
    assert_eq!(a.demand.pending(), 0);
    a.demand.check().unwrap();
}

#[test]
fn an_ended_backoff_does_not_keep_the_actor_awake() {
    let mut a = actor();
    let now = Instant::now();
    // A pool top-up failed half a minute ago; its backoff (about 1 s) is
    // long over, and nothing succeeded since to clear it.
    a.pool_backoff.fail(now - Duration::from_secs(30));
    a.shed_backoff.fail(now - Duration::from_secs(30));
    a.next_maintenance = now + Duration::from_secs(60);
    let wake = a.next_wakeup(now);
    assert!(
        wake >= now + Duration::from_secs(59),
        "the actor would wake again in {:?} (a loop that spins while idle)",
        wake - now
    );
}

#[test]
fn a_vswitch_eniipd_gave_addresses_back_to_is_no_longer_exhausted() {
    // Issue 31: an inhibited vswitch stayed "exhausted" after eniipd
    // itself gave addresses back to it, until a probe read it again.
    let mut a = actor();
    a.vsw.inhibit("vsw-a", unix_ms() + 600_000);
    a.pool.set_releasing(&[ip(3), ip(4)], true);
    a.on_event(unassigned(&[ip(3), ip(4)], &[ip(3), ip(4)], None));
    assert_eq!(a.vsw.switches().inhibited_until("vsw-a", unix_ms()), None);
    // An unassign that gave nothing back says nothing of the vswitch.
    a.vsw.inhibit("vsw-a", unix_ms() + 600_000);
    a.pool.set_releasing(&[ip(2)], true);
    let refused = CloudError::new(CloudErrorKind::Api, "UnassignPrivateIpAddresses", "x");
    a.on_event(unassigned(&[ip(2)], &[], Some(refused)));
    assert!(a
        .vsw
        .switches()
        .inhibited_until("vsw-a", unix_ms())
        .is_some());
}
