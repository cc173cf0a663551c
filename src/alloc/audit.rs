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
use std::net::Ipv4Addr;

use crate::cloud::{CloudApi, Eni, EniStatus, Ipv4Prefix};
use crate::core::AllocError;

use super::maint::{attached_managed, drift, tagged_unattached};
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
    let cloud_err = |e: crate::cloud::CloudError| super::cloud_error(&e);
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
    out.extend(drift(&attached, security_groups));
    Ok(out)
}

fn differences(
    s: &Snapshot,
    attached: &[Eni],
    loose: &[Eni],
    macs: &BTreeSet<String>,
) -> Vec<String> {
    let mut out = Vec::new();
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
    for e in loose {
        if !busy.contains(e.id.as_str()) {
            out.push(format!(
                "eni {} is tagged for this instance but not attached ({})",
                e.id, e.status
            ));
        }
    }
    for (id, e) in &cloud {
        if busy.contains(id) {
            continue;
        }
        let Some(local) = s.pool.enis.get(*id) else {
            out.push(format!(
                "eni {id} is attached and managed but unknown locally"
            ));
            continue;
        };
        if !macs.contains(&local.mac.to_ascii_lowercase()) {
            out.push(format!(
                "eni {id} ({}) is attached but missing from metadata",
                local.mac
            ));
        }
        if local.pending > 0 {
            continue;
        }
        // Prefixes first: a /28 is assigned and given back whole.
        let remote_prefixes: BTreeSet<Ipv4Prefix> = e.ipv4_prefixes.iter().copied().collect();
        for p in remote_prefixes.difference(&local.prefixes) {
            out.push(format!(
                "prefix {p} is on eni {id} in the cloud but unknown locally"
            ));
        }
        for p in local.prefixes.difference(&remote_prefixes) {
            let releasing = p
                .addresses()
                .any(|a| s.pool.ips.get(&a).is_some_and(|ip| ip.releasing));
            if !releasing {
                out.push(format!("prefix {p} is missing from eni {id} in the cloud"));
            }
        }
        let remote: BTreeSet<Ipv4Addr> = e
            .private_ips
            .iter()
            .copied()
            .chain(e.ipv4_prefixes.iter().flat_map(|p| p.addresses()))
            .collect();
        // Addresses are compared with their ENI: a vswitch may give an
        // address of a deleted ENI to another one.
        for a in &remote {
            match s.pool.ips.get(a) {
                None => out.push(format!(
                    "address {a} is on eni {id} in the cloud but unknown locally"
                )),
                Some(ip) if ip.eni != *id => out.push(format!(
                    "address {a} is on eni {id} in the cloud but held locally on eni {} ({})",
                    ip.eni,
                    ip.state.name()
                )),
                Some(_) => {}
            }
        }
        for ip in s
            .pool
            .ips
            .values()
            .filter(|ip| ip.eni == *id && !ip.releasing)
        {
            if !remote.contains(&ip.v4) {
                out.push(format!(
                    "address {} ({}) is missing from eni {id} in the cloud",
                    ip.v4,
                    ip.state.name()
                ));
            }
        }
        let v6: BTreeSet<std::net::Ipv6Addr> = e.ipv6s.iter().copied().collect();
        let known6 = s.pool.known_v6();
        for b in v6.difference(&known6) {
            out.push(format!(
                "address {b} is on eni {id} in the cloud but unknown locally"
            ));
        }
        for ip in s
            .pool
            .ips
            .values()
            .filter(|ip| ip.eni == *id && !ip.releasing)
        {
            if let Some(b) = ip.v6 {
                if !v6.contains(&b) {
                    out.push(format!(
                        "address {b} ({}) is missing from eni {id} in the cloud",
                        ip.state.name()
                    ));
                }
            }
        }
    }
    for (id, e) in &s.pool.enis {
        if e.gone {
            for ip in s.pool.ips.values().filter(|ip| ip.eni == *id) {
                out.push(format!(
                    "address {} ({}) is still held on eni {id}, which no longer exists in the cloud",
                    ip.v4,
                    ip.state.name()
                ));
            }
        } else if !cloud.contains_key(id.as_str()) && !busy.contains(id.as_str()) {
            out.push(format!(
                "eni {id} is known locally but not attached in the cloud"
            ));
        }
    }
    out
}
