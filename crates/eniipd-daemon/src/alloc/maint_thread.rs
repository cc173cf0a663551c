//! The maintenance thread: the periodic cloud reads the actor must not do
//! itself. Every `pool_check_interval` (jittered) it
//! - refreshes vswitch free counts (`ordered` policy);
//! - describes the managed ENIs attached to this instance, logs
//!   security-group drift (the seed's Reconcile) and sends the actor the
//!   cloud's view so it can adopt what it lost and drop what is gone;
//! - deletes ENIs tagged for this instance and left unattached (a crash
//!   between create and attach), unless the actor knows them or they are
//!   younger than `sweep_min_age`. A delete holds an ENI operation permit.
//!
//! After a restart served from the state files, the first pass comes
//! early (`first_reconcile`, or at once when the actor asks), is retried
//! soon while it fails, checks for another eniipd's ENIs and sweeps every
//! loose ENI whatever its age: it does what a first start does before
//! serving, and the actor hands out nothing new until its view arrives.

use std::collections::BTreeSet;
use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender};
use log::{debug, info, warn};

use crate::config::VSwitchPolicy;
use eniip_cloud::{CloudApi, CloudErrorKind, Eni, EniStatus};
use eniip_protocol::core::EniInfo;
use eniip_util::sem::Semaphore;
use eniip_util::time::unix_secs;

use super::eniops;
use super::mailbox::{CloudEniView, Event, ReadyEni, Request};
use super::ownership::{attached, live_peers, peer_refusal, tagged_for_instance, unattached};
use super::AllocatorOptions;

/// What wakes the maintenance thread besides its period.
pub(super) struct Wakeups {
    /// The allocator stops.
    pub(super) stop: Receiver<()>,
    /// The allocator wants the first reconcile now (after a restart
    /// served from the state files, an `alloc` waits on it).
    pub(super) kick: Receiver<()>,
}

pub(super) fn spawn(
    opts: Arc<AllocatorOptions>,
    cloud: Arc<dyn CloudApi>,
    requests: Sender<Request>,
    events: Sender<Event>,
    op_sem: Semaphore,
    wake: Wakeups,
    fatal: Sender<super::Fatal>,
) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("eniipd-maint".into())
        .spawn(move || {
            let period = || {
                opts.pool_check_interval
                    .mul_f64(eniip_util::rand::jitter(0.2))
            };
            // After a restart served from the state files the first pass
            // comes early (spread over the fleet by the daemon's jitter),
            // and is tried again soon while it fails: until it has run,
            // nothing new is handed out.
            let mut first = opts.first_reconcile.is_some();
            let mut leftovers = BTreeSet::new();
            let mut retry = Duration::from_secs(1);
            let mut wait = opts.first_reconcile.unwrap_or_else(period);
            // The actor drops its end once it no longer needs a kick (or
            // never had one): from then on only the period wakes.
            let mut kick = wake.kick;
            loop {
                crossbeam_channel::select! {
                    recv(wake.stop) -> _ => return,
                    recv(kick) -> k => if k.is_err() {
                        kick = crossbeam_channel::never();
                        continue;
                    },
                    default(wait) => {}
                }
                let reconciled = cycle(
                    &opts,
                    &*cloud,
                    &requests,
                    &events,
                    &op_sem,
                    Pass {
                        first,
                        leftovers: &mut leftovers,
                    },
                    &fatal,
                );
                // What the pass and the cloud calls since the last one
                // freed goes back to the kernel.
                eniip_util::memory::release_free();
                if first && !reconciled {
                    retry = (retry * 2).min(opts.pool_check_interval);
                    wait = retry.mul_f64(eniip_util::rand::jitter(0.5));
                    continue;
                }
                first = false;
                wait = period();
            }
        })
}

/// What a pass carries from the ones before.
struct Pass<'a> {
    /// Before the actor's first view after a restart served from the
    /// state files: the pass also makes the peer check a first start
    /// makes before serving.
    first: bool,
    /// Loose ENIs listed before the actor planned anything (so none is
    /// one this run is creating): leftovers of the last run, deleted
    /// whatever their age, as a first start does, until they are gone.
    leftovers: &'a mut BTreeSet<String>,
}

/// One pass; true when the actor was sent the cloud's view.
fn cycle(
    opts: &AllocatorOptions,
    cloud: &dyn CloudApi,
    requests: &Sender<Request>,
    events: &Sender<Event>,
    op_sem: &Semaphore,
    pass: Pass<'_>,
    fatal: &Sender<super::Fatal>,
) -> bool {
    let first = pass.first;
    if opts.vswitch_policy == VSwitchPolicy::Ordered {
        match cloud.describe_vswitches(&opts.vswitches) {
            Ok(v) => {
                let _ = events.send(Event::VSwitchFree(
                    v.into_iter().map(|s| (s.id, s.available_ips)).collect(),
                ));
            }
            Err(e) => warn!("refreshing vswitch free counts failed: {e}"),
        }
    }
    let started = Instant::now();
    // One DescribeNetworkInterfaces by tag a cycle, for reconcile and the
    // sweeper both.
    let mut tagged = None;
    let mut tagged = || {
        tagged
            .get_or_insert_with(|| tagged_for_instance(cloud, &opts.instance_id, &opts.node_id))
            .clone()
    };
    let mut reconciled = false;
    match attached(cloud, &opts.instance_id) {
        Ok(all) => {
            if first {
                let peers = live_peers(&all, &opts.instance_id, &opts.node_id);
                if !peers.is_empty() {
                    let _ = fatal.try_send(super::Fatal {
                        message: peer_refusal(&peers),
                        peer_running: true,
                    });
                    return false;
                }
            }
            let enis: Vec<Eni> = all
                .into_iter()
                .filter(|e| e.is_managed_by(&opts.instance_id, &opts.node_id))
                .collect();
            // Each ENI's groups, checked by the actor against its set
            // (it logs a change out of band; `audit` reads the cloud
            // itself).
            let _ = events.send(Event::SecurityGroups {
                started,
                enis: enis
                    .iter()
                    .map(|e| (e.id.clone(), e.security_group_ids.clone()))
                    .collect(),
            });
            let views: Vec<CloudEniView> = enis
                .iter()
                .filter(|e| e.status == EniStatus::InUse)
                .map(|e| view(cloud, e))
                .collect();
            // Every ENI tagged for this instance that exists, read after
            // the attached ones, less those seen attached: an ENI
            // detached or attached in between is then in one of the two
            // lists, never in neither (which means deleted).
            let detached = match &tagged() {
                Ok(t) => Some(
                    t.iter()
                        .filter(|e| !views.iter().any(|v| v.eni.id() == e.id))
                        .map(|e| e.id.clone())
                        .collect(),
                ),
                Err(_) => None,
            };
            reconciled = events
                .send(Event::Reconcile {
                    started,
                    enis: views,
                    detached,
                })
                .is_ok();
        }
        Err(e) => warn!("describing managed ENIs failed: {e}"),
    }
    // Nothing is planned before the first pass's view arrives, so what
    // that pass lists is the last run's.
    let loose = tagged().map(|t| unattached(t, &opts.instance_id));
    if let Ok(l) = &loose {
        let listed: BTreeSet<String> = l.iter().map(|e| e.id.clone()).collect();
        if first {
            pass.leftovers.extend(listed.iter().cloned());
        }
        pass.leftovers.retain(|id| listed.contains(id));
    }
    if let Err(e) = sweep(
        cloud,
        requests,
        op_sem,
        loose,
        opts.sweep_min_age,
        pass.leftovers,
    ) {
        warn!("sweeping unattached ENIs failed: {e}");
    }
    reconciled
}

fn view(cloud: &dyn CloudApi, e: &Eni) -> CloudEniView {
    let deadline = Instant::now() + Duration::from_secs(2);
    match eniops::ready_info(cloud, &e.id, &e.mac, &e.vswitch_id, deadline) {
        Ok(mut r) => {
            r.v4 = e.private_ips.clone();
            r.v6 = e.ipv6s.clone();
            r.prefixes = e.ipv4_prefixes.clone();
            r.v6_prefixes = e.ipv6_prefixes.clone();
            if let Some(p) = e.primary_ip {
                r.primary_ip = p;
            }
            CloudEniView {
                eni: r,
                in_metadata: true,
            }
        }
        Err(_) => CloudEniView {
            eni: ReadyEni {
                link: EniInfo {
                    eni: e.id.clone(),
                    mac: e.mac.clone(),
                    vswitch: e.vswitch_id.clone(),
                    cidr: String::new(),
                    gateway: std::net::Ipv4Addr::UNSPECIFIED,
                    v6: None,
                },
                primary_ip: e.primary_ip.unwrap_or(std::net::Ipv4Addr::UNSPECIFIED),
                v4: e.private_ips.clone(),
                v6: e.ipv6s.clone(),
                prefixes: e.ipv4_prefixes.clone(),
                prefix_fallback: false,
                v6_prefixes: e.ipv6_prefixes.clone(),
                v6_prefix_fallback: false,
            },
            in_metadata: false,
        },
    }
}

fn sweep(
    cloud: &dyn CloudApi,
    requests: &Sender<Request>,
    op_sem: &Semaphore,
    loose: Result<Vec<Eni>, eniip_cloud::CloudError>,
    min_age: Duration,
    leftovers: &BTreeSet<String>,
) -> Result<(), eniip_cloud::CloudError> {
    let candidates: Vec<Eni> = loose?
        .into_iter()
        .filter(|e| e.status == EniStatus::Available)
        .filter(|e| {
            leftovers.contains(&e.id)
                || e.created_at
                    .is_none_or(|t| unix_secs().saturating_sub(t) >= min_age.as_secs())
        })
        .collect();
    if candidates.is_empty() {
        return Ok(());
    }
    let (tx, rx) = bounded(1);
    if requests
        .send_timeout(Request::KnownEnis(tx), Duration::from_secs(2))
        .is_err()
    {
        return Ok(());
    }
    let Ok(known) = rx.recv_timeout(Duration::from_secs(10)) else {
        return Ok(());
    };
    for e in candidates.into_iter().filter(|e| !known.contains(&e.id)) {
        let Some(_permit) = op_sem.try_acquire() else {
            debug!(
                "sweeper: no ENI operation slot free; {} waits for the next round",
                e.id
            );
            continue;
        };
        match cloud.delete_eni(&e.id) {
            Ok(()) => info!(
                "deleted {}: tagged for this instance but left unattached",
                e.id
            ),
            Err(err) if err.kind == CloudErrorKind::InvalidState => {
                debug!("{} changed state; left for the next round", e.id)
            }
            Err(err) => warn!("deleting leaked {} failed: {err}", e.id),
        }
    }
    Ok(())
}
