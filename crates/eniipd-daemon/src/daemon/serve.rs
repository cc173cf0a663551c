//! Serving and stopping: signals (SIGHUP reloads the pool sizes), the
//! systemd watchdog and status line, and the stop against one deadline.

use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, tick, Receiver};
use log::{error, info, warn};

use crate::alloc::capacity::{self, Capacity, PoolSizes};
use crate::alloc::Fatal;
use crate::config::Config;

use super::config::load_config;
use super::{exit, status_line, Running};

/// From SIGTERM to exit, whatever the cloud or the disk is doing (SPEC
/// promises 10 s).
const STOP_DEADLINE: Duration = Duration::from_secs(8);

enum Stop {
    Signal(i32),
    Fatal(Fatal),
}

/// The signal thread: it forwards SIGTERM, SIGINT and SIGHUP to `rx`.
pub(super) struct SignalThread {
    pub(super) rx: Receiver<i32>,
    handle: signal_hook::iterator::Handle,
    thread: std::thread::JoinHandle<()>,
}

impl SignalThread {
    /// Ends the thread and joins it, waiting until `deadline` at most (it
    /// ends at once: closing the handle ends its loop, and dropping the
    /// receiver any send it is in).
    pub(super) fn stop(self, deadline: std::time::Instant) {
        let SignalThread { rx, handle, thread } = self;
        handle.close();
        drop(rx);
        if !eniip_util::thread::join_until(thread, deadline) {
            log::warn!("the signal thread did not end in time; not joined");
        }
    }
}

pub(super) fn signals() -> Result<SignalThread, std::io::Error> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])?;
    let handle = signals.handle();
    let (tx, rx) = bounded(8);
    let thread = std::thread::Builder::new()
        .name("eniipd-signals".into())
        .spawn(move || {
            for s in signals.forever() {
                if tx.send(s).is_err() {
                    break;
                }
            }
        })?;
    Ok(SignalThread { rx, handle, thread })
}

/// SIGHUP: the config loaded again as at start (the file, then the flags
/// and the defaults of `--simulate` and systemd over it), its pool sizes
/// applied, and every other key that differs named as needing a restart.
fn reload(r: &Running) {
    if r.args.config.is_none() && r.sim.is_some() {
        info!("SIGHUP: no config file to reload");
        return;
    }
    match load_config(&r.args, r.sim.as_ref(), r.sock_dir.as_deref()) {
        Ok((new, warnings)) => {
            for w in warnings {
                warn!("SIGHUP: {w}");
            }
            for k in changed_needing_restart(&r.cfg, &new) {
                warn!("SIGHUP: {k} changed; it takes effect only after a restart");
            }
            let mut notes = Vec::new();
            let cap: Capacity =
                capacity::compute(&r.limits, &r.cfg, PoolSizes::of(&new), &mut notes);
            for n in &notes {
                warn!("SIGHUP: {n}");
            }
            let mut view = capacity::effective_view(&r.cfg, &cap);
            // The view shows the reloaded keys; the rest is what runs.
            for (k, v) in &mut view {
                if k == "min_eni" {
                    *v = new.min_eni.to_string();
                }
            }
            match r.alloc.reload(cap, view) {
                Ok(c) => info!("SIGHUP: idle pool now {}..{}", c.min_idle, c.max_idle),
                Err(e) => warn!("SIGHUP: reload failed: {e}"),
            }
        }
        Err(e) => warn!("SIGHUP: {e}; keeping the current pool sizes"),
    }
}

/// The keys whose effective value differs between `old` and `new` and
/// that a reload does not apply.
fn changed_needing_restart(old: &Config, new: &Config) -> Vec<String> {
    let old = old.effective();
    new.effective()
        .into_iter()
        .filter(|(k, v)| {
            !capacity::RELOADABLE.contains(&k.as_str())
                && old.iter().find(|(ok, _)| ok == k).map(|(_, v)| v) != Some(v)
        })
        .map(|(k, _)| k)
        .collect()
}

/// How often the `STATUS=` line is refreshed (only sent when it changed).
const STATUS_EVERY: Duration = Duration::from_secs(5);

pub(super) fn serve(r: Running, sig_rx: &Receiver<i32>) -> i32 {
    let watchdog = eniip_util::systemd::watchdog_interval().map(|d| tick(d / 2));
    // `systemctl status` shows the pool counters, refreshed when they change.
    let status_tick = r.notifier.is_active().then(|| tick(STATUS_EVERY));
    let mut last_status = String::new();
    // A store that failed (a compaction, between requests) can make
    // nothing durable any more: say so and stop at once (exit 1; systemd
    // restarts it), not at the next alloc.
    let store_failures = r.committer.failures();
    let never = crossbeam_channel::never();
    let stop = loop {
        select! {
            recv(sig_rx) -> s => match s {
                Ok(signal_hook::consts::SIGHUP) => reload(&r),
                Ok(s) => break Stop::Signal(s),
                Err(_) => break Stop::Fatal(String::from("signal thread ended").into()),
            },
            recv(r.alloc.fatal()) -> m => break Stop::Fatal(m.unwrap_or_else(|_| String::from("allocator stopped").into())),
            recv(store_failures) -> m => break Stop::Fatal(m.unwrap_or_else(|_| "the state store stopped".into()).into()),
            recv(status_tick.as_ref().unwrap_or(&never)) -> _ => {
                let text = status_line(&r.alloc.commands());
                if !text.is_empty() && text != last_status {
                    let _ = r.notifier.status(&text);
                    last_status = text;
                }
            }
            recv(watchdog.as_ref().unwrap_or(&never)) -> _ => {
                // Only while the allocator answers: a wedged pool thread
                // lets systemd's watchdog restart the daemon.
                if r.alloc.ping(Duration::from_secs(2)) {
                    let _ = r.notifier.watchdog();
                }
            }
        }
    };
    let code = match &stop {
        Stop::Signal(s) => {
            info!("signal {s}: stopping");
            exit::OK
        }
        Stop::Fatal(f) => {
            error!("stopping: {}", f.message);
            // Restarting beside a live peer would find it again.
            if f.peer_running {
                exit::TEMPFAIL
            } else {
                exit::FAILURE
            }
        }
    };
    let _ = r.notifier.stopping();
    stop_all(r, code)
}

/// The whole stop, against ONE deadline (cloud-hypervisor's shape): every
/// component is told at once (the allocator fails its waiters, the
/// listener stops accepting), then each is joined, latest started first,
/// until the same instant. What is left then (a thread in a cloud call, a
/// disk that does not answer) is named in the log, not waited for.
fn stop_all(r: Running, code: i32) -> i32 {
    let started = Instant::now();
    let until = started + STOP_DEADLINE;
    r.alloc.begin_stop();
    if let Some(c) = r.conflist {
        c.stop_until(until);
    }
    if let Some(reaper) = r.reaper {
        reaper.stop(until);
    }
    r.queued.stop(until);
    if let Some(m) = r.metrics_http {
        m.shutdown_until(until);
    }
    r.server.shutdown(until);
    let stragglers = r.alloc.stop_actor(until);
    drop(r.alloc);
    // The actor is gone, so nothing submits to the store any more (a
    // client's thread held in a commit it leads still shares it; the
    // close refuses anything more): it makes the last submissions durable
    // and writes its snapshot, then the threads still in cloud calls get
    // what is left of the deadline.
    let mut code = code;
    match r.committer.close_until(until) {
        Ok(()) => {}
        Err(e @ crate::store::StoreError::NotDurable { .. }) => {
            error!(
                "the state directory did not answer within the stop deadline: {e} (every acknowledged change was already durable; the next start replays the log)"
            );
            code = exit::NOT_DURABLE;
        }
        Err(e) => {
            error!("closing the state failed: {e}");
            code = exit::NOT_DURABLE;
        }
    }
    crate::alloc::join_all(stragglers, until);
    if let Some(s) = &r.socket {
        s.remove_if_ours();
    }
    // The emulator (and its links and VPC namespace) last: it was started
    // first. It gets what is left of the deadline.
    if let Some(sim) = r.sim {
        sim.stop_until(until);
    }
    // The emulator's world is gone with it: its state directory is too.
    if let Some(d) = &r.sim_dir {
        let _ = std::fs::remove_dir_all(d);
    }
    info!("stopped in {:?}", started.elapsed());
    code
}
