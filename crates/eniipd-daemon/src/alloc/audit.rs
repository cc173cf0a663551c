//! `audit`: settled local state against the OpenAPI (DescribeNetworkInterfaces
//! is the source of truth; metadata lag is not a difference) and against
//! the metadata service's list of ENIs: a settled ENI that metadata does
//! not list is one the host cannot use (its addresses lag, so they are not
//! compared there).
//!
//! The cloud is read between two snapshots of the local state; a
//! difference counts only if both snapshots show it, and nothing with an
//! operation in flight (addresses pending or being released, ENIs being
//! created or freed) counts. So a healthy daemon under load audits
//! consistent.
//!
//! Prefix mode: the cloud's addresses of an ENI are its secondary
//! addresses and every address of its /28s; prefixes are compared too
//! (`prefix <p> ...` lines), so a leaked /28 shows even while its
//! addresses are idle.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::pool::{PoolEni, PoolIp, PoolState};
use eniip_cloud::{CloudApi, Eni, EniStatus, Ipv4Prefix};
use eniip_protocol::core::AllocError;

use super::ownership::{attached_managed, tagged_unattached};
use super::Snapshot;

/// The differences, one line each (empty: consistent).
pub(crate) fn audit(
    cloud: &dyn CloudApi,
    instance_id: &str,
    node_id: &str,
    security_groups: &[String],
    snapshot: impl Fn() -> Result<Snapshot, AllocError>,
) -> Result<Vec<String>, AllocError> {
    let before = snapshot()?;
    let cloud_err = |e: eniip_cloud::CloudError| super::cloud_error(&e);
    let attached = attached_managed(cloud, instance_id, node_id).map_err(cloud_err)?;
    let loose = tagged_unattached(cloud, instance_id, node_id).map_err(cloud_err)?;
    let macs: BTreeSet<String> = cloud
        .metadata()
        .macs()
        .map_err(cloud_err)?
        .into_iter()
        .map(|m| m.to_ascii_lowercase())
        .collect();
    let after = snapshot()?;
    let a: BTreeSet<String> = differences(&before, &attached, &loose, &macs)
        .into_iter()
        .collect();
    let b: BTreeSet<String> = differences(&after, &attached, &loose, &macs)
        .into_iter()
        .collect();
    let mut out: Vec<String> = a.intersection(&b).cloned().collect();
    out.extend(super::sg_sets::audit_lines(
        &after.pool,
        &attached,
        security_groups,
    ));
    Ok(out)
}

/// The differences one snapshot shows against the cloud's ENIs.
fn differences(
    s: &Snapshot,
    attached: &[Eni],
    loose: &[Eni],
    macs: &BTreeSet<String>,
) -> Vec<String> {
    let busy: BTreeSet<&str> = s
        .creating
        .iter()
        .chain(&s.freeing)
        .map(String::as_str)
        .collect();
    let cloud: BTreeMap<&str, &Eni> = attached
        .iter()
        .filter(|e| e.status == EniStatus::InUse)
        .map(|e| (e.id.as_str(), e))
        .collect();
    let mut out: Vec<String> = loose
        .iter()
        .filter(|e| !busy.contains(e.id.as_str()))
        .map(|e| {
            format!(
                "eni {} is tagged for this instance but not attached ({})",
                e.id, e.status
            )
        })
        .collect();
    for (id, e) in cloud.iter().filter(|(id, _)| !busy.contains(*id)) {
        match s.pool.eni(id) {
            None => out.push(format!(
                "eni {id} is attached and managed but unknown locally"
            )),
            Some(local) => out.extend(eni_differences(s, local, e, macs)),
        }
    }
    out.extend(local_only(s, &cloud, &busy));
    out
}

/// An ENI attached in the cloud and known locally: its MAC in metadata,
/// then (once nothing is pending on it) its prefixes and addresses.
fn eni_differences(s: &Snapshot, local: &PoolEni, e: &Eni, macs: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    if !macs.contains(&local.mac().to_ascii_lowercase()) {
        out.push(format!(
            "eni {} ({}) is attached but missing from metadata",
            local.id(),
            local.mac()
        ));
    }
    if local.pending() > 0 {
        return out;
    }
    // Prefixes first: a /28 is assigned and given back whole.
    out.extend(prefix_differences(&s.pool, local, e));
    out.extend(v4_differences(&s.pool, local.id(), e));
    out.extend(v6_prefix_differences(&s.pool, local, e));
    out.extend(v6_differences(&s.pool, local.id(), e));
    out
}

/// The /80s (dual stack): each side's against the other's.
fn v6_prefix_differences(pool: &PoolState, local: &PoolEni, e: &Eni) -> Vec<String> {
    if !pool.dual() {
        return Vec::new();
    }
    let id = local.id();
    let unknown = e
        .ipv6_prefixes
        .iter()
        .filter(|p| !local.v6_prefixes().contains(p))
        .map(|p| format!("IPv6 prefix {p} is on eni {id} in the cloud but unknown locally"));
    let missing = local
        .v6_prefixes()
        .iter()
        .filter(|p| !e.ipv6_prefixes.contains(p))
        .map(|p| format!("IPv6 prefix {p} is missing from eni {id} in the cloud"));
    unknown.chain(missing).collect()
}

fn prefix_differences(pool: &PoolState, local: &PoolEni, e: &Eni) -> Vec<String> {
    let id = local.id();
    let remote: BTreeSet<Ipv4Prefix> = e.ipv4_prefixes.iter().copied().collect();
    let unknown = remote
        .difference(local.prefixes())
        .map(|p| format!("prefix {p} is on eni {id} in the cloud but unknown locally"));
    let missing = local
        .prefixes()
        .difference(&remote)
        .filter(|p| {
            !p.addresses()
                .any(|a| pool.ip(a).is_some_and(PoolIp::releasing))
        })
        .map(|p| format!("prefix {p} is missing from eni {id} in the cloud"));
    unknown.chain(missing).collect()
}

/// IPv4 addresses, compared with their ENI: a vswitch may give an address
/// of a deleted ENI to another one.
fn v4_differences(pool: &PoolState, id: &str, e: &Eni) -> Vec<String> {
    let remote: BTreeSet<Ipv4Addr> = e
        .private_ips
        .iter()
        .copied()
        .chain(e.ipv4_prefixes.iter().flat_map(|p| p.addresses()))
        .collect();
    let mut out = Vec::new();
    for a in &remote {
        match pool.ip(*a) {
            None => out.push(format!(
                "address {a} is on eni {id} in the cloud but unknown locally"
            )),
            Some(ip) if ip.eni() != id => out.push(format!(
                "address {a} is on eni {id} in the cloud but held locally on eni {} ({})",
                ip.eni(),
                pool.state_of(ip).name()
            )),
            Some(_) => {}
        }
    }
    for ip in settled_on(pool, id).filter(|ip| !remote.contains(&ip.v4())) {
        out.push(format!(
            "address {} ({}) is missing from eni {id} in the cloud",
            ip.v4(),
            pool.state_of(ip).name()
        ));
    }
    out
}

fn v6_differences(pool: &PoolState, id: &str, e: &Eni) -> Vec<String> {
    let remote: BTreeSet<Ipv6Addr> = e.ipv6s.iter().copied().collect();
    let known = pool.ips().known_v6();
    let mut out: Vec<String> = remote
        .difference(&known)
        .map(|b| format!("address {b} is on eni {id} in the cloud but unknown locally"))
        .collect();
    // A carved IPv6 is there while its /80 is (compared above).
    let carved = |b: &Ipv6Addr| e.ipv6_prefixes.iter().any(|p| p.contains(*b));
    for ip in settled_on(pool, id) {
        if let Some(b) = ip.v6().filter(|b| !remote.contains(b) && !carved(b)) {
            out.push(format!(
                "address {b} ({}) is missing from eni {id} in the cloud",
                pool.state_of(ip).name()
            ));
        }
    }
    out
}

/// The addresses of `id` not being given back.
fn settled_on<'a>(pool: &'a PoolState, id: &'a str) -> impl Iterator<Item = &'a PoolIp> {
    pool.ips().on(id).filter(|ip| !ip.releasing())
}

/// What only the local state shows: addresses still held on an ENI the
/// cloud no longer has, and ENIs the cloud does not show attached.
fn local_only(s: &Snapshot, cloud: &BTreeMap<&str, &Eni>, busy: &BTreeSet<&str>) -> Vec<String> {
    let mut out = Vec::new();
    for e in s.pool.enis().iter() {
        let id = e.id();
        if e.gone() {
            for ip in s.pool.ips().on(id) {
                out.push(format!(
                    "address {} ({}) is still held on eni {id}, which no longer exists in the cloud",
                    ip.v4(),
                    s.pool.state_of(ip).name()
                ));
            }
        } else if !cloud.contains_key(id) && !busy.contains(id) {
            out.push(format!(
                "eni {id} is known locally but not attached in the cloud"
            ));
        }
    }
    out
}
