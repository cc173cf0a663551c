//! Validation: a [`RawConfig`] to a [`Config`], every error naming the key,
//! the value and what is allowed.

use super::*;
use eniip_protocol::core::MAX_STICK_S;

fn invalid(key: &str, value: &Value, allowed: &str) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        value: value.to_string(),
        allowed: allowed.to_string(),
    }
}

pub(super) fn invalid_str(key: &str, value: &str, allowed: &str) -> ConfigError {
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

pub(super) fn secs(
    key: &str,
    v: &Option<Value>,
    default: u64,
    lo: u64,
    hi: u64,
) -> Result<Duration, ConfigError> {
    int_in(key, v, default, lo, hi).map(Duration::from_secs)
}

/// `prefix` then 1 to 64 lowercase letters and digits: the shape of the
/// ids the OpenAPI hands out (`vsw-bp1s5fnvk4gn2tws03624`).
fn id_shaped(id: &str, prefix: &str) -> bool {
    id.strip_prefix(prefix).is_some_and(|rest| {
        (1..=64).contains(&rest.len())
            && rest
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    })
}

/// Region and zone ids: lowercase words joined by '-', at least two
/// (`cn-hangzhou`, `ap-southeast-1`, `cn-hangzhou-i`).
fn region_shaped(id: &str) -> bool {
    let mut parts = id.split('-');
    id.len() <= 64
        && parts
            .next()
            .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase()))
        && parts.clone().next().is_some()
        && parts.all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

impl RawConfig {
    /// Validates into a [`Config`]: one check per key or key group, each
    /// error naming its key.
    pub fn validate(&self) -> Result<Config, ConfigError> {
        let ip_stack = self.ip_stack()?;
        self.check_names()?;
        self.check_credentials()?;
        self.check_paths()?;
        Ok(Config {
            access_key: self.access_key.clone(),
            access_secret: self.access_secret.clone(),
            vswitches: self.vswitches()?,
            security_groups: self.security_groups()?,
            min_pool_size: usize_in("min_pool_size", &self.min_pool_size, 0, 0, 100_000)?,
            max_pool_size: usize_in("max_pool_size", &self.max_pool_size, 5, 0, 100_000)?,
            min_eni: usize_in("min_eni", &self.min_eni, 0, 0, 64)?,
            max_eni: usize_in("max_eni", &self.max_eni, 0, 0, 64)?,
            eni_cap_ratio: self.eni_cap_ratio()?,
            eni_cap_shift: self.eni_cap_shift()?,
            vswitch_selection_policy: self.vswitch_selection_policy()?,
            eni_tags: self.eni_tags()?,
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
            socket_mode: self.socket_mode()?,
            socket_group: self.socket_group()?,
            allowed_uids: self.allowed_uids()?,
            state_dir: PathBuf::from(self.state_dir.as_deref().unwrap_or(DEFAULT_STATE_DIR)),
            ip_stick_time: secs("ip_stick_time", &self.ip_stick_time, 0, 0, MAX_STICK_S)?,
            max_ip_stick_time: secs(
                "max_ip_stick_time",
                &self.max_ip_stick_time,
                DEFAULT_MAX_IP_STICK_TIME_S,
                0,
                MAX_STICK_S,
            )?,
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
            start_timeout: secs("start_timeout", &self.start_timeout, 60, 1, 3_600)?,
            max_connections: usize_in("max_connections", &self.max_connections, 256, 1, 65_536)?,
            metrics_listen: self.metrics_listen()?,
            signature_version: self.signature_version()?,
            ip_prefix: self.ip_prefix()?,
            adaptive_pool: match &self.adaptive_pool {
                None => true,
                Some(v) => v
                    .as_bool()
                    .ok_or_else(|| invalid("adaptive_pool", v, "true or false"))?,
            },
            cni: self.cni_settings()?,
            sg: self.sg_settings()?,
            exhaustion_warn: secs(
                "exhaustion_warn_s",
                &self.exhaustion_warn_s,
                3600,
                0,
                7 * 86_400,
            )?,
        })
    }

    /// `security_group` and `security_groups` merged (Terway reads both),
    /// sorted, at most 5.
    fn security_groups(&self) -> Result<Vec<String>, ConfigError> {
        let mut groups: Vec<String> = Vec::new();
        let given = self
            .security_group
            .iter()
            .chain(self.security_groups.iter().flatten());
        for sg in given {
            // Terway's files leave `security_group` empty beside the list.
            if sg.is_empty() || groups.contains(sg) {
                continue;
            }
            if !id_shaped(sg, "sg-") {
                return Err(invalid_str(
                    "security_groups",
                    sg,
                    "security group ids (sg- then lowercase letters and digits)",
                ));
            }
            groups.push(sg.clone());
        }
        groups.sort();
        if groups.len() > 5 {
            return Err(invalid_str(
                "security_groups",
                &groups.join(","),
                "at most 5 security groups in all",
            ));
        }
        Ok(groups)
    }

    fn vswitches(&self) -> Result<BTreeMap<String, Vec<String>>, ConfigError> {
        let vswitches = self.vswitches.clone().unwrap_or_default();
        for (zone, ids) in &vswitches {
            if !region_shaped(zone) {
                return Err(invalid_str(
                    "vswitches",
                    zone,
                    "zone ids such as cn-hangzhou-i as the keys",
                ));
            }
            for id in ids {
                if !id_shaped(id, "vsw-") {
                    return Err(invalid_str(
                        &format!("vswitches.{zone}"),
                        id,
                        "vswitch ids (vsw- then lowercase letters and digits)",
                    ));
                }
            }
        }
        Ok(vswitches)
    }

    fn eni_cap_ratio(&self) -> Result<f64, ConfigError> {
        let Some(v) = &self.eni_cap_ratio else {
            return Ok(1.0);
        };
        match v.as_f64() {
            Some(r) if r > 0.0 && r <= 1.0 => Ok(r),
            // Terway turns 0 into 1.
            Some(0.0) => Ok(1.0),
            _ => Err(invalid("eni_cap_ratio", v, "a number > 0 and <= 1")),
        }
    }

    fn eni_cap_shift(&self) -> Result<i64, ConfigError> {
        let Some(v) = &self.eni_cap_shift else {
            return Ok(0);
        };
        match v.as_i64() {
            Some(n) if (-64..=64).contains(&n) => Ok(n),
            _ => Err(invalid("eni_cap_shift", v, "an integer from -64 to 64")),
        }
    }

    fn vswitch_selection_policy(&self) -> Result<VSwitchPolicy, ConfigError> {
        match self.vswitch_selection_policy.as_deref() {
            None | Some("") | Some("random") => Ok(VSwitchPolicy::Random),
            Some("ordered") => Ok(VSwitchPolicy::Ordered),
            Some(other) => Err(invalid_str(
                "vswitch_selection_policy",
                other,
                "\"random\" or \"ordered\"",
            )),
        }
    }

    fn signature_version(&self) -> Result<SignatureVersion, ConfigError> {
        match self.signature_version.as_deref() {
            None | Some("") | Some("v3") => Ok(SignatureVersion::V3),
            Some("v1") => Ok(SignatureVersion::V1),
            Some(other) => Err(invalid_str("signature_version", other, "\"v3\" or \"v1\"")),
        }
    }

    fn ip_stack(&self) -> Result<IpStack, ConfigError> {
        match self.ip_stack.as_deref() {
            None | Some("") | Some("ipv4") => Ok(IpStack::Ipv4),
            Some("dual") => Ok(IpStack::Dual),
            Some(other) => Err(invalid_str("ip_stack", other, "\"ipv4\" or \"dual\"")),
        }
    }

    /// Tag keys the OpenAPI accepts and that are not eniipd's own.
    fn eni_tags(&self) -> Result<BTreeMap<String, String>, ConfigError> {
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
            if k == eniip_protocol::core::TAG_CREATOR_KEY
                || k == eniip_protocol::core::TAG_INSTANCE_KEY
            {
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
        Ok(eni_tags)
    }

    /// The endpoints are URLs; the region, the instance and the RAM role
    /// have the shapes the cloud gives them.
    fn check_names(&self) -> Result<(), ConfigError> {
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
        if let Some(r) = &self.region_id {
            if !region_shaped(r) {
                return Err(invalid_str(
                    "region_id",
                    r,
                    "a region id such as cn-hangzhou (lowercase words joined by '-')",
                ));
            }
        }
        if let Some(i) = &self.instance_id {
            if !id_shaped(i, "i-") {
                return Err(invalid_str(
                    "instance_id",
                    i,
                    "an instance id (i- then lowercase letters and digits)",
                ));
            }
        }
        if let Some(s) = &self.ram_role {
            let fits = (1..=64).contains(&s.len())
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
            if !fits {
                return Err(invalid_str(
                    "ram_role",
                    s,
                    "1 to 64 letters, digits, '-', '_' and '.'",
                ));
            }
        }
        Ok(())
    }

    fn check_credentials(&self) -> Result<(), ConfigError> {
        if self.access_key.is_some() == self.access_secret.is_some() {
            return Ok(());
        }
        Err(invalid_str(
            if self.access_key.is_some() {
                "access_secret"
            } else {
                "access_key"
            },
            "(missing)",
            "access_key and access_secret given together",
        ))
    }

    fn socket_mode(&self) -> Result<u32, ConfigError> {
        const ALLOWED: &str = "an octal mode string such as \"0660\"";
        match &self.socket_mode {
            None => Ok(0o660),
            Some(Value::String(s)) => match u32::from_str_radix(s.trim_start_matches("0o"), 8) {
                Ok(m) if m <= 0o777 && !s.is_empty() => Ok(m),
                _ => Err(invalid_str("socket_mode", s, ALLOWED)),
            },
            Some(v) => Err(invalid("socket_mode", v, ALLOWED)),
        }
    }

    /// A group name as groupadd takes it, or a numeric gid (whether a
    /// group stands behind it is a local check: see the preflight).
    fn socket_group(&self) -> Result<Option<String>, ConfigError> {
        const ALLOWED: &str =
            "a group name (letters, digits, '_', '-', '.', not starting with '-') or a numeric gid; leave the key out for none";
        match &self.socket_group {
            None => Ok(None),
            Some(Value::String(s)) => {
                let name_like = (1..=32).contains(&s.len())
                    && !s.starts_with('-')
                    && s.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
                if name_like {
                    Ok(Some(s.clone()))
                } else {
                    Err(invalid_str("socket_group", s, ALLOWED))
                }
            }
            Some(Value::Number(n)) if n.as_u64().is_some_and(|g| g <= u64::from(u32::MAX)) => {
                Ok(Some(n.to_string()))
            }
            Some(v) => Err(invalid("socket_group", v, ALLOWED)),
        }
    }

    fn allowed_uids(&self) -> Result<Vec<u32>, ConfigError> {
        let Some(list) = &self.allowed_uids else {
            return Ok(vec![0]);
        };
        list.iter()
            .map(|v| match v.as_u64() {
                Some(n) if n <= u64::from(u32::MAX) => Ok(n as u32),
                _ => Err(invalid("allowed_uids", v, "a list of numeric uids")),
            })
            .collect()
    }

    fn metrics_listen(&self) -> Result<Option<SocketAddr>, ConfigError> {
        match &self.metrics_listen {
            None => Ok(None),
            Some(s) if s.is_empty() => Ok(None),
            Some(s) => s
                .parse::<SocketAddr>()
                .map(Some)
                .map_err(|_| invalid_str("metrics_listen", s, "an address such as 127.0.0.1:9712")),
        }
    }

    fn check_paths(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// `ip_prefix`, or Terway's `enable_ip_prefix` (the same meaning; both
    /// given must agree). In dual stack it also gives each ENI an IPv6 /80
    /// that its pods' IPv6 are carved from.
    fn ip_prefix(&self) -> Result<bool, ConfigError> {
        let mut on = None;
        for key in ["ip_prefix", "enable_ip_prefix"] {
            let v = if key == "ip_prefix" {
                &self.ip_prefix
            } else {
                &self.enable_ip_prefix
            };
            let Some(v) = v else { continue };
            let b = v
                .as_bool()
                .ok_or_else(|| invalid(key, v, "true or false"))?;
            match on {
                Some((_, prev)) if prev != b => {
                    return Err(invalid(
                        key,
                        v,
                        "the value of `ip_prefix`, whose alias it is (give one of the two)",
                    ))
                }
                _ => on = Some((key, b)),
            }
        }
        Ok(on.is_some_and(|(_, b)| b))
    }
}

impl Config {
    /// What the daemon would warn about at start that needs no cloud:
    /// pool bounds that contradict each other (the capacity clamps, which
    /// need the instance type, come at start).
    pub(crate) fn local_warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.min_eni == 0 && self.min_pool_size > self.max_pool_size {
            w.push(format!(
                "min_pool_size {} exceeds max_pool_size {}: max_pool_size will be raised to {}",
                self.min_pool_size, self.max_pool_size, self.min_pool_size
            ));
        }
        if self.max_eni != 0 && self.min_eni > self.max_eni {
            w.push(format!(
                "min_eni {} exceeds max_eni {}: at most {} ENIs will be used, min_eni cannot be met",
                self.min_eni, self.max_eni, self.max_eni
            ));
        }
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str, key: &str) -> String {
        let raw = RawConfig::parse(text).unwrap();
        let msg = match raw.validate() {
            Ok(_) => panic!("{text} was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(msg.contains(&format!("`{key}`")), "{text}: {msg}");
        msg
    }

    #[test]
    fn ids_the_openapi_would_be_given_have_their_shape() {
        for (text, key) in [
            (
                r#"{"vswitches": {"cn-hangzhou-i": ["vsw-bp1 s5fn"]}}"#,
                "vswitches.cn-hangzhou-i",
            ),
            (
                r#"{"vswitches": {"cn-hangzhou-i": ["vsw-"]}}"#,
                "vswitches.cn-hangzhou-i",
            ),
            (
                r#"{"vswitches": {"cn-hangzhou-i": ["vsw-BP1"]}}"#,
                "vswitches.cn-hangzhou-i",
            ),
            (r#"{"vswitches": {"hangzhou i": ["vsw-bp1"]}}"#, "vswitches"),
            (r#"{"security_groups": ["sg-bp1 bad"]}"#, "security_groups"),
            (r#"{"security_group": "sg-"}"#, "security_groups"),
            (r#"{"security_groups": ["sg-bp1\tx"]}"#, "security_groups"),
            (r#"{"instance_id": "i-bp1 x"}"#, "instance_id"),
            (r#"{"instance_id": "bp1abc"}"#, "instance_id"),
            (r#"{"region_id": "cn hangzhou"}"#, "region_id"),
            (r#"{"region_id": "hangzhou"}"#, "region_id"),
            (r#"{"region_id": "CN-HANGZHOU"}"#, "region_id"),
            (r#"{"socket_group": ""}"#, "socket_group"),
            (r#"{"socket_group": "a b"}"#, "socket_group"),
        ] {
            refused(text, key);
        }
        let c = RawConfig::parse(
            r#"{"vswitches": {"cn-hangzhou-i": ["vsw-bp1s5fnvk4gn2tws03624", "vsw-a"]},
                "security_groups": ["sg-bp1fg655nh68xyz9i7km"], "region_id": "ap-southeast-1",
                "instance_id": "i-bp67acfmxazb4p0000", "socket_group": "eniipd"}"#,
        )
        .unwrap()
        .validate()
        .unwrap();
        assert_eq!(c.region_id.as_deref(), Some("ap-southeast-1"));
    }
}
