//! An IPv6 /80 prefix ([`Ipv6Prefix`], 2^48 addresses): in dual stack
//! with prefix mode each managed ENI holds one, and its pods' IPv6 are
//! carved from it (issue 32). A domain value shared by the cloud layer,
//! the pool and the allocator. Always aligned (the 48 host bits zero):
//! only [`Ipv6Prefix::containing`] and a checked parse make one.

use std::fmt;
use std::net::Ipv6Addr;
use std::str::FromStr;

/// An IPv6 /80 prefix, by its network address (the 48 host bits zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv6Prefix(Ipv6Addr);

impl Ipv6Prefix {
    /// Its length.
    pub const LEN: u8 = 80;
    /// The host part's bits.
    pub const HOST_BITS: u32 = 128 - Self::LEN as u32;
    /// The largest host part.
    pub const HOST_MAX: u64 = (1 << Self::HOST_BITS) - 1;

    /// The /80 holding `a`.
    pub fn containing(a: Ipv6Addr) -> Ipv6Prefix {
        Ipv6Prefix(Ipv6Addr::from(u128::from(a) & !u128::from(Self::HOST_MAX)))
    }

    /// True if `a` is one of its addresses.
    pub fn contains(self, a: Ipv6Addr) -> bool {
        Self::containing(a) == self
    }

    /// Its address with host part `host` (taken modulo 2^48).
    pub fn address(self, host: u64) -> Ipv6Addr {
        Ipv6Addr::from(u128::from(self.0) | u128::from(host & Self::HOST_MAX))
    }

    /// The host part of `a` (which it contains).
    pub fn host(a: Ipv6Addr) -> u64 {
        (u128::from(a) & u128::from(Self::HOST_MAX)) as u64
    }
}

impl fmt::Display for Ipv6Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.0, Self::LEN)
    }
}

impl FromStr for Ipv6Prefix {
    type Err = String;

    /// `x:x::/80`, host bits zero.
    fn from_str(s: &str) -> Result<Ipv6Prefix, String> {
        let bad = || format!("{s:?} is not an IPv6 /80 prefix");
        let (a, len) = s.trim().split_once('/').ok_or_else(bad)?;
        let a: Ipv6Addr = a.parse().map_err(|_| bad())?;
        if len != "80" || Self::containing(a) != Ipv6Prefix(a) {
            return Err(bad());
        }
        Ok(Ipv6Prefix(a))
    }
}

#[cfg(test)]
mod tests {
    use super::Ipv6Prefix;
    use std::net::Ipv6Addr;

    #[test]
    fn an_80_parses_prints_and_holds_its_2_to_the_48_addresses() {
        let p: Ipv6Prefix = "2408:4005:3ab:100:1::/80".parse().unwrap();
        assert_eq!(p.to_string(), "2408:4005:3ab:100:1::/80");
        let a: Ipv6Addr = "2408:4005:3ab:100:1:ab:cd:ef".parse().unwrap();
        assert!(p.contains(a));
        assert_eq!(Ipv6Prefix::containing(a), p);
        assert_eq!(p.address(Ipv6Prefix::host(a)), a);
        assert_eq!(
            p.address(Ipv6Prefix::HOST_MAX).to_string(),
            "2408:4005:3ab:100:1:ffff:ffff:ffff"
        );
        assert_eq!(p.address(1 << 48), p.address(0), "modulo 2^48");
        assert!(!p.contains("2408:4005:3ab:100:2::1".parse().unwrap()));
        for bad in [
            "2408:4005:3ab:100:1::1/80",
            "2408:4005:3ab:100::/64",
            "2408:4005:3ab:100::",
            "10.0.0.0/80",
            "x::/80",
        ] {
            assert!(bad.parse::<Ipv6Prefix>().is_err(), "{bad}");
        }
    }
}
