//! The effective configuration as `key=value` lines, secrets masked.

use super::*;

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
                .map(|k| crate::util::mask(&k))
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
        push("max_ip_stick_time", dur(self.max_ip_stick_time));
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
        push("start_timeout", dur(self.start_timeout));
        push("max_connections", self.max_connections.to_string());
        push(
            "metrics_listen",
            self.metrics_listen
                .map(|a| a.to_string())
                .unwrap_or_else(|| "-".into()),
        );
        push("signature_version", self.signature_version.as_str().into());
        push("ip_prefix", self.ip_prefix.to_string());
        for (k, val) in self.cni.effective() {
            push(k, val);
        }
        v
    }
}
