//! The deciding part of the emulated hotplug, pure: what the emulator's
//! state asks for ([`Wanted`], read from `GET /__sim/state`), what has
//! been made ([`Plugged`]), and the steps from one to the other
//! ([`plan`]).
//!
//! Invariants: a step for an ENI's addresses, neighbour entries or IPv6
//! gateways comes after that ENI's `Plug` in the plan; slots (the `n` of
//! the link names) are the smallest free ones, so names stay short
//! however long it runs.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde_json::Value;

use eniip_datapath::netlink::parse_mac;

/// Most ENIs one instance can have plugged at once (the largest real
/// instance types allow fewer); slots above are never used.
pub(crate) const MAX_SLOTS: usize = 1000;

/// A destination the VPC routes over one ENI: an address (/32, /128) or
/// an IPv4 prefix (/28).
pub(crate) type Net = (IpAddr, u8);

/// One ENI as the emulator shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WantedEni {
    /// Its MAC.
    pub(crate) mac: Vec<u8>,
    /// Every address and prefix on it.
    pub(crate) nets: BTreeSet<Net>,
}

/// What should exist: the attached managed ENIs of one instance, and the
/// vswitches' gateways.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Wanted {
    /// By ENI id.
    pub(crate) enis: BTreeMap<String, WantedEni>,
    /// IPv4 gateways (on the VPC's `lo`).
    pub(crate) gateways4: BTreeSet<Ipv4Addr>,
    /// IPv6 gateways (on every ENI's VPC end).
    pub(crate) gateways6: BTreeSet<Ipv6Addr>,
}

impl Wanted {
    /// From a `GET /__sim/state` answer: the ENIs eniipd created (tag
    /// `creator=eniipd`) that are `InUse` on `instance`. Malformed entries
    /// are skipped.
    pub(crate) fn from_state(state: &Value, instance: &str) -> Wanted {
        let mut w = Wanted::default();
        for v in state["vswitches"].as_array().into_iter().flatten() {
            if let Some(g) = v["gateway"].as_str().and_then(|g| g.parse().ok()) {
                w.gateways4.insert(g);
            }
            if let Some(g) = v["ipv6_gateway"].as_str().and_then(|g| g.parse().ok()) {
                w.gateways6.insert(g);
            }
        }
        for e in state["enis"].as_array().into_iter().flatten() {
            if e["tags"]["creator"] != "eniipd"
                || e["instance_id"] != instance
                || e["status"] != "InUse"
            {
                continue;
            }
            let (Some(id), Some(mac)) = (e["id"].as_str(), e["mac"].as_str().and_then(parse_mac))
            else {
                continue;
            };
            let addrs = e["private_ips"]
                .as_array()
                .into_iter()
                .chain(e["ipv6s"].as_array())
                .flatten()
                .filter_map(|ip| ip.as_str()?.parse::<IpAddr>().ok())
                .map(|ip| (ip, if ip.is_ipv4() { 32 } else { 128 }));
            let prefixes = e["ipv4_prefixes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| {
                    let (a, l) = p.as_str()?.split_once('/')?;
                    let a: Ipv4Addr = a.parse().ok()?;
                    let l: u8 = l.parse().ok().filter(|l| (24..=32).contains(l))?;
                    Some((IpAddr::V4(a), l))
                });
            let prefixes6 = e["ipv6_prefixes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| {
                    let (a, l) = p.as_str()?.split_once('/')?;
                    let a: Ipv6Addr = a.parse().ok()?;
                    let l: u8 = l.parse().ok().filter(|l| (64..128).contains(l))?;
                    Some((IpAddr::V6(a), l))
                });
            w.enis.insert(
                id.to_string(),
                WantedEni {
                    mac,
                    nets: addrs.chain(prefixes).chain(prefixes6).collect(),
                },
            );
        }
        w
    }
}

/// One plugged ENI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Slot {
    /// The `n` of its link names.
    pub(crate) n: usize,
    /// Its VPC end's ifindex.
    pub(crate) vpc_index: u32,
    /// Its VPC end's MAC (what the VPC answers from).
    pub(crate) vpc_mac: Vec<u8>,
    /// Its node end's ifindex.
    pub(crate) node_index: u32,
}

/// What has been made (recorded only once the kernel took it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Plugged {
    /// By ENI id.
    pub(crate) links: BTreeMap<String, Slot>,
    /// Gateways on the VPC's `lo`.
    pub(crate) gateways4: BTreeSet<Ipv4Addr>,
    /// (ENI id, IPv6 gateway) on that ENI's VPC end.
    pub(crate) gateways6: BTreeSet<(String, Ipv6Addr)>,
    /// (ENI id, IPv4 gateway) known on that ENI's node end.
    pub(crate) neighs4: BTreeSet<(String, Ipv4Addr)>,
    /// Each routed destination and the ENI it is routed over.
    pub(crate) routes: BTreeMap<Net, String>,
}

/// One change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// An IPv4 gateway on the VPC's `lo`.
    Gateway4(Ipv4Addr),
    /// An ENI's veth pair, in slot `n`.
    Plug {
        /// ENI id.
        id: String,
        /// Its MAC (on the node end).
        mac: Vec<u8>,
        /// Slot.
        n: usize,
    },
    /// An IPv4 gateway's permanent neighbour entry on an ENI's node end
    /// (the VPC end's MAC), in place of the VPC answering ARP (see the
    /// module doc of [`super`]).
    GatewayNeigh {
        /// ENI id.
        id: String,
        /// The gateway.
        gw: Ipv4Addr,
    },
    /// An IPv6 gateway on an ENI's VPC end.
    Gateway6 {
        /// ENI id.
        id: String,
        /// The gateway.
        gw: Ipv6Addr,
    },
    /// A destination routed over an ENI, with permanent neighbour entries
    /// (address -> the ENI's MAC).
    Route {
        /// ENI id.
        id: String,
        /// Its MAC.
        mac: Vec<u8>,
        /// The destination.
        net: Net,
    },
    /// A destination no ENI holds any more (its ENI is still plugged).
    Unroute {
        /// The ENI it was routed over.
        id: String,
        /// The destination.
        net: Net,
    },
    /// An ENI no longer attached: its pair goes (its routes with it).
    Unplug {
        /// ENI id.
        id: String,
    },
}

/// The steps from `have` to `want`: unplugs first (so their slots are
/// free), then gateways, then per ENI its plug, the gateways' neighbour
/// entries on its node end, IPv6 gateways and routes.
pub(crate) fn plan(have: &Plugged, want: &Wanted) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut used: BTreeSet<usize> = BTreeSet::new();
    for (id, slot) in &have.links {
        if want.enis.contains_key(id) {
            used.insert(slot.n);
        } else {
            steps.push(Step::Unplug { id: id.clone() });
        }
    }
    for gw in want.gateways4.difference(&have.gateways4) {
        steps.push(Step::Gateway4(*gw));
    }
    let wanted_nets: BTreeSet<&Net> = want.enis.values().flat_map(|e| &e.nets).collect();
    for (net, id) in &have.routes {
        if want.enis.contains_key(id) && !wanted_nets.contains(net) {
            steps.push(Step::Unroute {
                id: id.clone(),
                net: *net,
            });
        }
    }
    for (id, eni) in &want.enis {
        if !have.links.contains_key(id) {
            let Some(n) = (0..MAX_SLOTS).find(|n| !used.contains(n)) else {
                continue;
            };
            used.insert(n);
            steps.push(Step::Plug {
                id: id.clone(),
                mac: eni.mac.clone(),
                n,
            });
        }
        for gw in &want.gateways4 {
            if !have.neighs4.contains(&(id.clone(), *gw)) {
                steps.push(Step::GatewayNeigh {
                    id: id.clone(),
                    gw: *gw,
                });
            }
        }
        for gw in &want.gateways6 {
            if !have.gateways6.contains(&(id.clone(), *gw)) {
                steps.push(Step::Gateway6 {
                    id: id.clone(),
                    gw: *gw,
                });
            }
        }
        for net in &eni.nets {
            if have.routes.get(net) != Some(id) {
                steps.push(Step::Route {
                    id: id.clone(),
                    mac: eni.mac.clone(),
                    net: *net,
                });
            }
        }
    }
    steps
}

/// The next hop of an IPv6 prefix's route in the VPC (a /80 has far too
/// many addresses for a neighbour entry each): link-local, on the ENI's
/// VPC end only, its neighbour entry the ENI's MAC, so a packet for any
/// address of the prefix leaves for that ENI as one for a single address
/// does. Nothing on the node owns it; the node takes the frame by its MAC.
pub(crate) const PREFIX6_NEXT_HOP: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0xe);

/// The next hop of a destination's route in the VPC: [`PREFIX6_NEXT_HOP`]
/// for an IPv6 prefix, none (the destination itself) for the rest.
pub(crate) fn next_hop(net: Net) -> Option<IpAddr> {
    match net {
        (IpAddr::V6(_), len) if len < 128 => Some(IpAddr::V6(PREFIX6_NEXT_HOP)),
        _ => None,
    }
}

/// The addresses of a destination that get neighbour entries: every
/// address of an IPv4 prefix (at most a /24 here), the next hop of an
/// IPv6 prefix, else the address itself.
pub(crate) fn addresses(net: Net) -> Vec<IpAddr> {
    match net {
        (IpAddr::V4(a), len) if len < 32 => {
            let base = u32::from(a) & (u32::MAX << (32 - u32::from(len)));
            (0..(1u32 << (32 - u32::from(len))))
                .map(|i| IpAddr::V4(Ipv4Addr::from(base + i)))
                .collect()
        }
        _ => next_hop(net).map_or_else(|| vec![net.0], |h| vec![h]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const MAC_A: &str = "00:16:3e:00:00:0a";
    const MAC_B: &str = "00:16:3e:00:00:0b";

    fn state(enis: Value) -> Value {
        json!({
            "vswitches": [
                {"id": "vsw-1", "cidr": "192.168.0.0/22", "gateway": "192.168.3.253"},
                {"id": "vsw-2", "cidr": "10.0.0.0/24", "gateway": "10.0.0.253",
                 "ipv6_cidr": "2408::/64", "ipv6_gateway": "2408::ffff:ffff:ffff:fff7"},
            ],
            "enis": enis,
        })
    }

    fn eni(id: &str, mac: &str, status: &str, instance: &str, ips: &[&str]) -> Value {
        json!({"id": id, "mac": mac, "status": status, "instance_id": instance,
               "private_ips": ips, "ipv6s": [], "ipv4_prefixes": [],
               "tags": {"creator": "eniipd"}})
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn only_attached_managed_enis_of_the_instance_are_wanted() {
        let mut primary = eni("eni-p", MAC_A, "InUse", "i-1", &["192.168.0.3"]);
        primary["tags"] = json!({});
        let mut prefixed = eni("eni-a", MAC_A, "InUse", "i-1", &["192.168.0.4"]);
        prefixed["ipv6s"] = json!(["2408::5"]);
        prefixed["ipv4_prefixes"] = json!(["192.168.1.16/28", "bad", "192.168.2.0/8"]);
        prefixed["ipv6_prefixes"] = json!(["2408::7:0:0:0/80", "2408::/8", "2408::9"]);
        let w = Wanted::from_state(
            &state(json!([
                primary,
                prefixed,
                eni("eni-b", MAC_B, "Attaching", "i-1", &["192.168.0.5"]),
                eni("eni-c", MAC_B, "InUse", "i-2", &["192.168.0.6"]),
                eni("eni-d", "not-a-mac", "InUse", "i-1", &["192.168.0.7"]),
            ])),
            "i-1",
        );
        assert_eq!(w.enis.keys().collect::<Vec<_>>(), ["eni-a"]);
        let a = &w.enis["eni-a"];
        assert_eq!(a.mac, parse_mac(MAC_A).unwrap());
        let nets: Vec<Net> = a.nets.iter().copied().collect();
        assert_eq!(
            nets,
            [
                (ip("192.168.0.4"), 32),
                (ip("192.168.1.16"), 28),
                (ip("2408::5"), 128),
                (ip("2408::7:0:0:0"), 80)
            ]
        );
        assert_eq!(w.gateways4.len(), 2);
        assert_eq!(
            w.gateways6.iter().collect::<Vec<_>>(),
            [&"2408::ffff:ffff:ffff:fff7".parse::<Ipv6Addr>().unwrap()]
        );
    }

    /// Applies a plan as the actor would if every step succeeded.
    fn apply(have: &mut Plugged, steps: &[Step]) {
        for s in steps {
            match s {
                Step::Gateway4(g) => {
                    have.gateways4.insert(*g);
                }
                Step::Plug { id, n, .. } => {
                    have.links.insert(
                        id.clone(),
                        Slot {
                            n: *n,
                            vpc_index: 100 + *n as u32,
                            vpc_mac: vec![2, 0, 0, 0, 0, *n as u8],
                            node_index: 200 + *n as u32,
                        },
                    );
                }
                Step::GatewayNeigh { id, gw } => {
                    have.neighs4.insert((id.clone(), *gw));
                }
                Step::Gateway6 { id, gw } => {
                    have.gateways6.insert((id.clone(), *gw));
                }
                Step::Route { id, net, .. } => {
                    have.routes.insert(*net, id.clone());
                }
                Step::Unroute { net, .. } => {
                    have.routes.remove(net);
                }
                Step::Unplug { id } => {
                    have.links.remove(id);
                    have.routes.retain(|_, e| e != id);
                    have.gateways6.retain(|(e, _)| e != id);
                    have.neighs4.retain(|(e, _)| e != id);
                }
            }
        }
    }

    #[test]
    fn a_plan_plugs_routes_moves_and_unplugs_and_then_is_empty() {
        let mut have = Plugged::default();
        let s1 = state(json!([
            eni(
                "eni-a",
                MAC_A,
                "InUse",
                "i-1",
                &["192.168.0.4", "192.168.0.9"]
            ),
            eni("eni-b", MAC_B, "InUse", "i-1", &["192.168.0.5"]),
        ]));
        let want = Wanted::from_state(&s1, "i-1");
        let steps = plan(&have, &want);
        // Each ENI's plug comes before its routes and gateways.
        let pos = |f: &dyn Fn(&Step) -> bool| steps.iter().position(f).unwrap();
        let plug_a = pos(&|s| matches!(s, Step::Plug { id, n: 0, .. } if id == "eni-a"));
        let route_a = pos(&|s| matches!(s, Step::Route { id, .. } if id == "eni-a"));
        let gw6_a = pos(&|s| matches!(s, Step::Gateway6 { id, .. } if id == "eni-a"));
        let neigh_a = pos(&|s| matches!(s, Step::GatewayNeigh { id, .. } if id == "eni-a"));
        assert!(
            plug_a < route_a && plug_a < gw6_a && plug_a < neigh_a,
            "{steps:?}"
        );
        // Every ENI's node end knows every IPv4 gateway.
        let neighs = steps
            .iter()
            .filter(|s| matches!(s, Step::GatewayNeigh { .. }))
            .count();
        assert_eq!(neighs, 4, "{steps:?}");
        assert!(steps.contains(&Step::Gateway4("192.168.3.253".parse().unwrap())));
        apply(&mut have, &steps);
        assert_eq!(plan(&have, &want), []);

        // .9 moves to eni-b; eni-b's .5 is unassigned.
        let s2 = state(json!([
            eni("eni-a", MAC_A, "InUse", "i-1", &["192.168.0.4"]),
            eni("eni-b", MAC_B, "InUse", "i-1", &["192.168.0.9"]),
        ]));
        let want = Wanted::from_state(&s2, "i-1");
        let steps = plan(&have, &want);
        assert_eq!(
            steps,
            [
                Step::Unroute {
                    id: "eni-b".into(),
                    net: (ip("192.168.0.5"), 32)
                },
                Step::Route {
                    id: "eni-b".into(),
                    mac: parse_mac(MAC_B).unwrap(),
                    net: (ip("192.168.0.9"), 32)
                },
            ]
        );
        apply(&mut have, &steps);

        // eni-a detaches: unplugged, and a new ENI takes its slot 0.
        let s3 = state(json!([
            eni("eni-a", MAC_A, "Detaching", "i-1", &["192.168.0.4"]),
            eni("eni-b", MAC_B, "InUse", "i-1", &["192.168.0.9"]),
            eni("eni-c", MAC_A, "InUse", "i-1", &[]),
        ]));
        let want = Wanted::from_state(&s3, "i-1");
        let steps = plan(&have, &want);
        assert_eq!(steps[0], Step::Unplug { id: "eni-a".into() });
        assert!(steps.contains(&Step::Plug {
            id: "eni-c".into(),
            mac: parse_mac(MAC_A).unwrap(),
            n: 0
        }));
        apply(&mut have, &steps);
        assert_eq!(plan(&have, &want), []);
        assert!(!have.routes.contains_key(&(ip("192.168.0.4"), 32)));
    }

    #[test]
    fn a_prefix_is_every_address_in_it() {
        let a = addresses((ip("192.168.1.16"), 28));
        assert_eq!(a.len(), 16);
        assert_eq!(a[0], ip("192.168.1.16"));
        assert_eq!(a[15], ip("192.168.1.31"));
        assert_eq!(addresses((ip("2408::5"), 128)), [ip("2408::5")]);
        assert_eq!(next_hop((ip("2408::5"), 128)), None);
    }

    #[test]
    fn an_ipv6_prefix_is_routed_through_one_link_local_next_hop() {
        let net = (ip("2408::7:0:0:0"), 80);
        assert_eq!(next_hop(net), Some(IpAddr::V6(PREFIX6_NEXT_HOP)));
        assert_eq!(addresses(net), [IpAddr::V6(PREFIX6_NEXT_HOP)]);
    }
}
