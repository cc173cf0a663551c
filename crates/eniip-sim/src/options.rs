//! The emulator's settings: [`SimOptions`] and the vswitches of its
//! command line ([`VSwitchSpec`]), with the defaults the binary, `eniipd
//! --simulate`, the tests and the benchmarks share.
//!
//! Only parsing lives here: a spec that parses has a valid IPv4 (and
//! IPv6) block; whether the settings fit together (loopback listeners, a
//! known instance type, a non-empty key) is [`super::Simulator::start`]'s
//! to check.

use std::net::SocketAddr;
use std::time::Duration;

use super::net::{Net4, Net6};
use super::{flow, types};

/// The default access key id (emulator only).
pub const DEFAULT_ACCESS_KEY_ID: &str = "LTAI5tEniipSimulatorKey00";
/// The default access key secret (emulator only; not a real credential).
pub const DEFAULT_ACCESS_KEY_SECRET: &str = "eniip-sim-secret-not-for-production";

/// A vswitch on the command line: `ID=CIDR[,ipv6=CIDR6][,free=N]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VSwitchSpec {
    /// `vsw-...`
    pub(crate) id: String,
    /// IPv4 CIDR.
    pub(crate) cidr: String,
    /// IPv6 CIDR (dual stack).
    pub(crate) ipv6_cidr: Option<String>,
    /// Free addresses (default: the whole usable block).
    pub(crate) free: Option<u64>,
}

impl VSwitchSpec {
    /// Parses `ID=CIDR[,ipv6=CIDR6][,free=N]`.
    pub fn parse(s: &str) -> Result<VSwitchSpec, String> {
        let mut parts = s.split(',');
        let first = parts.next().unwrap_or("");
        let (id, cidr) = first
            .split_once('=')
            .ok_or_else(|| format!("{s:?}: expected ID=CIDR[,ipv6=CIDR6][,free=N]"))?;
        if !id.starts_with("vsw-") || id.len() < 5 {
            return Err(format!("{s:?}: the id must look like vsw-..."));
        }
        Net4::parse(cidr)?;
        let mut spec = VSwitchSpec {
            id: id.to_string(),
            cidr: cidr.to_string(),
            ipv6_cidr: None,
            free: None,
        };
        for p in parts {
            match p.split_once('=') {
                Some(("ipv6", c)) => {
                    Net6::parse(c)?;
                    spec.ipv6_cidr = Some(c.to_string());
                }
                Some(("free", n)) => {
                    spec.free = Some(
                        n.parse()
                            .map_err(|_| format!("{s:?}: free must be a number"))?,
                    )
                }
                _ => {
                    return Err(format!(
                        "{s:?}: unknown option {p:?} (ipv6=CIDR6 or free=N)"
                    ))
                }
            }
        }
        Ok(spec)
    }
}

/// Emulator settings.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// OpenAPI (ECS, VPC, admin) listener.
    pub listen: SocketAddr,
    /// Metadata listener.
    pub metadata_listen: SocketAddr,
    /// Instance type (see [`types::TYPES`]).
    pub instance_type: String,
    /// Region id.
    pub region: String,
    /// Zone id.
    pub zone: String,
    /// Vswitches; the first carries the primary ENI.
    pub vswitches: Vec<VSwitchSpec>,
    /// Access key id.
    pub access_key_id: String,
    /// Access key secret.
    pub access_key_secret: String,
    /// Added to every OpenAPI call.
    pub latency: Duration,
    /// Attaching/Detaching/Deleting take this long.
    pub attach_delay: Duration,
    /// Metadata shows API changes this late.
    pub metadata_lag: Duration,
    /// Tokenless metadata requests are refused.
    pub metadata_hardened: bool,
    /// Fixes every random choice.
    pub seed: Option<u64>,
    /// The RAM role metadata serves, if any.
    pub ram_role: Option<String>,
    /// Lifetime of role credentials.
    pub sts_ttl: Duration,
    /// Where the world is kept across runs: restored at start if the file
    /// exists, saved as it changes (`eniip-sim --state-file PATH`,
    /// `eniipd --simulate --state-dir DIR`).
    pub world_file: Option<std::path::PathBuf>,
    /// The account's flow control (none by default: one instance's
    /// emulator answers every call).
    pub flow: flow::FlowOptions,
    /// The account's instances (1: the single-instance emulator); each
    /// has its own metadata listener on an ephemeral loopback port.
    pub instances: usize,
    /// The types of the instances after the first, cycled (empty: every
    /// instance is of `instance_type`).
    pub instance_types: Vec<String>,
    /// Security groups of the VPC beside the instances' own
    /// (`--security-group`): ENIs can be created in, or changed to, any
    /// set of the VPC's groups.
    pub security_groups: Vec<String>,
}

impl Default for SimOptions {
    fn default() -> SimOptions {
        SimOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            metadata_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            instance_type: types::DEFAULT.into(),
            region: "cn-hangzhou".into(),
            zone: "cn-hangzhou-i".into(),
            vswitches: vec![VSwitchSpec {
                id: "vsw-bp1sim0000000000000001".into(),
                cidr: "192.168.0.0/22".into(),
                ipv6_cidr: None,
                free: Some(1000),
            }],
            access_key_id: DEFAULT_ACCESS_KEY_ID.into(),
            access_key_secret: DEFAULT_ACCESS_KEY_SECRET.into(),
            latency: Duration::ZERO,
            attach_delay: Duration::from_millis(100),
            metadata_lag: Duration::from_millis(100),
            metadata_hardened: false,
            seed: None,
            ram_role: Some("EniipdSimRole".into()),
            sts_ttl: Duration::from_secs(3600),
            world_file: None,
            flow: flow::FlowOptions::default(),
            instances: 1,
            instance_types: Vec::new(),
            security_groups: Vec::new(),
        }
    }
}

/// Checks a `--security-group` id: `sg-` then letters and digits (as the
/// service writes them).
pub fn parse_security_group(s: &str) -> Result<String, String> {
    let rest = s
        .strip_prefix("sg-")
        .ok_or_else(|| format!("{s:?}: the id must look like sg-..."))?;
    if rest.is_empty() || rest.len() > 60 || !rest.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(format!("{s:?}: after sg- only letters and digits"));
    }
    Ok(s.to_string())
}
