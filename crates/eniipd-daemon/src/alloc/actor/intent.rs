//! What an `alloc` may ask beyond an address ([`Intent`]: a pod's
//! annotations, SPEC section 6a), checked before anything changes. Pure:
//! the node's settings and what the owner holds or waits for in, the
//! reason for a refusal out.
//!
//! Refused: a vswitch that is not one of this node's (`vswitches` of its
//! zone, or the instance's own), a stick time over `max_ip_stick_time`,
//! and an ask that the owner's allocation (or its alloc still waiting)
//! contradicts: another vswitch, or IPv4 only while it holds an IPv6.
//! What the allocation does not contradict is answered as it is (an
//! `alloc` that asks nothing gets the same reply again), and a stick time
//! asked is the newest. Every message begins with the argument
//! (`vswitch=...`), as eniip-cni expects to name the pod's annotation.

use std::time::Duration;

use eniip_protocol::core::{
    Allocation, Intent, ARG_SECURITY_GROUPS, ARG_STACK, ARG_STICK, ARG_VSWITCH,
};

/// What the owner has while it asks.
#[derive(Debug, Clone, Copy)]
pub(super) enum Has<'a> {
    /// Nothing held or asked.
    Nothing,
    /// An allocation, on an ENI of this vswitch.
    Held(&'a Allocation, &'a str),
    /// An alloc waiting, that asked this.
    Waiting(&'a Intent),
}

/// Why `intent` is refused, if it is.
pub(super) fn refusal(
    owner: &str,
    intent: &Intent,
    vswitches: &[String],
    max_stick: Duration,
    has: Has<'_>,
) -> Option<String> {
    if let Some(v) = &intent.vswitch {
        if !vswitches.contains(v) {
            return Some(format!(
                "{ARG_VSWITCH}={v} is not one of this node's vswitches ({}; eni.json's vswitches for its zone)",
                vswitches.join(", ")
            ));
        }
    }
    if let Some(sgs) = &intent.security_groups {
        // No ENIs by security-group set yet: a pod's own groups cannot be
        // served, so the ask is refused rather than answered from an ENI
        // of other groups.
        return Some(format!(
            "{ARG_SECURITY_GROUPS}={sgs}: this node serves no security groups per pod (pod_security_groups is not set in eni.json)"
        ));
    }
    if let Some(s) = intent.stick_s.filter(|s| *s > max_stick.as_secs()) {
        return Some(format!(
            "{ARG_STICK}={s} is more than this node allows (max_ip_stick_time {} s)",
            max_stick.as_secs()
        ));
    }
    match has {
        Has::Nothing => None,
        Has::Held(a, on) => {
            if let Some(v) = intent.vswitch.as_deref().filter(|v| *v != on) {
                return Some(format!(
                    "{ARG_VSWITCH}={v}: {owner} holds {} on {on}; release it first",
                    a.ip
                ));
            }
            match a.owner_ipv6() {
                Some(v6) if intent.ipv4_only => Some(format!(
                    "{ARG_STACK}=ipv4: {owner} holds {} with IPv6 {v6}; release it first",
                    a.ip
                )),
                _ => None,
            }
        }
        Has::Waiting(w) => {
            if let Some(v) = intent
                .vswitch
                .as_deref()
                .filter(|v| w.vswitch.as_deref() != Some(*v))
            {
                return Some(format!(
                    "{ARG_VSWITCH}={v}: an alloc of {owner} asking {} is waiting",
                    w.vswitch
                        .as_deref()
                        .map_or("no vswitch".to_string(), |w| format!("vswitch {w}"))
                ));
            }
            (intent.ipv4_only && !w.ipv4_only).then(|| {
                format!("{ARG_STACK}=ipv4: an alloc of {owner} asking IPv6 too is waiting")
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eniip_protocol::core::Owner;

    fn node() -> Vec<String> {
        vec!["vsw-a".into(), "vsw-b".into()]
    }

    const HOUR: Duration = Duration::from_secs(3600);

    fn on(v: &str) -> Intent {
        Intent {
            vswitch: Some(v.into()),
            ..Intent::default()
        }
    }

    fn held(v6: bool, ipv4_only: bool) -> Allocation {
        Allocation {
            owner: Owner::parse("ns/db-0").unwrap(),
            sandbox: None,
            ip: "10.0.0.5".parse().unwrap(),
            ipv6: v6.then(|| "fd00::5".parse().unwrap()),
            ipv6_prefix: None,
            eni: "eni-1".into(),
            since_ms: 0,
            gen: eniip_protocol::core::Generation::NONE,
            attach: None,
            intent: Intent {
                ipv4_only,
                ..Intent::default()
            },
        }
    }

    fn refused(intent: &Intent, has: Has<'_>) -> Option<String> {
        refusal("ns/db-0", intent, &node(), HOUR, has)
    }

    #[test]
    fn only_this_nodes_vswitches_and_stick_times_within_the_maximum() {
        assert_eq!(refused(&Intent::default(), Has::Nothing), None);
        assert_eq!(refused(&on("vsw-b"), Has::Nothing), None);
        let why = refused(&on("vsw-zz"), Has::Nothing).unwrap();
        assert_eq!(
            why,
            "vswitch=vsw-zz is not one of this node's vswitches (vsw-a, vsw-b; eni.json's vswitches for its zone)"
        );
        let stick = |s| Intent {
            stick_s: Some(s),
            ..Intent::default()
        };
        assert_eq!(refused(&stick(3600), Has::Nothing), None);
        let why = refused(&stick(3601), Has::Nothing).unwrap();
        assert!(why.starts_with("ip-stick-time=3601 is more than"), "{why}");
        assert!(why.contains("max_ip_stick_time 3600 s"), "{why}");
        let none = refusal("o", &stick(1), &node(), Duration::ZERO, Has::Nothing);
        assert!(none.is_some(), "a maximum of 0 refuses every stick time");
        assert_eq!(
            refusal("o", &stick(0), &node(), Duration::ZERO, Has::Nothing),
            None
        );
    }

    #[test]
    fn what_the_owner_holds_may_not_be_contradicted() {
        let a = held(true, false);
        // Asking nothing, or what it has: the same reply.
        assert_eq!(refused(&Intent::default(), Has::Held(&a, "vsw-a")), None);
        assert_eq!(refused(&on("vsw-a"), Has::Held(&a, "vsw-a")), None);
        let why = refused(&on("vsw-b"), Has::Held(&a, "vsw-a")).unwrap();
        assert_eq!(
            why,
            "vswitch=vsw-b: ns/db-0 holds 10.0.0.5 on vsw-a; release it first"
        );
        let only4 = Intent {
            ipv4_only: true,
            ..Intent::default()
        };
        let why = refused(&only4, Has::Held(&a, "vsw-a")).unwrap();
        assert!(
            why.starts_with("ip-stack=ipv4: ns/db-0 holds 10.0.0.5 with IPv6 fd00::5"),
            "{why}"
        );
        // Held IPv4 only already, or on an IPv4 node: nothing contradicts.
        assert_eq!(refused(&only4, Has::Held(&held(true, true), "vsw-a")), None);
        assert_eq!(
            refused(&only4, Has::Held(&held(false, false), "vsw-a")),
            None
        );
        // A waiting alloc is held to what it asked.
        assert_eq!(
            refused(&Intent::default(), Has::Waiting(&on("vsw-a"))),
            None
        );
        assert_eq!(refused(&on("vsw-a"), Has::Waiting(&on("vsw-a"))), None);
        let why = refused(&on("vsw-a"), Has::Waiting(&Intent::default())).unwrap();
        assert!(
            why.starts_with("vswitch=vsw-a: an alloc of ns/db-0 asking no vswitch"),
            "{why}"
        );
        assert!(refused(&only4, Has::Waiting(&Intent::default())).is_some());
        assert_eq!(refused(&only4, Has::Waiting(&only4)), None);
    }

    #[test]
    fn security_groups_asked_are_refused_naming_the_key() {
        let asks = Intent {
            security_groups: Some(eniip_protocol::core::SecurityGroupSet::parse("sg-a").unwrap()),
            ..Intent::default()
        };
        let why = refusal("o", &asks, &node(), HOUR, Has::Nothing).unwrap();
        assert!(why.starts_with("security-groups=sg-a: "), "{why}");
        assert!(why.contains("pod_security_groups"), "{why}");
    }
}
