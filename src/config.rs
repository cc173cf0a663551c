//! Configuration: `eni.json` (Terway's format plus eniipd's own keys) parsed
//! into [`RawConfig`] by serde, then validated into [`Config`]. Validation
//! names the key, the value and what is allowed; a bad value is exit 78.
//!
//! Command-line flags override keys by being applied to the `RawConfig`
//! before validation, so one validation path covers both.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::util::Secret;

/// Default config file.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/eniipd/eni.json";
/// Default socket.
pub const DEFAULT_SOCKET_PATH: &str = "/run/eniipd/eniipd.sock";
/// Default state directory.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/eniipd";
/// Default metadata endpoint.
pub const DEFAULT_METADATA_ENDPOINT: &str = "http://100.100.100.200";

/// Terway keys that eniipd accepts but does not use (one warning names them).
const TERWAY_IGNORED_KEYS: &[&str] = &[
    "version",
    "credential_path",
    "service_cidr",
    "prefix",
    "enable_eip_pool",
    "allow_eip_rob",
    "enable_eni_trunking",
    "wait_trunk_eni",
    "custom_stateful_workload_kinds",
    "ipam_type",
    "eni_cap_policy",
    "backoff_override",
    "extra_routes",
    "disable_device_plugin",
    "disable_security_group_check",
    "kube_client_qps",
    "kube_client_burst",
    "resource_group_id",
    "enable_erdma",
    "ip_pool_sync_period",
    "idle_ip_reclaim_after",
    "idle_ip_reclaim_interval",
    "idle_ip_reclaim_batch_size",
    "idle_ip_reclaim_jitter_factor",
    "rate_limit",
    "trunk_eni_tags",
];

/// How a new ENI's vswitch is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VSwitchPolicy {
    /// A shuffled order each time (Terway's default).
    Random,
    /// Most free IPs first (DescribeVSwitches, cached).
    Ordered,
}

/// Address families handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpStack {
    /// IPv4 only.
    Ipv4,
    /// An IPv4 and IPv6 pair per allocation.
    Dual,
}

/// The file as written. Every field is optional; unknown keys are kept in
/// `other` so they can be named in a warning.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct RawConfig {
    pub access_key: Option<String>,
    pub access_secret: Option<Secret>,
    pub vswitches: Option<BTreeMap<String, Vec<String>>>,
    pub security_group: Option<String>,
    pub security_groups: Option<Vec<String>>,
    pub min_pool_size: Option<Value>,
    pub max_pool_size: Option<Value>,
    pub min_eni: Option<Value>,
    pub max_eni: Option<Value>,
    pub eni_cap_ratio: Option<Value>,
    pub eni_cap_shift: Option<Value>,
    pub vswitch_selection_policy: Option<String>,
    pub eni_tags: Option<BTreeMap<String, String>>,
    pub ip_stack: Option<String>,
    pub region_id: Option<String>,
    pub instance_id: Option<String>,
    pub ecs_endpoint: Option<String>,
    pub vpc_endpoint: Option<String>,
    pub metadata_endpoint: Option<String>,
    pub ram_role: Option<String>,
    pub socket_path: Option<String>,
    pub socket_mode: Option<Value>,
    pub socket_group: Option<Value>,
    pub allowed_uids: Option<Vec<Value>>,
    pub state_dir: Option<String>,
    pub ip_stick_time: Option<Value>,
    pub ip_cooldown: Option<Value>,
    pub alloc_timeout: Option<Value>,
    pub aggregation_window_ms: Option<Value>,
    pub max_ips_per_call: Option<Value>,
    pub max_concurrent_eni_ops: Option<Value>,
    pub pool_check_interval: Option<Value>,
    pub max_connections: Option<Value>,
    pub metrics_listen: Option<String>,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Static access key id (config), if any.
    pub access_key: Option<String>,
    /// Static access key secret (config), if any.
    pub access_secret: Option<Secret>,
    /// zone -> vswitch ids; empty means the instance's own vswitch.
    pub vswitches: BTreeMap<String, Vec<String>>,
    /// Security groups for new ENIs; empty means the instance's own.
    pub security_groups: Vec<String>,
    /// Idle IPs to keep at least (before clamping to capacity).
    pub min_pool_size: usize,
    /// Idle IPs to keep at most (before clamping to capacity).
    pub max_pool_size: usize,
    /// If non-zero, min pool = min_eni x IPs per ENI.
    pub min_eni: usize,
    /// If non-zero, caps the usable ENIs.
    pub max_eni: usize,
    /// Multiplier of EniQuantity.
    pub eni_cap_ratio: f64,
    /// Added to the ENI count.
    pub eni_cap_shift: i64,
    /// New-ENI vswitch order.
    pub vswitch_selection_policy: VSwitchPolicy,
    /// Extra tags on new ENIs.
    pub eni_tags: BTreeMap<String, String>,
    /// IPv4 or dual stack.
    pub ip_stack: IpStack,
    /// Region override (default: metadata).
    pub region_id: Option<String>,
    /// Instance override (default: metadata).
    pub instance_id: Option<String>,
    /// ECS endpoint override.
    pub ecs_endpoint: Option<String>,
    /// VPC endpoint override.
    pub vpc_endpoint: Option<String>,
    /// Metadata base URL.
    pub metadata_endpoint: String,
    /// RAM role name (default: the one metadata lists).
    pub ram_role: Option<String>,
    /// The Unix socket.
    pub socket_path: PathBuf,
    /// Its permission bits.
    pub socket_mode: u32,
    /// Its group (name or number), members may alloc/release.
    pub socket_group: Option<String>,
    /// Uids that may alloc/release.
    pub allowed_uids: Vec<u32>,
    /// The state directory.
    pub state_dir: PathBuf,
    /// How long a released IP stays reserved for its last owner.
    pub ip_stick_time: Duration,
    /// How long a released IP is kept from other owners.
    pub ip_cooldown: Duration,
    /// How long a cold alloc may wait.
    pub alloc_timeout: Duration,
    /// Per-ENI batching window.
    pub aggregation_window: Duration,
    /// IPs per Assign/Create call (1..10).
    pub max_ips_per_call: usize,
    /// Concurrent ENI create/delete operations.
    pub max_concurrent_eni_ops: usize,
    /// Pool maintenance period.
    pub pool_check_interval: Duration,
    /// Open connections at most.
    pub max_connections: usize,
    /// Address for `GET /metrics`, if any.
    pub metrics_listen: Option<SocketAddr>,
}

/// Why a config could not be loaded.
#[derive(Debug)]
pub enum ConfigError {
    /// The file could not be read.
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file is not valid JSON of the right shape.
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// A key has a value outside what is allowed.
    Invalid {
        key: String,
        value: String,
        allowed: String,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Read { path, .. } => {
                write!(f, "cannot read config file {}", path.display())
            }
            ConfigError::Parse { path, source } => {
                write!(f, "cannot parse config file {}: {source}", path.display())
            }
            ConfigError::Invalid {
                key,
                value,
                allowed,
            } => {
                write!(f, "invalid value for `{key}`: {value} (allowed: {allowed})")
            }
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::Read { source, .. } => Some(source),
            ConfigError::Parse { .. } | ConfigError::Invalid { .. } => None,
        }
    }
}

fn invalid(key: &str, value: &Value, allowed: &str) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        value: value.to_string(),
        allowed: allowed.to_string(),
    }
}

fn invalid_str(key: &str, value: &str, allowed: &str) -> ConfigError {
    invalid(key, &Value::String(value.to_string()), allowed)
}

/// An integer in `lo..=hi` (JSON number without fraction).
fn int_in(
    key: &str,
    v: &Option<Value>,
    default: u64,
    lo: u64,
    hi: u64,
) -> Result<u64, ConfigError> {
    let Some(v) = v else { return Ok(default) };
    let allowed = if hi == u64::MAX {
        format!("an integer >= {lo}")
    } else {
        format!("an integer from {lo} to {hi}")
    };
    match v.as_u64() {
        Some(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => Err(invalid(key, v, &allowed)),
    }
}

fn usize_in(
    key: &str,
    v: &Option<Value>,
    default: usize,
    lo: usize,
    hi: usize,
) -> Result<usize, ConfigError> {
    int_in(key, v, default as u64, lo as u64, hi as u64).map(|n| n as usize)
}

fn secs(
    key: &str,
    v: &Option<Value>,
    default: u64,
    lo: u64,
    hi: u64,
) -> Result<Duration, ConfigError> {
    int_in(key, v, default, lo, hi).map(Duration::from_secs)
}

impl RawConfig {
    /// Reads and parses a file (not yet validated).
    pub fn load(path: &Path) -> Result<RawConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        RawConfig::parse(&text).map_err(|source| ConfigError::Parse {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Parses JSON text.
    pub fn parse(text: &str) -> Result<RawConfig, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// Warnings for keys that are accepted but ignored, or unknown.
    pub fn warnings(&self) -> Vec<String> {
        let (terway, unknown): (Vec<&String>, Vec<&String>) = self
            .other
            .keys()
            .partition(|k| TERWAY_IGNORED_KEYS.contains(&k.as_str()));
        let mut w = Vec::new();
        if !terway.is_empty() {
            let names: Vec<&str> = terway.iter().map(|s| s.as_str()).collect();
            w.push(format!(
                "Terway keys not used by eniipd are ignored: {}",
                names.join(", ")
            ));
        }
        for k in unknown {
            w.push(format!("unknown config key `{k}` is ignored"));
        }
        w
    }

    /// Validates into a [`Config`].
    pub fn validate(&self) -> Result<Config, ConfigError> {
        let mut security_groups: Vec<String> = Vec::new();
        if let Some(sg) = &self.security_group {
            if !sg.is_empty() {
                security_groups.push(sg.clone());
            }
        }
        for sg in self.security_groups.iter().flatten() {
            if !security_groups.contains(sg) && !sg.is_empty() {
                security_groups.push(sg.clone());
            }
        }
        for sg in &security_groups {
            if !sg.starts_with("sg-") {
                return Err(invalid_str(
                    "security_groups",
                    sg,
                    "security group ids (sg-...)",
                ));
            }
        }
        security_groups.sort();
        if security_groups.len() > 5 {
            return Err(invalid_str(
                "security_groups",
                &security_groups.join(","),
                "at most 5 security groups in all",
            ));
        }

        let vswitches = self.vswitches.clone().unwrap_or_default();
        for (zone, ids) in &vswitches {
            for id in ids {
                if !id.starts_with("vsw-") {
                    return Err(invalid_str(
                        &format!("vswitches.{zone}"),
                        id,
                        "vswitch ids (vsw-...)",
                    ));
                }
            }
        }

        let eni_cap_ratio = match &self.eni_cap_ratio {
            None => 1.0,
            Some(v) => match v.as_f64() {
                Some(r) if r > 0.0 && r <= 1.0 => r,
                // Terway turns 0 into 1.
                Some(0.0) => 1.0,
                _ => return Err(invalid("eni_cap_ratio", v, "a number > 0 and <= 1")),
            },
        };
        let eni_cap_shift = match &self.eni_cap_shift {
            None => 0,
            Some(v) => match v.as_i64() {
                Some(n) if (-64..=64).contains(&n) => n,
                _ => return Err(invalid("eni_cap_shift", v, "an integer from -64 to 64")),
            },
        };

        let vswitch_selection_policy = match self.vswitch_selection_policy.as_deref() {
            None | Some("") | Some("random") => VSwitchPolicy::Random,
            Some("ordered") => VSwitchPolicy::Ordered,
            Some(other) => {
                return Err(invalid_str(
                    "vswitch_selection_policy",
                    other,
                    "\"random\" or \"ordered\"",
                ))
            }
        };
        let ip_stack = match self.ip_stack.as_deref() {
            None | Some("") | Some("ipv4") => IpStack::Ipv4,
            Some("dual") => IpStack::Dual,
            Some(other) => return Err(invalid_str("ip_stack", other, "\"ipv4\" or \"dual\"")),
        };

        let eni_tags = self.eni_tags.clone().unwrap_or_default();
        for k in eni_tags.keys() {
            let lower = k.to_ascii_lowercase();
            if k.is_empty()
                || k.len() > 128
                || lower.starts_with("aliyun")
                || lower.starts_with("acs:")
            {
                return Err(invalid_str(
                    "eni_tags",
                    k,
                    "keys of 1..128 characters not starting with aliyun or acs:",
                ));
            }
            if k == crate::cloud::TAG_CREATOR_KEY || k == crate::cloud::TAG_INSTANCE_KEY {
                return Err(invalid_str(
                    "eni_tags",
                    k,
                    "keys other than the ones eniipd sets itself",
                ));
            }
        }
        if eni_tags.len() > 18 {
            return Err(invalid_str(
                "eni_tags",
                &format!("{} tags", eni_tags.len()),
                "at most 18 tags",
            ));
        }

        for (key, v) in [
            ("ecs_endpoint", &self.ecs_endpoint),
            ("vpc_endpoint", &self.vpc_endpoint),
            ("metadata_endpoint", &self.metadata_endpoint),
        ] {
            if let Some(url) = v {
                if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() < 9 {
                    return Err(invalid_str(key, url, "an http:// or https:// URL"));
                }
            }
        }
        for (key, v) in [
            ("region_id", &self.region_id),
            ("instance_id", &self.instance_id),
            ("ram_role", &self.ram_role),
        ] {
            if let Some(s) = v {
                if s.is_empty()
                    || !s
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                {
                    return Err(invalid_str(key, s, "letters, digits, '-', '_' and '.'"));
                }
            }
        }
        if self.access_key.is_some() != self.access_secret.is_some() {
            return Err(invalid_str(
                if self.access_key.is_some() {
                    "access_secret"
                } else {
                    "access_key"
                },
                "(missing)",
                "access_key and access_secret given together",
            ));
        }

        let socket_mode = match &self.socket_mode {
            None => 0o660,
            Some(Value::String(s)) => match u32::from_str_radix(s.trim_start_matches("0o"), 8) {
                Ok(m) if m <= 0o777 && !s.is_empty() => m,
                _ => {
                    return Err(invalid_str(
                        "socket_mode",
                        s,
                        "an octal mode string such as \"0660\"",
                    ))
                }
            },
            Some(v) => {
                return Err(invalid(
                    "socket_mode",
                    v,
                    "an octal mode string such as \"0660\"",
                ))
            }
        };
        let socket_group = match &self.socket_group {
            None => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) if n.as_u64().is_some_and(|g| g <= u64::from(u32::MAX)) => {
                Some(n.to_string())
            }
            Some(v) => return Err(invalid("socket_group", v, "a group name or numeric gid")),
        };
        let allowed_uids = match &self.allowed_uids {
            None => vec![0],
            Some(list) => list
                .iter()
                .map(|v| match v.as_u64() {
                    Some(n) if n <= u64::from(u32::MAX) => Ok(n as u32),
                    _ => Err(invalid("allowed_uids", v, "a list of numeric uids")),
                })
                .collect::<Result<Vec<u32>, ConfigError>>()?,
        };

        let metrics_listen = match &self.metrics_listen {
            None => None,
            Some(s) if s.is_empty() => None,
            Some(s) => Some(s.parse::<SocketAddr>().map_err(|_| {
                invalid_str("metrics_listen", s, "an address such as 127.0.0.1:9712")
            })?),
        };
        for (key, v) in [
            ("socket_path", &self.socket_path),
            ("state_dir", &self.state_dir),
        ] {
            if let Some(p) = v {
                if p.is_empty() || !p.starts_with('/') {
                    return Err(invalid_str(key, p, "an absolute path"));
                }
            }
        }
        if let Some(p) = &self.socket_path {
            // sun_path holds 108 bytes including the terminating NUL.
            if p.len() > 107 {
                return Err(invalid_str("socket_path", p, "a path of at most 107 bytes"));
            }
        }

        Ok(Config {
            access_key: self.access_key.clone(),
            access_secret: self.access_secret.clone(),
            vswitches,
            security_groups,
            min_pool_size: usize_in("min_pool_size", &self.min_pool_size, 0, 0, 100_000)?,
            max_pool_size: usize_in("max_pool_size", &self.max_pool_size, 5, 0, 100_000)?,
            min_eni: usize_in("min_eni", &self.min_eni, 0, 0, 64)?,
            max_eni: usize_in("max_eni", &self.max_eni, 0, 0, 64)?,
            eni_cap_ratio,
            eni_cap_shift,
            vswitch_selection_policy,
            eni_tags,
            ip_stack,
            region_id: self.region_id.clone(),
            instance_id: self.instance_id.clone(),
            ecs_endpoint: self.ecs_endpoint.clone(),
            vpc_endpoint: self.vpc_endpoint.clone(),
            metadata_endpoint: self
                .metadata_endpoint
                .clone()
                .unwrap_or_else(|| DEFAULT_METADATA_ENDPOINT.to_string()),
            ram_role: self.ram_role.clone(),
            socket_path: PathBuf::from(self.socket_path.as_deref().unwrap_or(DEFAULT_SOCKET_PATH)),
            socket_mode,
            socket_group,
            allowed_uids,
            state_dir: PathBuf::from(self.state_dir.as_deref().unwrap_or(DEFAULT_STATE_DIR)),
            ip_stick_time: secs("ip_stick_time", &self.ip_stick_time, 0, 0, 7 * 86_400)?,
            ip_cooldown: secs("ip_cooldown", &self.ip_cooldown, 0, 0, 86_400)?,
            alloc_timeout: secs("alloc_timeout", &self.alloc_timeout, 60, 1, 3600)?,
            aggregation_window: Duration::from_millis(int_in(
                "aggregation_window_ms",
                &self.aggregation_window_ms,
                300,
                0,
                10_000,
            )?),
            max_ips_per_call: usize_in("max_ips_per_call", &self.max_ips_per_call, 10, 1, 10)?,
            max_concurrent_eni_ops: usize_in(
                "max_concurrent_eni_ops",
                &self.max_concurrent_eni_ops,
                3,
                1,
                16,
            )?,
            pool_check_interval: secs(
                "pool_check_interval",
                &self.pool_check_interval,
                120,
                1,
                86_400,
            )?,
            max_connections: usize_in("max_connections", &self.max_connections, 256, 1, 65_536)?,
            metrics_listen,
        })
    }
}

impl Config {
    /// The effective configuration as `key=value` lines, secrets masked,
    /// for `--check-config` and the `config` command.
    pub fn effective(&self) -> Vec<(String, String)> {
        fn dur(d: Duration) -> String {
            d.as_secs().to_string()
        }
        let mut v: Vec<(String, String)> = Vec::new();
        let mut push = |k: &str, val: String| v.push((k.to_string(), val));
        push(
            "access_key",
            self.access_key
                .clone()
                .map(|k| mask(&k))
                .unwrap_or_else(|| "-".into()),
        );
        push(
            "access_secret",
            if self.access_secret.is_some() {
                "***".into()
            } else {
                "-".into()
            },
        );
        let vsw: Vec<String> = self
            .vswitches
            .iter()
            .map(|(z, ids)| format!("{z}:{}", ids.join("+")))
            .collect();
        push(
            "vswitches",
            if vsw.is_empty() {
                "-".into()
            } else {
                vsw.join(",")
            },
        );
        push(
            "security_groups",
            if self.security_groups.is_empty() {
                "-".into()
            } else {
                self.security_groups.join(",")
            },
        );
        push("min_pool_size", self.min_pool_size.to_string());
        push("max_pool_size", self.max_pool_size.to_string());
        push("min_eni", self.min_eni.to_string());
        push("max_eni", self.max_eni.to_string());
        push("eni_cap_ratio", self.eni_cap_ratio.to_string());
        push("eni_cap_shift", self.eni_cap_shift.to_string());
        push(
            "vswitch_selection_policy",
            match self.vswitch_selection_policy {
                VSwitchPolicy::Random => "random".into(),
                VSwitchPolicy::Ordered => "ordered".into(),
            },
        );
        let tags: Vec<String> = self
            .eni_tags
            .iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect();
        push(
            "eni_tags",
            if tags.is_empty() {
                "-".into()
            } else {
                tags.join(",")
            },
        );
        push(
            "ip_stack",
            match self.ip_stack {
                IpStack::Ipv4 => "ipv4".into(),
                IpStack::Dual => "dual".into(),
            },
        );
        push(
            "region_id",
            self.region_id.clone().unwrap_or_else(|| "-".into()),
        );
        push(
            "instance_id",
            self.instance_id.clone().unwrap_or_else(|| "-".into()),
        );
        push(
            "ecs_endpoint",
            self.ecs_endpoint.clone().unwrap_or_else(|| "-".into()),
        );
        push(
            "vpc_endpoint",
            self.vpc_endpoint.clone().unwrap_or_else(|| "-".into()),
        );
        push("metadata_endpoint", self.metadata_endpoint.clone());
        push(
            "ram_role",
            self.ram_role.clone().unwrap_or_else(|| "-".into()),
        );
        push("socket_path", self.socket_path.display().to_string());
        push("socket_mode", format!("{:04o}", self.socket_mode));
        push(
            "socket_group",
            self.socket_group.clone().unwrap_or_else(|| "-".into()),
        );
        let uids: Vec<String> = self.allowed_uids.iter().map(u32::to_string).collect();
        push(
            "allowed_uids",
            if uids.is_empty() {
                "-".into()
            } else {
                uids.join(",")
            },
        );
        push("state_dir", self.state_dir.display().to_string());
        push("ip_stick_time", dur(self.ip_stick_time));
        push("ip_cooldown", dur(self.ip_cooldown));
        push("alloc_timeout", dur(self.alloc_timeout));
        push(
            "aggregation_window_ms",
            self.aggregation_window.as_millis().to_string(),
        );
        push("max_ips_per_call", self.max_ips_per_call.to_string());
        push(
            "max_concurrent_eni_ops",
            self.max_concurrent_eni_ops.to_string(),
        );
        push("pool_check_interval", dur(self.pool_check_interval));
        push("max_connections", self.max_connections.to_string());
        push(
            "metrics_listen",
            self.metrics_listen
                .map(|a| a.to_string())
                .unwrap_or_else(|| "-".into()),
        );
        v
    }
}

/// Shows the first 4 characters of an access key id and masks the rest.
pub fn mask(id: &str) -> String {
    let shown: String = id.chars().take(4).collect();
    format!("{shown}***")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        RawConfig::parse(text).unwrap().validate()
    }

    #[test]
    fn empty_config_gets_defaults() {
        let c = parse("{}").unwrap();
        assert_eq!(c.max_ips_per_call, 10);
        assert_eq!(c.aggregation_window, Duration::from_millis(300));
        assert_eq!(c.max_concurrent_eni_ops, 3);
        assert_eq!(c.alloc_timeout, Duration::from_secs(60));
        assert_eq!(c.allowed_uids, vec![0]);
        assert_eq!(c.socket_mode, 0o660);
        assert_eq!(c.ip_stack, IpStack::Ipv4);
        assert_eq!(c.vswitch_selection_policy, VSwitchPolicy::Random);
        assert_eq!(c.socket_path, PathBuf::from(DEFAULT_SOCKET_PATH));
        assert_eq!(c.metadata_endpoint, DEFAULT_METADATA_ENDPOINT);
    }

    #[test]
    fn terway_config_is_accepted_with_one_warning() {
        let text = r#"{
            "version": "1",
            "access_key": "LTAIxxxx", "access_secret": "s3cr3t",
            "service_cidr": "172.21.0.0/20",
            "security_group": "sg-b", "security_groups": ["sg-a", "sg-b"],
            "vswitches": {"cn-hangzhou-i": ["vsw-1", "vsw-2"]},
            "max_pool_size": 5, "min_pool_size": 0,
            "eni_tags": {"team": "net"},
            "vswitch_selection_policy": "ordered",
            "ip_stack": "dual",
            "disable_security_group_check": true,
            "frobnicate": 1
        }"#;
        let raw = RawConfig::parse(text).unwrap();
        let w = raw.warnings();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].contains("version")
                && w[0].contains("service_cidr")
                && w[0].contains("disable_security_group_check")
        );
        assert!(w[1].contains("frobnicate"));
        let c = raw.validate().unwrap();
        assert_eq!(c.security_groups, vec!["sg-a", "sg-b"]);
        assert_eq!(c.ip_stack, IpStack::Dual);
        assert_eq!(c.vswitch_selection_policy, VSwitchPolicy::Ordered);
        let eff = c.effective();
        let text: String = eff.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        assert!(!text.contains("s3cr3t"));
        assert!(text.contains("access_secret=***"));
        assert!(text.contains("access_key=LTAI***"));
    }

    #[test]
    fn bad_values_name_the_key_value_and_allowed() {
        for (text, key, value) in [
            (r#"{"max_ips_per_call": 11}"#, "max_ips_per_call", "11"),
            (r#"{"max_ips_per_call": 0}"#, "max_ips_per_call", "0"),
            (r#"{"max_pool_size": -1}"#, "max_pool_size", "-1"),
            (r#"{"min_pool_size": 1.5}"#, "min_pool_size", "1.5"),
            (r#"{"alloc_timeout": "60"}"#, "alloc_timeout", "\"60\""),
            (r#"{"ip_stack": "ipv6"}"#, "ip_stack", "\"ipv6\""),
            (
                r#"{"vswitch_selection_policy": "best"}"#,
                "vswitch_selection_policy",
                "\"best\"",
            ),
            (r#"{"socket_mode": "999"}"#, "socket_mode", "\"999\""),
            (
                r#"{"metrics_listen": "localhost"}"#,
                "metrics_listen",
                "\"localhost\"",
            ),
            (r#"{"eni_cap_ratio": 2}"#, "eni_cap_ratio", "2"),
            (r#"{"allowed_uids": ["root"]}"#, "allowed_uids", "\"root\""),
            (
                r#"{"security_groups": ["default"]}"#,
                "security_groups",
                "\"default\"",
            ),
            (
                r#"{"eni_tags": {"creator": "me"}}"#,
                "eni_tags",
                "\"creator\"",
            ),
            (
                r#"{"socket_path": "relative.sock"}"#,
                "socket_path",
                "\"relative.sock\"",
            ),
            (
                r#"{"access_key": "LTAI"}"#,
                "access_secret",
                "\"(missing)\"",
            ),
        ] {
            let err = parse(text).unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains(&format!("`{key}`")), "{text}: {msg}");
            assert!(msg.contains(value), "{text}: {msg}");
            assert!(msg.contains("allowed:"), "{text}: {msg}");
        }
    }

    #[test]
    fn wrong_shapes_are_parse_errors() {
        assert!(RawConfig::parse(r#"{"vswitches": ["vsw-1"]}"#).is_err());
        assert!(RawConfig::parse("[1]").is_err());
        assert!(RawConfig::parse("{").is_err());
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "[ -~]{0,20}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z_]{1,12}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    const KEYS: &[&str] = &[
        "max_pool_size",
        "min_pool_size",
        "min_eni",
        "max_eni",
        "eni_cap_ratio",
        "eni_cap_shift",
        "vswitches",
        "security_group",
        "security_groups",
        "ip_stack",
        "vswitch_selection_policy",
        "eni_tags",
        "socket_mode",
        "socket_group",
        "allowed_uids",
        "alloc_timeout",
        "max_ips_per_call",
        "metrics_listen",
        "socket_path",
        "state_dir",
        "access_key",
        "access_secret",
        "aggregation_window_ms",
        "ecs_endpoint",
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        /// Arbitrary text never panics the loader.
        #[test]
        fn arbitrary_text(text in "[ -~\n]{0,400}") {
            if let Ok(raw) = RawConfig::parse(&text) {
                let _ = raw.warnings();
                let _ = raw.validate();
            }
        }

        /// Known keys with arbitrary JSON values: a config or an error that
        /// names the key; never a panic; a valid config keeps its promises.
        #[test]
        fn known_keys_any_values(entries in proptest::collection::vec((proptest::sample::select(KEYS), json_value()), 0..6)) {
            let obj: serde_json::Map<String, Value> = entries.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
            let text = Value::Object(obj).to_string();
            if let Ok(raw) = RawConfig::parse(&text) {
                match raw.validate() {
                    Ok(c) => {
                        prop_assert!((1..=10).contains(&c.max_ips_per_call));
                        prop_assert!(c.eni_cap_ratio > 0.0 && c.eni_cap_ratio <= 1.0);
                        prop_assert!(c.socket_mode <= 0o777);
                        prop_assert!(!c.effective().iter().any(|(_, v)| c.access_secret.as_ref().is_some_and(|s| !s.is_empty() && v.contains(s.expose()))));
                    }
                    Err(e) => {
                        let msg = e.to_string();
                        prop_assert!(msg.contains('`') && msg.contains("allowed"), "{}", msg);
                    }
                }
            }
        }
    }
}
