//! `eniip-sim`: a faithful emulator of the Alibaba Cloud ECS/VPC OpenAPI and
//! the instance metadata service, on loopback, with real signatures.
//!
//! - [`world`]: the emulated instance, vswitches and ENIs and every action.
//! - [`openapi`]: the RPC listener (latency, ClientToken replay) and
//!   `/__sim/` admin; [`auth`]: signatures V3 and 1.0, the timestamp
//!   window, nonce reuse, STS tokens; [`faults`]: the fault rules both
//!   listeners obey.
//! - [`metadata`]: the metadata listener, lagging the API, with token mode.
//! - [`hostlinks`]: the emulated ENIs as links on a Linux host, and a VPC
//!   namespace that routes each address over its own ENI.
//! - [`options`]: the settings, and the vswitches of the command line.
//! - [`keeper`]: the emulated cloud kept in a file as it changes.
//!
//! It runs in-process ([`Simulator::start`], used by `eniipd --simulate`,
//! the tests and the benchmarks) or as the `eniip-sim` binary.

pub(crate) mod auth;
mod faults;
pub mod flow;
pub mod hostlinks;
mod keeper;
pub(crate) mod metadata;
pub(crate) mod net;
pub(crate) mod openapi;
mod options;
pub mod types;
pub(crate) mod world;

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::Value;

use eniip_httpd::{HttpOptions, HttpServer};
use eniip_util::rand::Rng;
use net::{Net4, Net6};
use world::{World, WorldConfig};

pub use faults::FaultRule;
pub use options::{
    parse_security_group, SimOptions, VSwitchSpec, DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET,
};

/// Why the emulator could not start.
#[derive(Debug)]
pub enum SimError {
    /// Settings that make no sense.
    Config(String),
    /// A listener could not be bound.
    Bind {
        /// Where.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimError::Config(s) => write!(f, "{s}"),
            SimError::Bind { addr, .. } => write!(f, "cannot listen on {addr}"),
        }
    }
}

impl std::error::Error for SimError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SimError::Bind { source, .. } => Some(source),
            SimError::Config(_) => None,
        }
    }
}

/// Role credentials handed out by metadata.
#[derive(Debug, Clone)]
pub(crate) struct StsCredentials {
    /// `STS.…`
    pub(crate) id: String,
    /// Secret.
    pub(crate) secret: String,
    /// Token.
    pub(crate) token: String,
    /// Issued (Unix s).
    pub(crate) issued_unix: u64,
    /// Expires (Unix s).
    pub(crate) expires_unix: u64,
}

/// State shared by both listeners.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The world.
    pub(crate) world: Mutex<World>,
    /// Gateway state (faults, nonces, replays).
    pub(crate) gateway: Mutex<openapi::Gateway>,
    /// Metadata tokens and their expiry.
    pub(crate) md_tokens: Mutex<HashMap<String, Instant>>,
    /// Role credentials issued so far.
    pub(crate) sts: Mutex<Vec<StsCredentials>>,
    /// Static key pair.
    pub(crate) key_id: String,
    /// Static secret.
    pub(crate) key_secret: String,
    /// Per-call latency.
    pub(crate) latency: Duration,
    /// Region.
    pub(crate) region: String,
    /// RAM role name.
    pub(crate) ram_role: Option<String>,
    /// Role credential lifetime.
    pub(crate) sts_ttl: Duration,
    /// Tokenless metadata refused.
    pub(crate) metadata_hardened: bool,
    /// The VPC block metadata reports.
    pub(crate) vpc_cidr: String,
    /// The account's flow control, shared by every instance.
    pub(crate) flow: Mutex<flow::FlowControl>,
    /// Where the world is kept, if it is.
    pub(crate) keeper: Option<keeper::Keeper>,
}

impl Shared {
    /// The world changed: it is saved, if it is kept.
    pub(crate) fn changed(&self) {
        if let Some(k) = &self.keeper {
            k.save(&self.world);
        }
    }
}

impl Shared {
    /// `GET /__sim/state`: the world, and the throttled calls per Action.
    pub(crate) fn state_json(&self) -> Value {
        let (mut v, fleet) = {
            let mut w = self.world.lock();
            (w.state_json(Instant::now()), w.account().fleet().to_vec())
        };
        if fleet.len() > 1 {
            let list: Vec<Value> = fleet
                .iter()
                .map(|(id, t)| serde_json::json!({"id": id, "type": t.id}))
                .collect();
            if let Some(m) = v.as_object_mut() {
                m.insert("instances".into(), Value::Array(list));
            }
        }
        let throttled = serde_json::to_value(self.flow.lock().throttled()).unwrap_or_default();
        if let Some(m) = v.as_object_mut() {
            m.insert("throttled".into(), throttled);
        }
        v
    }
}

/// What the emulator knows of an access key id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeySecret {
    /// The secret its requests are signed with.
    pub(crate) secret: String,
    /// Role credentials: the security token that must come with them.
    /// `None` for the static key pair.
    pub(crate) token: Option<RoleToken>,
}

/// The security token of role credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RoleToken {
    /// Still valid: requests must carry it.
    Valid(String),
    /// Past its expiry: requests are refused.
    Expired,
}

impl Shared {
    /// The secret of an access key id, and for role credentials their
    /// token.
    pub(crate) fn secret_for(&self, ak: &str) -> Option<KeySecret> {
        if ak == self.key_id {
            return Some(KeySecret {
                secret: self.key_secret.clone(),
                token: None,
            });
        }
        let now = eniip_util::time::unix_secs();
        self.sts
            .lock()
            .iter()
            .find(|c| c.id == ak)
            .map(|c| KeySecret {
                secret: c.secret.clone(),
                token: Some(if c.expires_unix > now {
                    RoleToken::Valid(c.token.clone())
                } else {
                    RoleToken::Expired
                }),
            })
    }

    /// Current role credentials, rotated when half their life is gone.
    pub(crate) fn sts_credentials(&self) -> StsCredentials {
        let now = eniip_util::time::unix_secs();
        let mut sts = self.sts.lock();
        if let Some(c) = sts.last() {
            if now < c.issued_unix + (c.expires_unix - c.issued_unix) / 2 {
                return c.clone();
            }
        }
        let mut w = self.world.lock();
        let id: String = format!("STS.{}", w.rng().hex(10).to_ascii_uppercase());
        let c = StsCredentials {
            id,
            secret: w.rng().hex(15),
            token: format!("CAES{}", w.rng().hex(32)),
            issued_unix: now,
            expires_unix: now + self.sts_ttl.as_secs().max(1),
        };
        sts.retain(|c| c.expires_unix + 3600 > now);
        sts.push(c.clone());
        c
    }
}

/// A running emulator.
#[derive(Debug)]
pub struct Simulator {
    shared: Arc<Shared>,
    api: HttpServer,
    md: HttpServer,
    /// The metadata listeners of the instances after the first.
    fleet_md: Vec<HttpServer>,
}

fn loopback(addr: SocketAddr) -> Result<SocketAddr, SimError> {
    if addr.ip().is_loopback() {
        Ok(addr)
    } else {
        Err(SimError::Config(format!(
            "{addr} is not a loopback address: eniip-sim listens on 127.0.0.1 or ::1 only"
        )))
    }
}

fn vpc_cidr(nets: &[Net4]) -> String {
    let mut prefix = 16u8.min(nets.iter().map(|n| n.prefix).min().unwrap_or(16));
    let base = nets.first().map(|n| n.base).unwrap_or(0);
    while prefix > 8 {
        let mask = u32::MAX << (32 - prefix);
        if nets.iter().all(|n| n.base & mask == base & mask) {
            break;
        }
        prefix -= 1;
    }
    let mask = u32::MAX << (32 - prefix);
    format!("{}/{prefix}", std::net::Ipv4Addr::from(base & mask))
}

/// The instances after the first: each added to the world and given its
/// own metadata listener (same address as the first's, ephemeral port).
fn start_fleet(
    shared: &Arc<Shared>,
    opts: &SimOptions,
    http: &HttpOptions,
) -> Result<Vec<HttpServer>, SimError> {
    if opts.instances == 0 || opts.instances > 1000 {
        return Err(SimError::Config(format!(
            "{} instances: from 1 to 1000",
            opts.instances
        )));
    }
    let mut servers = Vec::new();
    for n in 1..opts.instances {
        let name = match opts.instance_types.len() {
            0 => &opts.instance_type,
            k => &opts.instance_types[(n - 1) % k],
        };
        let itype = types::find(name).ok_or_else(|| {
            SimError::Config(format!(
                "unknown instance type {name} (known: {})",
                types::known()
            ))
        })?;
        shared
            .world
            .lock()
            .add_instance(itype)
            .map_err(SimError::Config)?;
        let addr = SocketAddr::new(opts.metadata_listen.ip(), 0);
        let sh = Arc::clone(shared);
        let md = HttpServer::bind(
            addr,
            "sim-md",
            Arc::new(move |r| metadata::handle(&sh, r, n)),
            http.clone(),
        )
        .map_err(|source| SimError::Bind { addr, source })?;
        servers.push(md);
    }
    Ok(servers)
}

impl Simulator {
    /// Starts both listeners.
    pub fn start(opts: SimOptions) -> Result<Simulator, SimError> {
        let listen = loopback(opts.listen)?;
        let md_listen = loopback(opts.metadata_listen)?;
        let itype = types::find(&opts.instance_type).ok_or_else(|| {
            SimError::Config(format!(
                "unknown instance type {} (known: {})",
                opts.instance_type,
                types::known()
            ))
        })?;
        if opts.access_key_id.is_empty() || opts.access_key_secret.is_empty() {
            return Err(SimError::Config(
                "the access key id and secret must not be empty".into(),
            ));
        }
        let mut vsw = Vec::new();
        for v in &opts.vswitches {
            let cidr = Net4::parse(&v.cidr).map_err(SimError::Config)?;
            let cidr6 = v
                .ipv6_cidr
                .as_deref()
                .map(Net6::parse)
                .transpose()
                .map_err(SimError::Config)?;
            vsw.push((v.id.clone(), cidr, cidr6, v.free));
        }
        let nets: Vec<Net4> = vsw.iter().map(|v| v.1).collect();
        let rng = match opts.seed {
            Some(s) => Rng::seeded(s),
            None => Rng::from_entropy(),
        };
        let mut world = World::new(
            WorldConfig {
                region: opts.region.clone(),
                zone: opts.zone.clone(),
                itype,
                vswitches: vsw,
                attach_delay: opts.attach_delay,
                metadata_lag: opts.metadata_lag,
                security_groups: opts.security_groups.clone(),
            },
            rng,
        )
        .map_err(SimError::Config)?;
        let keeper = opts
            .world_file
            .as_deref()
            .map(keeper::Keeper::open)
            .transpose()
            .map_err(SimError::Config)?;
        let restored = match &keeper {
            Some(k) => k.restore(&mut world).map_err(SimError::Config)?,
            None => false,
        };
        let shared = Arc::new(Shared {
            world: Mutex::new(world),
            gateway: Mutex::new(openapi::Gateway::default()),
            md_tokens: Mutex::new(HashMap::new()),
            sts: Mutex::new(Vec::new()),
            key_id: opts.access_key_id.clone(),
            key_secret: opts.access_key_secret.clone(),
            latency: opts.latency,
            region: opts.region.clone(),
            ram_role: opts.ram_role.clone(),
            sts_ttl: opts.sts_ttl,
            metadata_hardened: opts.metadata_hardened,
            vpc_cidr: vpc_cidr(&nets),
            flow: Mutex::new(flow::FlowControl::new(opts.flow.clone())),
            keeper,
        });
        let http = HttpOptions {
            max_connections: 1024,
            ..HttpOptions::default()
        };
        let sh = Arc::clone(&shared);
        let api = HttpServer::bind(
            listen,
            "sim-api",
            Arc::new(move |r| openapi::handle(&sh, r)),
            http.clone(),
        )
        .map_err(|source| SimError::Bind {
            addr: listen,
            source,
        })?;
        let sh = Arc::clone(&shared);
        let md = HttpServer::bind(
            md_listen,
            "sim-md",
            Arc::new(move |r| metadata::handle(&sh, r, 0)),
            http.clone(),
        )
        .map_err(|source| SimError::Bind {
            addr: md_listen,
            source,
        })?;
        let fleet_md = start_fleet(&shared, &opts, &http)?;
        if let (Some(k), false) = (&shared.keeper, restored) {
            // A new world is kept from the start: its instance, and the
            // ids metadata gives, are the same after a restart.
            log::info!("keeping the emulated cloud in {}", k.path().display());
            shared.changed();
        }
        Ok(Simulator {
            shared,
            api,
            md,
            fleet_md,
        })
    }

    /// `http://127.0.0.1:P`
    pub fn ecs_url(&self) -> String {
        format!("http://{}", self.api.local_addr())
    }

    /// Same listener as ECS.
    pub(crate) fn vpc_url(&self) -> String {
        self.ecs_url()
    }

    /// `http://127.0.0.1:Q`
    pub fn metadata_url(&self) -> String {
        format!("http://{}", self.md.local_addr())
    }

    /// Every instance of the account: (id, type, metadata URL), the
    /// first one first.
    pub(crate) fn instances(&self) -> Vec<(String, String, String)> {
        let fleet = self.shared.world.lock().account().fleet().to_vec();
        let urls = std::iter::once(self.metadata_url()).chain(
            self.fleet_md
                .iter()
                .map(|m| format!("http://{}", m.local_addr())),
        );
        fleet
            .into_iter()
            .zip(urls)
            .map(|((id, t), url)| (id, t.id.to_string(), url))
            .collect()
    }

    /// The lines printed after the `ready` line, one per instance:
    /// `instance id=<id> type=<type> metadata=<url>` (none with one).
    pub fn instance_lines(&self) -> Vec<String> {
        if self.fleet_md.is_empty() {
            return Vec::new();
        }
        self.instances()
            .into_iter()
            .map(|(id, t, url)| format!("instance id={id} type={t} metadata={url}"))
            .collect()
    }

    /// The instance id.
    pub fn instance_id(&self) -> String {
        self.shared.world.lock().account().instance_id().to_string()
    }

    /// The region id.
    pub fn region_id(&self) -> String {
        self.shared.region.clone()
    }

    /// The access key id.
    pub fn access_key_id(&self) -> &str {
        &self.shared.key_id
    }

    /// The access key secret.
    pub fn access_key_secret(&self) -> &str {
        &self.shared.key_secret
    }

    /// The line SPEC section 5 prints when ready.
    pub fn ready_line(&self) -> String {
        format!(
            "ready ecs={} vpc={} metadata={} instance={} region={}",
            self.ecs_url(),
            self.vpc_url(),
            self.metadata_url(),
            self.instance_id(),
            self.region_id()
        )
    }

    /// The state JSON of `GET /__sim/state`.
    pub fn state(&self) -> Value {
        self.shared.state_json()
    }

    /// Adds a fault rule.
    pub fn add_fault(&self, rule: FaultRule) {
        self.shared
            .gateway
            .lock()
            .faults
            .push(faults::Fault::new(rule));
    }

    /// Removes every fault rule.
    pub fn clear_faults(&self) {
        self.shared.gateway.lock().faults.clear();
    }

    /// Sets a vswitch's free addresses; false if unknown.
    pub fn set_vswitch_free(&self, id: &str, free: u64) -> bool {
        let known = self.shared.world.lock().set_free(id, free);
        if known {
            self.shared.changed();
        }
        known
    }

    /// Caps the /28 prefixes a vswitch still gives (`Some(0)`: fragmented,
    /// free addresses but no /28; `None`: no cap); false if unknown.
    pub fn set_vswitch_free_prefixes(&self, id: &str, cap: Option<u64>) -> bool {
        self.shared.world.lock().set_free_prefixes(id, cap)
    }

    /// Caps the IPv6 /80 prefixes a vswitch still gives (`Some(0)`: no
    /// room; `None`: no cap); false if unknown.
    pub fn set_vswitch_free_v6_prefixes(&self, id: &str, cap: Option<u64>) -> bool {
        self.shared.world.lock().set_free_v6_prefixes(id, cap)
    }

    /// Options for eniipd's OpenAPI client against this emulator: its
    /// endpoints and key pair, default timeouts, retries and signature.
    pub fn client_options(&self) -> eniip_cloud::aliyun::AliyunCloudOptions {
        eniip_cloud::aliyun::AliyunCloudOptions {
            ecs_endpoint: self.ecs_url(),
            vpc_endpoint: self.vpc_url(),
            ..eniip_cloud::aliyun::AliyunCloudOptions::new(
                &self.region_id(),
                &self.metadata_url(),
                eniip_cloud::credentials::CredentialSource::Static {
                    id: self.access_key_id().into(),
                    secret: eniip_util::Secret::new(self.access_key_secret()),
                    token: None,
                },
            )
        }
    }

    /// Tells systemd the emulator is ready (`READY=1` to
    /// `$NOTIFY_SOCKET`, when it runs as a `Type=notify` unit, as the
    /// packaged `eniip-sim.service` does).
    pub fn notify_ready(&self) {
        if let Err(e) = eniip_util::systemd::Notifier::from_env().ready() {
            log::warn!("cannot tell systemd the emulator is ready: {e}");
        }
    }

    /// Stops both listeners, then saves the world if it is kept in a
    /// file (as every change did: see [`keeper`]).
    pub fn shutdown(self) {
        self.api.shutdown();
        self.md.shutdown();
        for m in self.fleet_md {
            m.shutdown();
        }
        self.shared.changed();
    }
}

#[cfg(test)]
mod tests;
