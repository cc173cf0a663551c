//! The node's outlook: the exhaustion forecast, sampled at each tick of
//! the vswitch reads and shown (`status`, `capacity`, the WARN once under
//! `exhaustion_warn_s`), and the drain: started and ended (durably), and
//! judged ready to retire.
//!
//! [`Outlook`] borrows only the parts this touches: it changes the pool
//! sizes in force (the drain's) and when the pool is next checked, never
//! the pool itself; the forecast's arithmetic is in
//! [`forecast`](super::super::forecast), the drain's state in
//! [`drain`](super::super::drain).

use std::time::Instant;

use log::{info, warn};

use crate::pool::PoolState;
use crate::store::Record;
use eniip_protocol::core::{Answer, CeilingUse, Exhaustion};

use super::super::capacity::Capacity;
use super::super::drain::{self, Drain, Held};
use super::super::forecast::{self, Clock, Forecast, NodeUse};
use super::super::mailbox::VSwitchRead;
use super::super::AllocatorOptions;
use super::demand::Demand;
use super::durable::Durable;
use super::inflight::InFlight;
use super::Reply;

/// The parts the outlook touches.
pub(super) struct Outlook<'a> {
    pub(super) opts: &'a AllocatorOptions,
    pub(super) cap: &'a mut Capacity,
    pub(super) pool: &'a PoolState,
    pub(super) demand: &'a Demand,
    pub(super) inflight: &'a InFlight,
    pub(super) durable: &'a Durable,
    pub(super) forecast: &'a mut Forecast,
    pub(super) clock: &'a Clock,
    pub(super) drain: &'a mut Drain,
    pub(super) next_maintenance: &'a mut Instant,
}

impl Outlook<'_> {
    /// What the node uses of its own ceilings now.
    fn node_use(&self) -> NodeUse {
        forecast::node_use(self.pool, self.cap)
    }

    /// Every ceiling, its use as of now.
    pub(super) fn ceilings(&mut self) -> Vec<CeilingUse> {
        self.forecast
            .now(self.clock.at(Instant::now()), self.node_use());
        self.forecast.ceilings()
    }

    /// The soonest forecast, the use as of now.
    pub(super) fn soonest(&mut self) -> Option<Exhaustion> {
        self.forecast
            .now(self.clock.at(Instant::now()), self.node_use());
        self.forecast.soonest()
    }

    /// The forecast's tick: the vswitches read and the node's use
    /// sampled; a forecast newly under `exhaustion_warn_s` is logged
    /// once. The free counts read, for where every read of them goes.
    pub(super) fn tick(
        &mut self,
        at: Instant,
        read: Option<Vec<VSwitchRead>>,
    ) -> Option<Vec<(String, u64)>> {
        let t = self.clock.at(at);
        if let Some(read) = &read {
            for v in read {
                self.forecast.observe_vswitch(t, &v.id, v.free, v.limit);
            }
        }
        self.forecast.observe_node(t, self.node_use());
        let warn_s = self.opts.exhaustion_warn.as_secs();
        if warn_s > 0 {
            for c in self.forecast.newly_under(warn_s) {
                warn!("{}", forecast::warning(&c));
            }
        }
        read.map(|r| r.into_iter().map(|v| (v.id, v.free)).collect())
    }

    /// `Some(ready to retire)` while draining.
    pub(super) fn retire_ready(&self) -> Option<bool> {
        if !self.drain.on() {
            return None;
        }
        self.drain.retire_ready(Held {
            not_in_use: drain::leftovers(self.pool),
            pending: self.demand.pending(),
            eni_ops: self.inflight.len(),
        })
    }

    /// `drain` / `undrain`: in force at once (the pool is checked now),
    /// answered once durable.
    pub(super) fn set_drain(&mut self, on: bool, reply: Reply) {
        let changed = if on {
            self.drain.start(self.cap)
        } else {
            self.drain.end(self.cap)
        };
        if changed && on {
            info!("draining: no new allocation; idle addresses and ENIs that hold no owner go back to the cloud");
        } else if changed {
            info!(
                "no longer draining: the pool refills to min_pool_size={}",
                self.cap.min_idle
            );
        }
        *self.next_maintenance = Instant::now();
        self.durable
            .then(vec![Record::Drain { on }], reply, move || {
                Answer::Draining(on)
            });
    }
}
