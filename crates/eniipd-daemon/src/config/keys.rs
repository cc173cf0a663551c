//! The keys a config file may hold: eniipd's own, Terway's that eniipd
//! ignores, and how close an unknown key is to a known one (a typo of a
//! known key silently falls back to its default otherwise).

/// Terway keys that eniipd accepts but does not use (one warning names them).
pub(super) const TERWAY_IGNORED_KEYS: &[&str] = &[
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

/// Every key eniipd reads (the fields of `RawConfig`).
pub(crate) const KNOWN_KEYS: &[&str] = &[
    "access_key",
    "access_secret",
    "vswitches",
    "security_group",
    "security_groups",
    "min_pool_size",
    "max_pool_size",
    "min_eni",
    "max_eni",
    "eni_cap_ratio",
    "eni_cap_shift",
    "vswitch_selection_policy",
    "eni_tags",
    "ip_stack",
    "region_id",
    "instance_id",
    "ecs_endpoint",
    "vpc_endpoint",
    "metadata_endpoint",
    "ram_role",
    "socket_path",
    "socket_mode",
    "socket_group",
    "allowed_uids",
    "state_dir",
    "ip_stick_time",
    "max_ip_stick_time",
    "ip_cooldown",
    "alloc_timeout",
    "aggregation_window_ms",
    "max_ips_per_call",
    "max_concurrent_eni_ops",
    "pool_check_interval",
    "start_timeout",
    "max_connections",
    "metrics_listen",
    "signature_version",
    "ip_prefix",
    "enable_ip_prefix",
    "sandbox_reap_interval",
    "sandbox_reap_grace",
    "adaptive_pool",
    "cni_conflist",
    "cni_conflist_source",
    "pod_security_groups",
    "sg_set_idle_s",
    "exhaustion_warn_s",
];

/// The known key an unknown `key` is a near miss of: the same but for
/// case and `-`/`_`, or within 2 edits (1 for keys of up to 6 letters, so
/// short Terway keys are not taken for typos). Terway's own keys are never
/// near misses: they are what they say.
pub(super) fn near_miss(key: &str) -> Option<&'static str> {
    if TERWAY_IGNORED_KEYS.contains(&key) || KNOWN_KEYS.contains(&key) {
        return None;
    }
    let folded = key.to_ascii_lowercase().replace('-', "_");
    let limit = if key.len() <= 6 { 1 } else { 2 };
    KNOWN_KEYS
        .iter()
        .map(|k| (eniip_util::spelling::edit_distance(&folded, k), *k))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, k)| k)
}

impl super::RawConfig {
    /// Warnings for keys that are accepted but ignored, or unknown.
    pub(crate) fn warnings(&self) -> Vec<String> {
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
            match near_miss(k) {
                Some(known) => w.push(format!(
                    "unknown config key `{k}` is ignored: did you mean `{known}`? (`{known}` keeps its default)"
                )),
                None => w.push(format!("unknown config key `{k}` is ignored")),
            }
        }
        w
    }

    /// Unknown keys that are near misses of known ones, with the key each
    /// resembles: errors for `--check-config` (a typo would silently fall
    /// back to the default).
    pub(crate) fn near_misses(&self) -> Vec<(String, &'static str)> {
        self.other
            .keys()
            .filter_map(|k| near_miss(k).map(|known| (k.clone(), known)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_of_known_keys_are_named_and_terway_keys_are_not() {
        for (typo, key) in [
            ("min_pool_sise", "min_pool_size"),
            ("max_pool_szie", "max_pool_size"),
            ("Min_Pool_Size", "min_pool_size"),
            ("socket-group", "socket_group"),
            ("vswitch", "vswitches"),
            ("securty_groups", "security_groups"),
            ("ip_stak", "ip_stack"),
        ] {
            assert_eq!(near_miss(typo), Some(key), "{typo}");
        }
        for k in TERWAY_IGNORED_KEYS.iter().chain(KNOWN_KEYS) {
            assert_eq!(near_miss(k), None, "{k}");
        }
        for k in ["frobnicate", "prefix2", "colour", "cluster_id"] {
            assert_eq!(near_miss(k), None, "{k}");
        }
    }

    #[test]
    fn every_known_key_is_a_field() {
        for k in KNOWN_KEYS {
            let raw = super::super::RawConfig::parse(&format!("{{\"{k}\": null}}")).unwrap();
            assert!(raw.other.is_empty(), "{k} is not a RawConfig field");
        }
    }
}
