//! The pool `eniipd` starts serving with: the state directory (locked
//! first), then from the state files and metadata on a restart they
//! confirm (no OpenAPI call before ready), else from the OpenAPI, with the
//! instance's facts (its type's limits, its security groups) and the
//! allocator's options computed from them (eniipd(8), "Start-up and
//! recovery").

use std::time::Duration;

use crossbeam_channel::Receiver;
use log::{info, warn};

use crate::alloc::capacity::{self, PoolSizes};
use crate::alloc::recover::{provisional, recover, Provisional, Recovered};
use crate::alloc::AllocatorOptions;
use crate::config::Config;
use crate::store::{PersistedState, Store, StoreOptions};
use eniip_cloud::{CloudApi, InstanceIdentity, MetadataApi};

use super::cloud::at_start;
use super::error::{exit, store_error, DaemonError};
use super::facts;
use super::other_eniipd::{foreign_enis, refuse_beside_peer};

/// Locks and loads the state directory (`--recover-state`: salvaging);
/// the quarantine to apply to addresses with no known owner, if any.
pub(super) fn open_state(
    cfg: &Config,
    recover_state: bool,
) -> Result<(Store, PersistedState, Option<Duration>), DaemonError> {
    if recover_state {
        let (store, state, report) =
            Store::open_recovering(&cfg.state_dir, StoreOptions::default())
                .map_err(|e| store_error(&e))?;
        warn!("state recovered: {report:?}");
        let q = report
            .quarantine_needed
            .then_some(Duration::from_secs(3600));
        Ok((store, state, q))
    } else {
        let (store, state) =
            Store::open(&cfg.state_dir, StoreOptions::default()).map_err(|e| store_error(&e))?;
        Ok((store, state, None))
    }
}

/// What [`restore`] gives: the instance's facts, the allocator's
/// options, the pool to start with.
pub(super) struct Restored {
    pub(super) facts: facts::InstanceFacts,
    pub(super) opts: AllocatorOptions,
    pub(super) recovered: Recovered,
}

/// What [`restore`] starts from.
pub(super) struct Restore<'a> {
    pub(super) persisted: &'a PersistedState,
    pub(super) quarantine: Option<Duration>,
    pub(super) node_id: String,
}

/// The instance's facts, the allocator's options and the pool to start
/// with: from the state files and metadata on a restart they confirm
/// (no OpenAPI call before ready), else from the OpenAPI (eniipd(8),
/// "Start-up and recovery").
pub(super) fn restore(
    cfg: &Config,
    identity: &InstanceIdentity,
    cloud: &dyn CloudApi,
    md: &dyn MetadataApi,
    from: Restore<'_>,
    signals: &Receiver<i32>,
) -> Result<Restored, DaemonError> {
    let budget = cfg.start_timeout;
    let (persisted, quarantine) = (from.persisted, from.quarantine);
    let dual = cfg.ip_stack == crate::config::IpStack::Dual;
    let kept = kept_facts(cfg, identity);
    // A restart whose state files metadata confirms is served from them
    // before the OpenAPI is asked anything (a fleet restarting at once
    // would otherwise spend the account's quota before any node serves).
    let warm = match (&kept, quarantine) {
        (Some(_), None) => match at_start("reading metadata", budget, signals, || {
            provisional(md, dual, persisted)
        })? {
            Provisional::Ready(r) => Some(*r),
            Provisional::Cold(why) => {
                info!("restoring the pool from the OpenAPI before serving: {why}");
                None
            }
        },
        _ => None,
    };
    let facts = match (&warm, kept) {
        (Some(_), Some(f)) => f,
        _ => ask_facts(cfg, identity, cloud, signals)?,
    };
    let mut opts = allocator_options(cfg, identity, &facts)?;
    opts.node_id = from.node_id.clone();
    opts.draining = persisted.draining;
    let recovered = match warm {
        Some(mut r) => {
            for n in r.notes.drain(..) {
                info!("{n}");
            }
            let first = first_reconcile_delay(cfg.pool_check_interval);
            info!(
                "restarted from the state files and metadata, before any OpenAPI call: nothing new is handed out until the first reconcile, in {} ms (or at the first alloc that needs an address)",
                first.as_millis()
            );
            opts.first_reconcile = Some(first);
            r
        }
        None => from_openapi(cfg, identity, cloud, &mut opts, &from, &facts, signals)?,
    };
    Ok(Restored {
        facts,
        opts,
        recovered,
    })
}

/// A first start: the pool from the OpenAPI, before serving, after the
/// checks a restart leaves to its first reconcile; the facts kept.
fn from_openapi(
    cfg: &Config,
    identity: &InstanceIdentity,
    cloud: &dyn CloudApi,
    opts: &mut AllocatorOptions,
    from: &Restore<'_>,
    facts: &facts::InstanceFacts,
    signals: &Receiver<i32>,
) -> Result<Recovered, DaemonError> {
    let budget = cfg.start_timeout;
    match cloud.describe_vswitches(&opts.vswitches) {
        Ok(v) => {
            let known: Vec<String> = v.iter().map(|s| s.id.clone()).collect();
            opts.vswitches = usable_vswitches(std::mem::take(&mut opts.vswitches), &known);
            opts.vswitch_free = v.into_iter().map(|s| (s.id, s.available_ips)).collect();
        }
        Err(e) => warn!(
            "DescribeVSwitches failed ({e}); the configured vswitches are used unchecked{}",
            if cfg.vswitch_selection_policy == crate::config::VSwitchPolicy::Ordered {
                " and start unordered"
            } else {
                ""
            }
        ),
    }
    at_start("looking for another eniipd's ENIs", budget, signals, || {
        foreign_enis(cloud, &identity.instance_id, &opts.node_id)
    })
    .and_then(refuse_beside_peer)?;
    let r = at_start(
        "restoring the pool from the cloud",
        budget * 3,
        signals,
        || {
            recover(
                cloud,
                &identity.instance_id,
                &opts.node_id,
                opts.dual,
                from.persisted,
                from.quarantine,
            )
        },
    )?;
    if let Err(e) = facts::save(&cfg.state_dir, facts) {
        warn!(
            "cannot keep the instance's facts in {} ({e}): the next start asks the OpenAPI again",
            cfg.state_dir.display()
        );
    }
    Ok(r)
}

/// The configured vswitches of this zone the cloud knows (`known`, from
/// DescribeVSwitches), in their order: one it does not know (a typo, one
/// deleted) is skipped with a warning naming it, rather than failing the
/// ENI creations that would pick it. When it knows none, all are kept
/// (the cloud's error then names them at the first creation).
fn usable_vswitches(configured: Vec<String>, known: &[String]) -> Vec<String> {
    let (usable, unknown): (Vec<String>, Vec<String>) =
        configured.iter().cloned().partition(|v| known.contains(v));
    if unknown.is_empty() {
        return configured;
    }
    if usable.is_empty() {
        warn!(
            "the cloud knows none of the configured vswitches ({}): ENIs cannot be created until `vswitches` names one of this zone",
            unknown.join(", ")
        );
        return configured;
    }
    for v in &unknown {
        warn!(
            "vswitch {v} is configured but the cloud does not know it (DescribeVSwitches): skipped; new ENIs use {}",
            usable.join(", ")
        );
    }
    usable
}

/// The instance's facts kept at the last cold start, if they describe
/// this instance and hold what this configuration needs from them.
fn kept_facts(cfg: &Config, identity: &InstanceIdentity) -> Option<facts::InstanceFacts> {
    match facts::load(&cfg.state_dir) {
        Ok(Some(f)) if !f.describe(identity) => {
            info!(
                "{} describes {} ({}), not this instance: asking the OpenAPI",
                facts::INSTANCE_FILE,
                f.instance_id,
                f.instance_type
            );
            None
        }
        Ok(Some(f)) if cfg.security_groups.is_empty() && f.security_groups.is_empty() => None,
        Ok(f) => f,
        Err(e) => {
            warn!("ignoring the kept instance facts: {e}");
            None
        }
    }
}

/// What the OpenAPI says about the instance: its type's limits and
/// (unless configured) its security groups.
fn ask_facts(
    cfg: &Config,
    identity: &InstanceIdentity,
    cloud: &dyn CloudApi,
    signals: &Receiver<i32>,
) -> Result<facts::InstanceFacts, DaemonError> {
    let budget = cfg.start_timeout;
    let limits = at_start("DescribeInstanceTypes", budget, signals, || {
        cloud.instance_type_limits(&identity.instance_type)
    })?;
    let security_groups = if cfg.security_groups.is_empty() {
        at_start("DescribeInstanceAttribute", budget, signals, || {
            cloud.instance_security_groups(&identity.instance_id)
        })?
    } else {
        Vec::new()
    };
    Ok(facts::InstanceFacts::new(
        identity,
        &limits,
        &security_groups,
    ))
}

/// When the first reconcile of a restart served from the state files
/// runs: at a random point of the first `min(pool_check_interval, 10 s)`,
/// so that the nodes of a fleet restarted at once spread their calls.
fn first_reconcile_delay(pool_check_interval: Duration) -> Duration {
    let spread = pool_check_interval.min(Duration::from_secs(10));
    spread.mul_f64(eniip_util::rand::with_thread_rng(|r| r.unit()))
}

fn allocator_options(
    cfg: &Config,
    identity: &InstanceIdentity,
    facts: &facts::InstanceFacts,
) -> Result<AllocatorOptions, DaemonError> {
    let limits = facts.limits();
    let security_groups = if cfg.security_groups.is_empty() {
        facts.security_groups.clone()
    } else {
        cfg.security_groups.clone()
    };
    let vswitches = match cfg.vswitches.get(&identity.zone_id) {
        Some(v) if !v.is_empty() => v.clone(),
        _ => vec![identity.vswitch_id.clone()],
    };
    let mut notes = Vec::new();
    let cap = capacity::compute(&limits, cfg, PoolSizes::of(cfg), &mut notes);
    for n in &notes {
        warn!("{n}");
    }
    if cap.total_ips == 0 {
        return Err(DaemonError::new(
            exit::CONFIG,
            format!(
                "no capacity: {} allows {} ENI(s) of {} address(es); with eni_cap_ratio {}, eni_cap_shift {} and max_eni {} no secondary ENI is usable",
                limits.instance_type, limits.eni_quantity, cap.ips_per_eni, cfg.eni_cap_ratio, cfg.eni_cap_shift, cfg.max_eni
            ),
        ));
    }
    info!(
        "{} in {}: {} usable ENI(s) x {} address(es) = capacity {}; idle pool {}..{}",
        identity.instance_type,
        identity.zone_id,
        cap.usable_enis,
        cap.ips_per_eni,
        cap.total_ips,
        cap.min_idle,
        cap.max_idle
    );
    let mut opts =
        AllocatorOptions::new(cfg, &identity.instance_id, vswitches, security_groups, cap);
    opts.config_view = capacity::effective_view(cfg, &cap);
    Ok(opts)
}

#[cfg(test)]
mod tests {
    use super::usable_vswitches;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn an_unknown_vswitch_is_skipped_unless_none_is_known() {
        let conf = ids(&["vsw-typo", "vsw-a", "vsw-b"]);
        assert_eq!(
            usable_vswitches(conf.clone(), &ids(&["vsw-b", "vsw-a"])),
            ids(&["vsw-a", "vsw-b"])
        );
        assert_eq!(usable_vswitches(conf.clone(), &ids(&[])), conf);
        assert_eq!(
            usable_vswitches(ids(&["vsw-a"]), &ids(&["vsw-a"])),
            ids(&["vsw-a"])
        );
    }
}
