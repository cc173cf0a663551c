//! The forecast's tick: a thread that reads every configured vswitch's
//! free count with one `DescribeVSwitches` call every [`READ_EVERY`]
//! (jittered) and sends it to the actor, which samples the node's own
//! use at the same tick (see [`super::forecast`]). It is sent even when
//! the read failed, so the node's samples keep their pace.
//!
//! Budget: one call a minute a node, whatever the number of vswitches:
//! a fleet of 100 nodes makes 100 a minute, a third of the 300 a minute
//! Terway's client allows itself for the action (reference
//! aliyun-api.md) and a sixth of the emulator's default flow control.
//! The first read is one period after start, so a fleet restarting at
//! once does not read at once either.
//!
//! Debug builds read `ENIIPD_TEST_VSWITCH_READ_MS` for the period (the
//! forecast tests run in seconds).

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use log::debug;

use eniip_cloud::CloudApi;

use super::forecast::vswitch_limit;
use super::mailbox::{Event, VSwitchRead};

/// How often the vswitches are read.
pub(crate) const READ_EVERY: Duration = Duration::from_secs(60);

/// The period: [`READ_EVERY`], or the tests' own.
fn period() -> Duration {
    #[cfg(debug_assertions)]
    if let Some(ms) = std::env::var("ENIIPD_TEST_VSWITCH_READ_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
    {
        return Duration::from_millis(ms);
    }
    READ_EVERY
}

/// Starts the thread; it ends when `stop` fires or is dropped, or the
/// actor is gone.
pub(crate) fn spawn(
    cloud: Arc<dyn CloudApi>,
    vswitches: Vec<String>,
    events: Sender<Event>,
    stop: Receiver<()>,
) -> io::Result<JoinHandle<()>> {
    let every = period();
    std::thread::Builder::new()
        .name("eniipd-vsw-read".into())
        .spawn(move || loop {
            match stop.recv_timeout(every.mul_f64(eniip_util::rand::jitter(0.1))) {
                Err(RecvTimeoutError::Timeout) => {}
                _ => return,
            }
            let read = match cloud.describe_vswitches(&vswitches) {
                Ok(v) => Some(
                    v.into_iter()
                        .map(|s| VSwitchRead {
                            limit: vswitch_limit(&s.cidr).unwrap_or(s.available_ips),
                            free: s.available_ips,
                            id: s.id,
                        })
                        .collect(),
                ),
                Err(e) => {
                    debug!("reading the vswitches' free counts failed: {e}");
                    None
                }
            };
            let tick = Event::ForecastTick {
                at: Instant::now(),
                read,
            };
            if events.send(tick).is_err() {
                return;
            }
        })
}
