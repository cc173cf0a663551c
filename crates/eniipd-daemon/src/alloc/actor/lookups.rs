//! `eni ID`: one managed ENI's link and gateways, for a consumer that
//! routes through it (eniip-cni's IPv6 egress needs the vswitch's IPv6
//! gateway, which no `alloc` reply carries).
//!
//! The IPv4 half comes from the pool. The IPv6 half is read from metadata
//! on a short-lived thread (the actor never does I/O), only in dual stack
//! and only for an ENI holding IPv6 addresses: metadata lists an ENI's
//! `ipv6-gateway` once its `ipv6s` appear, which can lag the OpenAPI a
//! moment, so the thread polls for it within [`V6_WAIT`]. At most
//! [`MAX_LOOKUPS`] such threads run at once; beyond that the answer is
//! `busy`. A vswitch's IPv6 CIDR and gateway do not change: once read they
//! are kept (by vswitch) and later requests are answered without I/O.

use std::net::Ipv6Addr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use log::debug;

use crate::pool::PoolState;
use eniip_cloud::{CloudApi, CloudErrorKind};
use eniip_protocol::core::{AllocError, Answer, EniInfo, ErrCode};

use super::super::cloud_error;
use super::super::mailbox::Event;
use super::threads::Threads;
use super::Reply;

/// How long a lookup waits for metadata to list the ENI's IPv6 gateway.
const V6_WAIT: Duration = Duration::from_secs(5);
/// Concurrent metadata lookups.
const MAX_LOOKUPS: usize = 16;

/// What the pool alone says of `eni ID`.
#[derive(Debug)]
pub(super) enum Local {
    /// The answer (unknown, or everything known already).
    Answer(Result<Answer, AllocError>),
    /// The IPv4 half; the IPv6 half is to be read from metadata.
    NeedsMetadata(EniInfo),
}

/// `eni id` from the pool, with the vswitch's IPv6 half from `v6_of` (read
/// once per vswitch): only a dual-stack ENI holding IPv6 addresses whose
/// vswitch was never read needs metadata.
pub(super) fn local(
    pool: &PoolState,
    dual: bool,
    id: &str,
    v6_of: impl Fn(&str) -> Option<(String, Ipv6Addr)>,
) -> Local {
    let Some(info) = pool.eni(id).filter(|e| !e.gone()).map(|e| e.link().clone()) else {
        return Local::Answer(Err(AllocError::new(
            ErrCode::NotFound,
            format!("{id} is no ENI eniipd manages"),
        )));
    };
    let holds_v6 = pool.ips().on(id).any(|ip| ip.v6().is_some()) || pool.ips().unpaired_on(id) > 0;
    if !dual || !holds_v6 {
        return Local::Answer(Ok(Answer::Eni(info)));
    }
    match v6_of(&info.vswitch) {
        Some(v6) => Local::Answer(Ok(Answer::Eni(EniInfo {
            v6: Some(v6),
            ..info
        }))),
        None => Local::NeedsMetadata(info),
    }
}

/// Releases a lookup slot when the thread ends, however it ends.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Metadata lookups in flight, at most [`MAX_LOOKUPS`].
#[derive(Debug, Default)]
pub(super) struct Lookups {
    in_flight: Arc<AtomicUsize>,
}

impl Lookups {
    /// Completes `info` from metadata on a thread of its own and answers
    /// `reply` from there (the vswitch's IPv6 half is reported as
    /// [`Event::VSwitchV6`], kept for later requests); `busy` at once when
    /// [`MAX_LOOKUPS`] are in flight.
    pub(super) fn start(&self, threads: &mut Threads, info: EniInfo, reply: Reply) {
        let Some(slot) = self.slot() else {
            let _ = reply.send(Err(AllocError::new(
                ErrCode::Busy,
                "too many ENI lookups in flight",
            )));
            return;
        };
        let (cloud, events) = threads.cloud_and_events();
        let spawned = threads.spawn("eni lookup", "eniipd-eni-info", move || {
            let _slot = slot;
            let r = with_v6(&*cloud, info, Instant::now() + V6_WAIT);
            if let Ok(EniInfo {
                vswitch,
                v6: Some((cidr6, gateway6)),
                ..
            }) = &r
            {
                let _ = events.try_send(Event::VSwitchV6 {
                    vswitch: vswitch.clone(),
                    cidr6: cidr6.clone(),
                    gateway6: *gateway6,
                });
            }
            let _ = reply.send(r.map(Answer::Eni));
        });
        if let Err(e) = spawned {
            // The closure (its reply and slot) is dropped: the client sees
            // the allocator's answer channel close.
            log::warn!("cannot start an ENI lookup thread: {e}");
        }
    }

    fn slot(&self) -> Option<Slot> {
        if self.in_flight.fetch_add(1, Ordering::SeqCst) >= MAX_LOOKUPS {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Slot(Arc::clone(&self.in_flight)))
    }
}

/// `info` with its vswitch's IPv6 CIDR and gateway from metadata, when
/// metadata lists them by `deadline`.
fn with_v6(
    cloud: &dyn CloudApi,
    mut info: EniInfo,
    deadline: Instant,
) -> Result<EniInfo, AllocError> {
    let mut delay = Duration::from_millis(50);
    loop {
        match cloud.metadata().eni(&info.mac) {
            Ok(md) => {
                if let (Some(gw6), Some(cidr6)) = (md.ipv6_gateway, md.vswitch_ipv6_cidr) {
                    info.v6 = Some((cidr6, gw6));
                    return Ok(info);
                }
                if !md.ipv6s.is_empty() {
                    // Listed addresses but no gateway: waiting will not
                    // change that.
                    debug!("{}: metadata lists no IPv6 gateway", info.eni);
                    return Ok(info);
                }
            }
            Err(e) if e.kind == CloudErrorKind::NotFound => {}
            Err(e) => return Err(cloud_error(&e)),
        }
        let now = Instant::now();
        if now >= deadline {
            debug!("{}: metadata lists no IPv6 address yet", info.eni);
            return Ok(info);
        }
        std::thread::sleep(delay.min(deadline - now));
        delay = (delay * 2).min(Duration::from_millis(500));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn at_most_max_lookups_hold_a_slot() {
        let l = Lookups::default();
        let slots: Vec<Slot> = (0..MAX_LOOKUPS).map(|_| l.slot().unwrap()).collect();
        assert!(l.slot().is_none());
        drop(slots);
        assert!(l.slot().is_some());
        assert_eq!(l.in_flight.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn only_an_unread_dual_stack_vswitch_needs_metadata() {
        let mut pool = PoolState::new(true);
        let gw = Ipv4Addr::new(10, 0, 0, 253);
        pool.add_eni(
            EniInfo {
                eni: "eni-1".into(),
                mac: "00:16:3e:00:00:01".into(),
                vswitch: "vsw-a".into(),
                cidr: "10.0.0.0/24".into(),
                gateway: gw,
                v6: None,
            },
            Ipv4Addr::new(10, 0, 0, 1),
        );
        let none = |_: &str| None;
        assert!(matches!(
            local(&pool, true, "eni-9", none),
            Local::Answer(Err(e)) if e.code == ErrCode::NotFound
        ));
        // No IPv6 held: the IPv4 half is the answer.
        assert!(
            matches!(local(&pool, true, "eni-1", none), Local::Answer(Ok(Answer::Eni(i))) if i.v6.is_none())
        );
        pool.add_ip(
            "eni-1",
            Ipv4Addr::new(10, 0, 0, 2),
            Some("fd00::2".parse().unwrap()),
        );
        assert!(
            matches!(local(&pool, true, "eni-1", none), Local::NeedsMetadata(i) if i.eni == "eni-1")
        );
        assert!(matches!(
            local(&pool, false, "eni-1", none),
            Local::Answer(Ok(_))
        ));
        let read =
            |v: &str| (v == "vsw-a").then(|| ("fd00::/64".to_string(), "fd00::1".parse().unwrap()));
        assert!(matches!(
            local(&pool, true, "eni-1", read),
            Local::Answer(Ok(Answer::Eni(i))) if i.v6.as_ref().is_some_and(|(c, _)| c == "fd00::/64")
        ));
    }
}
