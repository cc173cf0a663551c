//! A security-group set ([`SecurityGroupSet`]): what a pod asks with
//! `eniipd/security-groups` and what an ENI carries. A set: order and
//! repeats do not matter, so it is kept sorted and without repeats, and
//! two sets are equal exactly when they hold the same groups.

use std::fmt;

use super::AllocError;

/// `security-groups=SG,...`: an [`Intent`](super::Intent)'s own set.
pub const ARG_SECURITY_GROUPS: &str = "security-groups";

/// At most this many groups in a set (the service's limit per ENI).
pub const MAX_SECURITY_GROUPS: usize = 5;

/// 1 to [`MAX_SECURITY_GROUPS`] security group ids, sorted, no repeats.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SecurityGroupSet(Vec<String>);

impl SecurityGroupSet {
    /// The set of `ids` (any order, repeats dropped); `None` when it is
    /// empty or holds more than [`MAX_SECURITY_GROUPS`].
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(ids: I) -> Option<SecurityGroupSet> {
        let mut v: Vec<String> = ids.into_iter().map(Into::into).collect();
        v.sort();
        v.dedup();
        (!v.is_empty() && v.len() <= MAX_SECURITY_GROUPS).then_some(SecurityGroupSet(v))
    }

    /// `sg-a,sg-b` as an `alloc` argument or an annotation carries it:
    /// 1 to 5 ids, each `sg-` then letters and digits.
    pub fn parse(v: &str) -> Result<SecurityGroupSet, AllocError> {
        let ids: Vec<&str> = v.split(',').collect();
        if let Some(bad) = ids.iter().find(|id| !valid_id(id)) {
            return Err(AllocError::bad(format!(
                "{ARG_SECURITY_GROUPS}={}: {} is not a security group id (sg- then letters and digits)",
                clip(v),
                clip(bad)
            )));
        }
        SecurityGroupSet::new(ids).ok_or_else(|| {
            AllocError::bad(format!(
                "{ARG_SECURITY_GROUPS}={}: a set of 1 to {MAX_SECURITY_GROUPS} security groups",
                clip(v)
            ))
        })
    }

    /// The ids, sorted.
    pub fn ids(&self) -> &[String] {
        &self.0
    }
}

impl fmt::Display for SecurityGroupSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join(","))
    }
}

fn valid_id(id: &str) -> bool {
    id.strip_prefix("sg-").is_some_and(|rest| {
        (1..=64).contains(&rest.len()) && rest.bytes().all(|b| b.is_ascii_alphanumeric())
    })
}

fn clip(s: &str) -> String {
    s.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_and_repeats_do_not_matter() {
        let a = SecurityGroupSet::parse("sg-b,sg-a,sg-b").unwrap();
        assert_eq!(a, SecurityGroupSet::parse("sg-a,sg-b").unwrap());
        assert_eq!(a.to_string(), "sg-a,sg-b");
        assert_eq!(a.ids(), ["sg-a", "sg-b"]);
    }

    #[test]
    fn one_to_five_well_formed_ids() {
        assert!(SecurityGroupSet::parse("sg-1,sg-2,sg-3,sg-4,sg-5").is_ok());
        let e = SecurityGroupSet::parse("sg-1,sg-2,sg-3,sg-4,sg-5,sg-6").unwrap_err();
        assert!(e.message.contains("1 to 5"), "{e}");
        for bad in ["", "sg-", "sg-a,", "default", "sg-a b"] {
            let e = SecurityGroupSet::parse(bad).unwrap_err();
            assert!(e.message.starts_with("security-groups="), "{bad}: {e}");
        }
        assert!(SecurityGroupSet::new(Vec::<String>::new()).is_none());
    }
}
