//! A set of security groups ([`SecurityGroupSet`]): what a pod asks its
//! address's ENI to be in (`eniipd/security-groups`, `alloc ...
//! security-groups=`), and what an ENI is in. A domain value shared by the
//! wire protocol, eniip-cni, the allocator and the cloud layer.
//!
//! Invariant, kept by its only constructors ([`SecurityGroupSet::parse`],
//! [`SecurityGroupSet::from_ids`]): 1 to [`MAX_SECURITY_GROUPS`] ids, each
//! a security group id as the cloud writes them (`sg-` then lowercase
//! letters and digits), sorted and each once. So two sets that hold the
//! same groups are equal, whatever order or repeats they were written
//! with, and render the same ([`fmt::Display`]: `sg-a,sg-b`).

use std::fmt;
use std::str::FromStr;

/// The most security groups an ENI can be in (the cloud's limit, and the
/// most a pod may ask).
pub const MAX_SECURITY_GROUPS: usize = 5;

/// Longest id after `sg-`.
const MAX_SG_ID_TAIL: usize = 64;

/// A canonical set of 1 to [`MAX_SECURITY_GROUPS`] security group ids
/// (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SecurityGroupSet(Vec<String>);

/// Why a text or a list is not a [`SecurityGroupSet`]; its display says
/// what was wrong (the caller names the key or annotation it came from).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecurityGroupSetError {
    /// No id at all.
    Empty,
    /// More distinct ids than an ENI can be in.
    TooMany(usize),
    /// An item that is not a security group id (as given, clipped).
    Malformed(String),
}

impl fmt::Display for SecurityGroupSetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecurityGroupSetError::Empty => f.write_str("no security group given (1 to 5 ids)"),
            SecurityGroupSetError::TooMany(n) => write!(
                f,
                "{n} security groups: an ENI can be in at most {MAX_SECURITY_GROUPS}"
            ),
            SecurityGroupSetError::Malformed(s) if s.is_empty() => {
                f.write_str("an empty id in the list (ids are separated by single commas)")
            }
            SecurityGroupSetError::Malformed(s) => write!(
                f,
                "{s:?} is not a security group id (sg- then lowercase letters and digits)"
            ),
        }
    }
}

impl std::error::Error for SecurityGroupSetError {}

/// A security group id as the cloud makes them: `sg-` then 1 to 64
/// lowercase letters and digits.
pub fn valid_security_group_id(s: &str) -> bool {
    s.strip_prefix("sg-").is_some_and(|rest| {
        (1..=MAX_SG_ID_TAIL).contains(&rest.len())
            && rest
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    })
}

impl SecurityGroupSet {
    /// Reads `sg-a,sg-b`: ids separated by commas (blanks around an id
    /// are allowed, as a person writes an annotation), in any order,
    /// repeats counted once.
    pub fn parse(text: &str) -> Result<SecurityGroupSet, SecurityGroupSetError> {
        if text.trim().is_empty() {
            return Err(SecurityGroupSetError::Empty);
        }
        SecurityGroupSet::from_ids(text.split(',').map(str::trim))
    }

    /// The set of `ids` (any order, repeats counted once), as a list
    /// (an ENI's `SecurityGroupIds`, a config list) gives them.
    pub fn from_ids<'a>(
        ids: impl IntoIterator<Item = &'a str>,
    ) -> Result<SecurityGroupSet, SecurityGroupSetError> {
        let mut set = Vec::new();
        for id in ids {
            if !valid_security_group_id(id) {
                return Err(SecurityGroupSetError::Malformed(
                    id.chars().take(70).collect(),
                ));
            }
            set.push(id.to_string());
        }
        set.sort();
        set.dedup();
        match set.len() {
            0 => Err(SecurityGroupSetError::Empty),
            n if n > MAX_SECURITY_GROUPS => Err(SecurityGroupSetError::TooMany(n)),
            _ => Ok(SecurityGroupSet(set)),
        }
    }

    /// The ids, sorted.
    pub fn ids(&self) -> &[String] {
        &self.0
    }

    /// Whether `id` is one of them.
    pub fn contains(&self, id: &str) -> bool {
        self.0.binary_search_by(|s| s.as_str().cmp(id)).is_ok()
    }
}

impl fmt::Display for SecurityGroupSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join(","))
    }
}

impl FromStr for SecurityGroupSet {
    type Err = SecurityGroupSetError;

    fn from_str(s: &str) -> Result<SecurityGroupSet, SecurityGroupSetError> {
        SecurityGroupSet::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::{SecurityGroupSet as Set, SecurityGroupSetError as E};

    #[test]
    fn order_and_repeats_do_not_matter() {
        let a = Set::parse("sg-b,sg-a,sg-b").unwrap();
        let b = Set::parse(" sg-a , sg-b").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "sg-a,sg-b");
        assert_eq!(a.ids(), ["sg-a", "sg-b"]);
        assert!(a.contains("sg-b") && !a.contains("sg-c"));
        assert_eq!(Set::from_ids(["sg-b", "sg-a"]).unwrap(), a);
        assert_eq!(a.to_string().parse::<Set>().unwrap(), a, "it reads back");
    }

    #[test]
    fn one_to_five_distinct_ids() {
        assert!(Set::parse("sg-1,sg-2,sg-3,sg-4,sg-5").is_ok());
        assert!(
            Set::parse("sg-1,sg-2,sg-3,sg-4,sg-5,sg-1").is_ok(),
            "a repeat is not a sixth"
        );
        assert_eq!(
            Set::parse("sg-1,sg-2,sg-3,sg-4,sg-5,sg-6"),
            Err(E::TooMany(6))
        );
        assert_eq!(Set::parse(""), Err(E::Empty));
        assert_eq!(Set::parse("  "), Err(E::Empty));
        assert_eq!(Set::from_ids([]), Err(E::Empty));
    }

    #[test]
    fn a_malformed_item_is_named() {
        for (text, bad) in [
            ("sg-a,,sg-b", ""),
            ("sg-a,", ""),
            ("default", "default"),
            ("sg-", "sg-"),
            ("sg-A1", "sg-A1"),
            ("sg-a;sg-b", "sg-a;sg-b"),
            ("sg-a sg-b", "sg-a sg-b"),
        ] {
            assert_eq!(Set::parse(text), Err(E::Malformed(bad.into())), "{text:?}");
        }
        let msg = Set::parse("sg-a,web").unwrap_err().to_string();
        assert!(msg.contains("\"web\"") && msg.contains("sg-"), "{msg}");
        assert!(Set::parse("sg-a,,b")
            .unwrap_err()
            .to_string()
            .contains("empty"));
        let long = format!("sg-{}", "a".repeat(65));
        assert!(Set::parse(&long).is_err());
        assert!(Set::parse(&long[..67]).is_ok(), "64 after sg-");
    }
}
