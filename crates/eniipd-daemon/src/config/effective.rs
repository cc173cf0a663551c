//! The effective configuration as `key=value` lines, secrets masked.

use super::*;
use eniip_util::mask;

impl Config {
    /// The effective configuration as `key=value` lines, secrets masked,
    /// for `--check-config` and the `config` command.
    pub fn effective(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = Vec::new();
        let mut push = |k: &str, val: String| v.push((k.to_string(), val));
        push("access_key", or_dash(self.access_key.as_deref().map(mask)));
        push(
            "access_secret",
            or_dash(self.access_secret.as_ref().map(|_| "***")),
        );
        let vswitches = self.vswitches.iter();
        push(
            "vswitches",
            list(vswitches.map(|(z, ids)| format!("{z}:{}", ids.join("+")))),
        );
        push(
            "security_groups",
            list(self.security_groups.iter().cloned()),
        );
        push("min_pool_size", self.min_pool_size.to_string());
        push("max_pool_size", self.max_pool_size.to_string());
        push("min_eni", self.min_eni.to_string());
        push("max_eni", self.max_eni.to_string());
        push("eni_cap_ratio", self.eni_cap_ratio.to_string());
        push("eni_cap_shift", self.eni_cap_shift.to_string());
        let policy = match self.vswitch_selection_policy {
            VSwitchPolicy::Random => "random",
            VSwitchPolicy::Ordered => "ordered",
        };
        push("vswitch_selection_policy", policy.into());
        push(
            "eni_tags",
            list(self.eni_tags.iter().map(|(k, v)| format!("{k}:{v}"))),
        );
        let stack = match self.ip_stack {
            IpStack::Ipv4 => "ipv4",
            IpStack::Dual => "dual",
        };
        push("ip_stack", stack.into());
        push("region_id", or_dash(self.region_id.as_ref()));
        push("instance_id", or_dash(self.instance_id.as_ref()));
        push("ecs_endpoint", or_dash(self.ecs_endpoint.as_ref()));
        push("vpc_endpoint", or_dash(self.vpc_endpoint.as_ref()));
        push("metadata_endpoint", self.metadata_endpoint.clone());
        push("ram_role", or_dash(self.ram_role.as_ref()));
        push("socket_path", self.socket_path.display().to_string());
        push("socket_mode", format!("{:04o}", self.socket_mode));
        push("socket_group", or_dash(self.socket_group.as_ref()));
        push(
            "allowed_uids",
            list(self.allowed_uids.iter().map(u32::to_string)),
        );
        push("state_dir", self.state_dir.display().to_string());
        push("ip_stick_time", secs(self.ip_stick_time));
        push("max_ip_stick_time", secs(self.max_ip_stick_time));
        push("ip_cooldown", secs(self.ip_cooldown));
        push("alloc_timeout", secs(self.alloc_timeout));
        let window = self.aggregation_window.as_millis();
        push("aggregation_window_ms", window.to_string());
        push("max_ips_per_call", self.max_ips_per_call.to_string());
        let ops = self.max_concurrent_eni_ops;
        push("max_concurrent_eni_ops", ops.to_string());
        push("pool_check_interval", secs(self.pool_check_interval));
        push("start_timeout", secs(self.start_timeout));
        push("max_connections", self.max_connections.to_string());
        push("metrics_listen", or_dash(self.metrics_listen));
        push("signature_version", self.signature_version.as_str().into());
        push("ip_prefix", self.ip_prefix.to_string());
        for (k, val) in self.sg.effective() {
            push(k, val);
        }
        push("adaptive_pool", self.adaptive_pool.to_string());
        for (k, val) in self.cni.effective() {
            push(k, val);
        }
        push("exhaustion_warn_s", secs(self.exhaustion_warn));
        v
    }
}

/// Whole seconds.
fn secs(d: Duration) -> String {
    d.as_secs().to_string()
}

/// A value, or `-` for none.
pub(super) fn or_dash(v: Option<impl ToString>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

/// The items joined by commas, or `-` for none.
fn list(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    if items.is_empty() {
        "-".into()
    } else {
        items.join(",")
    }
}
