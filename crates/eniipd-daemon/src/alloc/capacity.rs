//! Capacity math (SPEC section 3), following Terway: usable ENIs =
//! floor(EniQuantity x eni_cap_ratio) + eni_cap_shift - 1 (the primary ENI is
//! not usable), capped by `max_eni`; IPs per ENI = EniPrivateIpAddressQuantity
//! (dual stack: the smaller of it and EniIpv6AddressQuantity); capacity =
//! usable ENIs x IPs per ENI. `min_eni` sets the min pool; pool sizes are
//! clamped to capacity and min <= max.
//!
//! Prefix mode (`ip_prefix`): every IPv4 slot of an ENI but its primary's
//! holds a /28, so IPs per ENI = (EniPrivateIpAddressQuantity - 1) x 16 + 1
//! (the issue's (quota - 1) x 16 prefix addresses, plus the primary, which
//! SPEC section 3 makes a pool IP like any other). In dual stack the
//! IPv6 come from the ENI's /80 (issue 32), so EniIpv6AddressQuantity no
//! longer caps the IPs per ENI; an ENI that falls back to single IPv6
//! addresses is held within it by the planner instead.

use crate::config::{Config, IpStack};
use eniip_cloud::InstanceTypeLimits;

/// The numbers the allocator plans with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Capacity {
    /// ENIs eniipd may hold (the primary ENI excluded).
    pub(crate) usable_enis: usize,
    /// Pool IPs per ENI, its primary IP included.
    pub(crate) ips_per_eni: usize,
    /// IPv4 slots per ENI beside its primary's (each holds one secondary
    /// address, or one /28 in prefix mode).
    pub(crate) slots_per_eni: usize,
    /// IPv6 slots per ENI (EniIpv6AddressQuantity; 0 in IPv4 stack): what
    /// an ENI with single IPv6 addresses holds at most (a /80 takes one).
    pub(crate) ipv6_per_eni: usize,
    /// Prefix mode: new addresses come as /28s where they can.
    pub(crate) prefix_mode: bool,
    /// `usable_enis * ips_per_eni`.
    pub(crate) total_ips: usize,
    /// Idle IPs to keep at least.
    pub(crate) min_idle: usize,
    /// Idle IPs to keep at most.
    pub(crate) max_idle: usize,
}

/// Pool-size inputs that SIGHUP may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolSizes {
    /// `min_pool_size`
    pub(crate) min_pool_size: usize,
    /// `max_pool_size`
    pub(crate) max_pool_size: usize,
    /// `min_eni`
    pub(crate) min_eni: usize,
}

impl PoolSizes {
    /// The pool-size keys of a config.
    pub(crate) fn of(cfg: &Config) -> PoolSizes {
        PoolSizes {
            min_pool_size: cfg.min_pool_size,
            max_pool_size: cfg.max_pool_size,
            min_eni: cfg.min_eni,
        }
    }
}

/// The effective configuration with the pool sizes in force: `config`
/// shows what the allocator plans with, not what the file asked.
pub(crate) fn effective_view(cfg: &Config, cap: &Capacity) -> Vec<(String, String)> {
    let mut v = cfg.effective();
    for (k, val) in &mut v {
        match k.as_str() {
            "min_pool_size" => *val = cap.min_idle.to_string(),
            "max_pool_size" => *val = cap.max_idle.to_string(),
            _ => {}
        }
    }
    v
}

/// Keys SIGHUP applies; a change to any other needs a restart.
pub(crate) const RELOADABLE: [&str; 3] = ["min_pool_size", "max_pool_size", "min_eni"];

/// Computes capacity; `notes` receives one line per adjustment made, for the
/// start-up log (Terway logs the same clamps).
pub(crate) fn compute(
    limits: &InstanceTypeLimits,
    cfg: &Config,
    sizes: PoolSizes,
    notes: &mut Vec<String>,
) -> Capacity {
    let scaled = (f64::from(limits.eni_quantity) * cfg.eni_cap_ratio).floor() as i64;
    let mut usable = (scaled + cfg.eni_cap_shift - 1).max(0) as usize;
    if cfg.max_eni != 0 && cfg.max_eni < usable {
        notes.push(format!(
            "max_eni {} caps usable ENIs (instance allows {usable})",
            cfg.max_eni
        ));
        usable = cfg.max_eni;
    }
    let dual = cfg.ip_stack == IpStack::Dual;
    let mut ips_per_eni = limits.ipv4_per_eni as usize;
    if dual && !cfg.ip_prefix {
        ips_per_eni = ips_per_eni.min(limits.ipv6_per_eni as usize);
    }
    let slots_per_eni = ips_per_eni.saturating_sub(1);
    if cfg.ip_prefix {
        ips_per_eni = super::prefix_mode::ips_per_eni(ips_per_eni) + 1;
    }
    let ipv6_per_eni = if dual {
        limits.ipv6_per_eni as usize
    } else {
        0
    };
    let total = usable * ips_per_eni;
    let mut min_idle = if sizes.min_eni != 0 {
        sizes.min_eni * ips_per_eni
    } else {
        sizes.min_pool_size
    };
    let mut max_idle = sizes.max_pool_size;
    let min_key = if sizes.min_eni != 0 {
        "min_eni"
    } else {
        "min_pool_size"
    };
    if min_idle > total {
        notes.push(format!(
            "{min_key} asks for {min_idle} idle addresses but the capacity is {total}: min_pool_size clamped to {total}"
        ));
        min_idle = total;
    }
    if max_idle > total {
        notes.push(format!(
            "max_pool_size {max_idle} exceeds the capacity {total}: clamped to {total}"
        ));
        max_idle = total;
    }
    if min_idle > max_idle {
        notes.push(format!(
            "min_pool_size {min_idle} exceeds max_pool_size {max_idle}: max_pool_size raised to {min_idle}"
        ));
        max_idle = min_idle;
    }
    Capacity {
        usable_enis: usable,
        ips_per_eni,
        slots_per_eni,
        ipv6_per_eni,
        prefix_mode: cfg.ip_prefix,
        total_ips: total,
        min_idle,
        max_idle,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RawConfig;

    fn limits(enis: u32, v4: u32, v6: u32) -> InstanceTypeLimits {
        InstanceTypeLimits {
            instance_type: "t".into(),
            eni_quantity: enis,
            ipv4_per_eni: v4,
            ipv6_per_eni: v6,
        }
    }

    fn cfg(json: &str) -> Config {
        RawConfig::parse(json).unwrap().validate().unwrap()
    }

    #[test]
    fn terway_formula() {
        let c = cfg("{}");
        let cap = compute(&limits(4, 15, 15), &c, PoolSizes::of(&c), &mut Vec::new());
        assert_eq!(cap.usable_enis, 3);
        assert_eq!(cap.ips_per_eni, 15);
        assert_eq!(cap.total_ips, 45);
        assert_eq!((cap.min_idle, cap.max_idle), (0, 5));
    }

    #[test]
    fn ratio_shift_and_max_eni() {
        let c = cfg(r#"{"eni_cap_ratio": 0.5, "eni_cap_shift": 1}"#);
        let cap = compute(&limits(8, 30, 30), &c, PoolSizes::of(&c), &mut Vec::new());
        assert_eq!(cap.usable_enis, 4); // floor(8*0.5)+1-1
        let c = cfg(r#"{"max_eni": 2}"#);
        let mut notes = Vec::new();
        let cap = compute(&limits(8, 30, 30), &c, PoolSizes::of(&c), &mut notes);
        assert_eq!(cap.usable_enis, 2);
        assert_eq!(cap.total_ips, 60);
        assert_eq!(notes.len(), 1);
        let c = cfg(r#"{"eni_cap_shift": -5}"#);
        assert_eq!(
            compute(&limits(3, 6, 6), &c, PoolSizes::of(&c), &mut Vec::new()).total_ips,
            0
        );
    }

    #[test]
    fn dual_stack_takes_the_smaller_per_eni_count() {
        let c = cfg(r#"{"ip_stack": "dual"}"#);
        let cap = compute(&limits(3, 10, 1), &c, PoolSizes::of(&c), &mut Vec::new());
        assert_eq!(cap.ips_per_eni, 1);
        assert_eq!(cap.total_ips, 2);
    }

    #[test]
    fn prefix_mode_holds_a_slash_28_per_slot_plus_the_primary() {
        // ecs.g7.large: 3 ENIs, 6 IPv4 each.
        let c = cfg(r#"{"ip_prefix": true, "max_pool_size": 1000}"#);
        let cap = compute(&limits(3, 6, 6), &c, PoolSizes::of(&c), &mut Vec::new());
        assert_eq!((cap.usable_enis, cap.slots_per_eni), (2, 5));
        assert_eq!(cap.ips_per_eni, 81);
        assert_eq!(cap.total_ips, 162);
        assert_eq!(cap.max_idle, 162, "pool sizes count addresses");
        assert!(cap.prefix_mode);
    }

    #[test]
    fn dual_stack_prefix_mode_is_not_capped_by_the_ipv6_quota() {
        // ecs.g7.4xlarge: 8 ENIs, 30 IPv4 and 30 IPv6 per ENI; a type
        // with fewer IPv6 than IPv4 caps dual stack without prefixes only.
        let c = cfg(r#"{"ip_stack": "dual", "ip_prefix": true, "max_pool_size": 5000}"#);
        let cap = compute(&limits(8, 30, 10), &c, PoolSizes::of(&c), &mut Vec::new());
        assert_eq!((cap.slots_per_eni, cap.ips_per_eni), (29, 29 * 16 + 1));
        assert_eq!(cap.total_ips, 7 * 465);
        assert_eq!(cap.ipv6_per_eni, 10);
        let c = cfg(r#"{"ip_stack": "dual"}"#);
        let cap = compute(&limits(8, 30, 10), &c, PoolSizes::of(&c), &mut Vec::new());
        assert_eq!((cap.slots_per_eni, cap.ips_per_eni), (9, 10));
        let c = cfg(r#"{"ip_prefix": true}"#);
        let cap = compute(&limits(8, 30, 10), &c, PoolSizes::of(&c), &mut Vec::new());
        assert_eq!(cap.ipv6_per_eni, 0, "IPv4 stack");
    }

    #[test]
    fn pool_sizes_clamp() {
        let c = cfg(r#"{"min_eni": 2, "max_pool_size": 3}"#);
        let mut notes = Vec::new();
        let cap = compute(&limits(4, 15, 15), &c, PoolSizes::of(&c), &mut notes);
        assert_eq!(cap.min_idle, 30);
        assert_eq!(cap.max_idle, 30, "max raised to min");
        let c = cfg(r#"{"min_pool_size": 100, "max_pool_size": 200}"#);
        let cap = compute(&limits(4, 15, 15), &c, PoolSizes::of(&c), &mut Vec::new());
        assert_eq!((cap.min_idle, cap.max_idle), (45, 45));
    }
}
