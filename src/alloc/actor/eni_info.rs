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

use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::core::EniInfo;

/// How long a lookup waits for metadata to list the ENI's IPv6 gateway.
const V6_WAIT: Duration = Duration::from_secs(5);
/// Concurrent metadata lookups.
const MAX_LOOKUPS: usize = 16;

/// The helper name of a lookup thread.
const LOOKUP_THREAD: &str = "eni lookup";

/// Releases a lookup slot when the thread ends, however it ends.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Actor {
    pub(super) fn on_eni(&mut self, id: &str, reply: Reply) {
        let known = self.pool.enis.get(id).filter(|e| !e.gone);
        let Some(info) = known.and_then(|e| self.pool.eni_info(&e.id)) else {
            let _ = reply.send(Err(AllocError::bare(ErrCode::NotFound)));
            return;
        };
        let holds_v6 = self
            .pool
            .ips
            .values()
            .any(|ip| ip.eni == id && ip.v6.is_some())
            || self.pool.unpaired_v6.values().any(|e| e == id);
        if !self.opts.dual || !holds_v6 {
            let _ = reply.send(Ok(Answer::Eni(info)));
            return;
        }
        if let Some(v6) = self.vsw.v6(&info.vswitch) {
            let info = EniInfo {
                v6: Some(v6.clone()),
                ..info
            };
            let _ = reply.send(Ok(Answer::Eni(info)));
            return;
        }
        if self.stopping {
            let _ = reply.send(Err(AllocError::shutting_down()));
            return;
        }
        if self.lookups.fetch_add(1, Ordering::SeqCst) >= MAX_LOOKUPS {
            self.lookups.fetch_sub(1, Ordering::SeqCst);
            let _ = reply.send(Err(AllocError::new(
                ErrCode::Busy,
                "too many ENI lookups in flight",
            )));
            return;
        }
        let slot = Slot(Arc::clone(&self.lookups));
        // Finished lookups need no join (and would pile up otherwise).
        self.helpers
            .retain(|(name, h)| name != LOOKUP_THREAD || !h.is_finished());
        let cloud = Arc::clone(&self.cloud);
        let events = self.events_tx.clone();
        let spawned = std::thread::Builder::new()
            .name("eniipd-eni-info".into())
            .spawn(move || {
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
        match spawned {
            Ok(h) => self.helpers.push((LOOKUP_THREAD.into(), h)),
            // The closure (its reply and slot) is dropped: the client sees
            // the allocator's answer channel close.
            Err(e) => warn!("cannot start an ENI lookup thread: {e}"),
        }
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
