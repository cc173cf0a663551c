//! Allocator tests against the in-process fake cloud.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::capacity::{self, PoolSizes};
use super::fake::{FakeCloud, FakeEni, MemJournal, INSTANCE};
use super::recover::{provisional, recover, Provisional};
use super::{Allocator, AllocatorOptions};
use crate::config::RawConfig;
use crate::pool::choose::pick;
use crate::pool::PoolState;
use crate::store::{Allocation as Stored, PersistedState};
use eniip_cloud::{CloudApi, EniStatus, TAG_CREATOR_KEY, TAG_CREATOR_VALUE, TAG_INSTANCE_KEY};
use eniip_protocol::core::{
    AllocError, Allocation, Answer, Command, EniEntry, ErrCode, Intent, Owner, SandboxId,
    StatusCounts,
};

/// The verbs as typed calls, each one [`Command`] through the one path.
trait Verbs {
    fn alloc(
        &self,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
        prefer: Option<std::net::IpAddr>,
    ) -> Result<Allocation, AllocError>;
    fn release(
        &self,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
    ) -> Result<Option<std::net::IpAddr>, AllocError>;
    fn alloc_asking(
        &self,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
        intent: Intent,
    ) -> Result<Allocation, AllocError>;
    fn show(&self, owner: &Owner) -> Result<Allocation, AllocError>;
    fn status(&self) -> Result<StatusCounts, AllocError>;
    fn enis(&self) -> Result<Vec<EniEntry>, AllocError>;
    fn audit(&self) -> Result<Vec<String>, AllocError>;
}

impl Verbs for Allocator {
    fn alloc(
        &self,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
        prefer: Option<std::net::IpAddr>,
    ) -> Result<Allocation, AllocError> {
        self.ask_alloc(owner, sandbox, prefer, Intent::default())
    }
    fn alloc_asking(
        &self,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
        intent: Intent,
    ) -> Result<Allocation, AllocError> {
        self.ask_alloc(owner, sandbox, None, intent)
    }
    fn release(
        &self,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
    ) -> Result<Option<std::net::IpAddr>, AllocError> {
        match self.ask(Command::Release {
            owner: owner.clone(),
            sandbox: sandbox.cloned(),
            gen: None,
        })? {
            Answer::Released(r) => Ok(r),
            other => panic!("release answered {other:?}"),
        }
    }
    fn show(&self, owner: &Owner) -> Result<Allocation, AllocError> {
        match self.ask(Command::Show {
            owner: owner.clone(),
        })? {
            Answer::Allocation(a, eni) => {
                assert_eq!(eni.eni, a.eni, "show answers the allocation's ENI");
                Ok(*a)
            }
            other => panic!("show answered {other:?}"),
        }
    }
    fn status(&self) -> Result<StatusCounts, AllocError> {
        match self.ask(Command::Status)? {
            Answer::Status(s) => Ok(s),
            other => panic!("status answered {other:?}"),
        }
    }
    fn enis(&self) -> Result<Vec<EniEntry>, AllocError> {
        match self.ask(Command::Enis)? {
            Answer::Enis(e) => Ok(e),
            other => panic!("enis answered {other:?}"),
        }
    }
    fn audit(&self) -> Result<Vec<String>, AllocError> {
        match self.ask(Command::Audit)? {
            Answer::Audit(d) => Ok(d),
            other => panic!("audit answered {other:?}"),
        }
    }
}

impl Allocator {
    fn ask_alloc(
        &self,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
        prefer: Option<std::net::IpAddr>,
        intent: Intent,
    ) -> Result<Allocation, AllocError> {
        match self.ask(Command::Alloc {
            owner: owner.clone(),
            sandbox: sandbox.cloned(),
            prefer,
            attach: None,
            intent,
        })? {
            Answer::Allocation(a, eni) => {
                assert_eq!(eni.eni, a.eni, "alloc answers the allocation's ENI");
                Ok(*a)
            }
            other => panic!("alloc answered {other:?}"),
        }
    }
}

fn options(fake: &FakeCloud, json: &str) -> AllocatorOptions {
    let cfg = RawConfig::parse(json).unwrap().validate().unwrap();
    let cap = capacity::compute(&fake.limits, &cfg, PoolSizes::of(&cfg), &mut Vec::new());
    let mut o = AllocatorOptions::new(
        &cfg,
        INSTANCE,
        vec!["vsw-a".into()],
        vec!["sg-1".into()],
        cap,
    );
    o.aggregation_window = Duration::from_millis(50);
    o.metadata_wait = Duration::from_secs(2);
    o.eni_ready_timeout = Duration::from_secs(5);
    // These tests count the calls of the pool's mechanics at fixed sizes;
    // the adaptive target has its own (`idle_target`).
    o.adaptive_pool = false;
    o
}

fn start(fake: &Arc<FakeCloud>, o: AllocatorOptions) -> (Allocator, Arc<MemJournal>) {
    let pool = PoolState::new(o.dual);
    start_with(fake, o, pool)
}

fn start_with(
    fake: &Arc<FakeCloud>,
    o: AllocatorOptions,
    pool: PoolState,
) -> (Allocator, Arc<MemJournal>) {
    let journal = Arc::new(MemJournal::default());
    let a = Allocator::start(o, fake.clone(), journal.clone(), pool).unwrap();
    (a, journal)
}

fn owner(s: &str) -> Owner {
    Owner::parse(s).unwrap()
}

/// Waits (3 s at most) for the pool to have an idle address.
fn wait_for_an_idle_address(a: &Allocator) {
    assert!(
        eventually(Duration::from_secs(3), || a.status().unwrap().idle >= 1),
        "no idle address within 3 s: {:?}",
        a.status()
    );
}

/// Polls `f` until true or the deadline; returns its last answer.
fn eventually(limit: Duration, f: impl FnMut() -> bool) -> bool {
    eniip_util::thread::poll_until(Instant::now() + limit, Duration::from_millis(20), f)
}

/// `n` allocations at once: every thread is started before any asks (a
/// slow start, as under qemu-user, would otherwise spread the burst over
/// several aggregation windows).
fn burst(a: &Allocator, n: usize, prefix: &str) -> Vec<Result<Ipv4Addr, ErrCode>> {
    let go = std::sync::Barrier::new(n);
    std::thread::scope(|s| {
        let go = &go;
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let o = owner(&format!("{prefix}-{i}"));
                s.spawn(move || {
                    go.wait();
                    a.alloc(&o, None, None).map(|r| r.ip).map_err(|e| e.code)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn assert_no_double_hand(journal: &MemJournal) {
    let st = journal.state.lock();
    let ips: Vec<Ipv4Addr> = st.allocations.values().map(|a| a.ipv4).collect();
    let set: BTreeSet<Ipv4Addr> = ips.iter().copied().collect();
    assert_eq!(
        ips.len(),
        set.len(),
        "an address is held twice: {:?}",
        st.allocations
    );
}

#[test]
fn burst_of_25_on_an_empty_pool_is_batched() {
    let fake = FakeCloud::new(8, 30, 1000);
    // The product's window: the tests' 50 ms is shorter than 25 requests
    // let go together take to arrive under qemu-user on a busy machine.
    let mut o = options(&fake, "{}");
    o.aggregation_window = Duration::from_millis(300);
    let (a, journal) = start(&fake, o);
    let got = burst(&a, 25, "web");
    let ips: BTreeSet<Ipv4Addr> = got.iter().map(|r| *r.as_ref().unwrap()).collect();
    assert_eq!(ips.len(), 25);
    let creates = fake.calls("CreateNetworkInterface");
    let assigns = fake.calls("AssignPrivateIpAddresses");
    println!(
        "creates {creates}, assigns {assigns} ({:?})",
        fake.assign_sizes()
    );
    // Lower bound: ceil(25/10) assign-or-create calls.
    assert_eq!(creates, 1);
    assert!(
        creates + assigns <= 3,
        "creates {creates} + assigns {assigns}"
    );
    assert_eq!(a.status().unwrap().pending, 0);
    assert_no_double_hand(&journal);
    let cloud_ips: BTreeSet<Ipv4Addr> = fake.managed_ips().into_iter().collect();
    assert!(ips.is_subset(&cloud_ips));
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn eni_operations_and_count_stay_within_their_caps() {
    let fake = FakeCloud::new(8, 2, 1000).with_latency(Duration::from_millis(40));
    let (a, journal) = start(&fake, options(&fake, r#"{"max_pool_size": 0}"#));
    let got = burst(&a, 25, "pod");
    let ok = got.iter().filter(|r| r.is_ok()).count();
    let exhausted = got
        .iter()
        .filter(|r| **r == Err(ErrCode::Exhausted))
        .count();
    println!(
        "ok {ok}, exhausted {exhausted}, max concurrent ops {}",
        fake.max_concurrent_ops()
    );
    assert_eq!(ok, 14, "capacity is 7 ENIs x 2: {got:?}");
    assert_eq!(exhausted, 11);
    assert!(
        fake.max_concurrent_ops() <= 3,
        "{}",
        fake.max_concurrent_ops()
    );
    let attached = fake
        .enis()
        .iter()
        .filter(|e| !e.primary && e.instance.is_some())
        .count();
    assert_eq!(attached, 7);
    assert_no_double_hand(&journal);
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn pending_returns_to_zero_after_injected_errors() {
    let fake = FakeCloud::new(4, 15, 1000);
    let (a, journal) = start(&fake, options(&fake, "{}"));
    a.alloc(&owner("first"), None, None).unwrap();
    fake.fail("AssignPrivateIpAddresses", "InternalError", 500, 1);
    let got = burst(&a, 12, "pod");
    let ok = got.iter().filter(|r| r.is_ok()).count();
    let cloud = got.iter().filter(|r| **r == Err(ErrCode::Cloud)).count();
    println!("ok {ok}, cloud errors {cloud}");
    assert!(cloud > 0, "the injected error reached no request: {got:?}");
    assert_eq!(ok + cloud, 12, "{got:?}");
    let s = a.status().unwrap();
    assert_eq!(s.pending, 0);
    assert!(a.enis().unwrap().iter().all(|e| e.pending == 0));
    // Failed requests can be retried and succeed.
    for (i, r) in got.iter().enumerate() {
        if r.is_err() {
            a.alloc(&owner(&format!("pod-{i}")), None, None).unwrap();
        }
    }
    assert_eq!(a.status().unwrap().inuse, 13);
    assert_no_double_hand(&journal);
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn exhausted_vswitch_is_inhibited_for_the_window() {
    let fake = FakeCloud::new(4, 15, 2);
    let mut o = options(&fake, "{}");
    o.inhibit = Duration::from_millis(700);
    let (a, _journal) = start(&fake, o);
    a.alloc(&owner("a"), None, None).unwrap();
    // Two more need an assign of 2, the vswitch has 1 left: the call for
    // 2 is refused, the last address is still had in a call for one, and
    // only the call for one after it inhibits the vswitch.
    let got = burst(&a, 2, "b");
    assert_eq!(
        got.iter().filter(|r| r.is_ok()).count(),
        1,
        "the last free address is handed out: {got:?}"
    );
    assert_eq!(
        got.iter()
            .filter(|r| **r == Err(ErrCode::Exhausted))
            .count(),
        1,
        "{got:?}"
    );
    let enis = a.enis().unwrap();
    assert!(enis[0].inhibited_until.is_some(), "{enis:?}");
    let calls = (
        fake.calls("AssignPrivateIpAddresses"),
        fake.calls("CreateNetworkInterface"),
    );
    // During the window: refused at once, without asking the cloud.
    let started = Instant::now();
    assert_eq!(
        a.alloc(&owner("c"), None, None).unwrap_err().code,
        ErrCode::Exhausted
    );
    assert!(started.elapsed() < Duration::from_millis(500));
    assert_eq!(
        calls,
        (
            fake.calls("AssignPrivateIpAddresses"),
            fake.calls("CreateNetworkInterface")
        )
    );
    // After it, allocation resumes.
    fake.set_free("vsw-a", 100);
    assert!(eventually(Duration::from_secs(3), || a.enis().unwrap()[0]
        .inhibited_until
        .is_none()));
    a.alloc(&owner("d"), None, None).unwrap();
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn failed_eni_creation_is_rolled_back_and_fails_its_requests() {
    let fake = FakeCloud::new(4, 15, 1000);
    fake.fail(
        "AttachNetworkInterface",
        "InvalidOperation.InvalidEcsState",
        400,
        1,
    );
    let (a, _journal) = start(&fake, options(&fake, "{}"));
    let started = Instant::now();
    let err = a.alloc(&owner("a"), None, None).unwrap_err();
    assert_eq!(err.code, ErrCode::Cloud);
    assert_eq!(
        err.cloud_code.as_deref(),
        Some("InvalidOperation.InvalidEcsState"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(2), "failed at once");
    assert!(
        fake.enis().iter().all(|e| e.primary),
        "the ENI was deleted: {:?}",
        fake.enis()
    );
    let log = fake.log();
    assert!(
        log[0].starts_with("create") && log.last().unwrap().starts_with("delete"),
        "{log:?}"
    );
    assert_eq!(a.status().unwrap().pending, 0);
    // The ENI slot and the operation slot came back.
    a.alloc(&owner("b"), None, None).unwrap();
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn dispose_order_secondaries_then_the_eni_and_never_the_primary() {
    let fake = FakeCloud::new(4, 15, 1000);
    let mut o = options(&fake, r#"{"max_pool_size": 0}"#);
    o.pool_check_interval = Duration::from_millis(100);
    let (a, journal) = start(&fake, o);
    let got = burst(&a, 12, "pod");
    assert!(got.iter().all(|r| r.is_ok()));
    for i in 0..12 {
        assert!(a
            .release(&owner(&format!("pod-{i}")), None)
            .unwrap()
            .is_some());
    }
    assert!(
        eventually(Duration::from_secs(5), || fake.enis().len() == 1),
        "{:?}",
        fake.enis()
    );
    let log = fake.log();
    let first_detach = log.iter().position(|l| l.starts_with("detach")).unwrap();
    let unassigned: usize = log
        .iter()
        .filter(|l| l.starts_with("unassign"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<usize>().unwrap())
        .sum();
    assert_eq!(
        unassigned, 11,
        "every secondary, never the primary: {log:?}"
    );
    assert!(
        log.iter().rposition(|l| l.starts_with("unassign")).unwrap() < first_detach,
        "{log:?}"
    );
    assert!(log[first_detach + 1..]
        .iter()
        .any(|l| l.starts_with("delete")));
    // The cloud deleted it before the worker's report reached the pool.
    assert!(
        eventually(Duration::from_secs(5), || a.status().unwrap().enis == 0),
        "{:?}",
        a.status()
    );
    assert!(journal.state.lock().allocations.is_empty());
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn alloc_is_idempotent_and_concurrent_allocs_of_one_owner_share_an_address() {
    let fake = FakeCloud::new(4, 15, 1000);
    let (a, _journal) = start(&fake, options(&fake, "{}"));
    let got: Vec<Ipv4Addr> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8)
            .map(|_| s.spawn(|| a.alloc(&owner("same"), None, None).unwrap().ip))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(got.iter().all(|ip| *ip == got[0]), "{got:?}");
    assert_eq!(a.alloc(&owner("same"), None, None).unwrap().ip, got[0]);
    assert_eq!(a.status().unwrap().inuse, 1);
    assert_eq!(a.show(&owner("same")).unwrap().ip, got[0]);
    assert_eq!(a.show(&owner("other")).unwrap_err().code, ErrCode::NotFound);
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn sticky_addresses_return_to_their_owner() {
    let fake = FakeCloud::new(4, 15, 1000);
    let (a, journal) = start(
        &fake,
        options(&fake, r#"{"ip_stick_time": 60, "min_pool_size": 3}"#),
    );
    let ip = a.alloc(&owner("sts/web-0"), None, None).unwrap().ip;
    assert_eq!(
        a.release(&owner("sts/web-0"), None).unwrap(),
        Some(ip.into())
    );
    assert!(journal.state.lock().holds.contains_key(&ip));
    for i in 0..3 {
        assert_ne!(
            a.alloc(&owner(&format!("other-{i}")), None, None)
                .unwrap()
                .ip,
            ip
        );
    }
    assert_eq!(a.alloc(&owner("sts/web-0"), None, None).unwrap().ip, ip);
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn a_cold_alloc_times_out_and_its_address_is_not_lost() {
    let fake = FakeCloud::new(4, 15, 1000).with_latency(Duration::from_millis(400));
    let mut o = options(&fake, "{}");
    o.alloc_timeout = Duration::from_millis(300);
    let (a, _journal) = start(&fake, o);
    let started = Instant::now();
    let err = a.alloc(&owner("slow"), None, None).unwrap_err();
    assert_eq!(err.code, ErrCode::Timeout);
    assert!(started.elapsed() < Duration::from_millis(1500));
    assert!(eventually(Duration::from_secs(5), || {
        let s = a.status().unwrap();
        s.pending == 0 && s.idle == 1
    }));
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn shutdown_answers_waiting_allocs() {
    let fake = FakeCloud::new(4, 15, 1000).with_latency(Duration::from_millis(1500));
    let (a, _journal) = start(&fake, options(&fake, "{}"));
    std::thread::scope(|s| {
        let h = s.spawn(|| a.alloc(&owner("late"), None, None));
        assert!(eventually(Duration::from_secs(2), || a
            .snapshot()
            .unwrap()
            .waiters
            == 1));
        let _ = a.stop.try_send(());
        let err = h.join().unwrap().unwrap_err();
        assert_eq!(err.code, ErrCode::ShuttingDown);
    });
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn dual_stack_allocations_are_pairs() {
    let fake = FakeCloud::new(4, 15, 1000);
    let (a, _journal) = start(&fake, options(&fake, r#"{"ip_stack": "dual"}"#));
    let got = burst(&a, 3, "dual");
    assert!(got.iter().all(|r| r.is_ok()));
    for i in 0..3 {
        assert!(a.show(&owner(&format!("dual-{i}"))).unwrap().ipv6.is_some());
    }
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn dual_stack_shedding_gives_back_both_halves_of_a_pair() {
    shed_dual(false);
}

#[test]
fn dual_stack_shedding_retries_an_ipv6_half_that_failed() {
    shed_dual(true);
}

fn shed_dual(fail_v6_once: bool) {
    let fake = FakeCloud::new(4, 15, 1000);
    let mut o = options(&fake, r#"{"ip_stack": "dual", "max_pool_size": 0}"#);
    o.pool_check_interval = Duration::from_millis(100);
    let (a, _journal) = start(&fake, o);
    let got = burst(&a, 12, "pod");
    assert!(got.iter().all(|r| r.is_ok()), "{got:?}");
    if fail_v6_once {
        fake.fail("UnassignIpv6Addresses", "InternalError", 500, 1);
    }
    // Keep one owner on a secondary address so the ENI stays.
    let kept = (0..12)
        .map(|i| owner(&format!("pod-{i}")))
        .find(|o| {
            let ip = a.show(o).unwrap().ip;
            fake.enis().iter().all(|e| e.v4.first() != Some(&ip))
        })
        .unwrap();
    for i in 0..12 {
        let o = owner(&format!("pod-{i}"));
        if o != kept {
            a.release(&o, None).unwrap();
        }
    }
    let managed = |fake: &FakeCloud| -> Vec<FakeEni> {
        fake.enis().into_iter().filter(|e| !e.primary).collect()
    };
    assert!(
        eventually(Duration::from_secs(5), || {
            let m = managed(&fake);
            m.len() == 1 && m[0].v4.len() == 2
        }),
        "{:?}",
        managed(&fake)
    );
    assert!(
        eventually(Duration::from_secs(5), || {
            let m = managed(&fake);
            m[0].v6.len() == m[0].v4.len()
        }),
        "every IPv6 given back with its IPv4: {:?}",
        managed(&fake)
    );
    if fail_v6_once {
        // One IPv6 unassign per shedding pass, plus the retry of the one
        // that failed.
        assert_eq!(
            fake.calls("UnassignIpv6Addresses"),
            fake.calls("UnassignPrivateIpAddresses") + 1,
            "{:?}",
            fake.log()
        );
    }
    assert!(a.show(&kept).unwrap().ipv6.is_some());
    // The cloud took them back before the worker's report reached the pool.
    assert!(
        eventually(Duration::from_secs(5), || a.status().unwrap().ips == 2),
        "{:?}",
        a.status()
    );
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn reconcile_gives_back_an_ipv6_the_allocator_never_heard_of() {
    let fake = FakeCloud::new(4, 15, 1000);
    let mut o = options(&fake, r#"{"ip_stack": "dual"}"#);
    o.pool_check_interval = Duration::from_millis(100);
    let (a, _journal) = start(&fake, o);
    assert!(a.alloc(&owner("one"), None, None).unwrap().ipv6.is_some());
    let eni = fake.enis().into_iter().find(|e| !e.primary).unwrap();
    let before = eni.v6.len();
    fake.assign_ipv6_direct(&eni.id);
    assert!(
        eventually(Duration::from_secs(5), || {
            fake.calls("UnassignIpv6Addresses") > 0
                && fake
                    .enis()
                    .iter()
                    .find(|e| e.id == eni.id)
                    .unwrap()
                    .v6
                    .len()
                    == before
        }),
        "{:?}",
        fake.log()
    );
    // The cloud took it back before the worker's report reached the pool.
    assert!(
        eventually(Duration::from_secs(5), || a.status().unwrap().ips == before),
        "{:?}",
        a.status()
    );
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn a_failed_commit_is_an_internal_error_and_fatal() {
    let fake = FakeCloud::new(4, 15, 1000);
    let (a, journal) = start(&fake, options(&fake, r#"{"min_pool_size": 2}"#));
    wait_for_an_idle_address(&a);
    journal.fail.store(true, Ordering::SeqCst);
    let err = a.alloc(&owner("x"), None, None).unwrap_err();
    assert_eq!(err.code, ErrCode::Internal);
    assert!(a.fatal().recv_timeout(Duration::from_secs(2)).is_ok());
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn min_pool_is_filled_in_the_background() {
    let fake = FakeCloud::new(4, 15, 1000);
    let (a, _journal) = start(
        &fake,
        options(&fake, r#"{"min_pool_size": 12, "max_pool_size": 20}"#),
    );
    assert!(eventually(Duration::from_secs(5), || a
        .status()
        .unwrap()
        .idle
        >= 12));
    let s = a.status().unwrap();
    assert_eq!(s.pending, 0);
    assert!(s.idle <= 15, "{s:?}");
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

fn managed(id: &str, mac: &str, ips: &[&str]) -> FakeEni {
    let mut tags = std::collections::BTreeMap::new();
    tags.insert(TAG_CREATOR_KEY.to_string(), TAG_CREATOR_VALUE.to_string());
    tags.insert(TAG_INSTANCE_KEY.to_string(), INSTANCE.to_string());
    FakeEni {
        id: id.into(),
        mac: mac.into(),
        status: EniStatus::InUse,
        instance: Some(INSTANCE.into()),
        vswitch: "vsw-a".into(),
        v4: ips.iter().map(|s| s.parse().unwrap()).collect(),
        v6: Vec::new(),
        tags,
        sgs: vec!["sg-1".into()],
        primary: false,
    }
}

#[test]
fn recovery_keeps_owners_adopts_the_rest_and_cleans_up() {
    let fake = FakeCloud::new(4, 15, 1000);
    fake.insert(managed(
        "eni-kept",
        "00:16:3e:aa:00:01",
        &["10.0.9.1", "10.0.9.2", "10.0.9.3"],
    ));
    let mut loose = managed("eni-loose", "00:16:3e:aa:00:02", &["10.0.9.9"]);
    loose.status = EniStatus::Available;
    loose.instance = None;
    fake.insert(loose);
    let mut foreign = managed("eni-terway", "00:16:3e:aa:00:03", &["10.0.8.1"]);
    foreign.tags.insert(TAG_CREATOR_KEY.into(), "terway".into());
    fake.insert(foreign);
    let mut persisted = PersistedState::default();
    for (o, ip) in [("ns/a", "10.0.9.2"), ("ns/gone", "10.0.9.7")] {
        persisted.allocations.insert(
            o.into(),
            Stored {
                owner: o.into(),
                sandbox: None,
                ipv4: ip.parse().unwrap(),
                ipv6: None,
                ipv6_prefix: None,
                eni: "eni-kept".into(),
                at_ms: 1,
                gen: 0,
                attach: None,
                asked: Default::default(),
            },
        );
    }
    let r = recover(&*fake, INSTANCE, "", false, &persisted, None).unwrap();
    assert_eq!(r.pool.enis().len(), 1, "only the managed, attached ENI");
    let counts = crate::pool::views::counts(&r.pool);
    assert_eq!((counts.inuse, counts.idle), (1, 2));
    assert_eq!(
        r.pool.owner_ip(&owner("ns/a")).unwrap().v4(),
        "10.0.9.2".parse::<Ipv4Addr>().unwrap()
    );
    assert!(r.records.contains(&crate::store::Record::Forget {
        owner: "ns/gone".into()
    }));
    assert!(
        !fake.enis().iter().any(|e| e.id == "eni-loose"),
        "unattached leftover deleted"
    );
    assert!(
        fake.enis().iter().any(|e| e.id == "eni-terway"),
        "foreign ENI untouched"
    );
    // With quarantine (state rebuild), unowned addresses stay out of use.
    let r = recover(
        &*fake,
        INSTANCE,
        "",
        false,
        &persisted,
        Some(Duration::from_secs(3600)),
    )
    .unwrap();
    assert_eq!(crate::pool::views::counts(&r.pool).reserved, 2);
    assert_eq!(pick(&r.pool, &owner("new"), None, None), None);
    // The recovered pool serves.
    let (a, _j) = start_with(
        &fake,
        options(&fake, "{}"),
        recover(&*fake, INSTANCE, "", false, &persisted, None)
            .unwrap()
            .pool,
    );
    assert_eq!(
        a.show(&owner("ns/a")).unwrap().ip,
        "10.0.9.2".parse::<Ipv4Addr>().unwrap()
    );
    assert!(a.audit().unwrap().is_empty(), "{:?}", a.audit());
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn recovery_keeps_a_detached_eni_the_state_files_name_and_its_owners() {
    let fake = FakeCloud::new(4, 15, 1000);
    fake.insert(managed("eni-kept", "00:16:3e:aa:00:01", &["10.0.9.1"]));
    let mut away = managed("eni-away", "00:16:3e:aa:00:04", &["10.0.7.1", "10.0.7.2"]);
    away.status = EniStatus::Available;
    away.instance = None;
    fake.insert(away);
    let mut persisted = PersistedState::default();
    persisted.allocations.insert(
        "ns/held".into(),
        Stored {
            owner: "ns/held".into(),
            sandbox: None,
            ipv4: "10.0.7.2".parse().unwrap(),
            ipv6: None,
            ipv6_prefix: None,
            eni: "eni-away".into(),
            at_ms: 1,
            gen: 0,
            attach: None,
            asked: Default::default(),
        },
    );
    let r = recover(&*fake, INSTANCE, "", false, &persisted, None).unwrap();
    assert!(
        fake.enis().iter().any(|e| e.id == "eni-away"),
        "a detached ENI that owners hold addresses on is not deleted"
    );
    // Nothing forgotten (the sets the ENIs were found with are recorded).
    assert!(
        r.records
            .iter()
            .all(|r| matches!(r, crate::store::Record::EniSet { .. })),
        "nothing forgotten: {:?}",
        r.records
    );
    let held = r.pool.owner_ip(&owner("ns/held")).unwrap();
    assert_eq!(held.v4(), "10.0.7.2".parse::<Ipv4Addr>().unwrap());
    assert!(held.lost(), "withdrawn: never handed out");
    assert!(
        r.pool.eni("eni-away").unwrap().at_limit(),
        "nothing asked of it"
    );
    assert_eq!(
        r.pool.ips().count_on("eni-away"),
        1,
        "its idle address left"
    );
    let new = pick(&r.pool, &owner("new"), None, None);
    assert_ne!(new, Some(held.v4()));
    r.pool.check().unwrap();
}

#[test]
fn a_restart_from_the_state_files_serves_owners_at_once_and_nothing_new_before_the_openapi() {
    let fake = FakeCloud::new(4, 15, 1000);
    fake.insert(managed(
        "eni-kept",
        "00:16:3e:aa:00:01",
        &["10.0.9.1", "10.0.9.2", "10.0.9.3"],
    ));
    let mut persisted = PersistedState::default();
    let stored = |o: &str, ip: &str, eni: &str| Stored {
        owner: o.into(),
        sandbox: None,
        ipv4: ip.parse().unwrap(),
        ipv6: None,
        ipv6_prefix: None,
        eni: eni.into(),
        at_ms: 1,
        gen: 0,
        attach: None,
        asked: Default::default(),
    };
    persisted
        .allocations
        .insert("ns/a".into(), stored("ns/a", "10.0.9.2", "eni-kept"));
    let Provisional::Ready(r) = provisional(fake.metadata(), false, &persisted).unwrap() else {
        panic!("every recorded ENI is in metadata");
    };
    // Exactly what was handed out: no idle address before the OpenAPI.
    assert_eq!(r.pool.enis().len(), 1);
    let counts = crate::pool::views::counts(&r.pool);
    assert_eq!((counts.inuse, counts.idle), (1, 0));
    assert_eq!(fake.calls("DescribeNetworkInterfaces"), 0);

    let mut o = options(&fake, "{}");
    o.first_reconcile = Some(Duration::from_secs(3600));
    let (a, _j) = start_with(&fake, o, r.pool);
    assert_eq!(
        a.show(&owner("ns/a")).unwrap().ip,
        "10.0.9.2".parse::<Ipv4Addr>().unwrap()
    );
    assert_eq!(
        a.alloc(&owner("ns/a"), None, None).unwrap().ip,
        "10.0.9.2".parse::<Ipv4Addr>().unwrap(),
        "an owner gets its own address again before any OpenAPI call"
    );
    assert_eq!(fake.calls("DescribeNetworkInterfaces"), 0);
    // A new owner's alloc asks for the first reconcile at once (not in an
    // hour) and is served from what the OpenAPI shows.
    let got = a.alloc(&owner("ns/new"), None, None).unwrap().ip;
    assert!(fake.calls("DescribeNetworkInterfaces") > 0);
    assert!(
        ["10.0.9.1", "10.0.9.3"].contains(&got.to_string().as_str()),
        "{got}: one of the ENI's idle addresses, adopted at the reconcile"
    );
    assert!(a.audit().unwrap().is_empty(), "{:?}", a.audit());
    a.shutdown(Instant::now() + Duration::from_secs(5));

    // What metadata does not show makes a cold start (the OpenAPI first).
    persisted
        .allocations
        .insert("ns/b".into(), stored("ns/b", "10.0.7.1", "eni-detached"));
    match provisional(fake.metadata(), false, &persisted).unwrap() {
        Provisional::Cold(why) => assert!(why.contains("eni-detached"), "{why}"),
        Provisional::Ready(_) => panic!("an ENI metadata does not show was trusted"),
    }
    persisted.allocations.remove("ns/b");
    fake.hide_from_metadata("00:16:3e:aa:00:01");
    assert!(matches!(
        provisional(fake.metadata(), false, &persisted).unwrap(),
        Provisional::Cold(_)
    ));
}

#[test]
fn a_restart_from_the_state_files_knows_the_80s_its_owners_ipv6_were_carved_from() {
    let fake = FakeCloud::new(4, 15, 1000);
    fake.insert(managed(
        "eni-kept",
        "00:16:3e:aa:00:01",
        &["10.0.9.1", "10.0.9.2"],
    ));
    let p: eniip_cloud::Ipv6Prefix = "fd00:0:0:1:5::/80".parse().unwrap();
    let carved: std::net::Ipv6Addr = "fd00:0:0:1:5:1:2:3".parse().unwrap();
    let mut persisted = PersistedState::default();
    persisted.allocations.insert(
        "ns/a".into(),
        Stored {
            owner: "ns/a".into(),
            sandbox: None,
            ipv4: "10.0.9.2".parse().unwrap(),
            ipv6: Some(carved),
            ipv6_prefix: Some(p.to_string()),
            eni: "eni-kept".into(),
            at_ms: 1,
            gen: 0,
            attach: None,
            asked: Default::default(),
        },
    );
    let Provisional::Ready(r) = provisional(fake.metadata(), true, &persisted).unwrap() else {
        panic!("every recorded ENI is in metadata");
    };
    assert_eq!(r.pool.eni("eni-kept").unwrap().carve_prefix(), Some(p));
    let a = r.pool.allocation(&owner("ns/a")).unwrap();
    assert_eq!(
        (a.ipv6, a.ipv6_prefix),
        (Some(carved), Some(p)),
        "carved, not a single address"
    );
    r.pool.check().unwrap();
}

#[test]
fn audit_reports_a_leak_and_an_unknown_address() {
    let fake = FakeCloud::new(4, 15, 1000);
    let (a, _journal) = start(&fake, options(&fake, "{}"));
    a.alloc(&owner("x"), None, None).unwrap();
    assert!(a.audit().unwrap().is_empty(), "{:?}", a.audit());
    let eni = fake.enis().into_iter().find(|e| !e.primary).unwrap();
    fake.assign_ipv4_direct(&eni.id);
    let mut loose = managed("eni-leak", "00:16:3e:aa:00:09", &["10.0.9.9"]);
    loose.status = EniStatus::Available;
    loose.instance = None;
    fake.insert(loose);
    let diffs = a.audit().unwrap();
    assert_eq!(diffs.len(), 2, "{diffs:?}");
    assert!(diffs.iter().any(|d| d.contains("eni-leak")));
    assert!(diffs.iter().any(|d| d.contains("unknown locally")));
    fake.hide_from_metadata(&eni.mac);
    let diffs = a.audit().unwrap();
    assert!(
        diffs
            .iter()
            .any(|d| d.contains(&eni.id) && d.contains("missing from metadata")),
        "{diffs:?}"
    );
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

/// Options on both of the fake's vswitches (vsw-a first).
fn options_ab(fake: &FakeCloud, json: &str) -> AllocatorOptions {
    let mut o = options(fake, json);
    o.vswitches = vec!["vsw-a".into(), "vsw-b".into()];
    o.vswitch_policy = crate::config::VSwitchPolicy::Ordered;
    o
}

fn on(vswitch: &str) -> Intent {
    Intent {
        vswitch: Some(vswitch.into()),
        ..Intent::default()
    }
}

/// The vswitch of the fake ENI holding `ip`.
fn vswitch_of(fake: &FakeCloud, ip: Ipv4Addr) -> String {
    fake.enis()
        .into_iter()
        .find(|e| e.v4.contains(&ip))
        .map(|e| e.vswitch)
        .unwrap_or_default()
}

#[test]
fn an_alloc_that_asks_a_vswitch_gets_its_address_there() {
    let fake = FakeCloud::new(4, 15, 1000);
    let (a, journal) = start(&fake, options_ab(&fake, r#"{"max_pool_size": 20}"#));
    // An ENI on vsw-a with room is there; the pod's vswitch has none, so
    // one is created there.
    let plain = a.alloc(&owner("ns/plain"), None, None).unwrap();
    assert_eq!(vswitch_of(&fake, plain.ip), "vsw-a");
    let pinned = a
        .alloc_asking(&owner("ns/pinned"), None, on("vsw-b"))
        .unwrap();
    assert_eq!(vswitch_of(&fake, pinned.ip), "vsw-b");
    assert_eq!(pinned.intent.vswitch.as_deref(), Some("vsw-b"));
    assert_eq!(
        journal.state.lock().allocations["ns/pinned"]
            .asked
            .vswitch
            .as_deref(),
        Some("vsw-b"),
        "recorded"
    );
    // Asked again: the same; asked on the other vswitch: refused, named.
    assert_eq!(
        a.alloc_asking(&owner("ns/pinned"), None, on("vsw-b"))
            .unwrap()
            .ip,
        pinned.ip
    );
    assert_eq!(
        a.alloc(&owner("ns/pinned"), None, None).unwrap().ip,
        pinned.ip
    );
    let e = a
        .alloc_asking(&owner("ns/pinned"), None, on("vsw-a"))
        .unwrap_err();
    assert_eq!(e.code, ErrCode::BadRequest);
    assert!(
        e.message.starts_with("vswitch=vsw-a: ns/pinned holds"),
        "{e}"
    );
    // A burst of both kinds: each pinned one on its vswitch.
    let got: Vec<(String, Ipv4Addr)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..12)
            .map(|i| {
                let a = &a;
                s.spawn(move || {
                    let v = ["vsw-a", "vsw-b", ""][i % 3];
                    let intent = if v.is_empty() {
                        Intent::default()
                    } else {
                        on(v)
                    };
                    let got = a.alloc_asking(&owner(&format!("burst/{i}")), None, intent);
                    (v.to_string(), got.unwrap().ip)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (v, ip) in &got {
        if !v.is_empty() {
            assert_eq!(&vswitch_of(&fake, *ip), v, "{ip}");
        }
    }
    let ips: BTreeSet<Ipv4Addr> = got.iter().map(|(_, ip)| *ip).collect();
    assert_eq!(ips.len(), 12);
    assert_no_double_hand(&journal);
    // Every ticket ends (one asked for a waiter that another address
    // served ends with its call).
    assert!(eventually(Duration::from_secs(5), || a
        .status()
        .unwrap()
        .pending
        == 0));
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn a_vswitch_that_is_not_the_nodes_is_refused_and_changes_nothing() {
    let fake = FakeCloud::new(4, 15, 1000);
    let (a, journal) = start(&fake, options(&fake, "{}"));
    let e = a
        .alloc_asking(&owner("ns/p"), None, on("vsw-b"))
        .unwrap_err();
    assert_eq!(e.code, ErrCode::BadRequest);
    assert!(
        e.message
            .starts_with("vswitch=vsw-b is not one of this node's vswitches (vsw-a;"),
        "{e}"
    );
    let too_long = Intent {
        stick_s: Some(3601),
        ..Intent::default()
    };
    let e = a.alloc_asking(&owner("ns/p"), None, too_long).unwrap_err();
    assert_eq!(e.code, ErrCode::BadRequest);
    assert!(e.message.contains("max_ip_stick_time 3600 s"), "{e}");
    assert_eq!(a.show(&owner("ns/p")).unwrap_err().code, ErrCode::NotFound);
    assert!(journal.state.lock().allocations.is_empty());
    assert_eq!(fake.calls("CreateNetworkInterface"), 0);
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn a_vswitch_out_of_addresses_is_named_and_others_still_serve() {
    let fake = FakeCloud::new(4, 15, 1000);
    fake.set_free("vsw-b", 0);
    let (a, _journal) = start(&fake, options_ab(&fake, "{}"));
    let e = a
        .alloc_asking(&owner("ns/pinned"), None, on("vsw-b"))
        .unwrap_err();
    assert_eq!(e.code, ErrCode::Exhausted, "{e}");
    assert!(e.to_string().contains("vsw-b"), "{e}");
    // Inhibited now: the next one is refused at once, naming it.
    let e = a
        .alloc_asking(&owner("ns/pinned"), None, on("vsw-b"))
        .unwrap_err();
    assert_eq!(e.code, ErrCode::Exhausted, "{e}");
    assert!(
        e.message
            .starts_with("vswitch vsw-b: the vswitch asked, vsw-b, has no free addresses"),
        "{e}"
    );
    let plain = a.alloc(&owner("ns/plain"), None, None).unwrap();
    assert_eq!(vswitch_of(&fake, plain.ip), "vsw-a");
    assert_eq!(a.status().unwrap().pending, 0);
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn a_pod_asking_a_vswitch_where_no_eni_can_be_made_is_exhausted_naming_it() {
    // One usable ENI (two in all, the primary included), on vsw-a.
    let fake = FakeCloud::new(2, 15, 1000);
    let (a, _journal) = start(&fake, options_ab(&fake, "{}"));
    a.alloc(&owner("ns/plain"), None, None).unwrap();
    let e = a
        .alloc_asking(&owner("ns/pinned"), None, on("vsw-b"))
        .unwrap_err();
    assert_eq!(e.code, ErrCode::Exhausted, "{e}");
    assert!(
        e.message
            .starts_with("eni_slots: capacity reached for the vswitch asked, vsw-b:"),
        "{e}"
    );
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn an_owners_own_stick_time_keeps_its_address_across_a_restart() {
    let fake = FakeCloud::new(4, 15, 1000);
    // The node keeps nothing for a released owner; the pod asks 10 min.
    let (a, journal) = start(&fake, options(&fake, r#"{"min_pool_size": 3}"#));
    let sticky = Intent {
        stick_s: Some(600),
        ..Intent::default()
    };
    let web0 = a
        .alloc_asking(&owner("sts/web-0"), None, sticky.clone())
        .unwrap()
        .ip;
    let web1 = a
        .alloc_asking(&owner("sts/web-1"), None, sticky.clone())
        .unwrap()
        .ip;
    let plain = a.alloc(&owner("rs/plain"), None, None).unwrap().ip;
    a.release(&owner("sts/web-0"), None).unwrap();
    a.release(&owner("rs/plain"), None).unwrap();
    {
        let st = journal.state.lock();
        let hold = &st.holds[&web0];
        assert!(hold.reserved_until_ms > eniip_util::time::unix_ms() + 590_000);
        assert!(!st.holds.contains_key(&plain), "the node keeps nothing");
        assert_eq!(st.allocations["sts/web-1"].asked.stick_s, Some(600));
    }
    a.shutdown(Instant::now() + Duration::from_secs(5));

    // A restart: web-0's reservation holds, web-1's stick time applies to
    // its release.
    let persisted = journal.state.lock().clone();
    let r = recover(&*fake, INSTANCE, "", false, &persisted, None).unwrap();
    let (b, journal) = start_with(&fake, options(&fake, r#"{"min_pool_size": 3}"#), r.pool);
    for i in 0..4 {
        let got = b.alloc(&owner(&format!("new-{i}")), None, None).unwrap().ip;
        assert_ne!(got, web0, "reserved for sts/web-0");
    }
    b.release(&owner("sts/web-1"), None).unwrap();
    assert!(journal.state.lock().holds.contains_key(&web1));
    assert_eq!(
        b.alloc_asking(&owner("sts/web-0"), None, sticky.clone())
            .unwrap()
            .ip,
        web0
    );
    assert_eq!(b.alloc(&owner("sts/web-1"), None, None).unwrap().ip, web1);
    b.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn an_owner_re_created_on_another_vswitch_keeps_one_reservation_on_disk_too() {
    let fake = FakeCloud::new(4, 15, 1000);
    let (a, journal) = start(&fake, options_ab(&fake, "{}"));
    let asks = |v: &str| Intent {
        vswitch: Some(v.into()),
        stick_s: Some(600),
        ..Intent::default()
    };
    let db = owner("sts/db-0");
    let first = a.alloc_asking(&db, None, asks("vsw-a")).unwrap().ip;
    a.release(&db, None).unwrap();
    // Re-created asking the other vswitch: a new address there; released
    // again, its newest reservation is the one kept, in memory and on disk.
    let second = a.alloc_asking(&db, None, asks("vsw-b")).unwrap().ip;
    assert_eq!(vswitch_of(&fake, second), "vsw-b");
    a.release(&db, None).unwrap();
    let persisted = journal.state.lock().clone();
    let kept: Vec<Ipv4Addr> = persisted
        .holds
        .values()
        .filter(|h| h.last_owner.as_deref() == Some(db.as_str()))
        .map(|h| h.ipv4)
        .collect();
    assert_eq!(kept, vec![second], "{first} no longer kept");
    a.shutdown(Instant::now() + Duration::from_secs(5));
    // A restart keeps the newest one for it.
    let r = recover(&*fake, INSTANCE, "", false, &persisted, None).unwrap();
    let (b, _journal) = start_with(&fake, options_ab(&fake, "{}"), r.pool);
    assert_eq!(b.alloc_asking(&db, None, asks("vsw-b")).unwrap().ip, second);
    b.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn an_ipv4_only_owner_on_a_dual_node_gets_no_ipv6() {
    let fake = FakeCloud::new(4, 15, 1000);
    let (a, journal) = start(&fake, options(&fake, r#"{"ip_stack": "dual"}"#));
    let only4 = Intent {
        ipv4_only: true,
        ..Intent::default()
    };
    let got = a
        .alloc_asking(&owner("ns/v4"), None, only4.clone())
        .unwrap();
    assert_eq!(got.owner_ipv6(), None);
    let pair = got.ipv6.expect("its pair stays with it");
    assert_eq!(a.show(&owner("ns/v4")).unwrap().owner_ipv6(), None);
    let both = a.alloc(&owner("ns/both"), None, None).unwrap();
    assert!(both.owner_ipv6().is_some());
    assert_ne!(both.ipv6, Some(pair));
    // Asked again IPv4 only, or with nothing: the same (under a new
    // generation); IPv4 only for the owner of a pair: refused.
    let again = a.alloc(&owner("ns/v4"), None, None).unwrap();
    assert!(again.gen > got.gen);
    assert_eq!(
        Allocation {
            gen: got.gen,
            ..again
        },
        got
    );
    let e = a.alloc_asking(&owner("ns/both"), None, only4).unwrap_err();
    assert!(e.message.starts_with("ip-stack=ipv4: ns/both holds"), "{e}");
    assert_eq!(journal.state.lock().allocations["ns/v4"].ipv6, Some(pair));
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

#[test]
fn a_release_naming_an_older_generation_changes_nothing() {
    let fake = FakeCloud::new(4, 15, 1000);
    let (a, journal) = start(&fake, options(&fake, "{}"));
    let o = owner("ns/web-0");
    let sb = SandboxId::parse("c1").unwrap();
    let first = a.alloc(&o, Some(&sb), None).unwrap();
    // The same sandbox added again (a runtime reusing container ids):
    // the same address under a new generation, durable with it.
    let again = a.alloc(&o, Some(&sb), None).unwrap();
    assert_eq!(again.ip, first.ip);
    assert!(again.gen > first.gen, "{first:?} {again:?}");
    assert!(journal.state.lock().next_gen > again.gen.get());
    let release = |gen| {
        a.ask(Command::Release {
            owner: o.clone(),
            sandbox: Some(sb.clone()),
            gen: Some(gen),
        })
    };
    // The first ADD's DEL, late: stale, the address stays.
    assert_eq!(release(first.gen), Ok(Answer::Stale));
    assert_eq!(a.show(&o).unwrap().ip, again.ip);
    // The second's: released.
    assert_eq!(
        release(again.gen),
        Ok(Answer::Released(Some(std::net::IpAddr::V4(again.ip))))
    );
    assert!(a.show(&o).is_err());
    // A new allocation never gets a generation answered before.
    let third = a.alloc(&o, Some(&sb), None).unwrap();
    assert!(third.gen > again.gen);
    a.shutdown(Instant::now() + Duration::from_secs(5));
}

mod leading;
mod sg_sets;
