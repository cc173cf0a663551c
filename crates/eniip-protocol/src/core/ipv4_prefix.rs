//! An IPv4 /28 prefix (16 addresses), the unit prefix mode assigns: a
//! domain value shared by the cloud layer, the pool and the allocator.
//! Always 16-aligned: only [`Ipv4Prefix::containing`] and a checked parse
//! make one.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// An IPv4 /28 prefix, by its network address (always 16-aligned).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv4Prefix(Ipv4Addr);

impl Ipv4Prefix {
    /// Addresses in a prefix.
    pub const SIZE: u32 = 16;
    /// Its length.
    pub const LEN: u8 = 28;

    /// The prefix holding `a`.
    pub fn containing(a: Ipv4Addr) -> Ipv4Prefix {
        Ipv4Prefix(Ipv4Addr::from(u32::from(a) & !(Self::SIZE - 1)))
    }

    /// The network address.
    pub fn base(self) -> Ipv4Addr {
        self.0
    }

    /// True if `a` is one of its 16 addresses.
    pub fn contains(self, a: Ipv4Addr) -> bool {
        Self::containing(a) == self
    }

    /// Its 16 addresses, in order.
    pub fn addresses(self) -> impl Iterator<Item = Ipv4Addr> {
        let b = u32::from(self.0);
        (0..Self::SIZE).map(move |i| Ipv4Addr::from(b + i))
    }
}

impl fmt::Display for Ipv4Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.0, Self::LEN)
    }
}

impl FromStr for Ipv4Prefix {
    type Err = String;

    /// `a.b.c.d/28`, host bits zero.
    fn from_str(s: &str) -> Result<Ipv4Prefix, String> {
        let bad = || format!("{s:?} is not an IPv4 /28 prefix");
        let (a, len) = s.trim().split_once('/').ok_or_else(bad)?;
        let a: Ipv4Addr = a.parse().map_err(|_| bad())?;
        if len != "28" || Self::containing(a) != Ipv4Prefix(a) {
            return Err(bad());
        }
        Ok(Ipv4Prefix(a))
    }
}
