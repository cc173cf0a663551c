//! CIDR arithmetic for the emulator's vswitches.

use std::net::{Ipv4Addr, Ipv6Addr};

/// `address/n`, with n within `lengths` and no host bit set (`bits` gives
/// the address's `width` bits); `what` names the form in errors.
fn cidr<A: std::str::FromStr>(
    s: &str,
    what: &str,
    lengths: std::ops::RangeInclusive<u8>,
    (width, bits): (u8, fn(A) -> u128),
) -> Result<(u128, u8), String> {
    let bad = || format!("{s:?} is not {what}");
    let (a, p) = s.split_once('/').ok_or_else(bad)?;
    let base = bits(a.parse().map_err(|_| bad())?);
    let prefix: u8 = p.parse().map_err(|_| bad())?;
    if !lengths.contains(&prefix) {
        let (lo, hi) = lengths.into_inner();
        return Err(format!("{s}: the prefix must be from /{lo} to /{hi}"));
    }
    // `lengths` keeps the shift below 128.
    if base & ((1u128 << (width - prefix)) - 1) != 0 {
        return Err(format!("{s}: host bits are set"));
    }
    Ok((base, prefix))
}

/// An IPv4 CIDR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Net4 {
    /// Network address.
    pub(crate) base: u32,
    /// Prefix length.
    pub(crate) prefix: u8,
}

impl Net4 {
    /// Parses `a.b.c.d/n` (host bits must be zero; n from 8 to 29).
    pub(crate) fn parse(s: &str) -> Result<Net4, String> {
        let v4 = |a: Ipv4Addr| u128::from(u32::from(a));
        let (base, prefix) = cidr(s, "a CIDR", 8..=29, (32, v4))?;
        let base = u32::try_from(base).map_err(|_| format!("{s:?} is not a CIDR"))?;
        Ok(Net4 { base, prefix })
    }

    /// Addresses in the block.
    pub(crate) fn size(&self) -> u64 {
        1u64 << (32 - self.prefix)
    }

    /// The address at `offset`.
    pub(crate) fn at(&self, offset: u64) -> Ipv4Addr {
        Ipv4Addr::from(self.base.wrapping_add(offset as u32))
    }

    /// Usable offsets: the network address and the next two, and the last
    /// three (gateway, reserved, broadcast), are reserved as in a VPC.
    pub(crate) fn usable(&self) -> std::ops::Range<u64> {
        3..self.size() - 3
    }

    /// The gateway (broadcast - 2: `.253` of a /24).
    pub(crate) fn gateway(&self) -> Ipv4Addr {
        self.at(self.size() - 3)
    }

    /// Netmask in dotted form.
    pub(crate) fn netmask(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::MAX << (32 - self.prefix))
    }

    /// True if `a` is in the block.
    pub(crate) fn contains(&self, a: Ipv4Addr) -> bool {
        u32::from(a) & (u32::MAX << (32 - self.prefix)) == self.base
    }
}

impl std::fmt::Display for Net4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.base), self.prefix)
    }
}

/// An IPv6 CIDR (/48 to /64).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Net6 {
    /// Network address.
    pub(crate) base: u128,
    /// Prefix length.
    pub(crate) prefix: u8,
}

impl Net6 {
    /// Parses `x::/n` (host bits must be zero; n from 48 to 64).
    pub(crate) fn parse(s: &str) -> Result<Net6, String> {
        let (base, prefix) = cidr::<Ipv6Addr>(s, "an IPv6 CIDR", 48..=64, (128, u128::from))?;
        Ok(Net6 { base, prefix })
    }

    /// The address with host part `host` (taken modulo the block).
    pub(crate) fn at(&self, host: u128) -> Ipv6Addr {
        let mask = !(u128::MAX << (128 - self.prefix));
        Ipv6Addr::from(self.base | (host & mask))
    }

    /// The gateway (`…:ffff:ffff:ffff:fff7` in the reference's samples).
    pub(crate) fn gateway(&self) -> Ipv6Addr {
        self.at(u128::MAX - 8)
    }
}

impl std::fmt::Display for Net6 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", Ipv6Addr::from(self.base), self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_blocks() {
        let n = Net4::parse("192.168.1.0/24").unwrap();
        assert_eq!(n.gateway(), Ipv4Addr::new(192, 168, 1, 253));
        assert_eq!(n.usable(), 3..253);
        assert_eq!(n.netmask(), Ipv4Addr::new(255, 255, 255, 0));
        assert!(n.contains(Ipv4Addr::new(192, 168, 1, 77)));
        assert!(!n.contains(Ipv4Addr::new(192, 168, 2, 1)));
        assert_eq!(Net4::parse("10.0.0.0/22").unwrap().size(), 1024);
        for bad in [
            "10.0.0.1/24",
            "10.0.0.0",
            "10.0.0.0/33",
            "x/24",
            "10.0.0.0/30",
        ] {
            assert!(Net4::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ipv6_blocks() {
        let n = Net6::parse("2408:4005:300:ab00::/64").unwrap();
        assert_eq!(n.at(5).to_string(), "2408:4005:300:ab00::5");
        assert!(Net6::parse("2408:4005:300:ab00::1/64").is_err());
        assert!(Net6::parse("2408::/32").is_err());
    }
}
