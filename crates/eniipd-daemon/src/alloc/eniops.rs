//! ENI operations: create (create with the initial addresses, attach, wait
//! until the API says `InUse` and metadata shows the MAC) and free (detach,
//! wait until `Available`, delete). Each runs on its own named thread and
//! holds an operation permit for its whole life, so at most
//! `max_concurrent_eni_ops` run at once whatever path started them.
//!
//! Unlike the seed, a failure after the ENI exists rolls it back (detach if
//! attached, delete) before reporting, and the report carries any ENI the
//! rollback could not remove. Local state changes only when the actor gets
//! the report: nothing is forgotten before the cloud agreed.
//!
//! A create in prefix mode carries its /28s and, in dual stack, its IPv6
//! /80 (`Ipv6PrefixCount=1`): one call for both stacks. No room for a
//! prefix falls back a step at a time, the /28s first (a fragmented IPv4
//! block is the common case): /28s and /80, then single IPv4 addresses
//! and the /80, then single addresses of both stacks. A create whose
//! job says another configured vswitch has /28 room does not fall back
//! from its /28s: it fails with the refusal, and the actor plans its
//! demand on that other vswitch.

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use log::{debug, info, warn};

use eniip_cloud::{
    wait, CloudApi, CloudError, CloudErrorKind, CreateEni, Eni, EniStatus, TAG_CREATOR_KEY,
    TAG_CREATOR_VALUE, TAG_INSTANCE_KEY, TAG_NODE_KEY,
};
use eniip_protocol::core::EniInfo;
use eniip_util::sem::Permit;

use super::describe::StatusBatcher;
use super::mailbox::{Event, FreeFailure, OpId, ReadyEni};
use super::prefix_mode::V6From;
use super::AllocatorOptions;

/// Most IPv6 addresses one CreateNetworkInterface (or
/// AssignIpv6Addresses) may ask (`Ipv6AddressCount`, 1 to 10).
pub(crate) const MAX_V6_PER_CALL: usize = 10;

/// What a create operation needs.
#[derive(Debug, Clone)]
pub(crate) struct CreateJob {
    /// The operation id.
    pub(crate) op: OpId,
    /// The vswitch.
    pub(crate) vswitch: String,
    /// Security groups.
    pub(crate) security_groups: Vec<String>,
    /// Extra tags (`eni_tags`).
    pub(crate) extra_tags: Vec<(String, String)>,
    /// This instance.
    pub(crate) instance_id: String,
    /// This daemon's node id.
    pub(crate) node_id: String,
    /// Addresses to create it with, its primary included (>= 1); with
    /// `prefixes`, only if the vswitch has no free /28.
    pub(crate) init: usize,
    /// /28 prefixes to create it with (prefix mode; 0: single addresses).
    pub(crate) prefixes: usize,
    /// Where its IPv6 come from (dual stack): a /80 with the create, or
    /// as many single addresses as IPv4 ones.
    pub(crate) v6: Option<V6From>,
    /// Deadline for attach + InUse + metadata.
    pub(crate) ready_timeout: Duration,
    /// How long to wait for metadata to list the initial addresses.
    pub(crate) metadata_wait: Duration,
    /// With `prefixes`: fall back to single addresses if the vswitch has
    /// no free /28 (false: another vswitch has room, fail instead).
    pub(crate) fall_back: bool,
}

impl CreateJob {
    /// Creation `op` on `vswitch` with `prefixes` /28s, or `singles`
    /// addresses, their IPv6 from `v6`, with this node's settings.
    pub(crate) fn new(
        opts: &AllocatorOptions,
        (op, vswitch): (OpId, String),
        singles: usize,
        prefixes: usize,
        v6: Option<V6From>,
    ) -> CreateJob {
        CreateJob {
            op,
            vswitch,
            security_groups: opts.security_groups.clone(),
            extra_tags: opts.eni_tags.clone(),
            instance_id: opts.instance_id.clone(),
            node_id: opts.node_id.clone(),
            init: singles,
            prefixes,
            v6,
            ready_timeout: opts.eni_ready_timeout,
            metadata_wait: opts.metadata_wait,
            fall_back: true,
        }
    }

    /// The same, failing rather than falling back to single addresses
    /// when the vswitch has no free /28 (`elsewhere`: another vswitch
    /// has room).
    pub(crate) fn prefixes_elsewhere(mut self, elsewhere: bool) -> CreateJob {
        self.fall_back = !elsewhere;
        self
    }
}

/// The tags every eniipd ENI carries, then `extra`.
pub(crate) fn eni_tags(
    instance_id: &str,
    node_id: &str,
    extra: &[(String, String)],
) -> Vec<(String, String)> {
    let mut tags = vec![
        (TAG_CREATOR_KEY.to_string(), TAG_CREATOR_VALUE.to_string()),
        (TAG_INSTANCE_KEY.to_string(), instance_id.to_string()),
        (TAG_NODE_KEY.to_string(), node_id.to_string()),
    ];
    tags.extend(extra.iter().cloned());
    tags
}

/// Runs a create operation on a new thread holding `permit`.
pub(crate) fn spawn_create(
    job: CreateJob,
    cloud: Arc<dyn CloudApi>,
    batcher: Arc<StatusBatcher>,
    events: Sender<Event>,
    permit: Permit,
) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("eni-create-{}", job.op))
        .stack_size(256 * 1024)
        .spawn(move || {
            let op = job.op;
            let event = match create(&job, &*cloud, &batcher, &events) {
                Ok(eni) => Event::EniReady { op, eni },
                Err((error, leaked)) => Event::EniFailed { op, error, leaked },
            };
            // Free the slot before the actor hears of it: it plans the next
            // operation as soon as it does.
            drop(permit);
            let _ = events.send(event);
        })
}

type CreateFailure = (CloudError, Option<String>);

/// The CreateNetworkInterface request of `job` with `prefixes` /28s and,
/// in dual stack, a /80 (`v6_prefix`) or single IPv6 addresses.
fn create_request(job: &CreateJob, prefixes: usize, v6_prefix: bool) -> CreateEni {
    let singles_v6 = job.v6.is_some() && !v6_prefix;
    let mut init = job.init.max(1);
    if singles_v6 {
        // Each IPv4 needs its IPv6 in the same call (at most 10).
        init = init.min(MAX_V6_PER_CALL);
    }
    CreateEni {
        vswitch_id: job.vswitch.clone(),
        security_group_ids: job.security_groups.clone(),
        secondary_ipv4_count: if prefixes > 0 { 0 } else { init - 1 },
        ipv6_count: if singles_v6 { init } else { 0 },
        ipv6_prefixes: usize::from(v6_prefix),
        tags: eni_tags(&job.instance_id, &job.node_id, &job.extra_tags),
        description: "interface created by eniipd".into(),
    }
}

/// What a create fell back from.
#[derive(Debug, Default, Clone, Copy)]
struct FellBack {
    /// No free /28: single IPv4 addresses.
    v4: bool,
    /// No /80 to give: single IPv6 addresses.
    v6: bool,
}

/// CreateNetworkInterface for `job`, falling back a step at a time where
/// the vswitch has no room for a prefix (see the module doc).
fn create_call(job: &CreateJob, cloud: &dyn CloudApi) -> Result<(Eni, FellBack), CloudError> {
    let mut prefixes = job.prefixes;
    let mut v6_prefix = job.v6 == Some(V6From::NewPrefix);
    let mut fell = FellBack::default();
    loop {
        let req = create_request(job, prefixes, v6_prefix);
        match cloud.create_eni_with_prefixes(&req, prefixes) {
            Err(e)
                if e.kind == CloudErrorKind::PrefixExhausted && prefixes > 0 && !job.fall_back =>
            {
                warn!(
                    "{} has no free /28 prefix ({}); another vswitch has room, the ENI goes there",
                    job.vswitch,
                    e.code_or_kind()
                );
                return Err(e);
            }
            Err(e) if e.kind == CloudErrorKind::PrefixExhausted && prefixes > 0 => {
                warn!(
                    "{} has no free /28 prefix ({}); creating the ENI with single addresses",
                    job.vswitch,
                    e.code_or_kind()
                );
                fell.v4 = true;
                prefixes = 0;
            }
            Err(e) if e.kind == CloudErrorKind::PrefixExhausted && v6_prefix => {
                warn!(
                    "{} has no IPv6 /80 prefix to give ({}); creating the ENI with single IPv6 addresses",
                    job.vswitch,
                    e.code_or_kind()
                );
                fell.v6 = true;
                v6_prefix = false;
            }
            other => return other.map(|eni| (eni, fell)),
        }
    }
}

fn create(
    job: &CreateJob,
    cloud: &dyn CloudApi,
    batcher: &StatusBatcher,
    events: &Sender<Event>,
) -> Result<ReadyEni, CreateFailure> {
    let (eni, fell) = create_call(job, cloud).map_err(|e| (e, None))?;
    info!(
        "created {} on {} with {} address(es)",
        eni.id,
        job.vswitch,
        eni.private_ips.len()
    );
    let _ = events.send(Event::EniCreated {
        op: job.op,
        eni: eni.id.clone(),
    });
    let deadline = Instant::now() + job.ready_timeout;
    let attached = cloud.attach_eni(&eni.id, &job.instance_id);
    // Metadata lags the API, so once it lists the MAC the API normally says
    // InUse already: waiting on metadata first (free) usually leaves a
    // single DescribeNetworkInterfaces to confirm, shared with the other
    // ENI operations running now.
    let ready = attached.and_then(|()| {
        wait::wait_mac_present(cloud.metadata(), &eni.mac, deadline)?;
        batcher.wait_status(&eni.id, EniStatus::InUse, deadline)?;
        ready_info(cloud, &eni.id, &eni.mac, &job.vswitch, deadline)
    });
    match ready {
        Ok(mut ready) => {
            // The create answer is authoritative for the initial addresses;
            // metadata may still lag behind it.
            ready.v4 = eni.private_ips.clone();
            ready.v6 = eni.ipv6s.clone();
            ready.prefixes = eni.ipv4_prefixes.clone();
            ready.prefix_fallback = fell.v4;
            ready.v6_prefixes = eni.ipv6_prefixes.clone();
            ready.v6_prefix_fallback = fell.v6;
            if let Some(p) = eni.primary_ip {
                ready.primary_ip = p;
            }
            let md_deadline = Instant::now() + job.metadata_wait;
            if let Err(e) = wait::wait_ips_present(
                cloud.metadata(),
                &eni.mac,
                &ready.v4,
                &ready.v6,
                md_deadline,
            ) {
                warn!(
                    "{}: initial addresses not yet in metadata ({e}); using them anyway",
                    eni.id
                );
            }
            Ok(ready)
        }
        Err(error) => {
            warn!(
                "{} could not be made ready: {error}; rolling it back",
                eni.id
            );
            let leaked = match rollback(cloud, &eni.id, &job.instance_id) {
                Ok(()) => None,
                Err(e) => {
                    warn!(
                        "rollback of {} failed: {e}; the sweeper will delete it",
                        eni.id
                    );
                    Some(eni.id.clone())
                }
            };
            Err((error, leaked))
        }
    }
}

/// Reads the gateway and CIDR of an attached ENI from metadata, waiting for
/// the per-MAC items to appear.
pub(crate) fn ready_info(
    cloud: &dyn CloudApi,
    eni_id: &str,
    mac: &str,
    vswitch: &str,
    deadline: Instant,
) -> Result<ReadyEni, CloudError> {
    let what = format!("the gateway and CIDR of {mac} ({eni_id}) in metadata");
    wait::poll_metadata(&what, deadline, || match cloud.metadata().eni(mac) {
        Ok(md) if md.vswitch_cidr.is_empty() => Ok(None),
        Ok(md) => Ok(md.gateway.map(|gateway| ReadyEni {
            link: EniInfo {
                eni: eni_id.to_string(),
                mac: mac.to_string(),
                vswitch: if md.vswitch_id.is_empty() {
                    vswitch.to_string()
                } else {
                    md.vswitch_id
                },
                cidr: md.vswitch_cidr,
                gateway,
                v6: None,
            },
            primary_ip: md.primary_ip.unwrap_or(std::net::Ipv4Addr::UNSPECIFIED),
            v4: md.ipv4s,
            v6: md.ipv6s,
            prefixes: Vec::new(),
            prefix_fallback: false,
            v6_prefixes: Vec::new(),
            v6_prefix_fallback: false,
        })),
        Err(e) if e.kind == CloudErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    })
}

/// Detaches (if attached) and deletes an ENI, waiting in between.
pub(crate) fn rollback(
    cloud: &dyn CloudApi,
    eni_id: &str,
    instance_id: &str,
) -> Result<(), CloudError> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let q = eniip_cloud::EniQuery {
        eni_ids: vec![eni_id.to_string()],
        ..Default::default()
    };
    let Some(eni) = cloud
        .describe_enis(&q)?
        .into_iter()
        .find(|e| e.id == eni_id)
    else {
        return Ok(());
    };
    match eni.status {
        EniStatus::Available => {}
        EniStatus::Deleting => return Ok(()),
        EniStatus::Attaching => {
            // Let the attach settle before undoing it.
            let _ = wait::wait_eni_status(cloud, eni_id, EniStatus::InUse, deadline);
            cloud.detach_eni(eni_id, instance_id)?;
            wait::wait_eni_status(cloud, eni_id, EniStatus::Available, deadline)?;
        }
        _ => {
            if eni.status == EniStatus::InUse {
                cloud.detach_eni(eni_id, instance_id)?;
            }
            wait::wait_eni_status(cloud, eni_id, EniStatus::Available, deadline)?;
        }
    }
    cloud.delete_eni(eni_id)
}

/// Runs a free operation (detach, wait, delete) on a new thread holding
/// `permit`.
pub(crate) fn spawn_free(
    eni: String,
    instance_id: String,
    cloud: Arc<dyn CloudApi>,
    events: Sender<Event>,
    permit: Permit,
) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("eni-free-{}", eni.trim_start_matches("eni-")))
        .stack_size(256 * 1024)
        .spawn(move || {
            let result = free(&*cloud, &eni, &instance_id);
            drop(permit);
            let _ = events.send(Event::EniFreed { eni, result });
        })
}

fn free(cloud: &dyn CloudApi, eni: &str, instance_id: &str) -> Result<(), FreeFailure> {
    cloud
        .detach_eni(eni, instance_id)
        .map_err(FreeFailure::Detach)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    match wait::wait_eni_status(cloud, eni, EniStatus::Available, deadline) {
        Ok(_) => {}
        Err(e) if e.kind == CloudErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(FreeFailure::Delete(e)),
    }
    cloud.delete_eni(eni).map_err(FreeFailure::Delete)?;
    debug!("{eni} detached and deleted");
    Ok(())
}
