//! The CNI contract (spec 0.4.0, 1.0.0 and 1.1.0) as types: the error
//! object and its codes, the environment, the network configuration (raw
//! JSON -> validated [`NetConf`], errors naming the key), and the result.
//!
//! Invariant: a caller gets its answer in the version it called with
//! ([`CniResult::for_version`]): runtimes parse results with the library
//! of their day (containerd 1.6/1.7's libcni reads up to 1.0.0), so
//! answering a 1.0.0 call in 1.1.0 fails every pod. GC and STATUS exist
//! only from 1.1.0.

use std::collections::HashMap;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The capability a conflist declares for the runtime to pass a pod's
/// annotations, and the `runtimeConfig` key they come in (read by
/// [`super::annotations`]).
pub(crate) const POD_ANNOTATIONS: &str = "io.kubernetes.cri.pod-annotations";

/// The spec versions this plugin speaks, oldest first.
pub(crate) const SUPPORTED_VERSIONS: [&str; 3] = ["0.4.0", "1.0.0", "1.1.0"];

/// True for the versions that have GC and STATUS.
pub(crate) fn has_gc_and_status(version: &str) -> bool {
    version == "1.1.0"
}

/// CNI error codes used here (spec section "Error").
pub mod code {
    /// Incompatible CNI version.
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    /// Invalid necessary environment variables.
    pub const INVALID_ENV: u32 = 4;
    /// I/O failure.
    pub const IO: u32 = 5;
    /// Failed to decode content.
    pub const DECODE: u32 = 6;
    /// Invalid network config.
    pub const INVALID_CONFIG: u32 = 7;
    /// Try again later.
    pub const TRY_AGAIN: u32 = 11;
    /// The plugin is not available (STATUS).
    pub const NOT_AVAILABLE: u32 = 50;
    /// The plugin is not available: no address can be had (STATUS).
    pub const LIMITED: u32 = 51;
    /// Plugin-specific: eniipd refused (its ERR code is in the details).
    pub const DAEMON: u32 = 100;
    /// Plugin-specific: the datapath could not be set up or checked.
    pub const DATAPATH: u32 = 101;
}

/// A CNI error: printed as the error object on stdout, exit status 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniError {
    /// The CNI error code.
    pub(crate) code: u32,
    /// Short message.
    pub(crate) msg: String,
    /// Longer details.
    pub(crate) details: String,
    /// eniipd could not be asked (away, going away, not answering): what
    /// ADD waits out and DEL queues for (never printed).
    pub(crate) away: bool,
}

impl CniError {
    /// An error with a code and a message.
    pub fn new(code: u32, msg: impl Into<String>) -> CniError {
        CniError {
            code,
            msg: msg.into(),
            details: String::new(),
            away: false,
        }
    }

    /// Marks it as "eniipd could not be asked" (see [`CniError::away`]).
    pub(crate) fn eniipd_away(mut self) -> CniError {
        self.away = true;
        self
    }

    /// Adds details.
    pub(crate) fn details(mut self, d: impl Into<String>) -> CniError {
        self.details = d.into();
        self
    }

    /// The error object.
    pub fn to_json(&self, version: &str) -> String {
        let mut v = serde_json::json!({
            "cniVersion": version,
            "code": self.code,
            "msg": self.msg,
        });
        if !self.details.is_empty() {
            v["details"] = Value::String(self.details.clone());
        }
        v.to_string()
    }
}

impl fmt::Display for CniError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CNI error {}: {}", self.code, self.msg)?;
        if !self.details.is_empty() {
            write!(f, " ({})", self.details)?;
        }
        Ok(())
    }
}

impl std::error::Error for CniError {}

fn bad_config(key: &str, why: impl fmt::Display) -> CniError {
    CniError::new(
        code::INVALID_CONFIG,
        format!("invalid network config: {key}: {why}"),
    )
}

/// The command asked for by `CNI_COMMAND`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// ADD
    Add,
    /// DEL
    Del,
    /// CHECK
    Check,
    /// GC (1.1)
    Gc,
    /// STATUS (1.1)
    Status,
    /// VERSION
    Version,
}

impl Command {
    /// Parses `CNI_COMMAND`.
    pub fn parse(s: &str) -> Result<Command, CniError> {
        Ok(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "GC" => Command::Gc,
            "STATUS" => Command::Status,
            "VERSION" => Command::Version,
            other => {
                return Err(CniError::new(
                    code::INVALID_ENV,
                    format!("unknown CNI_COMMAND {other:?}"),
                ))
            }
        })
    }
}

/// An interface name the kernel takes as it is (its `dev_valid_name`):
/// 1..15 bytes, not `.` or `..`, no `/`, `:`, NUL or white space.
pub(crate) fn valid_ifname(name: &str) -> bool {
    !name.is_empty()
        && name.len() < 16
        && name != "."
        && name != ".."
        && !name
            .bytes()
            .any(|b| matches!(b, b'/' | b':' | 0) || b.is_ascii_whitespace() || b == 0x0b)
}

/// The `CNI_*` environment of one invocation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Env {
    /// CNI_CONTAINERID
    pub(crate) container_id: String,
    /// CNI_NETNS
    pub(crate) netns: Option<PathBuf>,
    /// CNI_IFNAME
    pub(crate) ifname: String,
    /// CNI_ARGS as key=value pairs.
    pub(crate) args: HashMap<String, String>,
    /// Where ADD appends its profile ([`crate::add_profile`]), if asked.
    pub(crate) profile: Option<PathBuf>,
}

impl Env {
    /// Reads the variables a command needs from `get`.
    pub fn from_vars(cmd: Command, get: impl Fn(&str) -> Option<String>) -> Result<Env, CniError> {
        let need = |k: &str| {
            get(k)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| CniError::new(code::INVALID_ENV, format!("{k} is not set")))
        };
        let mut env = Env::default();
        if matches!(cmd, Command::Add | Command::Del | Command::Check) {
            env.container_id = need("CNI_CONTAINERID")?;
            env.ifname = need("CNI_IFNAME")?;
            if !valid_ifname(&env.ifname) {
                return Err(CniError::new(
                    code::INVALID_ENV,
                    format!(
                        "CNI_IFNAME {:?} is not a valid interface name (1..15 bytes, not . or .., \
                         no /, : or white space)",
                        env.ifname
                    ),
                ));
            }
            env.netns = get("CNI_NETNS")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from);
            if cmd != Command::Del && env.netns.is_none() {
                return Err(CniError::new(code::INVALID_ENV, "CNI_NETNS is not set"));
            }
            env.profile = get(crate::add_profile::VAR)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from);
        }
        if let Some(args) = get("CNI_ARGS") {
            for kv in args.split(';').filter(|s| !s.is_empty()) {
                if let Some((k, v)) = kv.split_once('=') {
                    env.args.insert(k.to_string(), v.to_string());
                }
            }
        }
        Ok(env)
    }
}

/// The plugin's configuration as a runtime hands it over on stdin.
#[derive(Debug, Clone, Deserialize)]
struct RawConf {
    #[serde(rename = "cniVersion")]
    cni_version: Option<Value>,
    name: Option<Value>,
    #[serde(rename = "type")]
    kind: Option<Value>,
    socket: Option<Value>,
    #[serde(rename = "lockDir")]
    lock_dir: Option<Value>,
    mtu: Option<Value>,
    #[serde(rename = "daemonWait")]
    daemon_wait: Option<Value>,
    dns: Option<Value>,
    #[serde(rename = "prevResult")]
    prev_result: Option<Value>,
    #[serde(rename = "cni.dev/valid-attachments")]
    valid_attachments: Option<Value>,
    #[serde(rename = "runtimeConfig")]
    runtime_config: Option<Value>,
}

/// One entry of `cni.dev/valid-attachments`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attachment {
    /// Its container id.
    pub(crate) container_id: String,
    /// Its interface name.
    pub(crate) ifname: String,
}

/// The validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NetConf {
    /// `cniVersion` (one of [`SUPPORTED_VERSIONS`]).
    pub(crate) cni_version: String,
    /// The network name (scopes owners and GC).
    pub(crate) name: String,
    /// eniipd's socket.
    pub(crate) socket: PathBuf,
    /// `lockDir`: where the per-owner locks live ([`super::lock`]).
    pub(crate) lock_dir: PathBuf,
    /// MTU of the veth pair.
    pub(crate) mtu: u32,
    /// `daemonWait`: how long ADD waits for an eniipd that is away.
    pub(crate) daemon_wait: Duration,
    /// `dns`, passed through to the result.
    pub(crate) dns: Option<Value>,
    /// `prevResult` (DEL, CHECK).
    pub(crate) prev_result: Option<Value>,
    /// `cni.dev/valid-attachments` (GC).
    pub(crate) valid_attachments: Vec<Attachment>,
    /// The pod's annotations, as the runtime passed them in
    /// `runtimeConfig` (read by ADD only: [`super::annotations`]).
    pub(crate) pod_annotations: Option<Value>,
}

/// Where the lock files live unless the config's `lockDir` says otherwise.
pub(crate) const DEFAULT_LOCK_DIR: &str = "/run/eniip-cni";
/// Default eniipd socket.
pub(crate) const DEFAULT_SOCKET: &str = "/run/eniipd/eniipd.sock";
/// Default MTU (an ENI's).
pub(crate) const DEFAULT_MTU: u32 = 1500;
/// How long ADD waits for an eniipd that is away, unless `daemonWait`
/// says otherwise: a DaemonSet rollout or a restart (seconds to stop, to
/// start the new pod and restore the pool), with room for the allocation
/// within kubelet's runtime request timeout (2 min; see
/// [`super::eniipd_client::ADD_BUDGET`]).
pub(crate) const DEFAULT_DAEMON_WAIT: Duration = Duration::from_secs(60);
/// The largest `daemonWait`.
pub(crate) const MAX_DAEMON_WAIT_S: u64 = 100;

/// True when `s` is a usable network name: it prefixes owners, so it must
/// be in the owner alphabet, without `/`, short enough to leave room.
fn valid_network_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':' | b'@'))
}

impl NetConf {
    /// Parses and validates stdin. `cmd` decides which keys are required.
    pub(crate) fn parse(bytes: &[u8], cmd: Command) -> Result<NetConf, CniError> {
        let raw: RawConf = serde_json::from_slice(bytes).map_err(|e| {
            CniError::new(
                code::DECODE,
                format!("network config is not valid JSON: {e}"),
            )
        })?;
        let cni_version = match &raw.cni_version {
            Some(Value::String(v)) => v.clone(),
            Some(_) => return Err(bad_config("cniVersion", "must be a string")),
            None => return Err(bad_config("cniVersion", "is missing")),
        };
        if !SUPPORTED_VERSIONS.contains(&cni_version.as_str()) {
            return Err(CniError::new(
                code::INCOMPATIBLE_VERSION,
                format!(
                    "cniVersion {cni_version:?} is not supported (supported: {})",
                    SUPPORTED_VERSIONS.join(", ")
                ),
            ));
        }
        if matches!(cmd, Command::Gc | Command::Status) && !has_gc_and_status(&cni_version) {
            return Err(CniError::new(
                code::INCOMPATIBLE_VERSION,
                format!("GC and STATUS need cniVersion 1.1.0 (the config has {cni_version})"),
            ));
        }
        let name = match &raw.name {
            Some(Value::String(n)) if valid_network_name(n) => n.clone(),
            Some(_) => {
                return Err(bad_config(
                    "name",
                    "must be 1..128 characters of A-Z a-z 0-9 . _ - : @",
                ))
            }
            None => return Err(bad_config("name", "is missing")),
        };
        match &raw.kind {
            Some(Value::String(_)) | None => {}
            Some(_) => return Err(bad_config("type", "must be a string")),
        }
        let socket = match &raw.socket {
            None => PathBuf::from(DEFAULT_SOCKET),
            Some(Value::String(s)) if s.starts_with('/') => PathBuf::from(s),
            Some(_) => return Err(bad_config("socket", "must be an absolute path")),
        };
        let lock_dir = match &raw.lock_dir {
            None => PathBuf::from(DEFAULT_LOCK_DIR),
            Some(Value::String(s)) if s.starts_with('/') => PathBuf::from(s),
            Some(_) => return Err(bad_config("lockDir", "must be an absolute path")),
        };
        let mtu = match &raw.mtu {
            None => DEFAULT_MTU,
            Some(v) => match v.as_u64() {
                Some(m) if (576..=9000).contains(&m) => m as u32,
                _ => return Err(bad_config("mtu", "must be a number in 576..9000")),
            },
        };
        let daemon_wait = match &raw.daemon_wait {
            None => DEFAULT_DAEMON_WAIT,
            Some(v) => match v.as_u64() {
                Some(s) if s <= MAX_DAEMON_WAIT_S => Duration::from_secs(s),
                _ => {
                    return Err(bad_config(
                        "daemonWait",
                        format!("must be a number of seconds in 0..{MAX_DAEMON_WAIT_S}"),
                    ))
                }
            },
        };
        let dns = match raw.dns {
            None => None,
            Some(v @ Value::Object(_)) => Some(v),
            Some(_) => return Err(bad_config("dns", "must be an object")),
        };
        let prev_result = match raw.prev_result {
            None | Some(Value::Null) => None,
            Some(v @ Value::Object(_)) => Some(v),
            Some(_) => return Err(bad_config("prevResult", "must be an object")),
        };
        let mut valid_attachments = Vec::new();
        match &raw.valid_attachments {
            None => {}
            Some(Value::Array(list)) => {
                for (i, a) in list.iter().enumerate() {
                    let id = a.get("containerID").and_then(Value::as_str);
                    let ifname = a.get("ifname").and_then(Value::as_str).unwrap_or("");
                    match id {
                        Some(id) if !id.is_empty() => valid_attachments.push(Attachment {
                            container_id: id.to_string(),
                            ifname: ifname.to_string(),
                        }),
                        _ => {
                            return Err(bad_config(
                                &format!("cni.dev/valid-attachments[{i}].containerID"),
                                "must be a non-empty string",
                            ))
                        }
                    }
                }
            }
            Some(_) => return Err(bad_config("cni.dev/valid-attachments", "must be an array")),
        }
        if cmd == Command::Gc && raw.valid_attachments.is_none() {
            return Err(bad_config("cni.dev/valid-attachments", "is missing"));
        }
        // Read liberally: a runtimeConfig that is not an object passes
        // no annotations.
        let pod_annotations = raw
            .runtime_config
            .as_ref()
            .and_then(|rc| rc.get(POD_ANNOTATIONS))
            .cloned();
        Ok(NetConf {
            cni_version,
            name,
            socket,
            lock_dir,
            mtu,
            daemon_wait,
            dns,
            prev_result,
            valid_attachments,
            pod_annotations,
        })
    }
}

// The pods' link-local gateways are the datapath's (it answers them).
pub(crate) use eniip_datapath::datapath::{POD_GATEWAY, POD_GATEWAY6};

/// An interface of the result.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Interface {
    /// Its name.
    pub(crate) name: String,
    /// Its MAC.
    pub(crate) mac: String,
    /// The netns path (container side only).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) sandbox: Option<String>,
}

/// An address of the result.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct IpConfig {
    /// `"4"` or `"6"`: spec 0.4.0 requires it, 1.0.0 removed it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) version: Option<String>,
    /// `a.b.c.d/32`
    pub(crate) address: String,
    /// The default gateway.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) gateway: Option<String>,
    /// Index into `interfaces`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) interface: Option<usize>,
}

/// A route of the result.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct ResultRoute {
    /// Destination prefix.
    pub(crate) dst: String,
    /// Next hop.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) gw: Option<String>,
}

/// The ADD result.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct CniResult {
    /// The config's version.
    #[serde(rename = "cniVersion")]
    pub(crate) cni_version: String,
    /// Host end, then container end.
    pub(crate) interfaces: Vec<Interface>,
    /// The pod's addresses.
    pub(crate) ips: Vec<IpConfig>,
    /// The pod's routes.
    pub(crate) routes: Vec<ResultRoute>,
    /// DNS settings from the config.
    #[serde(default)]
    pub(crate) dns: Value,
}

impl CniResult {
    /// The result as a caller of `version` reads it: in 0.4.0 every
    /// address says its IP version; from 1.0.0 none does. (The fields a
    /// 1.1.0 result adds are not used here, so 1.0.0 and 1.1.0 differ only
    /// in `cniVersion`.)
    pub(crate) fn for_version(mut self, version: &str) -> CniResult {
        let old = version.starts_with("0.");
        for ip in &mut self.ips {
            ip.version = old.then(|| if ip.address.contains(':') { "6" } else { "4" }.to_string());
        }
        self.cni_version = version.to_string();
        self
    }

    /// The first IPv4 address of a (previous) result, if it has one.
    pub(crate) fn ipv4_of(prev: &Value) -> Option<Ipv4Addr> {
        Self::first_of(prev)
    }

    /// The first IPv6 address of a (previous) result, if it has one.
    pub(crate) fn ipv6_of(prev: &Value) -> Option<Ipv6Addr> {
        Self::first_of(prev)
    }

    fn first_of<A: std::str::FromStr>(prev: &Value) -> Option<A> {
        prev.get("ips")?.as_array()?.iter().find_map(|ip| {
            let a = ip.get("address")?.as_str()?;
            a.split('/').next()?.parse().ok()
        })
    }
}

#[cfg(test)]
#[path = "spec_tests.rs"]
mod tests;
