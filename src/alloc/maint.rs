//! The maintenance thread: the periodic cloud reads the actor must not do
//! itself. Every `pool_check_interval` (jittered) it
//! - refreshes vswitch free counts (`ordered` policy);
//! - describes the managed ENIs attached to this instance, reports
//!   security-group drift (the seed's Reconcile) and sends the actor the
//!   cloud's view so it can adopt what it lost and drop what is gone;
//! - deletes ENIs tagged for this instance and left unattached (a crash
//!   between create and attach), unless the actor knows them or they are
//!   younger than `sweep_min_age`. A delete holds an ENI operation permit.

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender};
use log::{debug, info, warn};

use crate::cloud::{
    CloudApi, CloudErrorKind, Eni, EniQuery, EniStatus, TAG_CREATOR_KEY, TAG_CREATOR_VALUE,
    TAG_INSTANCE_KEY,
};
use crate::config::VSwitchPolicy;
use crate::util::sem::Semaphore;
use crate::util::time::unix_secs;

use super::eniops;
use super::msg::{CloudEniView, Event, ReadyEni, Request};
use super::AllocatorOptions;

pub(super) fn spawn(
    opts: Arc<AllocatorOptions>,
    cloud: Arc<dyn CloudApi>,
    requests: Sender<Request>,
    events: Sender<Event>,
    op_sem: Semaphore,
    stop: Receiver<()>,
) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("eniipd-maint".into())
        .spawn(move || loop {
            let wait = opts
                .pool_check_interval
                .mul_f64(crate::util::rand::jitter(0.2));
            match stop.recv_timeout(wait) {
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                _ => return,
            }
            cycle(&opts, &*cloud, &requests, &events, &op_sem);
        })
}

fn cycle(
    opts: &AllocatorOptions,
    cloud: &dyn CloudApi,
    requests: &Sender<Request>,
    events: &Sender<Event>,
    op_sem: &Semaphore,
) {
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
    let mut loose = || {
        tagged
            .get_or_insert_with(|| tagged_unattached(cloud, &opts.instance_id, &opts.node_id))
            .clone()
    };
    match attached_managed(cloud, &opts.instance_id, &opts.node_id) {
        Ok(enis) => {
            let _ = events.send(Event::SecurityGroupDrift(drift(
                &enis,
                &opts.security_groups,
            )));
            let views = enis
                .iter()
                .filter(|e| e.status == EniStatus::InUse)
                .map(|e| view(cloud, e))
                .collect();
            // Read after the attached ones: an ENI detached in between is
            // then in both lists, never in neither (which means deleted).
            let detached = match &loose() {
                Ok(l) => Some(l.iter().map(|e| e.id.clone()).collect()),
                Err(_) => None,
            };
            let _ = events.send(Event::Reconcile {
                started,
                enis: views,
                detached,
            });
        }
        Err(e) => warn!("describing managed ENIs failed: {e}"),
    }
    if let Err(e) = sweep(opts, cloud, requests, op_sem, loose()) {
        warn!("sweeping unattached ENIs failed: {e}");
    }
}

/// The managed ENIs attached to this instance (any status).
pub fn attached_managed(
    cloud: &dyn CloudApi,
    instance_id: &str,
    node_id: &str,
) -> Result<Vec<Eni>, crate::cloud::CloudError> {
    let q = EniQuery {
        instance_id: Some(instance_id.to_string()),
        ..EniQuery::default()
    };
    Ok(cloud
        .describe_enis(&q)?
        .into_iter()
        .filter(|e| e.is_managed_by(instance_id, node_id))
        .collect())
}

/// ENIs tagged for this instance that are not attached to it.
pub fn tagged_unattached(
    cloud: &dyn CloudApi,
    instance_id: &str,
    node_id: &str,
) -> Result<Vec<Eni>, crate::cloud::CloudError> {
    let q = EniQuery {
        tags: vec![
            (TAG_CREATOR_KEY.to_string(), TAG_CREATOR_VALUE.to_string()),
            (TAG_INSTANCE_KEY.to_string(), instance_id.to_string()),
        ],
        ..EniQuery::default()
    };
    Ok(cloud
        .describe_enis(&q)?
        .into_iter()
        .filter(|e| {
            e.is_managed_by(instance_id, node_id) && e.instance_id.as_deref() != Some(instance_id)
        })
        .collect())
}

/// One line per managed ENI whose security groups differ from `want`.
pub fn drift(enis: &[Eni], want: &[String]) -> Vec<String> {
    let mut want = want.to_vec();
    want.sort();
    enis.iter()
        .filter_map(|e| {
            let mut have = e.security_group_ids.clone();
            have.sort();
            (!want.is_empty() && have != want).then(|| {
                format!(
                    "eni {} security groups {} differ from the configured {}",
                    e.id,
                    if have.is_empty() {
                        "-".into()
                    } else {
                        have.join(",")
                    },
                    want.join(",")
                )
            })
        })
        .collect()
}

fn view(cloud: &dyn CloudApi, e: &Eni) -> CloudEniView {
    let deadline = Instant::now() + Duration::from_secs(2);
    match eniops::ready_info(cloud, &e.id, &e.mac, &e.vswitch_id, deadline) {
        Ok(mut r) => {
            r.v4 = e.private_ips.clone();
            r.v6 = e.ipv6s.clone();
            r.prefixes = e.ipv4_prefixes.clone();
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
                id: e.id.clone(),
                mac: e.mac.clone(),
                vswitch: e.vswitch_id.clone(),
                cidr: String::new(),
                gateway: std::net::Ipv4Addr::UNSPECIFIED,
                primary_ip: e.primary_ip.unwrap_or(std::net::Ipv4Addr::UNSPECIFIED),
                v4: e.private_ips.clone(),
                v6: e.ipv6s.clone(),
                prefixes: e.ipv4_prefixes.clone(),
                prefix_fallback: false,
            },
            in_metadata: false,
        },
    }
}

fn sweep(
    opts: &AllocatorOptions,
    cloud: &dyn CloudApi,
    requests: &Sender<Request>,
    op_sem: &Semaphore,
    loose: Result<Vec<Eni>, crate::cloud::CloudError>,
) -> Result<(), crate::cloud::CloudError> {
    let candidates: Vec<Eni> = loose?
        .into_iter()
        .filter(|e| e.status == EniStatus::Available)
        .filter(|e| {
            e.created_at
                .is_none_or(|t| unix_secs().saturating_sub(t) >= opts.sweep_min_age.as_secs())
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
