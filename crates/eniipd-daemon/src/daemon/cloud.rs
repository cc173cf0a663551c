//! The cloud at start-up: the client built from the config and the
//! instance's identity, and the retry every start-up read goes through
//! (exit 69 when the cloud stays unreachable, 77 when it refuses the
//! credentials, a clean stop on SIGTERM while waiting).

use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use log::{info, warn};

use crate::config::Config;
use eniip_cloud::aliyun::{AliyunCloud, AliyunCloudOptions};
use eniip_cloud::credentials::CredentialSource;
use eniip_cloud::error::METADATA_ACTION;
use eniip_cloud::{CloudError, CloudErrorKind, InstanceIdentity, MetadataApi};

use super::error::{chain, exit, DaemonError};

/// How long start-up waits for the account's quota while every answer is
/// a throttle: a fleet's restart spends windows, it is not an outage.
const THROTTLED_START_LIMIT: Duration = Duration::from_secs(30 * 60);

/// How long start-up tries a metadata service that gives no answer at
/// all (nothing listens or nothing routes there: not an ECS instance, or
/// a wrong `metadata_endpoint`) before it gives up naming it. One that
/// answers, even with errors, gets the whole start-up budget.
const UNREACHABLE_START_LIMIT: Duration = Duration::from_secs(10);

/// Retries a start-up cloud read for up to `budget` (up to
/// [`THROTTLED_START_LIMIT`] while it is throttled); failure is exit 69,
/// refused credentials exit 77, and SIGTERM/SIGINT while it waits a clean
/// stop.
pub(super) fn at_start<T>(
    what: &str,
    budget: Duration,
    signals: &Receiver<i32>,
    f: impl FnMut() -> Result<T, CloudError>,
) -> Result<T, DaemonError> {
    retry_at_start(what, budget, signals, f, |_, _, _| None)
}

/// The instance's identity from the metadata service at `endpoint`, as
/// [`at_start`] reads it, except that a service that never answered
/// fails the start (exit 69) after [`UNREACHABLE_START_LIMIT`], with a
/// message naming the endpoint and what to set.
pub(super) fn identity_at_start(
    endpoint: &str,
    budget: Duration,
    signals: &Receiver<i32>,
    md: &dyn MetadataApi,
) -> Result<InstanceIdentity, DaemonError> {
    let mut answered = false;
    let give_up = |e: &CloudError, tried: Duration, next: Duration| {
        let silent = e.action == METADATA_ACTION
            && matches!(e.kind, CloudErrorKind::Transport | CloudErrorKind::Timeout);
        answered |= !silent;
        (silent && !answered && tried + next >= UNREACHABLE_START_LIMIT)
            .then(|| unreachable_metadata(endpoint, e, tried))
    };
    retry_at_start(
        "reading instance metadata",
        budget,
        signals,
        || md.identity(),
        give_up,
    )
}

/// Why a start gave up on a metadata service that never answered, and
/// what to do.
fn unreachable_metadata(endpoint: &str, e: &CloudError, tried: Duration) -> String {
    format!(
        "metadata service unreachable at {endpoint} (no answer in {} s; the last try: {e}): eniipd reads the instance's identity from it, so run it on an ECS instance, or set metadata_endpoint in the config (or --metadata-endpoint) to one that answers, such as the packaged emulator's (eniip-sim.service: eniipd(8), SYSTEMD)",
        tried.as_secs()
    )
}

/// [`at_start`], where `give_up(error, time since the first try, the
/// wait before the next)` may end the retries at once with exit 69 and
/// the message it returns.
fn retry_at_start<T>(
    what: &str,
    budget: Duration,
    signals: &Receiver<i32>,
    mut f: impl FnMut() -> Result<T, CloudError>,
    mut give_up: impl FnMut(&CloudError, Duration, Duration) -> Option<String>,
) -> Result<T, DaemonError> {
    let started = Instant::now();
    let end = started + budget;
    let throttled_end = started + THROTTLED_START_LIMIT;
    let mut delay = Duration::from_millis(500);
    loop {
        let result = f();
        if let Err(e) = &result {
            if let Some(m) = give_up(e, started.elapsed(), delay) {
                return Err(DaemonError::new(exit::UNAVAILABLE, m));
            }
        }
        match result {
            Ok(v) => return Ok(v),
            Err(e) if e.kind == CloudErrorKind::Auth => {
                return Err(DaemonError::new(
                    exit::NOPERM,
                    format!(
                        "{what}: the cloud refused the credentials ({}): {}",
                        e.code_or_kind(),
                        chain(&e)
                    ),
                ));
            }
            Err(e) if e.kind == CloudErrorKind::ClockSkew => {
                return Err(DaemonError::new(
                    exit::UNAVAILABLE,
                    format!("{what}: {}", chain(&e)),
                ));
            }
            // Throttled: the cloud answers, the account's quota is spent
            // (a fleet starting at once). Wait our turn, with jitter, up
            // to THROTTLED_START_LIMIT rather than exit 69 (which says the
            // cloud is unreachable).
            Err(e)
                if e.kind == CloudErrorKind::Throttled
                    && Instant::now() + delay < end.max(throttled_end) =>
            {
                warn!("{what}: {e}; the account's quota is spent, waiting for the next window");
                stopped_during_start(signals, delay.mul_f64(eniip_util::rand::jitter(0.5)))?;
                delay = (delay * 2).min(Duration::from_secs(10));
            }
            Err(e) if Instant::now() + delay >= end => {
                return Err(DaemonError::new(
                    exit::UNAVAILABLE,
                    format!("{what}: {}", chain(&e)),
                ));
            }
            Err(e) => {
                warn!("{what}: {e}; retrying");
                stopped_during_start(signals, delay)?;
                delay = (delay * 2).min(Duration::from_secs(10));
            }
        }
    }
}

/// Waits `delay`, unless SIGTERM or SIGINT comes first: then start-up
/// ends with a clean stop (nothing was acknowledged yet; the state files
/// are consistent).
fn stopped_during_start(signals: &Receiver<i32>, delay: Duration) -> Result<(), DaemonError> {
    let until = Instant::now() + delay;
    loop {
        match signals.recv_deadline(until) {
            Ok(signal_hook::consts::SIGHUP) => continue,
            Ok(s) => {
                return Err(DaemonError::new(
                    exit::OK,
                    format!("signal {s} during start-up: stopping"),
                ))
            }
            Err(_) => return Ok(()),
        }
    }
}

pub(super) fn build_cloud(cfg: &Config, identity: &InstanceIdentity) -> AliyunCloud {
    let region = cfg
        .region_id
        .clone()
        .unwrap_or_else(|| identity.region_id.clone());
    let credentials = match (&cfg.access_key, &cfg.access_secret) {
        (Some(id), Some(secret)) => CredentialSource::Static {
            id: id.clone(),
            secret: secret.clone(),
            token: None,
        },
        _ => CredentialSource::from_env_or_role(cfg.ram_role.clone()),
    };
    info!("credentials: {}", credentials.describe());
    let mut opts = AliyunCloudOptions::new(&region, &cfg.metadata_endpoint, credentials);
    if let Some(e) = &cfg.ecs_endpoint {
        opts.ecs_endpoint = e.clone();
    }
    if let Some(e) = &cfg.vpc_endpoint {
        opts.vpc_endpoint = e.clone();
    }
    opts.signature_version = cfg.signature_version;
    info!(
        "endpoints: ECS {}, VPC {}, metadata {}",
        opts.ecs_endpoint, opts.vpc_endpoint, opts.metadata_endpoint
    );
    AliyunCloud::new(opts)
}
