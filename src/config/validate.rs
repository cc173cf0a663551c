//! Validation: a [`RawConfig`] to a [`Config`], every error naming the key,
//! the value and what is allowed.

use super::*;

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

impl RawConfig {
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
        let signature_version = match self.signature_version.as_deref() {
            None | Some("") | Some("v3") => SignatureVersion::V3,
            Some("v1") => SignatureVersion::V1,
            Some(other) => return Err(invalid_str("signature_version", other, "\"v3\" or \"v1\"")),
        };
        let ip_stack = match self.ip_stack.as_deref() {
            None | Some("") | Some("ipv4") => IpStack::Ipv4,
            Some("dual") => IpStack::Dual,
            Some(other) => return Err(invalid_str("ip_stack", other, "\"ipv4\" or \"dual\"")),
        };

        let ip_prefix = self.ip_prefix(ip_stack)?;

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
            if k == crate::core::TAG_CREATOR_KEY || k == crate::core::TAG_INSTANCE_KEY {
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
            start_timeout: secs("start_timeout", &self.start_timeout, 60, 1, 3_600)?,
            max_connections: usize_in("max_connections", &self.max_connections, 256, 1, 65_536)?,
            metrics_listen,
            signature_version,
            ip_prefix,
            cni: self.cni_settings()?,
        })
    }

    /// `ip_prefix`, or Terway's `enable_ip_prefix` (the same meaning; both
    /// given must agree). Prefix mode is IPv4 only in this version, so it
    /// is refused with dual stack, the message naming both keys.
    fn ip_prefix(&self, ip_stack: IpStack) -> Result<bool, ConfigError> {
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
        match on {
            Some((key, true)) if ip_stack == IpStack::Dual => Err(invalid(
                key,
                &Value::Bool(true),
                "false with `ip_stack` \"dual\": IPv4 prefixes are IPv4 only; set `ip_stack` to \"ipv4\" or turn the prefix mode off",
            )),
            Some((_, b)) => Ok(b),
            None => Ok(false),
        }
    }
}
