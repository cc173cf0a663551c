//! The verbs on the whole network: GC releases every address of this
//! network that no attachment the runtime still knows holds, and takes
//! down what was built for it (only that: the host ends those
//! attachments' ADDs made, never an end that routes the same address for
//! another pod); STATUS says whether eniipd could give a
//! new container an address now.

use std::net::IpAddr;

use super::built::{self, Built};
use super::eniipd_client::{self, Client};
use super::identity::sandbox_of;
use super::spec::{code, CniError, NetConf};
use super::{datapath, datapath_error, lock};
use eniip_protocol::protocol::reply::{parse_collected_line, parse_status};

/// The interface name runtimes give a pod's network (kubelet through
/// containerd and CRI-O, podman's first network): the host end of an
/// allocation that recorded none is looked for under it.
const DEFAULT_IFNAME: &str = "eth0";

pub(crate) fn gc(conf: &NetConf) -> Result<(), CniError> {
    let mut ids: Vec<String> = conf
        .valid_attachments
        .iter()
        .map(|a| sandbox_of(&a.container_id))
        .collect();
    ids.sort();
    ids.dedup();
    let mut c = Client::connect(&conf.socket)?;
    let mut first_err = None;
    // First what this plugin's ADDs recorded: each host end goes before
    // its address is given back, and the release names the allocation
    // the ADD was answered (a newer one of the same owner is kept).
    for b in built::of_network(&conf.lock_dir, &conf.name) {
        if ids.binary_search(&b.sandbox).is_ok() {
            continue;
        }
        if let Err(e) = collect_built(conf, &mut c, &b) {
            first_err.get_or_insert(e);
        }
    }
    // Then what eniipd holds that no record names (an older plugin's
    // ADD, one killed before its record): released by eniipd first, so
    // only the host end that allocation named is taken down after, never
    // any other end routing the address (by then it may be another
    // pod's). The sandboxes recorded now are kept: what the pass above
    // left is a newer ADD's.
    ids.extend(
        built::of_network(&conf.lock_dir, &conf.name)
            .into_iter()
            .map(|b| b.sandbox),
    );
    ids.sort();
    ids.dedup();
    let r = c.gc(&format!("{}/", conf.name), &ids)?;
    for line in r.data() {
        let Ok(released) = parse_collected_line(line) else {
            continue;
        };
        let IpAddr::V4(ip) = released.ip else {
            continue;
        };
        let veth = released
            .veth
            .as_deref()
            .filter(|v| v.starts_with(datapath::HOST_PREFIX));
        // An invocation for this owner that runs now finishes first.
        let _held = match lock::lock(
            &conf.lock_dir,
            &released.owner,
            eniipd_client::REPLY_DEADLINE,
        ) {
            Ok(l) => l,
            Err(e) => {
                first_err.get_or_insert(e);
                continue;
            }
        };
        let removed = match (veth, released.sandbox.as_deref()) {
            (Some(v), _) => datapath::teardown(v),
            // An allocation that recorded no host end (an older plugin's,
            // or made while eniipd could not read the netns): the one ADD
            // names after the sandbox's container id and eth0, when it
            // routes nobody else's address.
            (None, Some(s)) => {
                let named = datapath::host_veth_name(s, DEFAULT_IFNAME);
                datapath::teardown_unless_routing_another(&named, ip).map(|_| ())
            }
            (None, None) => Ok(()),
        };
        if let Err(e) = removed {
            first_err.get_or_insert(datapath_error(e));
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Takes down one recorded attachment whose sandbox the runtime no longer
/// knows, under its owner's lock: its host end (if it is still the one
/// its ADD made), then the release of the allocation its ADD was
/// answered; its record goes once eniipd has answered.
fn collect_built(conf: &NetConf, c: &mut Client, b: &Built) -> Result<(), CniError> {
    let _held = lock::lock(&conf.lock_dir, &b.owner, eniipd_client::REPLY_DEADLINE)?;
    // Read again under the lock: an ADD of the attachment may have
    // replaced it since.
    let Some(b) = built::find(&conf.lock_dir, &b.veth).filter(|now| now == b) else {
        return Ok(());
    };
    datapath::teardown_built(&b.veth, b.ifindex).map_err(datapath_error)?;
    c.ask(&format!(
        "release {} sandbox={}{}",
        b.owner,
        b.sandbox,
        b.gen_arg()
    ))?;
    let _ = built::forget(&conf.lock_dir, &b.veth);
    Ok(())
}

/// STATUS: 50 when eniipd cannot be asked, 51 when it could not hand out
/// an address now (no idle address, nothing pending, and the pool at its
/// capacity).
pub(crate) fn status(conf: &NetConf) -> Result<(), CniError> {
    let not_available = |e: CniError| {
        let queued = match eniip_protocol::releases::count(&conf.socket) {
            0 => String::new(),
            n => format!(" ({n} release(s) queued for it)"),
        };
        CniError::new(
            code::NOT_AVAILABLE,
            format!("eniipd is not available: {}{queued}", e.msg),
        )
        .details(e.to_string())
    };
    let mut c = Client::connect(&conf.socket).map_err(not_available)?;
    let r = c.ask("status").map_err(not_available)?;
    let Ok(s) = parse_status(r.text()) else {
        return Ok(());
    };
    if s.idle == 0 && s.pending == 0 && s.ips >= s.capacity {
        return Err(CniError::new(
            code::LIMITED,
            format!(
                "no address can be had: the instance's ENI quota is reached and every ENI \
                 is full ({} of {} addresses on {} ENIs in use, none idle)",
                s.ips, s.capacity, s.enis
            ),
        )
        .details(r.text().to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{conf_on, fake_eniipd};

    #[test]
    fn status_says_a_full_pool_in_one_plain_sentence() {
        let (socket, server) = fake_eniipd(&[(
            "status",
            "OK enis=2 ips=12 idle=0 inuse=12 reserved=0 cooling=0 pending=0 capacity=12 \
             later=1",
        )]);
        let err = status(&conf_on(&socket)).unwrap_err();
        assert_eq!(err.code, code::LIMITED, "{err}");
        assert_eq!(
            err.msg,
            "no address can be had: the instance's ENI quota is reached and every ENI is \
             full (12 of 12 addresses on 2 ENIs in use, none idle)"
        );
        assert_eq!(server.join().unwrap(), ["status"]);

        let (socket, server) = fake_eniipd(&[(
            "status",
            "OK enis=2 ips=12 idle=1 inuse=11 reserved=0 cooling=0 pending=0 capacity=12",
        )]);
        status(&conf_on(&socket)).unwrap();
        server.join().unwrap();
    }
}
