//! The store's edge: its on-disk records to and from core's types. The
//! rest of the daemon hands the journal a [`core::Allocation`] or a
//! [`core::Hold`] and gets them back from the loaded state; only the store
//! knows how they are written (owners as plain strings, `at_ms`,
//! `last_owner`), so the files stay as they are whatever core's types
//! become.
//!
//! Loading is the one lossy direction: a record whose owner is not one
//! eniipd accepts cannot become a core value, and is the caller's to drop
//! (the store never makes such a record itself).

use eniip_protocol::core::{self, Owner, SandboxId};

use super::record::{Allocation, Asked, Hold, Record};

impl Record {
    /// `a.owner` holds `a` (any hold on its address ends).
    pub(crate) fn alloc(a: &core::Allocation) -> Record {
        Record::Alloc(Allocation {
            owner: a.owner.to_string(),
            sandbox: a.sandbox.as_ref().map(|s| s.to_string()),
            ipv4: a.ip,
            ipv6: a.ipv6,
            ipv6_prefix: a.ipv6_prefix.map(|p| p.to_string()),
            eni: a.eni.clone(),
            at_ms: a.since_ms,
            gen: a.gen.get(),
            attach: a.attach.clone(),
            asked: Asked {
                vswitch: a.intent.vswitch.clone(),
                stick_s: a.intent.stick_s,
                ipv4_only: a.intent.ipv4_only,
                security_groups: a.intent.security_groups.as_ref().map(|s| s.ids().to_vec()),
            },
        })
    }

    /// eniipd gave `eni` the security groups `set` (`None`: it is no
    /// longer managed).
    pub(crate) fn eni_set(eni: &str, set: Option<&core::SecurityGroupSet>) -> Record {
        Record::EniSet {
            eni: eni.to_string(),
            security_groups: set.map(|s| s.ids().to_vec()),
        }
    }

    /// `owner`'s allocation ends; `hold`, if any, starts on its address.
    pub(crate) fn release(owner: &Owner, hold: Option<&core::Hold>) -> Record {
        Record::Release {
            owner: owner.to_string(),
            hold: hold.map(Hold::of),
        }
    }

    /// A hold nobody released (the quarantine after a state rebuild): the
    /// release of no owner, carrying it.
    pub(crate) fn quarantine(hold: &core::Hold) -> Record {
        Record::Release {
            owner: String::new(),
            hold: Some(Hold::of(hold)),
        }
    }
}

/// The /80 a recorded IPv6 was carved from: read liberally, a value this
/// build cannot read, or one that does not hold the address, is dropped
/// (the address itself is kept).
fn carved_from(ipv6: Option<std::net::Ipv6Addr>, p: Option<&str>) -> Option<core::Ipv6Prefix> {
    let p: core::Ipv6Prefix = p?.parse().ok()?;
    ipv6.filter(|b| p.contains(*b)).map(|_| p)
}

impl Allocation {
    /// The allocation as the rest of the daemon knows it; `None` when the
    /// owner is not a valid one. A sandbox that is not valid is dropped
    /// (the allocation is kept without it).
    pub(crate) fn to_core(&self) -> Option<core::Allocation> {
        Some(core::Allocation {
            owner: Owner::parse(&self.owner).ok()?,
            sandbox: self
                .sandbox
                .as_deref()
                .and_then(|s| SandboxId::parse(s).ok()),
            ip: self.ipv4,
            ipv6: self.ipv6,
            ipv6_prefix: carved_from(self.ipv6, self.ipv6_prefix.as_deref()),
            eni: self.eni.clone(),
            since_ms: self.at_ms,
            gen: core::Generation::from_u64(self.gen),
            attach: self.attach.clone(),
            intent: core::Intent {
                vswitch: self.asked.vswitch.clone(),
                stick_s: self.asked.stick_s,
                ipv4_only: self.asked.ipv4_only,
                // A set this build cannot read is dropped (read liberally).
                security_groups: self.asked.security_groups.as_ref().and_then(|g| {
                    core::SecurityGroupSet::from_ids(g.iter().map(String::as_str)).ok()
                }),
            },
        })
    }
}

impl Hold {
    fn of(h: &core::Hold) -> Hold {
        Hold {
            ipv4: h.ip,
            ipv6: h.ipv6,
            ipv6_prefix: h.ipv6_prefix.map(|p| p.to_string()),
            eni: h.eni.clone(),
            last_owner: h.last_owner.as_ref().map(|o| o.to_string()),
            reserved_until_ms: h.reserved_until_ms,
            cooling_until_ms: h.cooling_until_ms,
        }
    }

    /// The hold as the rest of the daemon knows it; `None` when its last
    /// owner is not a valid one (no owner at all is a quarantine).
    pub(crate) fn to_core(&self) -> Option<core::Hold> {
        let last_owner = match &self.last_owner {
            Some(o) => Some(Owner::parse(o).ok()?),
            None => None,
        };
        Some(core::Hold {
            ip: self.ipv4,
            ipv6: self.ipv6,
            ipv6_prefix: carved_from(self.ipv6, self.ipv6_prefix.as_deref()),
            eni: self.eni.clone(),
            last_owner,
            reserved_until_ms: self.reserved_until_ms,
            cooling_until_ms: self.cooling_until_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allocation() -> core::Allocation {
        core::Allocation {
            owner: Owner::parse("ns/pod").unwrap(),
            sandbox: Some(SandboxId::parse("sb1").unwrap()),
            ip: "10.0.0.7".parse().unwrap(),
            ipv6: Some("2408::7".parse().unwrap()),
            ipv6_prefix: None,
            eni: "eni-1".into(),
            since_ms: 42,
            gen: eniip_protocol::core::Generation::NONE,
            attach: None,
            intent: core::Intent::default(),
        }
    }

    #[test]
    fn an_allocation_round_trips_through_its_record() {
        let a = allocation();
        let Record::Alloc(rec) = Record::alloc(&a) else {
            panic!("an alloc record");
        };
        assert_eq!(rec.owner, "ns/pod");
        assert_eq!(rec.sandbox.as_deref(), Some("sb1"));
        assert_eq!(rec.at_ms, 42);
        assert_eq!(rec.to_core(), Some(a));
    }

    #[test]
    fn what_an_alloc_asked_round_trips_and_asking_nothing_writes_as_before() {
        let mut a = allocation();
        let plain = serde_json::to_string(&Record::alloc(&a)).unwrap();
        for key in ["vswitch", "stick_s", "ipv4_only", "security_groups"] {
            assert!(!plain.contains(key), "{plain}");
        }
        a.intent = core::Intent {
            vswitch: Some("vsw-b".into()),
            stick_s: Some(600),
            ipv4_only: true,
            security_groups: core::SecurityGroupSet::from_ids(["sg-b", "sg-a"]).ok(),
        };
        let text = serde_json::to_string(&Record::alloc(&a)).unwrap();
        assert!(
            text.contains(r#""vswitch":"vsw-b","stick_s":600,"ipv4_only":true,"security_groups":["sg-a","sg-b"]"#),
            "{text}"
        );
        let Record::Alloc(back) = serde_json::from_str::<Record>(&text).unwrap() else {
            panic!("an alloc record");
        };
        assert_eq!(back.to_core(), Some(a));
        // A record of an older eniipd (no such keys) asks nothing.
        let Record::Alloc(old) = serde_json::from_str::<Record>(&plain).unwrap() else {
            panic!("an alloc record");
        };
        assert!(old.to_core().unwrap().intent.is_empty());
    }

    #[test]
    fn a_record_with_an_invalid_owner_is_not_an_allocation() {
        let Record::Alloc(mut rec) = Record::alloc(&allocation()) else {
            panic!("an alloc record");
        };
        rec.owner = String::new();
        assert_eq!(rec.to_core(), None);
        // An invalid sandbox only loses the sandbox.
        rec.owner = "ns/pod".into();
        rec.sandbox = Some(String::new());
        assert_eq!(rec.to_core().unwrap().sandbox, None);
    }

    #[test]
    fn holds_round_trip_and_an_empty_release_is_a_quarantine() {
        let h = core::Hold {
            ip: "10.0.0.7".parse().unwrap(),
            ipv6: None,
            ipv6_prefix: None,
            eni: "eni-1".into(),
            last_owner: Some(Owner::parse("ns/pod").unwrap()),
            reserved_until_ms: 5,
            cooling_until_ms: 9,
        };
        let owner = Owner::parse("ns/pod").unwrap();
        let Record::Release {
            owner: o,
            hold: Some(rec),
        } = Record::release(&owner, Some(&h))
        else {
            panic!("a release with its hold");
        };
        assert_eq!(o, "ns/pod");
        assert_eq!(rec.to_core(), Some(h.clone()));
        let q = core::Hold {
            last_owner: None,
            ..h.clone()
        };
        let Record::Release { owner, hold } = Record::quarantine(&q) else {
            panic!("a release");
        };
        assert!(owner.is_empty());
        assert_eq!(hold.and_then(|h| h.to_core()), Some(q));
        let bad = Hold {
            last_owner: Some(String::new()),
            ..Hold::of(&h)
        };
        assert_eq!(bad.to_core(), None);
    }

    #[test]
    fn a_carved_ipv6_keeps_its_80_and_an_unreadable_80_is_dropped_alone() {
        let p: core::Ipv6Prefix = "2408:0:0:0:9::/80".parse().unwrap();
        let a = core::Allocation {
            ipv6: Some("2408::9:0:0:7".parse().unwrap()),
            ipv6_prefix: Some(p),
            ..allocation()
        };
        let Record::Alloc(mut rec) = Record::alloc(&a) else {
            panic!("an alloc record");
        };
        assert_eq!(rec.ipv6_prefix.as_deref(), Some("2408::9:0:0:0/80"));
        let json = serde_json::to_string(&rec).unwrap();
        assert!(
            json.contains(r#""ipv6_prefix":"2408::9:0:0:0/80""#),
            "{json}"
        );
        assert_eq!(rec.to_core(), Some(a.clone()));
        // Without one, the field is not written (older files read alike).
        let Record::Alloc(plain) = Record::alloc(&allocation()) else {
            panic!("an alloc record");
        };
        assert!(!serde_json::to_string(&plain)
            .unwrap()
            .contains("ipv6_prefix"));
        for bad in ["2408::/64", "nonsense", "2408:0:0:0:8::/80"] {
            rec.ipv6_prefix = Some(bad.into());
            let back = rec.to_core().unwrap();
            assert_eq!((back.ipv6, back.ipv6_prefix), (a.ipv6, None), "{bad}");
        }
    }
}
