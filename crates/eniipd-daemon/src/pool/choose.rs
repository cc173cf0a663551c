//! Which address an owner gets ([`pick`]): the choice is a pure function
//! of [`PoolState`]'s read accessors; [`PoolState::take`] then hands it
//! out.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

use super::{IpState, PoolIp, PoolState};
use eniip_cloud::Ipv4Prefix;
use eniip_protocol::core::{Owner, SecurityGroupSet};

/// An address for `owner` (who holds none), on an ENI of `vswitch` when
/// one is asked: its reservation or cool-down first, then `prefer` if
/// free, then the best idle address. Call [`PoolState::settle`] first.
#[cfg(test)]
pub(crate) fn pick(
    pool: &PoolState,
    owner: &Owner,
    prefer: Option<IpAddr>,
    vswitch: Option<&str>,
) -> Option<Ipv4Addr> {
    pick_in_set(pool, owner, prefer, vswitch, None)
}

/// [`pick`], only on ENIs that serve the security-group set `sgs` when
/// one is given (see [`SgSets::serves`](super::SgSets::serves)).
pub(crate) fn pick_in_set(
    pool: &PoolState,
    owner: &Owner,
    prefer: Option<IpAddr>,
    vswitch: Option<&str>,
    sgs: Option<&SecurityGroupSet>,
) -> Option<Ipv4Addr> {
    let on = |ip: &PoolIp| on_vswitch(pool, ip, vswitch) && in_set(pool, ip, sgs);
    if let Some(v4) = pool.holds().for_owner(owner) {
        if pool.ip(v4).is_some_and(|ip| pool.allocatable(ip) && on(ip)) {
            return Some(v4);
        }
    }
    if let Some(p) = prefer {
        let found = match p {
            IpAddr::V4(v4) => pool.ip(v4),
            IpAddr::V6(v6) => pool.ips().paired_with(v6),
        };
        if let Some(ip) = found {
            if pool.is_idle(ip) && pool.allocatable(ip) && on(ip) {
                return Some(ip.v4());
            }
        }
    }
    best_idle(pool, vswitch, sgs)
}

/// Whether `ip` is on an ENI that serves `sgs` (any, when none is given).
fn in_set(pool: &PoolState, ip: &PoolIp, sgs: Option<&SecurityGroupSet>) -> bool {
    sgs.is_none_or(|s| pool.sg_sets().serves(ip.eni(), s))
}

/// Whether `ip` is on an ENI of `vswitch` (any, when none is asked).
fn on_vswitch(pool: &PoolState, ip: &PoolIp, vswitch: Option<&str>) -> bool {
    vswitch.is_none_or(|v| pool.eni(ip.eni()).is_some_and(|e| e.vswitch() == v))
}

/// The idle address to hand out next: secondary addresses before
/// primaries (so ENIs can drain), then the ENI with the most addresses in
/// use (packing), then the fullest prefix (so whole prefixes empty out and
/// can go back; single addresses count as an empty prefix), then the
/// lowest address; only on ENIs of `vswitch` when one is asked. One walk
/// over the addresses (this runs on every allocation).
fn best_idle(
    pool: &PoolState,
    vswitch: Option<&str>,
    sgs: Option<&SecurityGroupSet>,
) -> Option<Ipv4Addr> {
    let mut inuse: HashMap<&str, usize> = HashMap::new();
    let mut taken: HashMap<Ipv4Prefix, usize> = HashMap::new();
    let mut idle: Vec<&PoolIp> = Vec::new();
    for (ip, state) in pool.states() {
        if state == IpState::Idle {
            idle.push(ip);
        } else {
            count_not_idle(ip, &mut inuse, &mut taken);
        }
    }
    idle.into_iter()
        .filter(|ip| pool.allocatable(ip) && on_vswitch(pool, ip, vswitch) && in_set(pool, ip, sgs))
        .min_by_key(|ip| {
            (
                ip.primary(),
                std::cmp::Reverse(inuse.get(ip.eni()).copied().unwrap_or(0)),
                std::cmp::Reverse(
                    ip.prefix()
                        .and_then(|p| taken.get(&p).copied())
                        .unwrap_or(0),
                ),
                ip.v4(),
            )
        })
        .map(PoolIp::v4)
}

fn count_not_idle<'a>(
    ip: &'a PoolIp,
    by_eni: &mut HashMap<&'a str, usize>,
    by_prefix: &mut HashMap<Ipv4Prefix, usize>,
) {
    *by_eni.entry(ip.eni()).or_default() += 1;
    if let Some(p) = ip.prefix() {
        *by_prefix.entry(p).or_default() += 1;
    }
}

/// Addresses not idle (in use, kept or invalid), per ENI.
pub(crate) fn not_idle_by_eni(pool: &PoolState) -> HashMap<&str, usize> {
    let mut by_eni = HashMap::new();
    let mut by_prefix = HashMap::new();
    for (ip, _) in pool.states().filter(|(_, s)| *s != IpState::Idle) {
        count_not_idle(ip, &mut by_eni, &mut by_prefix);
    }
    by_eni
}
