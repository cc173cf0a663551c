//! Start-up recovery: the state file plus the cloud give the initial pool.
//!
//! The cloud decides which addresses exist: the ENIs tagged `creator=eniipd`
//! for this instance and attached to it, with their addresses from
//! DescribeNetworkInterfaces (metadata lags, so where the two disagree the
//! OpenAPI wins and the difference is logged). The state file decides who
//! holds them: recorded owners whose address is still there keep it;
//! addresses nobody recorded become idle; recorded owners whose address is
//! gone are dropped (logged, and `Forget` records make that durable).
//! Tagged ENIs left unattached (a crash between create and attach) are
//! deleted; ones caught mid-attach are waited for and adopted; ones caught
//! mid-detach are finished off.
//!
//! An ENI is gone only when the OpenAPI says so (deleted, or attached to
//! another instance). One the state files name that is merely detached
//! (an operator detached it while eniipd was down) is neither deleted nor
//! forgotten: it is kept as a running daemon keeps an ENI detached behind
//! its back, its owners' addresses withdrawn (kept for them, never handed
//! out, the ENI asked for nothing) until it is attached again and a
//! reconcile finds them, or until they are released.
//!
//! A restart need not wait for the OpenAPI: [`provisional`] rebuilds, from
//! the state files and metadata alone, the pool of what was handed out
//! (every recorded owner and hold, on the ENIs metadata shows attached),
//! with no address to hand out. The allocator serves it at once and hands
//! out nothing new until its first reconcile with the OpenAPI has adopted
//! what the cloud has (see `Actor::verified`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use log::{info, warn};

use crate::pool::{PoolIp, PoolState};
use crate::store::{PersistedState, Record};
use eniip_cloud::{
    wait, CloudApi, CloudError, Eni, EniStatus, Ipv6Prefix, MetadataApi, MetadataEni,
};
use eniip_protocol::core::EniInfo;
use eniip_util::time::unix_ms;

use super::eniops;
use super::ownership::{attached_managed, tagged_unattached};

/// The pool to start with and the records that make the corrections
/// durable.
#[derive(Debug)]
pub(crate) struct Recovered {
    /// The pool.
    pub(crate) pool: PoolState,
    /// Records to commit before serving (dropped owners, stale holds,
    /// quarantine).
    pub(crate) records: Vec<Record>,
    /// Human-readable lines for the start-up log.
    pub(crate) notes: Vec<String>,
}

/// Rebuilds the pool. `quarantine`: after a state rebuild, keep every
/// address with no known owner out of circulation this long.
///
/// The phases: ENIs left half-made are finished off, the attached ones
/// settled and adopted with their addresses, the recorded owners and
/// holds restored on them, and (after a rebuild) the rest quarantined.
pub(crate) fn recover(
    cloud: &dyn CloudApi,
    instance_id: &str,
    node_id: &str,
    dual: bool,
    persisted: &PersistedState,
    quarantine: Option<Duration>,
) -> Result<Recovered, CloudError> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut notes = Vec::new();
    let named = named_enis(persisted);
    let mut detached =
        delete_unattached(cloud, instance_id, node_id, &named, deadline, &mut notes)?;
    let adopted = settle_attached(
        cloud,
        instance_id,
        node_id,
        (&named, &mut detached),
        deadline,
        &mut notes,
    )?;
    let mut pool = PoolState::new(dual);
    let pairs = known_pairs(persisted);
    for e in &adopted {
        notes.push(adopt(cloud, &mut pool, e, &pairs, dual, deadline)?);
    }
    for e in &detached {
        notes.push(keep_detached(cloud.metadata(), &mut pool, e, persisted)?);
    }
    let now_ms = unix_ms();
    let mut records = restore_owners(&mut pool, persisted, now_ms);
    records.extend(super::sg_sets::recover(
        &mut pool,
        persisted,
        adopted.iter().chain(detached.iter()),
    ));
    for e in &detached {
        withdraw_detached(&mut pool, &e.id);
    }
    if let Some(q) = quarantine {
        notes.push(quarantine_idle(&mut pool, q, now_ms, &mut records));
    }
    if let Err(e) = pool.check() {
        return Err(CloudError::new(
            eniip_cloud::CloudErrorKind::Api,
            "recovery",
            format!("inconsistent state after recovery: {e}"),
        ));
    }
    Ok(Recovered {
        pool,
        records,
        notes,
    })
}

/// What [`provisional`] made of the state files and metadata.
#[derive(Debug)]
pub(crate) enum Provisional {
    /// The pool of what was handed out, to serve before the first
    /// reconcile.
    Ready(Box<Recovered>),
    /// The state files name what metadata does not show (an ENI detached
    /// while the daemon was down, a state directory from another
    /// instance): only the OpenAPI can say what is left. Why.
    Cold(String),
}

/// The pool of a restart before the OpenAPI is asked: the ENIs the state
/// files name (by their owners' and holds' addresses), with the datapath
/// facts metadata gives for each, and on them exactly the recorded
/// addresses, their owners and holds. Nothing idle: which other addresses
/// the ENIs hold is the OpenAPI's to say (metadata lags both ways).
pub(crate) fn provisional(
    md: &dyn MetadataApi,
    dual: bool,
    persisted: &PersistedState,
) -> Result<Provisional, CloudError> {
    let mut named: BTreeMap<&str, Vec<(Ipv4Addr, Option<Ipv6Addr>)>> = BTreeMap::new();
    for a in persisted.allocations.values() {
        named
            .entry(a.eni.as_str())
            .or_default()
            .push((a.ipv4, a.ipv6));
    }
    for h in persisted.holds.values() {
        named
            .entry(h.eni.as_str())
            .or_default()
            .push((h.ipv4, h.ipv6));
    }
    // The /80s recorded IPv6 were carved from (read as restoring reads
    // them: one that does not parse or hold its address is left to the
    // first reconcile).
    let mut carved_from: BTreeMap<String, BTreeSet<Ipv6Prefix>> = BTreeMap::new();
    let allocs = persisted
        .allocations
        .values()
        .filter_map(|a| a.to_core().map(|a| (a.eni, a.ipv6_prefix)));
    let holds = persisted
        .holds
        .values()
        .filter_map(|h| h.to_core().map(|h| (h.eni, h.ipv6_prefix)));
    for (eni, p) in allocs.chain(holds) {
        if let Some(p) = p {
            carved_from.entry(eni).or_default().insert(p);
        }
    }
    if named.contains_key("") {
        return Ok(Provisional::Cold(
            "the state files hold an address with no ENI recorded".into(),
        ));
    }
    let mut attached: BTreeMap<String, MetadataEni> = BTreeMap::new();
    for mac in md.macs()? {
        let e = md.eni(&mac)?;
        attached.insert(e.eni_id.clone(), e);
    }
    let mut pool = PoolState::new(dual);
    let mut notes = Vec::new();
    for (eni, addrs) in &named {
        let Some(m) = attached.get(*eni) else {
            return Ok(Provisional::Cold(format!(
                "the state files hold addresses on {eni}, which metadata does not show attached"
            )));
        };
        let (Some(gateway), false) = (m.gateway, m.vswitch_cidr.is_empty()) else {
            return Ok(Provisional::Cold(format!(
                "metadata gives no gateway or CIDR for {eni} ({})",
                m.mac
            )));
        };
        let primary = m.primary_ip.unwrap_or(Ipv4Addr::UNSPECIFIED);
        pool.add_eni(
            EniInfo {
                eni: eni.to_string(),
                mac: m.mac.clone(),
                vswitch: m.vswitch_id.clone(),
                cidr: m.vswitch_cidr.clone(),
                gateway,
                v6: None,
            },
            primary,
        );
        // The /80s its owners' IPv6 were carved from, as recorded, before
        // the addresses: restored owners get their carved IPv6 back, and
        // nothing asks the ENI for another /80 before the first reconcile.
        if dual {
            for p in carved_from.get(*eni).into_iter().flatten() {
                pool.add_v6_prefix(eni, *p);
            }
        }
        let unseen = addrs.iter().filter(|(a, _)| !m.ipv4s.contains(a)).count();
        for (v4, v6) in addrs {
            pool.add_ip(eni, *v4, v6.filter(|_| dual));
        }
        notes.push(if unseen > 0 {
            format!(
                "{eni}: {} recorded address(es), {unseen} of them not (yet) in metadata; the OpenAPI decides at the first reconcile",
                addrs.len()
            )
        } else {
            format!("{eni}: {} recorded address(es), all in metadata", addrs.len())
        });
    }
    let records = restore_owners(&mut pool, persisted, unix_ms());
    super::sg_sets::restore(&mut pool, persisted);
    if let Err(e) = pool.check() {
        return Ok(Provisional::Cold(format!(
            "the recorded addresses do not make a consistent pool: {e}"
        )));
    }
    Ok(Provisional::Ready(Box::new(Recovered {
        pool,
        records,
        notes,
    })))
}

/// The ENIs the state files say owners hold addresses on.
fn named_enis(persisted: &PersistedState) -> BTreeSet<String> {
    persisted
        .allocations
        .values()
        .map(|a| a.eni.clone())
        .filter(|e| !e.is_empty())
        .collect()
}

/// Tagged ENIs left unattached (a crash between create and attach) are
/// deleted, once any detach has finished; those the state files `named`
/// (owners hold addresses on them) are returned instead, detached and
/// kept.
fn delete_unattached(
    cloud: &dyn CloudApi,
    instance_id: &str,
    node_id: &str,
    named: &BTreeSet<String>,
    deadline: Instant,
    notes: &mut Vec<String>,
) -> Result<Vec<Eni>, CloudError> {
    let mut kept = Vec::new();
    for e in tagged_unattached(cloud, instance_id, node_id)? {
        match e.status {
            EniStatus::Available | EniStatus::Detaching => {
                let e = if e.status == EniStatus::Detaching {
                    wait::wait_eni_status(cloud, &e.id, EniStatus::Available, deadline)?
                } else {
                    e
                };
                if named.contains(&e.id) {
                    kept.push(e);
                    continue;
                }
                cloud.delete_eni(&e.id)?;
                notes.push(format!(
                    "deleted {}: tagged for this instance but not attached",
                    e.id
                ));
            }
            // Attached to another instance (or on its way there): gone
            // for this one, and not ours to touch.
            _ => {}
        }
    }
    Ok(kept)
}

/// The attached managed ENIs to adopt: ones mid-attach are waited for,
/// ones mid-detach finished off and deleted, unless the state files name
/// them (`named`): those join the `detached` kept.
fn settle_attached(
    cloud: &dyn CloudApi,
    instance_id: &str,
    node_id: &str,
    (named, detached): (&BTreeSet<String>, &mut Vec<Eni>),
    deadline: Instant,
    notes: &mut Vec<String>,
) -> Result<Vec<Eni>, CloudError> {
    let mut adopted: Vec<Eni> = Vec::new();
    for e in attached_managed(cloud, instance_id, node_id)? {
        match e.status {
            EniStatus::InUse => adopted.push(e),
            EniStatus::Attaching => adopted.push(wait::wait_eni_status(
                cloud,
                &e.id,
                EniStatus::InUse,
                deadline,
            )?),
            EniStatus::Detaching => {
                let e = wait::wait_eni_status(cloud, &e.id, EniStatus::Available, deadline)?;
                if named.contains(&e.id) {
                    detached.push(e);
                    continue;
                }
                cloud.delete_eni(&e.id)?;
                notes.push(format!("deleted {}: it was being detached", e.id));
            }
            _ => {}
        }
    }
    Ok(adopted)
}

/// A detached ENI the state files name, added to the pool with the
/// recorded addresses the OpenAPI still lists on it (their owners are
/// restored on them next, then [`withdraw_detached`] withdraws them). Its
/// vswitch's CIDR and gateway come from metadata (another ENI on the same
/// vswitch), else the first reconcile after it is attached again fills
/// them in. The note for the start-up log.
fn keep_detached(
    md: &dyn MetadataApi,
    pool: &mut PoolState,
    e: &Eni,
    persisted: &PersistedState,
) -> Result<String, CloudError> {
    let (cidr, gateway) = vswitch_facts(md, &e.vswitch_id)?;
    let primary = e
        .primary_ip
        .or_else(|| e.private_ips.first().copied())
        .unwrap_or(Ipv4Addr::UNSPECIFIED);
    pool.add_eni(
        EniInfo {
            eni: e.id.clone(),
            mac: e.mac.clone(),
            vswitch: e.vswitch_id.clone(),
            cidr,
            gateway,
            v6: None,
        },
        primary,
    );
    let on_it =
        |a: Ipv4Addr| e.private_ips.contains(&a) || e.ipv4_prefixes.iter().any(|p| p.contains(a));
    let mut kept = 0;
    for a in persisted.allocations.values() {
        if a.eni == e.id && on_it(a.ipv4) {
            pool.add_ip(&e.id, a.ipv4, a.ipv6.filter(|_| pool.dual()));
            kept += 1;
        }
    }
    Ok(format!(
        "{} is tagged for this instance but detached (not gone: the OpenAPI still has it, with {} address(es)); kept, with the {kept} address(es) owners hold on it withdrawn until it is attached again",
        e.id,
        e.private_ips.len()
    ))
}

/// The CIDR and gateway of `vswitch` as metadata gives them for any
/// attached ENI on it; empty and unspecified when none is (an ENI that
/// metadata lists but cannot describe is passed over).
fn vswitch_facts(md: &dyn MetadataApi, vswitch: &str) -> Result<(String, Ipv4Addr), CloudError> {
    for mac in md.macs()? {
        let Ok(m) = md.eni(&mac) else {
            continue;
        };
        if let (true, Some(gw), false) = (
            m.vswitch_id == vswitch,
            m.gateway,
            m.vswitch_cidr.is_empty(),
        ) {
            return Ok((m.vswitch_cidr, gw));
        }
    }
    Ok((String::new(), Ipv4Addr::UNSPECIFIED))
}

/// The addresses of a detached ENI leave circulation as a running
/// daemon's reconcile withdraws them: owned ones are kept for their
/// owners and never handed out, and nothing more is asked of the ENI.
fn withdraw_detached(pool: &mut PoolState, eni: &str) {
    pool.withdraw_eni(eni);
}

/// Pairs known from the state file, to keep dual-stack pairs stable.
fn known_pairs(persisted: &PersistedState) -> BTreeMap<Ipv4Addr, Ipv6Addr> {
    let mut known: BTreeMap<Ipv4Addr, Ipv6Addr> = BTreeMap::new();
    for a in persisted.allocations.values() {
        if let Some(v6) = a.ipv6 {
            known.insert(a.ipv4, v6);
        }
    }
    for h in persisted.holds.values() {
        if let Some(v6) = h.ipv6 {
            known.insert(h.ipv4, v6);
        }
    }
    known
}

/// Adds an attached ENI and its addresses (as the OpenAPI lists them) to
/// the pool; the note for the start-up log.
fn adopt(
    cloud: &dyn CloudApi,
    pool: &mut PoolState,
    e: &Eni,
    known_pairs: &BTreeMap<Ipv4Addr, Ipv6Addr>,
    dual: bool,
    deadline: Instant,
) -> Result<String, CloudError> {
    wait::wait_mac_present(cloud.metadata(), &e.mac, deadline)?;
    let info = eniops::ready_info(cloud, &e.id, &e.mac, &e.vswitch_id, deadline)?;
    let md4: BTreeSet<Ipv4Addr> = info.v4.iter().copied().collect();
    let api4: BTreeSet<Ipv4Addr> = e.private_ips.iter().copied().collect();
    if md4 != api4 {
        info!(
            "{}: metadata lists {} address(es), the OpenAPI {}; using the OpenAPI",
            e.id,
            md4.len(),
            api4.len()
        );
    }
    let primary = e
        .primary_ip
        .or_else(|| e.private_ips.first().copied())
        .unwrap_or(info.primary_ip);
    // The OpenAPI's id, MAC and vswitch; metadata's CIDR and gateway.
    pool.add_eni(
        EniInfo {
            eni: e.id.clone(),
            mac: e.mac.clone(),
            vswitch: e.vswitch_id.clone(),
            ..info.link
        },
        primary,
    );
    // Its /80s before its addresses: an address without a single IPv6 of
    // the cloud's then carves its IPv6 from the first (and an owner
    // recorded with a carved one gets it back when restored).
    if dual {
        for p in &e.ipv6_prefixes {
            pool.add_v6_prefix(&e.id, *p);
        }
    }
    let carved = |b: &Ipv6Addr| e.ipv6_prefixes.iter().any(|p| p.contains(*b));
    let mut v6_left: BTreeSet<Ipv6Addr> = e.ipv6s.iter().copied().collect();
    let mut unpaired4 = Vec::new();
    for a in &e.private_ips {
        match known_pairs.get(a) {
            Some(b) if dual && v6_left.remove(b) => pool.add_ip(&e.id, *a, Some(*b)),
            Some(b) if dual && carved(b) => pool.add_ip(&e.id, *a, None),
            _ if dual => unpaired4.push(*a),
            _ => pool.add_ip(&e.id, *a, None),
        }
    }
    let mut v6_iter = v6_left.into_iter();
    for a in unpaired4 {
        pool.add_ip(&e.id, a, v6_iter.next());
    }
    for b in v6_iter {
        pool.add_unpaired_v6(&e.id, b);
    }
    // Prefixes come from the OpenAPI like the addresses: a prefix
    // member is never taken for a single address.
    for p in &e.ipv4_prefixes {
        pool.add_prefix(&e.id, *p);
    }
    let in_prefixes = e.ipv4_prefixes.len() * eniip_cloud::Ipv4Prefix::SIZE as usize;
    Ok(if in_prefixes > 0 {
        format!(
            "adopted {} on {} with {} address(es) and {} /28 prefix(es) ({in_prefixes} addresses)",
            e.id,
            e.vswitch_id,
            e.private_ips.len(),
            e.ipv4_prefixes.len()
        )
    } else {
        format!(
            "adopted {} on {} with {} address(es)",
            e.id,
            e.vswitch_id,
            e.private_ips.len()
        )
    })
}

/// Recorded owners keep the addresses still there and recorded holds
/// their addresses; the rest is dropped, durably (the records returned).
fn restore_owners(pool: &mut PoolState, persisted: &PersistedState, now_ms: u64) -> Vec<Record> {
    let mut records = Vec::new();
    // Above every generation ever answered, the released ones' too.
    pool.raise_next_gen(eniip_protocol::core::Generation::from_u64(
        persisted.next_gen,
    ));
    for a in persisted.allocations.values() {
        if !a.to_core().is_some_and(|a| pool.restore_allocation(&a)) {
            warn!(
                "{} held {} on {}, which the cloud no longer has: dropped",
                a.owner, a.ipv4, a.eni
            );
            records.push(Record::Forget {
                owner: a.owner.clone(),
            });
        }
    }
    for h in persisted.holds.values() {
        if !h.to_core().is_some_and(|h| pool.restore_hold(&h, now_ms)) {
            records.push(Record::ClearHold { ipv4: h.ipv4 });
        }
    }
    records
}

/// After a state rebuild: every idle address (no known owner) is held for
/// `q`, durably; the note for the start-up log.
fn quarantine_idle(
    pool: &mut PoolState,
    q: Duration,
    now_ms: u64,
    records: &mut Vec<Record>,
) -> String {
    let until = now_ms + q.as_millis() as u64;
    let idle: Vec<Ipv4Addr> = pool
        .ips()
        .iter()
        .filter(|ip| pool.is_idle(ip))
        .map(PoolIp::v4)
        .collect();
    let n = idle.len();
    for v4 in idle {
        if let Some(hold) = pool.quarantine(v4, until) {
            records.push(Record::quarantine(&hold));
        }
    }
    format!(
        "{n} address(es) with no known owner quarantined for {} s",
        q.as_secs()
    )
}
