//! The verbs on one container: ADD builds its network from an address
//! eniipd hands its owner, DEL takes it down and gives the address back,
//! CHECK compares what is built with what eniipd holds. In dual stack the
//! IPv6 half needs the vswitch's IPv6 gateway, which eniipd's `eni` verb
//! gives (the `alloc` reply does not carry it).
//!
//! Invariants: one invocation per owner at a time ([`lock`]); an ADD that
//! fails gives back only what it took itself (the address only when the
//! owner held none before it, the host end only when it made it); DEL is
//! idempotent and undoes only what its attachment's ADD built and was
//! answered ([`built`]: that host end, by name and ifindex, taken down
//! before the address is given back; the release naming that
//! allocation's generation); ADD reaches eniipd before anything changes, waiting for an
//! eniipd that cannot be asked up to `daemonWait` (then CNI error 11, and
//! the runtime's retry finds everything as it was); DEL never fails for
//! it: the node's side goes and the release is queued for eniipd
//! ([`eniip_protocol::releases`]); the container's netns is checked before
//! anything is asked or built (CNI error 4).

use std::net::Ipv6Addr;
use std::time::Instant;

use serde_json::json;

use super::add_profile::{Profile, Stage};
use super::built::{self, Built};
use super::container_netns::open_container;
use super::eniipd_client::{self, Client};
use super::identity::{owner_of, sandbox_of};
use super::spec::{
    code, CniError, CniResult, Env, Interface, IpConfig, NetConf, ResultRoute, POD_GATEWAY,
    POD_GATEWAY6,
};
use super::{annotations, datapath, datapath_error, lock, netlink, LINK_TIMEOUT};
use eniip_protocol::core::{EniInfo, SecurityGroupSet};
use eniip_protocol::protocol::intent_args;
use eniip_protocol::protocol::reply::{parse_allocation, parse_eni, AllocReply, Reply};

/// A reply of `verb` this plugin cannot read (error 100, the reply in the
/// details).
fn not_understood(verb: &str, r: &Reply, e: impl std::fmt::Display) -> CniError {
    CniError::new(
        code::DAEMON,
        format!("eniipd's {verb} answer is not understood"),
    )
    .details(format!("{e}: {}", r.text()))
}

/// The allocation an `alloc` or `show` answered.
fn allocation_of(verb: &str, r: &Reply) -> Result<AllocReply, CniError> {
    parse_allocation(r.text()).map_err(|e| not_understood(verb, r, e))
}

/// The IPv6 half of an allocation holding `ip6` on `eni`: the vswitch's IPv6
/// gateway comes from eniipd's `eni` (no `alloc` reply carries it).
fn pod6(c: &mut Client, eni: &EniInfo, ip6: Ipv6Addr) -> Result<datapath::Pod6, CniError> {
    let r = c.ask(&format!("eni {}", eni.eni))?;
    let info = parse_eni(r.text()).map_err(|e| not_understood("eni", &r, e))?;
    let (_, gateway) = info.v6.ok_or_else(|| {
        CniError::new(
            code::DAEMON,
            format!(
                "eniipd knows no IPv6 gateway for ENI {} (vswitch {}): the pod's IPv6 address {ip6} cannot be routed",
                eni.eni, eni.vswitch
            ),
        )
        .details(r.text().to_string())
    })?;
    Ok(datapath::Pod6 { ip: ip6, gateway })
}

/// ` netns=PATH veth=NAME` for eniipd's sandbox reaper, or nothing when
/// the path cannot travel in a protocol word (the allocation is then
/// never reaped, only released by DEL or GC).
fn attach_args(netns: &std::path::Path, host_veth: &str) -> String {
    match netns.to_str() {
        Some(p) if p.starts_with('/') && !p.is_empty() && !p.chars().any(char::is_whitespace) => {
            format!(" netns={p} veth={host_veth}")
        }
        _ => String::new(),
    }
}

pub(crate) fn add(conf: &NetConf, env: &Env) -> Result<String, CniError> {
    let mut profile = Profile::start(env.profile.clone());
    let r = add_profiled(conf, env, &mut profile);
    profile.finish(&env.container_id, r.is_ok());
    r
}

/// A pod with its own security groups is served only from an ENI in
/// exactly them, as eniipd's `reply` says (`answered`).
fn same_security_groups(
    asked: Option<&SecurityGroupSet>,
    answered: Option<SecurityGroupSet>,
    reply: &Reply,
) -> Result<(), CniError> {
    let Some(asked) = asked else {
        return Ok(());
    };
    if answered.as_ref() == Some(asked) {
        return Ok(());
    }
    Err(CniError::new(
        code::DAEMON,
        format!(
            "eniipd answered with security groups {}, not the pod's {asked} ({})",
            answered.map_or("unsaid".to_string(), |s| s.to_string()),
            annotations::SECURITY_GROUPS
        ),
    )
    .details(reply.text().to_string()))
}

fn add_profiled(conf: &NetConf, env: &Env, profile: &mut Profile) -> Result<String, CniError> {
    let owner = owner_of(&conf.name, env);
    let sandbox = sandbox_of(&env.container_id);
    let host_veth = datapath::host_veth_name(&env.container_id, &env.ifname);
    let netns_path = env.netns.clone().unwrap_or_default();
    let ns = open_container(env)?.ok_or_else(|| {
        CniError::new(
            code::INVALID_ENV,
            format!("CNI_NETNS {} does not exist", netns_path.display()),
        )
    })?;
    // What the pod asks, checked before eniipd is; nothing asked writes
    // no argument, so an eniipd older than the annotations serves it.
    let intent = annotations::intent_of(conf.pod_annotations.as_ref())?;
    let asks: String = intent_args(&intent)
        .iter()
        .map(|a| format!(" {a}"))
        .collect();
    profile.skip();
    let _held = lock::lock(&conf.lock_dir, &owner, eniipd_client::ALLOC_DEADLINE)?;
    profile.mark(Stage::Lock);
    let (mut c, held_before, reply) = allocate(
        conf,
        &owner,
        &format!(
            "alloc {owner} sandbox={sandbox}{}{asks}",
            attach_args(&netns_path, &host_veth)
        ),
    )?;
    profile.mark(Stage::Eniipd);
    let AllocReply {
        ip,
        ipv6,
        eni,
        gen,
        security_groups,
    } = allocation_of("alloc", &reply)?;
    let gen_arg = gen.map(|g| format!(" gen={g}")).unwrap_or_default();
    let built = (|| {
        same_security_groups(intent.security_groups.as_ref(), security_groups, &reply)?;
        let mac = netlink::parse_mac(&eni.mac)
            .ok_or_else(|| CniError::new(code::DAEMON, format!("bad ENI MAC {}", eni.mac)))?;
        let v6 = match ipv6 {
            Some(ip6) => Some(pod6(&mut c, &eni, ip6)?),
            None => None,
        };
        let attached = datapath::setup(&datapath::Attach {
            pod: datapath::Pod {
                ip,
                eni_mac: &mac,
                gateway: eni.gateway,
                v6,
                ifname: &env.ifname,
                host_veth: &host_veth,
                netns: &ns,
            },
            mtu: conf.mtu,
            link_timeout: LINK_TIMEOUT,
        })
        .map_err(datapath_error)?;
        // What DEL and GC take down, and only that.
        built::keep(
            &conf.lock_dir,
            &Built {
                network: conf.name.clone(),
                owner: owner.clone(),
                sandbox: sandbox.clone(),
                gen: gen.map(|g| g.get()),
                veth: host_veth.clone(),
                ifindex: attached.host_index,
            },
        )
        .map_err(|e| {
            CniError::new(
                code::IO,
                format!(
                    "cannot keep the record of {host_veth} in {}: {e}",
                    conf.lock_dir.display()
                ),
            )
        })?;
        Ok(attached)
    })();
    profile.mark(Stage::Datapath);
    let attached = match built {
        Ok(a) => a,
        Err(e) => {
            // Roll back: what we built, then the address if it was ours
            // (on a new connection if this one was given up: a reply that
            // came late ends it).
            let _ = datapath::teardown(&host_veth);
            let _ = built::forget(&conf.lock_dir, &host_veth);
            if !held_before {
                // Only what this ADD was answered.
                let release = format!("release {owner} sandbox={sandbox}{gen_arg}");
                if c.ask(&release).is_err() {
                    let _ = Client::connect(&conf.socket).and_then(|mut c| c.ask(&release));
                }
            }
            return Err(e);
        }
    };
    let mut ips = vec![IpConfig {
        version: None,
        address: format!("{ip}/32"),
        gateway: Some(POD_GATEWAY.to_string()),
        interface: Some(1),
    }];
    let mut routes = vec![ResultRoute {
        dst: "0.0.0.0/0".into(),
        gw: Some(POD_GATEWAY.to_string()),
    }];
    if let Some(ip6) = ipv6 {
        ips.push(IpConfig {
            version: None,
            address: format!("{ip6}/128"),
            gateway: Some(POD_GATEWAY6.to_string()),
            interface: Some(1),
        });
        routes.push(ResultRoute {
            dst: "::/0".into(),
            gw: Some(POD_GATEWAY6.to_string()),
        });
    }
    // `interface` 1 is CNI_IFNAME in the sandbox: containerd's go-cni
    // finds the pod's addresses through it ("failed to find network info
    // for sandbox" otherwise).
    let result = CniResult {
        cni_version: conf.cni_version.clone(),
        interfaces: vec![
            Interface {
                name: host_veth,
                mac: attached.host_mac,
                sandbox: None,
            },
            Interface {
                name: env.ifname.clone(),
                mac: attached.container_mac,
                sandbox: Some(netns_path.display().to_string()),
            },
        ],
        ips,
        routes,
        dns: conf.dns.clone().unwrap_or_else(|| json!({})),
    }
    .for_version(&conf.cni_version);
    serde_json::to_string(&result)
        .map_err(|e| CniError::new(code::IO, format!("cannot render the result: {e}")))
}

/// ADD's conversation with eniipd: the connection, whether the owner held
/// an address before (what a failed ADD may give back: the address only
/// if the owner held none, so a second ADD of a running pod, or the new
/// sandbox of a pod whose old one was not deleted yet, does not take it
/// away from under it) and the `alloc` reply. While eniipd cannot be
/// asked (away, restarting, replaced by a rollout, going away in the
/// middle) it is waited for, up to `daemonWait` at a time and
/// [`eniipd_client::ADD_BUDGET`] in all, and asked again: `alloc` for a sandbox
/// is idempotent.
///
/// The `show` and the `alloc` go in the `ping`'s write (one round trip,
/// where three cost an ADD under a pod storm tens of milliseconds of
/// waiting for the scheduler), answered in order, so the `show` still
/// sees the owner as it was before this ADD's `alloc`. One case differs:
/// a `ping` not answered in time leaves its `alloc` in doubt, and the
/// next try's `show` may see the owner held by this ADD itself. It then
/// counts as held before: a failed ADD keeps the address rather than
/// risk taking it from a running pod, and the runtime's DEL gives it back.
fn allocate(conf: &NetConf, owner: &str, alloc: &str) -> Result<(Client, bool, Reply), CniError> {
    let started = Instant::now();
    let mut held_before = None;
    let show = format!("show {owner}");
    loop {
        let left = eniipd_client::ADD_BUDGET.saturating_sub(started.elapsed());
        // One write, one round trip: the `ping`, the `show` (until it is
        // answered once) and the `alloc`, answered in this order.
        let then = match held_before {
            None => vec![show.as_str(), alloc],
            Some(_) => vec![alloc],
        };
        let mut c = Client::connect_waiting_then(&conf.socket, conf.daemon_wait.min(left), &then)?;
        let mut ask = || {
            let held = match held_before {
                Some(h) => h,
                None => c.read_found("show")?.is_some(),
            };
            held_before = Some(held);
            let left = eniipd_client::ADD_BUDGET.saturating_sub(started.elapsed());
            c.read_alloc(left).map(|reply| (held, reply))
        };
        match ask() {
            Err(e)
                if eniipd_client::went_away(&e)
                    && !conf.daemon_wait.is_zero()
                    && started.elapsed() < eniipd_client::ADD_BUDGET =>
            {
                // It went away in the middle: a moment, then it is
                // waited for again.
                std::thread::sleep(eniipd_client::AWAY_POLL);
            }
            r => return r.map(|(held, reply)| (c, held, reply)),
        }
    }
}

pub(crate) fn del(conf: &NetConf, env: &Env) -> Result<(), CniError> {
    let owner = owner_of(&conf.name, env);
    let sandbox = sandbox_of(&env.container_id);
    let host_veth = datapath::host_veth_name(&env.container_id, &env.ifname);
    let _held = lock::lock(&conf.lock_dir, &owner, eniipd_client::ALLOC_DEADLINE)?;
    // What this attachment's ADD built and was answered, when it kept
    // it: only that host end goes, and the release names only that
    // allocation. Without it (an older plugin's ADD, one killed before
    // it kept it) the host end by its name, the address by its sandbox.
    let record = built::find(&conf.lock_dir, &host_veth)
        .filter(|b| b.owner == owner && b.sandbox == sandbox);
    let gen = record.as_ref().and_then(Built::generation);
    let release = format!(
        "release {owner} sandbox={sandbox}{}",
        record.as_ref().map(Built::gen_arg).unwrap_or_default()
    );
    // The host end goes before the address is given back: once eniipd
    // has it, it may be another pod's.
    let take_down = || match &record {
        Some(b) => datapath::teardown_built(&b.veth, b.ifindex).map(drop),
        None => datapath::teardown(&host_veth),
    };
    let released = Client::connect(&conf.socket).and_then(|mut c| {
        take_down().map_err(datapath_error)?;
        c.ask(&release)
    });
    let done = match released {
        // Given back, held by nobody any more, or already a newer
        // allocation's (stale): this attachment's part is done.
        Ok(_) => Ok(()),
        // eniipd cannot be asked: the node's side goes now, the release
        // waits for eniipd in its queue (it applies it before it serves).
        Err(e) if eniipd_client::went_away(&e) => {
            take_down().map_err(datapath_error)?;
            queue_release(conf, &owner, &sandbox, gen, &e)
        }
        Err(e) => Err(e),
    };
    if done.is_ok() {
        let _ = built::forget(&conf.lock_dir, &host_veth);
    }
    done
}

/// Queues `owner`'s release for eniipd ([`eniip_protocol::releases`]); an error 11
/// naming the queue if even that fails (the runtime retries the DEL).
fn queue_release(
    conf: &NetConf,
    owner: &str,
    sandbox: &str,
    gen: Option<eniip_protocol::core::Generation>,
    away: &CniError,
) -> Result<(), CniError> {
    eniip_protocol::releases::queue(&conf.socket, owner, sandbox, gen)
        .map(drop)
        .map_err(|io| {
            CniError::new(
                code::TRY_AGAIN,
                format!(
                    "{}, and the release of {owner} cannot be queued in {}: {io}",
                    away.msg,
                    eniip_protocol::releases::dir_for(&conf.socket).display()
                ),
            )
        })
}

pub(crate) fn check(conf: &NetConf, env: &Env) -> Result<(), CniError> {
    let prev = conf.prev_result.as_ref().ok_or_else(|| {
        CniError::new(
            code::INVALID_CONFIG,
            "invalid network config: prevResult is missing",
        )
    })?;
    let want_ip = CniResult::ipv4_of(prev).ok_or_else(|| {
        CniError::new(
            code::INVALID_CONFIG,
            "invalid network config: prevResult has no IPv4 address",
        )
    })?;
    let owner = owner_of(&conf.name, env);
    let ns = open_container(env)?
        .ok_or_else(|| CniError::new(code::DATAPATH, "the container's netns is gone"))?;
    let _held = lock::lock(&conf.lock_dir, &owner, eniipd_client::ALLOC_DEADLINE)?;
    let mut c = Client::connect(&conf.socket)?;
    let r = c.ask(&format!("show {owner}"))?;
    let AllocReply { ip, ipv6, eni, .. } = allocation_of("show", &r)?;
    if ip != want_ip {
        return Err(CniError::new(
            code::DATAPATH,
            format!("eniipd gives {owner} {ip} but prevResult has {want_ip}"),
        ));
    }
    // The IPv6 half is checked when ADD reported one (an attachment made
    // before eniip-cni configured IPv6 has none to check).
    let v6 = match (CniResult::ipv6_of(prev), ipv6) {
        (None, _) => None,
        (Some(want6), Some(ip6)) if want6 == ip6 => Some(pod6(&mut c, &eni, ip6)?),
        (Some(want6), got) => {
            return Err(CniError::new(
                code::DATAPATH,
                format!(
                    "eniipd gives {owner} IPv6 {} but prevResult has {want6}",
                    got.map_or_else(|| "none".to_string(), |a| a.to_string())
                ),
            ))
        }
    };
    let mac = netlink::parse_mac(&eni.mac)
        .ok_or_else(|| CniError::new(code::DAEMON, format!("bad ENI MAC {}", eni.mac)))?;
    datapath::check(&datapath::Pod {
        ip,
        eni_mac: &mac,
        gateway: eni.gateway,
        v6,
        ifname: &env.ifname,
        host_veth: &datapath::host_veth_name(&env.container_id, &env.ifname),
        netns: &ns,
    })
    .map_err(datapath_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Command;
    use crate::test_support::{
        conf_on, fake_eniipd, test_dir, OtherNetns, ALLOC_V6, ALLOC_V6_LATER, ENI_V4_ONLY,
    };

    fn env(cid: &str) -> Env {
        Env {
            container_id: cid.into(),
            ifname: "eth0".into(),
            netns: None,
            profile: None,
            args: Default::default(),
        }
    }

    #[test]
    fn add_without_an_ipv6_gateway_fails_and_gives_the_address_back() {
        let Some(ns) = OtherNetns::new("an ADD's rollback") else {
            return;
        };
        // An alloc answer with fields this version does not know is read
        // all the same: the ADD goes on to the same failure.
        for alloc in [ALLOC_V6, ALLOC_V6_LATER] {
            let (socket, server) = fake_eniipd(&[
                ("show", "ERR not-found"),
                ("alloc", alloc),
                ("eni", ENI_V4_ONLY),
                ("release", "OK released=192.168.0.9"),
            ]);
            let conf = conf_on(&socket);
            let mut e = env("abc123");
            // Never entered: the failure comes before the datapath.
            e.netns = Some(ns.path.clone());
            let err = add(&conf, &e).unwrap_err();
            assert_eq!(err.code, code::DAEMON, "{err}");
            assert!(
                err.msg.contains("no IPv6 gateway for ENI eni-1") && err.msg.contains("vsw-1"),
                "{alloc}: {err}"
            );
            drop(e);
            let seen = server.join().unwrap();
            assert_eq!(
                seen,
                vec![
                    "show eni/abc123".to_string(),
                    format!(
                        "alloc eni/abc123 sandbox=abc123 netns={} veth={}",
                        ns.path.display(),
                        datapath::host_veth_name("abc123", "eth0")
                    ),
                    "eni eni-1".to_string(),
                    "release eni/abc123 sandbox=abc123".to_string(),
                ]
            );
        }
    }

    #[test]
    fn a_pods_annotations_travel_with_its_alloc_and_a_bad_one_asks_nothing() {
        let Some(ns) = OtherNetns::new("an ADD with annotations") else {
            return;
        };
        let annotated = |socket: &std::path::Path, annotations: serde_json::Value| {
            let mut conf = conf_on(socket);
            conf.pod_annotations = Some(annotations);
            conf
        };
        let mut e = env("abc123");
        e.netns = Some(ns.path.clone());
        // An eniipd older than the annotations refuses the argument: the
        // ADD fails naming the annotation (the pod is never served other
        // than it asked), and nothing was taken.
        let (socket, server) = fake_eniipd(&[
            ("show", "ERR not-found"),
            ("alloc", "ERR bad-request unexpected argument vswitch=vsw-b"),
        ]);
        let conf = annotated(
            &socket,
            json!({"eniipd/vswitch": "vsw-b", "eniipd/ip-stick-time": "600", "app": "db"}),
        );
        let err = add(&conf, &e).unwrap_err();
        assert_eq!(err.code, code::DAEMON, "{err}");
        assert!(
            err.msg.starts_with(
                "the pod's annotation eniipd/vswitch cannot be honoured: this eniipd is older"
            ),
            "{err}"
        );
        let seen = server.join().unwrap();
        assert_eq!(
            seen[1],
            format!(
                "alloc eni/abc123 sandbox=abc123 netns={} veth={} vswitch=vsw-b ip-stick-time=600",
                ns.path.display(),
                datapath::host_veth_name("abc123", "eth0")
            )
        );
        assert_eq!(seen.len(), 2, "{seen:?}");
        // A bad value fails before eniipd is asked anything (here there
        // is none to ask: asking would fail with error 11 at once).
        let nowhere = test_dir("no-eniipd").join("eniipd.sock");
        let mut conf = annotated(&nowhere, json!({"eniipd/ip-stack": "ipv6"}));
        conf.daemon_wait = std::time::Duration::ZERO;
        let err = add(&conf, &e).unwrap_err();
        assert_eq!(err.code, code::INVALID_CONFIG, "{err}");
        assert!(
            err.msg
                .starts_with("invalid pod annotation eniipd/ip-stack: \"ipv6\""),
            "{err}"
        );
    }

    #[test]
    fn a_pods_security_groups_travel_as_a_set_and_are_held_to() {
        let Some(ns) = OtherNetns::new("an ADD with security groups") else {
            return;
        };
        let mut e = env("sg0001");
        e.netns = Some(ns.path.clone());
        let asking = |socket: &std::path::Path| {
            let mut conf = conf_on(socket);
            conf.pod_annotations =
                Some(json!({"eniipd/security-groups": "sg-bp1b,sg-bp1a,sg-bp1b"}));
            conf
        };
        // An eniipd older than per-pod security groups refuses the
        // argument: the ADD fails saying so, and nothing was taken.
        let (socket, server) = fake_eniipd(&[
            ("show", "ERR not-found"),
            (
                "alloc",
                "ERR bad-request unexpected argument security-groups=sg-bp1a,sg-bp1b",
            ),
        ]);
        let err = add(&asking(&socket), &e).unwrap_err();
        assert_eq!(err.code, code::DAEMON, "{err}");
        assert!(
            err.msg
                .contains("this eniipd does not support per-pod security groups"),
            "{err}"
        );
        let seen = server.join().unwrap();
        assert!(
            seen[1].ends_with(" security-groups=sg-bp1a,sg-bp1b"),
            "canonical on the wire: {seen:?}"
        );
        assert_eq!(seen.len(), 2, "{seen:?}");
        // An answer on an ENI of other groups (or one that does not say
        // them) is not the pod's: the ADD fails and gives the address back.
        for answered in [
            "OK ip=192.168.0.9 eni=eni-1 mac=00:16:3e:00:00:01 vswitch=vsw-1 cidr=192.168.0.0/24 gateway=192.168.0.253 gen=3 security-groups=sg-bp1a",
            "OK ip=192.168.0.9 eni=eni-1 mac=00:16:3e:00:00:01 vswitch=vsw-1 cidr=192.168.0.0/24 gateway=192.168.0.253 gen=3",
        ] {
            let (socket, server) = fake_eniipd(&[
                ("show", "ERR not-found"),
                ("alloc", answered),
                ("release", "OK released=192.168.0.9"),
            ]);
            let err = add(&asking(&socket), &e).unwrap_err();
            assert_eq!(err.code, code::DAEMON, "{err}");
            assert!(
                err.msg.contains("not the pod's sg-bp1a,sg-bp1b (eniipd/security-groups)"),
                "{err}"
            );
            let seen = server.join().unwrap();
            assert_eq!(
                seen.last().unwrap(),
                "release eni/sg0001 sandbox=sg0001 gen=3",
                "{seen:?}"
            );
        }
    }

    #[test]
    fn a_failed_add_keeps_an_address_the_owner_held_before_it() {
        let Some(ns) = OtherNetns::new("an ADD's rollback") else {
            return;
        };
        // A second ADD of a running pod: the address is the first one's.
        let (socket, server) = fake_eniipd(&[
            ("show", ALLOC_V6),
            ("alloc", ALLOC_V6),
            ("eni", ENI_V4_ONLY),
            ("release", "OK released=192.168.0.9"),
        ]);
        let mut e = env("abc123");
        e.netns = Some(ns.path.clone());
        let err = add(&conf_on(&socket), &e).unwrap_err();
        assert_eq!(err.code, code::DAEMON, "{err}");
        let seen = server.join().unwrap();
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert!(!seen.iter().any(|l| l.starts_with("release")), "{seen:?}");
    }

    #[test]
    fn a_bad_netns_is_refused_before_eniipd_is_asked() {
        // No eniipd at all: a check made after connecting would answer 11.
        let conf = conf_on(std::path::Path::new("/nonexistent/eniipd.sock"));
        let dir = test_dir("netns");
        let file = dir.join("file");
        std::fs::write(&file, "x").unwrap();
        for (path, says) in [
            ("/proc/self/ns/net", "is the namespace eniip-cni runs in"),
            (
                "/proc/thread-self/ns/net",
                "is the namespace eniip-cni runs in",
            ),
            ("/dev/null", "is not a network namespace"),
            ("/proc/self/ns/uts", "is not a network namespace"),
            (dir.to_str().unwrap(), "is not a network namespace"),
            (file.to_str().unwrap(), "is not a network namespace"),
        ] {
            let mut e = env("abc123");
            e.netns = Some(path.into());
            for cmd in [Command::Add, Command::Check] {
                let r = if cmd == Command::Add {
                    add(&conf, &e).map(drop)
                } else {
                    let mut c = conf.clone();
                    c.prev_result = Some(json!({"ips": [{"address": "192.168.0.9/32"}]}));
                    check(&c, &e)
                };
                let err = r.unwrap_err();
                assert_eq!(err.code, code::INVALID_ENV, "{path} {cmd:?}: {err}");
                assert!(err.msg.contains(says), "{path}: {err}");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
