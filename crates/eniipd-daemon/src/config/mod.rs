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

use eniip_cloud::sign::SignatureVersion;
use eniip_util::Secret;

mod cni;
mod effective;
mod keys;
mod sg_sets;
mod validate;

pub(crate) use cni::CniSettings;
pub(crate) use sg_sets::SgSettings;

/// Default config file.
pub(crate) const DEFAULT_CONFIG_PATH: &str = "/etc/eniipd/eni.json";
/// Default socket.
pub const DEFAULT_SOCKET_PATH: &str = "/run/eniipd/eniipd.sock";
/// Default state directory.
pub(crate) const DEFAULT_STATE_DIR: &str = "/var/lib/eniipd";
/// Default metadata endpoint.
pub(crate) const DEFAULT_METADATA_ENDPOINT: &str = "http://100.100.100.200";
/// Default `max_ip_stick_time` (s): an hour keeps a StatefulSet pod's
/// address over a rolling update or a node drain, and bounds what pods
/// with new names (a Job's) can keep out of the pool by asking.
pub(crate) const DEFAULT_MAX_IP_STICK_TIME_S: u64 = 3_600;

/// What a typed key's value must be, for errors.
fn expected_shape(key: &str) -> &'static str {
    match key {
        "vswitches" => {
            "an object of zone -> list of vswitch ids, like {\"cn-hangzhou-i\": [\"vsw-...\"]}"
        }
        "security_groups" => "a list of security group ids, like [\"sg-...\"]",
        "eni_tags" => "an object of tag key -> string value, like {\"team\": \"net\"}",
        "allowed_uids" => "a list of uids, like [0, 1000]",
        _ => "a string",
    }
}

/// How a new ENI's vswitch is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VSwitchPolicy {
    /// A shuffled order each time (Terway's default).
    Random,
    /// Most free IPs first (DescribeVSwitches, cached).
    Ordered,
}

/// Address families handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IpStack {
    /// IPv4 only.
    Ipv4,
    /// An IPv4 and IPv6 pair per allocation.
    Dual,
}

/// The key pair's other names (the Kubernetes Secret's), read as the keys.
const CREDENTIAL_ALIASES: [(&str, &str); 2] = [
    ("access_key_id", "access_key"),
    ("access_key_secret", "access_secret"),
];

/// The file as written. Every field is optional; unknown keys are kept in
/// `other` so they can be named in a warning.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct RawConfig {
    pub(crate) access_key: Option<String>,
    pub(crate) access_secret: Option<Secret>,
    pub(crate) vswitches: Option<BTreeMap<String, Vec<String>>>,
    pub(crate) security_group: Option<String>,
    pub(crate) security_groups: Option<Vec<String>>,
    pub(crate) min_pool_size: Option<Value>,
    pub(crate) max_pool_size: Option<Value>,
    pub(crate) min_eni: Option<Value>,
    pub(crate) max_eni: Option<Value>,
    pub(crate) eni_cap_ratio: Option<Value>,
    pub(crate) eni_cap_shift: Option<Value>,
    pub(crate) vswitch_selection_policy: Option<String>,
    pub(crate) eni_tags: Option<BTreeMap<String, String>>,
    pub(crate) ip_stack: Option<String>,
    pub(crate) region_id: Option<String>,
    pub(crate) instance_id: Option<String>,
    pub(crate) ecs_endpoint: Option<String>,
    pub(crate) vpc_endpoint: Option<String>,
    pub(crate) metadata_endpoint: Option<String>,
    pub(crate) ram_role: Option<String>,
    pub(crate) socket_path: Option<String>,
    pub(crate) socket_mode: Option<Value>,
    pub(crate) socket_group: Option<Value>,
    pub(crate) allowed_uids: Option<Vec<Value>>,
    pub(crate) state_dir: Option<String>,
    pub(crate) ip_stick_time: Option<Value>,
    pub(crate) max_ip_stick_time: Option<Value>,
    pub(crate) ip_cooldown: Option<Value>,
    pub(crate) alloc_timeout: Option<Value>,
    pub(crate) aggregation_window_ms: Option<Value>,
    pub(crate) max_ips_per_call: Option<Value>,
    pub(crate) max_concurrent_eni_ops: Option<Value>,
    pub(crate) pool_check_interval: Option<Value>,
    pub(crate) start_timeout: Option<Value>,
    pub(crate) max_connections: Option<Value>,
    pub(crate) metrics_listen: Option<String>,
    pub(crate) signature_version: Option<String>,
    pub(crate) ip_prefix: Option<Value>,
    /// Terway's name for `ip_prefix`.
    pub(crate) enable_ip_prefix: Option<Value>,
    pub(crate) sandbox_reap_interval: Option<Value>,
    pub(crate) sandbox_reap_grace: Option<Value>,
    pub(crate) adaptive_pool: Option<Value>,
    pub(crate) cni_conflist: Option<String>,
    pub(crate) cni_conflist_source: Option<String>,
    pub(crate) pod_security_groups: Option<Vec<String>>,
    pub(crate) sg_set_idle_s: Option<Value>,
    pub(crate) exhaustion_warn_s: Option<Value>,
    #[serde(flatten)]
    pub(crate) other: BTreeMap<String, Value>,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Static access key id (config), if any.
    pub(crate) access_key: Option<String>,
    /// Static access key secret (config), if any.
    pub(crate) access_secret: Option<Secret>,
    /// zone -> vswitch ids; empty means the instance's own vswitch.
    pub(crate) vswitches: BTreeMap<String, Vec<String>>,
    /// Security groups for new ENIs; empty means the instance's own.
    pub(crate) security_groups: Vec<String>,
    /// Idle IPs to keep at least (before clamping to capacity).
    pub(crate) min_pool_size: usize,
    /// Idle IPs to keep at most (before clamping to capacity).
    pub(crate) max_pool_size: usize,
    /// If non-zero, min pool = min_eni x IPs per ENI.
    pub(crate) min_eni: usize,
    /// If non-zero, caps the usable ENIs.
    pub(crate) max_eni: usize,
    /// Multiplier of EniQuantity.
    pub(crate) eni_cap_ratio: f64,
    /// Added to the ENI count.
    pub(crate) eni_cap_shift: i64,
    /// New-ENI vswitch order.
    pub(crate) vswitch_selection_policy: VSwitchPolicy,
    /// Extra tags on new ENIs.
    pub(crate) eni_tags: BTreeMap<String, String>,
    /// IPv4 or dual stack.
    pub(crate) ip_stack: IpStack,
    /// Region override (default: metadata).
    pub(crate) region_id: Option<String>,
    /// Instance override (default: metadata).
    pub(crate) instance_id: Option<String>,
    /// ECS endpoint override.
    pub(crate) ecs_endpoint: Option<String>,
    /// VPC endpoint override.
    pub(crate) vpc_endpoint: Option<String>,
    /// Metadata base URL.
    pub(crate) metadata_endpoint: String,
    /// RAM role name (default: the one metadata lists).
    pub(crate) ram_role: Option<String>,
    /// The Unix socket.
    pub(crate) socket_path: PathBuf,
    /// Its permission bits.
    pub(crate) socket_mode: u32,
    /// Its group (name or number), members may alloc/release.
    pub(crate) socket_group: Option<String>,
    /// Uids that may alloc/release.
    pub(crate) allowed_uids: Vec<u32>,
    /// The state directory.
    pub(crate) state_dir: PathBuf,
    /// How long a released IP stays reserved for its last owner.
    pub(crate) ip_stick_time: Duration,
    /// The longest stick time an owner may ask for itself (a pod's
    /// `eniipd/ip-stick-time`, an `alloc`'s `ip-stick-time=`).
    pub(crate) max_ip_stick_time: Duration,
    /// How long a released IP is kept from other owners.
    pub(crate) ip_cooldown: Duration,
    /// How long a cold alloc may wait.
    pub(crate) alloc_timeout: Duration,
    /// Per-ENI batching window.
    pub(crate) aggregation_window: Duration,
    /// IPs per Assign/Create call (1..10).
    pub(crate) max_ips_per_call: usize,
    /// Concurrent ENI create/delete operations.
    pub(crate) max_concurrent_eni_ops: usize,
    /// Pool maintenance period.
    pub(crate) pool_check_interval: Duration,
    /// How long start-up retries the metadata service and the cloud before
    /// exit 69 (restoring the pool gets three times this).
    pub(crate) start_timeout: Duration,
    /// Open connections at most.
    pub(crate) max_connections: usize,
    /// Address for `GET /metrics`, if any.
    pub(crate) metrics_listen: Option<SocketAddr>,
    /// OpenAPI signature sent: V3 (ACS3-HMAC-SHA256) unless "v1".
    pub(crate) signature_version: SignatureVersion,
    /// IPv4 /28 prefixes on ENIs instead of single secondary addresses
    /// (falling back to single addresses where no /28 can be had). IPv4
    /// only: refused with `ip_stack` "dual".
    pub(crate) ip_prefix: bool,
    /// The idle target follows the allocation rate within
    /// `min_pool_size`..`max_pool_size` (false: warm up to the min, shrink
    /// to the max, as Terway).
    pub(crate) adaptive_pool: bool,
    /// What eniipd does for eniip-cni: the sandbox reaper, the conflist.
    pub(crate) cni: CniSettings,
    /// Security groups per pod: which a pod may ask, how long a set idles.
    pub(crate) sg: SgSettings,
    /// A forecast under this is logged once as a WARN (0: never).
    pub(crate) exhaustion_warn: Duration,
}

/// Why a config could not be loaded.
#[derive(Debug)]
pub enum ConfigError {
    /// The file could not be read.
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file is not valid JSON.
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// The JSON is not an object, or a key has a value of the wrong type.
    Shape {
        /// The key, or `(top level)`.
        key: String,
        /// What the value must be.
        allowed: String,
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
            ConfigError::Parse { path, source } if path.as_os_str().is_empty() => {
                write!(f, "cannot parse the config: {source}")
            }
            ConfigError::Parse { path, source } => {
                write!(f, "cannot parse config file {}: {source}", path.display())
            }
            ConfigError::Shape { key, allowed } => {
                write!(f, "invalid type for `{key}`: it must be {allowed}")
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
            ConfigError::Parse { .. } | ConfigError::Shape { .. } | ConfigError::Invalid { .. } => {
                None
            }
        }
    }
}

impl RawConfig {
    /// Reads and parses a file (not yet validated).
    pub(crate) fn load(path: &Path) -> Result<RawConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        RawConfig::parse(&text).map_err(|e| match e {
            ConfigError::Parse { source, .. } => ConfigError::Parse {
                path: path.to_path_buf(),
                source,
            },
            other => other,
        })
    }

    /// [`RawConfig::load`], except that a missing file at the default
    /// path ([`DEFAULT_CONFIG_PATH`], not named on the command line) is
    /// every key's default, as SPEC says every key is optional. `Ok(None)`
    /// is that case. A file named with `--config` must exist: a missing
    /// one is more likely a typo than a wish for defaults.
    pub(crate) fn load_or_defaults(
        path: &Path,
        named: bool,
    ) -> Result<Option<RawConfig>, ConfigError> {
        match RawConfig::load(path) {
            Err(ConfigError::Read { source, .. })
                if !named && source.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(None)
            }
            other => other.map(Some),
        }
    }

    /// Parses JSON text (a UTF-8 byte-order mark is allowed). A value of
    /// the wrong type is refused naming its key and what it must be.
    pub fn parse(text: &str) -> Result<RawConfig, ConfigError> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let value: Value = serde_json::from_str(text).map_err(|source| ConfigError::Parse {
            path: PathBuf::new(),
            source,
        })?;
        let mut value = value;
        let Value::Object(map) = &mut value else {
            return Err(ConfigError::Shape {
                key: "(top level)".into(),
                allowed: "a JSON object of keys and values, like {\"max_pool_size\": 5}".into(),
            });
        };
        // The Kubernetes Secret's names for the key pair (README's
        // `kubectl create secret`): the same keys, never dropped.
        for (alias, key) in CREDENTIAL_ALIASES {
            if let Some(v) = map.remove(alias) {
                if map.contains_key(key) {
                    return Err(ConfigError::Shape {
                        key: alias.to_string(),
                        allowed: format!("absent when `{key}` is given: it is `{key}` under the Kubernetes Secret's name (give one of the two)"),
                    });
                }
                map.insert(key.to_string(), v);
            }
        }
        let map = map.clone();
        match serde_json::from_value::<RawConfig>(value.clone()) {
            Ok(raw) => Ok(raw),
            Err(whole) => {
                // Find the key: each alone against the same shape.
                for (k, v) in map {
                    let one = Value::Object([(k.clone(), v.clone())].into_iter().collect());
                    if serde_json::from_value::<RawConfig>(one).is_err() {
                        return Err(ConfigError::Shape {
                            key: k.clone(),
                            allowed: expected_shape(k.as_str()).to_string(),
                        });
                    }
                }
                Err(ConfigError::Shape {
                    key: "(top level)".into(),
                    allowed: whole.to_string(),
                })
            }
        }
    }

    /// A warning when the file at `path` holds an access key secret and
    /// users other than its owner may read it.
    pub(crate) fn secret_file_warning(&self, path: &Path) -> Option<String> {
        use std::os::unix::fs::PermissionsExt;
        self.access_secret.as_ref()?;
        let mode = std::fs::metadata(path).ok()?.permissions().mode();
        (mode & 0o044 != 0).then(|| {
            format!(
                "{} holds access_secret and is readable by others (mode {:04o}): chmod 0600 it",
                path.display(),
                mode & 0o7777
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        RawConfig::parse(text).unwrap().validate()
    }

    #[test]
    fn the_kubernetes_secrets_names_for_the_key_pair_are_read_as_the_keys() {
        let c = parse(r#"{"access_key_id": "LTAIxxxx", "access_key_secret": "s3cr3t"}"#).unwrap();
        assert_eq!(c.access_key.as_deref(), Some("LTAIxxxx"));
        assert_eq!(c.access_secret.as_ref().map(|s| s.expose()), Some("s3cr3t"));
        let e = RawConfig::parse(r#"{"access_key": "a", "access_key_id": "b"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("access_key_id") && !e.contains("\"b\""), "{e}");
    }

    #[test]
    fn a_missing_default_file_is_all_defaults_a_missing_named_one_is_an_error() {
        let gone = std::env::temp_dir().join(format!("eniipd-no-such-{}.json", std::process::id()));
        assert!(RawConfig::load_or_defaults(&gone, false).unwrap().is_none());
        let err = RawConfig::load_or_defaults(&gone, true).unwrap_err();
        assert!(matches!(err, ConfigError::Read { .. }), "{err}");
        // Any other read error of the default file is still an error.
        let dir = std::env::temp_dir();
        assert!(RawConfig::load_or_defaults(&dir, false).is_err());
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
        assert_eq!(c.max_ip_stick_time, Duration::from_secs(3600));
        assert_eq!(c.exhaustion_warn, Duration::from_secs(3600));
        let c = parse(r#"{"max_ip_stick_time": 604800, "ip_stick_time": 0}"#).unwrap();
        assert_eq!(c.max_ip_stick_time, Duration::from_secs(604_800));
    }

    #[test]
    fn ip_prefix_and_its_terway_alias() {
        assert!(!parse("{}").unwrap().ip_prefix);
        assert!(parse(r#"{"ip_prefix": true}"#).unwrap().ip_prefix);
        assert!(parse(r#"{"enable_ip_prefix": true}"#).unwrap().ip_prefix);
        assert!(!parse(r#"{"enable_ip_prefix": false}"#).unwrap().ip_prefix);
        assert!(
            parse(r#"{"ip_prefix": true, "enable_ip_prefix": true}"#)
                .unwrap()
                .ip_prefix
        );
        // The alias is a known key: no unknown-key warning names it.
        let raw = RawConfig::parse(r#"{"enable_ip_prefix": true}"#).unwrap();
        assert!(raw.warnings().is_empty(), "{:?}", raw.warnings());
        let raw = RawConfig::parse(r#"{"enable_ip_prefix": false}"#).unwrap();
        assert!(raw.warnings().is_empty(), "{:?}", raw.warnings());
        let e = parse(r#"{"ip_prefix": "yes"}"#).unwrap_err().to_string();
        assert!(
            e.contains("`ip_prefix`") && e.contains("true or false"),
            "{e}"
        );
        let e = parse(r#"{"ip_prefix": true, "enable_ip_prefix": false}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`enable_ip_prefix`") && e.contains("`ip_prefix`"),
            "{e}"
        );
        // Dual stack and prefixes: IPv4 /28s and an IPv6 /80 per ENI
        // (issue 32), whichever spelling was used.
        for key in ["ip_prefix", "enable_ip_prefix"] {
            let c = parse(&format!(r#"{{"ip_stack": "dual", "{key}": true}}"#)).unwrap();
            assert!(c.ip_prefix && c.ip_stack == IpStack::Dual);
        }
        assert!(
            !parse(r#"{"ip_stack": "dual", "ip_prefix": false}"#)
                .unwrap()
                .ip_prefix
        );
        let c = parse(r#"{"ip_prefix": true}"#).unwrap();
        assert!(c
            .effective()
            .iter()
            .any(|(k, v)| k == "ip_prefix" && v == "true"));
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
                r#"{"max_ip_stick_time": 604801}"#,
                "max_ip_stick_time",
                "604801",
            ),
            (r#"{"max_ip_stick_time": -1}"#, "max_ip_stick_time", "-1"),
            (
                r#"{"exhaustion_warn_s": 604801}"#,
                "exhaustion_warn_s",
                "604801",
            ),
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
            (
                r#"{"signature_version": "v2"}"#,
                "signature_version",
                "\"v2\"",
            ),
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
        let e = RawConfig::parse(r#"{"max_pool_size": 5, "vswitches": ["vsw-1"]}"#).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("`vswitches`"), "{text}");
        assert!(text.contains("zone -> list of vswitch ids"), "{text}");
        let e = RawConfig::parse("[1,2]").unwrap_err().to_string();
        assert!(e.contains("must be a JSON object"), "{e}");
        assert!(!e.contains("RawConfig") && !e.contains("struct"), "{e}");
        let e = RawConfig::parse(r#"{"eni_tags": {"a": 1}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`eni_tags`"), "{e}");
        // A byte-order mark (some editors write one) is fine.
        assert_eq!(
            RawConfig::parse("\u{feff}{\"max_pool_size\": 7}")
                .unwrap()
                .validate()
                .unwrap()
                .max_pool_size,
            7
        );
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
        "signature_version",
        "ip_prefix",
        "enable_ip_prefix",
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
                        prop_assert!(!(c.ip_prefix && c.ip_stack == IpStack::Dual));
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
