//! A small synchronous rtnetlink client: one blocking `NETLINK_ROUTE` socket
//! (netlink-sys) speaking netlink-packet-route messages, request by request.
//!
//! Invariants: every receive has a deadline (`SO_RCVTIMEO`), every reply
//! loop is bounded in messages, and a reply is matched to its request by
//! sequence number. A socket answers for the network namespace it was
//! opened in, whatever thread later uses it (see [`super::netns`]).
//!
//! This file is the socket and the vocabulary ([`Link`], [`Route`],
//! [`Rule`]); what each request says and how its answers read, the
//! netlink-packet-route messages, is [`msg`]'s.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL,
    NLM_F_REPLACE, NLM_F_REQUEST,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

mod msg;
pub mod stopwatch;

/// How long one netlink answer may take.
const RECV_TIMEOUT: Duration = Duration::from_secs(5);
/// Most netlink messages one request may answer (a dump of a big table).
const MAX_REPLY_MESSAGES: usize = 1_000_000;
/// Receive buffer; a kernel dump datagram is at most a few pages.
const RECV_BUF: usize = 256 * 1024;

/// A link name's room, its terminating NUL included.
const IFNAMSIZ: usize = 16;

/// The main routing table.
pub const MAIN_TABLE: u32 = 254;

/// One link as a dump shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// ifindex.
    pub index: u32,
    /// Its name.
    pub name: String,
    /// Its hardware address (empty when it has none).
    pub mac: Vec<u8>,
    /// IFF_UP.
    pub up: bool,
}

/// An address family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// IPv4
    V4,
    /// IPv6
    V6,
}

impl Family {
    /// The family of `ip`.
    pub fn of(ip: &IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }

    /// The unspecified address (`0.0.0.0`, `::`): a default route's
    /// destination.
    pub fn any(self) -> IpAddr {
        match self {
            Family::V4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            Family::V6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        }
    }
}

/// One route as a dump shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Table.
    pub table: u32,
    /// Destination and prefix length (`0.0.0.0/0` or `::/0` for a default
    /// route).
    pub dst: (IpAddr, u8),
    /// Gateway.
    pub gateway: Option<IpAddr>,
    /// Output link.
    pub oif: Option<u32>,
}

/// One policy rule as a dump shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Its family.
    pub family: Family,
    /// Priority.
    pub priority: u32,
    /// `from` prefix.
    pub src: Option<(IpAddr, u8)>,
    /// `to` prefix.
    pub dst: Option<(IpAddr, u8)>,
    /// `iif` name.
    pub iif: Option<String>,
    /// Table looked up.
    pub table: u32,
}

/// A netlink socket in one network namespace.
pub struct Netlink {
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<Vec<u8>> {
    let v: Vec<u8> = s
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).ok().filter(|_| h.len() == 2))
        .collect::<Option<_>>()?;
    (v.len() == 6).then_some(v)
}

/// Formats a MAC as `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(mac: &[u8]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn is_errno(e: &io::Error, errno: i32) -> bool {
    e.raw_os_error() == Some(errno)
}

/// True for "already there" answers.
pub fn is_exists(e: &io::Error) -> bool {
    is_errno(e, nix::libc::EEXIST)
}

/// True for "not there" answers.
pub fn is_missing(e: &io::Error) -> bool {
    is_errno(e, nix::libc::ENOENT)
        || is_errno(e, nix::libc::ENODEV)
        || is_errno(e, nix::libc::ESRCH)
}

impl std::fmt::Debug for Netlink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Netlink")
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

impl Netlink {
    /// A socket in the calling thread's network namespace.
    pub fn open() -> io::Result<Netlink> {
        let mut sock = Socket::new(NETLINK_ROUTE)?;
        sock.bind_auto()?;
        sock.connect(&SocketAddr::new(0, 0))?;
        // SAFETY: `sock` owns the fd and outlives this borrow, which ends
        // with the setsockopt below.
        #[allow(unsafe_code)]
        let fd = unsafe { BorrowedFd::borrow_raw(sock.as_raw_fd()) };
        nix::sys::socket::setsockopt(
            &fd,
            nix::sys::socket::sockopt::ReceiveTimeout,
            &nix::sys::time::TimeVal::new(RECV_TIMEOUT.as_secs() as i64, 0),
        )
        .map_err(io::Error::from)?;
        Ok(Netlink {
            sock,
            seq: 0,
            buf: Vec::with_capacity(RECV_BUF),
        })
    }

    /// Sends one request and collects its answer: the messages of a dump,
    /// or nothing for an acknowledged change. A kernel error is the errno.
    /// Timed by [`stopwatch`] when it counts.
    fn request(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> io::Result<Vec<RouteNetlinkMessage>> {
        let began = stopwatch::begin();
        let r = self.exchange(msg, flags);
        stopwatch::end(began);
        r
    }

    fn exchange(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> io::Result<Vec<RouteNetlinkMessage>> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let dump = flags & NLM_F_DUMP == NLM_F_DUMP;
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | flags | if dump { 0 } else { NLM_F_ACK };
        header.sequence_number = seq;
        let mut nl = NetlinkMessage::new(header, NetlinkPayload::from(msg));
        nl.finalize();
        let mut out = vec![0u8; nl.buffer_len()];
        nl.serialize(&mut out);
        self.sock.send(&out, 0)?;

        let mut got = Vec::new();
        let mut seen = 0usize;
        loop {
            self.buf.clear();
            let n = self.sock.recv(&mut self.buf, 0)?;
            if n > self.buf.len() {
                return Err(io::Error::other("netlink answer larger than the buffer"));
            }
            let mut off = 0;
            while off < n {
                seen += 1;
                if seen > MAX_REPLY_MESSAGES {
                    return Err(io::Error::other("netlink answer too long"));
                }
                let reply = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&self.buf[off..n])
                    .map_err(|e| io::Error::other(format!("bad netlink answer: {e}")))?;
                let len = reply.header.length as usize;
                if len == 0 {
                    return Err(io::Error::other("zero-length netlink message"));
                }
                off += (len + 3) & !3;
                if reply.header.sequence_number != seq {
                    continue;
                }
                match reply.payload {
                    NetlinkPayload::Error(e) => {
                        return match e.code {
                            None => Ok(got),
                            Some(_) => Err(e.to_io()),
                        }
                    }
                    NetlinkPayload::Done(_) => return Ok(got),
                    NetlinkPayload::InnerMessage(m) => got.push(m),
                    _ => {}
                }
            }
        }
    }

    /// Every link.
    pub fn links(&mut self) -> io::Result<Vec<Link>> {
        let msgs = self.request(msg::get_links(), NLM_F_DUMP)?;
        Ok(msgs.iter().filter_map(msg::link_of).collect())
    }

    /// The link named `name`, if any: one get, not a dump of every link
    /// (a node's hundreds of host ends would be read for each lookup).
    pub fn link_by_name(&mut self, name: &str) -> io::Result<Option<Link>> {
        // No link has a name the kernel would refuse to look up.
        if name.is_empty() || name.len() >= IFNAMSIZ {
            return Ok(None);
        }
        match self.request(msg::get_link_named(name), 0) {
            Err(e) if is_missing(&e) => Ok(None),
            r => Ok(r?.iter().filter_map(msg::link_of).find(|l| l.name == name)),
        }
    }

    /// The links whose hardware address is `mac`.
    pub fn links_by_mac(&mut self, mac: &[u8]) -> io::Result<Vec<Link>> {
        Ok(self.links()?.into_iter().filter(|l| l.mac == mac).collect())
    }

    /// Creates a veth pair, `name` up: `name` here, `peer` (down) in the
    /// namespace `peer_ns`.
    pub fn add_veth_up(
        &mut self,
        name: &str,
        peer: &str,
        peer_ns: RawFd,
        mtu: u32,
    ) -> io::Result<()> {
        let msg = msg::new_veth(name, None, peer, peer_ns, mtu, true);
        self.request(msg, NLM_F_CREATE | NLM_F_EXCL).map(drop)
    }

    /// Same, `name` carrying the hardware address `mac` (an emulated
    /// ENI: see [`eniip_sim::hostlinks`]).
    pub fn add_veth_with_mac(
        &mut self,
        name: &str,
        mac: &[u8],
        peer: &str,
        peer_ns: RawFd,
        mtu: u32,
    ) -> io::Result<()> {
        let msg = msg::new_veth(name, Some(mac), peer, peer_ns, mtu, false);
        self.request(msg, NLM_F_CREATE | NLM_F_EXCL).map(drop)
    }

    /// Deletes a link (a veth takes its peer along).
    pub fn del_link(&mut self, index: u32) -> io::Result<()> {
        self.request(msg::del_link(index), 0).map(drop)
    }

    /// Sets a link up.
    pub fn set_up(&mut self, index: u32) -> io::Result<()> {
        self.request(msg::set_up(index), 0).map(drop)
    }

    /// Adds `ip/prefix` to a link (already there is fine). An IPv6 address
    /// skips duplicate address detection, so it is usable at once.
    pub fn add_addr(&mut self, index: u32, ip: IpAddr, prefix: u8) -> io::Result<()> {
        match self.request(msg::new_addr(index, ip, prefix), NLM_F_CREATE | NLM_F_EXCL) {
            Err(e) if is_exists(&e) => Ok(()),
            r => r.map(drop),
        }
    }

    /// Addresses of `family` on a link, with prefix lengths.
    pub fn addrs(&mut self, index: u32, family: Family) -> io::Result<Vec<(IpAddr, u8)>> {
        let msgs = self.request(msg::get_addrs(family), NLM_F_DUMP)?;
        Ok(msgs
            .iter()
            .filter_map(|m| msg::addr_of(m, index, family))
            .collect())
    }

    /// Adds or replaces a route: `dst/prefix [via gw] dev oif table T`;
    /// with `onlink` the gateway need not be on a subnet of the link.
    pub fn replace_route(
        &mut self,
        table: u32,
        dst: (IpAddr, u8),
        gateway: Option<IpAddr>,
        oif: u32,
        onlink: bool,
    ) -> io::Result<()> {
        let msg = msg::new_route(table, dst, gateway, oif, onlink);
        self.request(msg, NLM_F_CREATE | NLM_F_REPLACE).map(drop)
    }

    /// Adds or replaces the default route of `gateway`'s family in
    /// `table`: via `gateway`, out of `oif` (`onlink` as above).
    pub fn replace_default_route(
        &mut self,
        table: u32,
        gateway: IpAddr,
        oif: u32,
        onlink: bool,
    ) -> io::Result<()> {
        let any = match gateway {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        };
        self.replace_route(table, (any, 0), Some(gateway), oif, onlink)
    }

    /// Every route of `family` in `table`.
    pub fn routes(&mut self, family: Family, table: u32) -> io::Result<Vec<Route>> {
        let msgs = self.request(msg::get_routes(family), NLM_F_DUMP)?;
        Ok(msgs
            .iter()
            .filter_map(|m| msg::route_of(m, family))
            .filter(|r| r.table == table)
            .collect())
    }

    /// Deletes a route (gone already is fine).
    pub fn del_route(&mut self, r: &Route) -> io::Result<()> {
        match self.request(msg::del_route(r), 0) {
            Err(e) if is_missing(&e) => Ok(()),
            r => r.map(drop),
        }
    }

    /// Adds `[from src] [to dst] [iif IIF] lookup TABLE` at `priority`
    /// (already there is fine: one rule, never a duplicate).
    pub fn add_rule(&mut self, rule: &Rule) -> io::Result<()> {
        match self.request(msg::new_rule(rule), NLM_F_CREATE | NLM_F_EXCL) {
            Err(e) if is_exists(&e) => Ok(()),
            r => r.map(drop),
        }
    }

    /// Deletes a rule (gone already is fine).
    pub fn del_rule(&mut self, rule: &Rule) -> io::Result<()> {
        match self.request(msg::del_rule(rule), 0) {
            Err(e) if is_missing(&e) => Ok(()),
            r => r.map(drop),
        }
    }

    /// Every rule of `family`.
    pub fn rules(&mut self, family: Family) -> io::Result<Vec<Rule>> {
        let msgs = self.request(msg::get_rules(family), NLM_F_DUMP)?;
        Ok(msgs
            .iter()
            .filter_map(|m| msg::rule_of(m, family))
            .collect())
    }

    /// A permanent neighbour entry `ip lladdr mac dev index`.
    pub fn replace_neigh(&mut self, index: u32, ip: IpAddr, mac: &[u8]) -> io::Result<()> {
        self.request(msg::new_neigh(index, ip, mac), NLM_F_CREATE | NLM_F_REPLACE)
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a network namespace of its own (a thread that unshares one):
    /// a link is found by its name, a name no link has (or none can have)
    /// is none, not an error; a veth made up is up from the start.
    #[test]
    fn a_link_is_found_by_its_name_alone_and_a_veth_is_made_up() {
        let t = std::thread::Builder::new()
            .name("own-netns".into())
            .spawn(|| {
                nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)?;
                let mut nl = Netlink::open()?;
                let lo = nl.link_by_name("lo")?.expect("lo is in every namespace");
                assert_eq!((lo.index, lo.name.as_str()), (1, "lo"));
                assert_eq!(nl.link_by_name("enipnothere")?, None);
                assert_eq!(nl.link_by_name("")?, None);
                assert_eq!(nl.link_by_name("sixteen-letters!")?, None);
                // A veth made up, its peer in the same namespace here.
                let here = std::fs::File::open("/proc/thread-self/ns/net")?;
                nl.add_veth_up("enipup", "peerup", here.as_raw_fd(), 1500)?;
                let made = nl.link_by_name("enipup")?.expect("the veth was made");
                let peer = nl.link_by_name("peerup")?.expect("its peer was made");
                assert!(made.up && !peer.up, "{made:?} {peer:?}");
                Ok::<(), io::Error>(())
            })
            .unwrap();
        match t.join().unwrap() {
            Err(e) if e.raw_os_error() == Some(nix::libc::EPERM) => {
                eniip_util::testing::skip(&format!(
                    "a_link_is_found_by_its_name_alone_and_a_veth_is_made_up: needs a network namespace ({e})"
                ));
            }
            r => r.unwrap(),
        }
    }

    #[test]
    fn macs_parse_and_format() {
        let m = parse_mac("00:16:3e:0a:BC:ff").unwrap();
        assert_eq!(m, vec![0, 0x16, 0x3e, 0x0a, 0xbc, 0xff]);
        assert_eq!(format_mac(&m), "00:16:3e:0a:bc:ff");
        for bad in [
            "",
            "00:16:3e:0a:bc",
            "00:16:3e:0a:bc:ff:00",
            "0:16:3e:0a:bc:ff",
            "zz:16:3e:0a:bc:ff",
        ] {
            assert!(parse_mac(bad).is_none(), "{bad}");
        }
    }
}
