//! The configuration `eniipd` runs with: the file (or the defaults), the
//! flags over it, `--simulate`'s and systemd's defaults; and
//! `--check-config`, which prints the effective config, runs every local
//! check and refuses near-miss keys.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use log::{info, warn};

use super::simulate::SimChild;
use crate::config::{Config, RawConfig, DEFAULT_CONFIG_PATH};

use super::args::Args;
use super::error::{chain, exit, preflight_error, DaemonError};
use super::preflight;

/// Loads the config and applies flag overrides (and the `--simulate`
/// defaults).
pub(crate) fn load_config(
    args: &Args,
    sim: Option<&SimChild>,
    sim_dir: Option<&Path>,
) -> Result<(Config, Vec<String>), DaemonError> {
    let path: Option<PathBuf> = match (&args.config, args.simulate) {
        (Some(p), _) => Some(p.clone()),
        (None, true) => None,
        (None, false) => Some(PathBuf::from(DEFAULT_CONFIG_PATH)),
    };
    let mut raw = match &path {
        Some(p) => RawConfig::load_or_defaults(p, args.config.is_some())
            .map_err(|e| DaemonError::new(exit::CONFIG, chain(&e)))?
            .unwrap_or_else(|| {
                info!("no {}: every key takes its default", p.display());
                RawConfig::default()
            }),
        None => RawConfig::default(),
    };
    let mut warnings = raw.warnings();
    if let Some(w) = path.as_ref().and_then(|p| raw.secret_file_warning(p)) {
        warnings.push(w);
    }
    if let Some(sim) = sim {
        raw.access_key = Some(sim.access_key_id.clone());
        raw.access_secret = Some(sim.access_key_secret.clone());
        raw.ecs_endpoint = Some(sim.ecs_url.clone());
        raw.vpc_endpoint = Some(sim.vpc_url.clone());
        raw.metadata_endpoint = Some(sim.metadata_url.clone());
        raw.allowed_uids = Some(vec![serde_json::Value::from(
            nix::unistd::getuid().as_raw(),
        )]);
        raw.socket_mode = Some(serde_json::Value::from("0600"));
        if raw.pool_check_interval.is_none() {
            raw.pool_check_interval = Some(serde_json::Value::from(30));
        }
    }
    if let Some(dir) = sim_dir {
        raw.socket_path = Some(dir.join("eniipd.sock").display().to_string());
        raw.state_dir = Some(dir.join("state").display().to_string());
    } else {
        // systemd's directories are the defaults under a unit.
        if raw.state_dir.is_none() {
            if let Ok(d) = std::env::var("STATE_DIRECTORY") {
                raw.state_dir = d.split(':').next().map(str::to_string);
            }
        }
        if raw.socket_path.is_none() {
            if let Ok(d) = std::env::var("RUNTIME_DIRECTORY") {
                raw.socket_path = d.split(':').next().map(|d| format!("{d}/eniipd.sock"));
            }
        }
    }
    let path_string = |p: &PathBuf| p.display().to_string();
    if let Some(p) = &args.socket {
        raw.socket_path = Some(path_string(p));
    }
    if let Some(p) = &args.state_dir {
        raw.state_dir = Some(path_string(p));
    }
    for (flag, slot) in [
        (&args.ecs_endpoint, &mut raw.ecs_endpoint),
        (&args.vpc_endpoint, &mut raw.vpc_endpoint),
        (&args.metadata_endpoint, &mut raw.metadata_endpoint),
    ] {
        if let Some(v) = flag {
            *slot = Some(v.clone());
        }
    }
    let cfg = raw
        .validate()
        .map_err(|e| DaemonError::new(exit::CONFIG, chain(&e)))?;
    Ok((cfg, warnings))
}

/// `--check-config`: the effective config and every local check, then
/// exit.
pub(super) fn check_config(args: &Args) -> Result<(), DaemonError> {
    let (mut cfg, warnings) = load_config(args, None, None)?;
    for w in warnings.iter().chain(&cfg.local_warnings()) {
        warn!("{w}");
    }
    check_near_misses(args)?;
    // Every local precondition (socket_group, metrics_listen, ...) before
    // the listing, so its error is the first thing read.
    preflight::check(&cfg, true).map_err(preflight_error)?;
    // What the daemon will use: a max_pool_size under min_pool_size is
    // raised to it (the warning above says so).
    if cfg.min_eni == 0 && cfg.min_pool_size > cfg.max_pool_size {
        cfg.max_pool_size = cfg.min_pool_size;
    }
    let mut out = std::io::stdout().lock();
    for (k, v) in cfg.effective() {
        let _ = writeln!(out, "{k}={v}");
    }
    check_vswitches_in_cloud(&cfg);
    Ok(())
}

/// `--check-config`, when `vswitches` names some and the cloud can be
/// asked (metadata answers within 2 s, one DescribeVSwitches each): warns
/// of every configured vswitch the cloud does not know, which eniipd
/// skips. Says so when it cannot ask; never fails the check.
fn check_vswitches_in_cloud(cfg: &Config) {
    use eniip_cloud::{CloudApi, MetadataApi};
    let configured: Vec<String> = cfg.vswitches.values().flatten().cloned().collect();
    if configured.is_empty() {
        return;
    }
    let md = eniip_cloud::metadata::MetadataClient::new(&cfg.metadata_endpoint);
    let identity = match md.identity() {
        Ok(i) => i,
        Err(e) => {
            info!("vswitches not checked against the cloud: {e}");
            return;
        }
    };
    let cloud = super::cloud::build_cloud(cfg, &identity);
    match cloud.describe_vswitches(&configured) {
        Ok(known) => {
            for v in configured
                .iter()
                .filter(|v| !known.iter().any(|k| &k.id == *v))
            {
                warn!("vswitch {v} is configured but the cloud does not know it (DescribeVSwitches): eniipd skips it");
            }
        }
        Err(e) => info!("vswitches not checked against the cloud: {e}"),
    }
}

/// `--check-config`: a typo of a known key is an error (78), not the
/// warning the daemon gives at start.
fn check_near_misses(args: &Args) -> Result<(), DaemonError> {
    let path = args
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_PATH));
    let Some(raw) = RawConfig::load_or_defaults(&path, args.config.is_some())
        .map_err(|e| DaemonError::new(exit::CONFIG, chain(&e)))?
    else {
        return Ok(());
    };
    let misses: Vec<String> = raw
        .near_misses()
        .into_iter()
        .map(|(k, known)| format!("`{k}` (did you mean `{known}`?)"))
        .collect();
    if misses.is_empty() {
        return Ok(());
    }
    Err(DaemonError::new(
        exit::CONFIG,
        format!(
            "{}: unknown key(s) close to known ones: {}; fix the spelling (a misspelt key is ignored and its default used)",
            path.display(),
            misses.join(", ")
        ),
    ))
}
