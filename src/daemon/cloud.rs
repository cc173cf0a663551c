//! The cloud at start-up: the client built from the config and the
//! instance's identity, and the retry every start-up read goes through
//! (exit 69 when the cloud stays unreachable, 77 when it refuses the
//! credentials, a clean stop on SIGTERM while waiting).

use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use log::{info, warn};

use crate::cloud::aliyun::{AliyunCloud, AliyunCloudOptions};
use crate::cloud::credentials::CredentialSource;
use crate::cloud::{CloudError, InstanceIdentity};
use crate::config::Config;

use super::error::{chain, exit, DaemonError};

/// How long start-up waits for the account's quota while every answer is
/// a throttle: a fleet's restart spends windows, it is not an outage.
const THROTTLED_START_LIMIT: Duration = Duration::from_secs(30 * 60);

/// Retries a start-up cloud read for up to `budget` (up to
/// [`THROTTLED_START_LIMIT`] while it is throttled); failure is exit 69,
/// refused credentials exit 77, and SIGTERM/SIGINT while it waits a clean
/// stop.
pub(super) fn at_start<T>(
    what: &str,
    budget: Duration,
    signals: &Receiver<i32>,
    mut f: impl FnMut() -> Result<T, CloudError>,
) -> Result<T, DaemonError> {
    let end = Instant::now() + budget;
    let throttled_end = Instant::now() + THROTTLED_START_LIMIT;
    let mut delay = Duration::from_millis(500);
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if e.kind == crate::cloud::CloudErrorKind::Auth => {
                return Err(DaemonError::new(
                    exit::NOPERM,
                    format!(
                        "{what}: the cloud refused the credentials ({}): {}",
                        e.code_or_kind(),
                        chain(&e)
                    ),
                ));
            }
            Err(e) if e.kind == crate::cloud::CloudErrorKind::ClockSkew => {
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
                if e.kind == crate::cloud::CloudErrorKind::Throttled
                    && Instant::now() + delay < end.max(throttled_end) =>
            {
                warn!("{what}: {e}; the account's quota is spent, waiting for the next window");
                stopped_during_start(signals, delay.mul_f64(crate::util::rand::jitter(0.5)))?;
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
