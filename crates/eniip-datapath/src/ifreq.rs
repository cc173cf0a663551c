//! Links read without netlink, so without the kernel's RTNL: their names
//! from `/proc/thread-self/net/dev`, and a link's hardware address, index
//! and flags by the socket ioctls (`SIOCGIFHWADDR`, `SIOCGIFINDEX`,
//! `SIOCGIFFLAGS`, which the kernel answers under RCU). A link dump over
//! netlink takes RTNL for each part of its answer, and a node's dump is
//! long (a host end per pod): under a storm of pods, each ADD waited
//! behind every other pod's changes for each part.
//!
//! Invariant: the names and the socket are the calling thread's network
//! namespace's; a link that goes between the listing and its ioctl is
//! skipped (a listing is a moment's, as a dump is).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::libc;
use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};

use crate::netlink::Link;

/// `ARPHRD_ETHER`: a hardware address of 6 bytes.
const ARPHRD_ETHER: u16 = 1;
/// `IFNAMSIZ`, the name's room with its NUL.
const IFNAMSIZ: usize = 16;

/// `struct ifreq`: a name and 24 bytes of answer (the union's size).
#[repr(C)]
struct IfReq {
    name: [u8; IFNAMSIZ],
    data: [u8; 24],
}

/// A socket to ask about the links of the namespace it was opened in.
#[derive(Debug)]
pub struct Ioctls(OwnedFd);

impl Ioctls {
    /// A socket in the calling thread's network namespace.
    pub fn open() -> io::Result<Ioctls> {
        let fd = socket(
            AddressFamily::Inet,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            None,
        )?;
        Ok(Ioctls(fd))
    }

    /// The answer to `request` about the link `name`; `None` when there
    /// is no such link.
    fn ask(&self, name: &str, request: libc::c_ulong) -> io::Result<Option<[u8; 24]>> {
        if name.is_empty() || name.len() >= IFNAMSIZ {
            return Ok(None);
        }
        let mut req = IfReq {
            name: [0; IFNAMSIZ],
            data: [0; 24],
        };
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        // SAFETY: `req` is a `struct ifreq` (40 bytes, the name
        // NUL-terminated) the kernel writes at most 24 bytes of answer
        // into; the fd is a socket this value owns.
        #[allow(unsafe_code)]
        let r = unsafe { libc::ioctl(self.0.as_raw_fd(), request as _, &mut req) };
        if r == 0 {
            return Ok(Some(req.data));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENODEV) | Some(libc::ENXIO) => Ok(None),
            _ => Err(e),
        }
    }

    /// The link `name` (its index, hardware address and whether it is
    /// up), if there is one.
    pub fn link(&self, name: &str) -> io::Result<Option<Link>> {
        let Some(hw) = self.ask(name, libc::SIOCGIFHWADDR)? else {
            return Ok(None);
        };
        let Some(index) = self.ask(name, libc::SIOCGIFINDEX)? else {
            return Ok(None);
        };
        let Some(flags) = self.ask(name, libc::SIOCGIFFLAGS)? else {
            return Ok(None);
        };
        // `struct sockaddr`: the family, then the address.
        let mac = if u16::from_ne_bytes([hw[0], hw[1]]) == ARPHRD_ETHER {
            hw[2..8].to_vec()
        } else {
            Vec::new()
        };
        let index = i32::from_ne_bytes([index[0], index[1], index[2], index[3]]);
        let flags = i16::from_ne_bytes([flags[0], flags[1]]);
        Ok(Some(Link {
            index: u32::try_from(index).unwrap_or(0),
            name: name.to_string(),
            mac,
            up: flags & libc::IFF_UP as i16 != 0,
        }))
    }

    /// Whether the link `name` is up (`None`: no such link).
    pub fn is_up(&self, name: &str) -> io::Result<Option<bool>> {
        Ok(self
            .ask(name, libc::SIOCGIFFLAGS)?
            .map(|f| i16::from_ne_bytes([f[0], f[1]]) & libc::IFF_UP as i16 != 0))
    }

    /// The links whose hardware address is `mac`: every link of the
    /// namespace is asked for its address, none is left out.
    pub fn links_by_mac(&self, mac: &[u8]) -> io::Result<Vec<Link>> {
        let mut found = Vec::new();
        for name in names()? {
            let Some(hw) = self.ask(&name, libc::SIOCGIFHWADDR)? else {
                continue;
            };
            if u16::from_ne_bytes([hw[0], hw[1]]) == ARPHRD_ETHER && hw[2..8] == *mac {
                found.extend(self.link(&name)?);
            }
        }
        Ok(found)
    }
}

/// The names of the calling thread's namespace's links.
fn names() -> io::Result<Vec<String>> {
    let text = std::fs::read_to_string("/proc/thread-self/net/dev")?;
    Ok(parse_names(&text))
}

/// The names in a `/proc/net/dev` text: two lines of headings, then one
/// line per link, `NAME: counters` (a link's name never holds a `:`).
fn parse_names(text: &str) -> Vec<String> {
    text.lines()
        .skip(2)
        .filter_map(|l| l.split_once(':'))
        .map(|(name, _)| name.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::Netlink;

    #[test]
    fn names_are_read_from_proc_net_dev() {
        let text = "Inter-|   Receive  |  Transmit\n \
                    face |bytes    packets\n    \
                    lo: 0 0 0\n  eth1:123 4 0\nenip0123456789a: 1 2 3\n";
        assert_eq!(parse_names(text), ["lo", "eth1", "enip0123456789a"]);
    }

    /// In a network namespace of its own: what the ioctls say of each
    /// link is what netlink says, and every link with a MAC is found.
    #[test]
    fn links_read_by_ioctl_are_the_links_netlink_shows() {
        crate::netns::in_own_netns("links_read_by_ioctl_are_the_links_netlink_shows", || {
            let mut nl = Netlink::open()?;
            let here = std::fs::File::open("/proc/thread-self/ns/net")?;
            let mac = [0x02, 0, 0, 0, 0, 0x42];
            nl.add_veth_with_mac("twina", &mac, "twinap", here.as_raw_fd(), 1500)?;
            nl.add_veth_with_mac("twinb", &mac, "twinbp", here.as_raw_fd(), 1500)?;
            nl.set_up(1)?;
            let io = Ioctls::open()?;
            for mut l in nl.links()? {
                // lo's address is none for an Ethernet MAC.
                if l.name == "lo" {
                    l.mac.clear();
                }
                assert_eq!(io.link(&l.name)?, Some(l.clone()), "{}", l.name);
                assert_eq!(io.is_up(&l.name)?, Some(l.up));
            }
            assert_eq!(io.link("enipnothere")?, None);
            assert_eq!(io.is_up("enipnothere")?, None);
            let mut twins: Vec<String> =
                io.links_by_mac(&mac)?.into_iter().map(|l| l.name).collect();
            twins.sort();
            assert_eq!(twins, ["twina", "twinb"]);
            assert_eq!(io.links_by_mac(&[2, 0, 0, 0, 0, 0x43])?, vec![]);
            Ok(())
        });
    }
}
