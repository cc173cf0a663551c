//! The emulated ENIs as links on a Linux host (`eniipd --simulate
//! --simulate-links`, and eniip-cni's tests): every ENI eniipd created
//! that is attached (`InUse`) to the instance appears in the node's
//! namespace as one end of a veth pair carrying the ENI's MAC, a moment
//! after its attach, as an ENI appears on an ECS host. The other end is
//! in a "VPC" namespace, which plays the VPC router: each vswitch's IPv4
//! gateway on its `lo` (its IPv6 gateway on every ENI's end, so it
//! answers neighbour solicitations there), and for every address and
//! prefix on an ENI a route over that ENI's end with permanent neighbour
//! entries (address -> the ENI's MAC; an IPv6 /80 through one link-local
//! next hop whose entry is the ENI's MAC), so the VPC answers an address
//! only over its own ENI; strict `rp_filter` and no forwarding there drop a
//! packet that comes over the wrong ENI. A detached ENI's pair goes.
//!
//! Strict `rp_filter` also drops an ARP request whose sender address the
//! VPC has no route back to over that ENI, and a host asks for the
//! gateway from an address of its own (its `eth0`'s): so each ENI's node
//! end gets a permanent neighbour entry for every IPv4 gateway (the VPC
//! end's MAC) instead of an answer to ARP, on that link only, gone with it.
//!
//! The VPC namespace is this process's own unless the caller names one
//! ([`HostLinksOptions::vpc_netns`], the tests'): it has no name under
//! `/run/netns` and lives only as long as something here holds it, so
//! when the process ends, however it ends (SIGKILL, a crash, an abort),
//! the kernel removes it and every pair with it (a veth goes with either
//! end). Nothing is left on the host to sweep.
//!
//! The world is read from the emulator's `GET /__sim/state` on loopback:
//! the tests run eniip-sim as a process, the daemon's emulator serves the
//! same, so both use this one implementation.
//!
//! Shape: one named thread owns the links. Each pass gathers (the state),
//! decides ([`steps::plan`], pure) and acts (netlink, through
//! [`eniip_datapath::netlink`]); what the kernel took is recorded in
//! [`steps::Plugged`], the rest is tried again next pass. Invariant: at
//! stop, and on drop, every pair made is deleted, and the VPC namespace,
//! when it is our own, is released; a thread that does not end before the
//! deadline takes the namespace and its pairs along when it ends or the
//! process exits.

pub(crate) mod steps;

use std::fmt;
use std::fs::File;
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, RecvTimeoutError, Sender};
use log::{debug, info, warn};
use nix::sched::{unshare, CloneFlags};
use serde_json::Value;

use eniip_datapath::netlink::{format_mac, is_missing, Netlink, Route, MAIN_TABLE};
use eniip_datapath::netns;
use steps::{addresses, next_hop, plan, Plugged, Slot, Step, Wanted};

/// The links' MTU (an ENI's).
const MTU: u32 = 1500;
/// How long one read of the emulator's state may take.
const STATE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long making the VPC namespace may take.
const NETNS_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest link-name tag: `e<tag>n<slot>` must fit IFNAMSIZ (15) with a
/// slot of up to 3 digits ([`steps::MAX_SLOTS`]).
pub(crate) const MAX_TAG: usize = 10;

/// What to emulate, and where.
#[derive(Debug, Clone)]
pub struct HostLinksOptions {
    /// The emulator's OpenAPI base URL (`http://127.0.0.1:P`).
    pub ecs_url: String,
    /// The instance whose ENIs appear.
    pub instance_id: String,
    /// The node's namespace (`/run/netns/NAME`, `/proc/PID/ns/net`); None:
    /// the caller's own (the host's, for the daemon).
    pub node_netns: Option<PathBuf>,
    /// The VPC namespace: None, one of our own, made here and gone with
    /// this process; or an existing, empty one whose owner removes it
    /// (set up here; the pairs made in it are removed at stop).
    pub vpc_netns: Option<PathBuf>,
    /// Link names: `e<tag>n<slot>` on the node, `v<tag>n<slot>` in the VPC
    /// (at most [`MAX_TAG`] characters, letters and digits).
    pub tag: String,
    /// How often the emulator's state is read.
    pub poll: Duration,
}

/// A failure to set the emulation up.
#[derive(Debug)]
pub struct HostLinksError {
    what: String,
    source: Option<io::Error>,
}

impl HostLinksError {
    fn new(what: impl Into<String>, source: Option<io::Error>) -> HostLinksError {
        HostLinksError {
            what: what.into(),
            source,
        }
    }
}

impl fmt::Display for HostLinksError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)
    }
}

impl std::error::Error for HostLinksError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// The running emulation: its thread and its VPC namespace.
#[derive(Debug)]
pub struct HostLinks {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
    /// Held open: a namespace of our own lives while this (or the
    /// thread's copy) does.
    vpc: Option<File>,
    vpc_path: PathBuf,
}

impl HostLinks {
    /// Sets the VPC namespace up, reads the emulator's state once (an
    /// emulator that does not answer is an error here), makes what it
    /// asks for and starts the thread that follows it.
    pub fn start(opts: HostLinksOptions) -> Result<HostLinks, HostLinksError> {
        if opts.tag.is_empty()
            || opts.tag.len() > MAX_TAG
            || !opts.tag.chars().all(|c| c.is_ascii_alphanumeric())
        {
            return Err(HostLinksError::new(
                format!("link tag {:?}: 1 to {MAX_TAG} letters and digits", opts.tag),
                None,
            ));
        }
        let node = match &opts.node_netns {
            None => Netlink::open(),
            Some(p) => File::open(p).and_then(|f| netns::netlink_in(&f)),
        }
        .map_err(|e| HostLinksError::new("cannot open netlink in the node's namespace", Some(e)))?;
        let (vpc_file, vpc_path) = match &opts.vpc_netns {
            Some(p) => File::open(p).map(|f| (f, p.clone())).map_err(|e| {
                HostLinksError::new(format!("cannot open {}", p.display()), Some(e))
            })?,
            None => {
                let f = new_netns().map_err(|e| {
                    HostLinksError::new("cannot create the VPC's network namespace", Some(e))
                })?;
                let path =
                    PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), f.as_raw_fd()));
                (f, path)
            }
        };
        let vpc_nl = prepare_vpc(&vpc_file)
            .map_err(|e| HostLinksError::new("cannot set the VPC namespace up", Some(e)))?;
        let thread_vpc = vpc_file
            .try_clone()
            .map_err(|e| HostLinksError::new("cannot hold the VPC namespace", Some(e)))?;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(STATE_TIMEOUT))
            .build()
            .into();
        let mut actor = Actor {
            opts,
            agent,
            node,
            vpc: vpc_nl,
            vpc_file: thread_vpc,
            lo: 0,
            have: Plugged::default(),
            warned: Default::default(),
        };
        actor.lo = actor
            .vpc
            .link_by_name("lo")
            .ok()
            .flatten()
            .map(|l| l.index)
            .unwrap_or(1);
        let state = match actor.state() {
            Ok(s) => s,
            Err(e) => {
                return Err(HostLinksError::new(
                    format!(
                        "cannot read the emulator's state at {}/__sim/state",
                        actor.opts.ecs_url
                    ),
                    Some(e),
                ))
            }
        };
        actor.pass_on(&state);
        let (tx, rx) = bounded::<()>(1);
        let poll = actor.opts.poll;
        let spawned = std::thread::Builder::new()
            .name("eniip-simlinks".into())
            .spawn(move || {
                // Ends when told (a message, or the sender dropped).
                while let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(poll) {
                    actor.pass();
                }
                actor.unplug_all();
            });
        // A failed spawn dropped the actor without unplugging: in a
        // namespace of our own, the pairs go with it.
        let thread =
            spawned.map_err(|e| HostLinksError::new("cannot start the hotplug thread", Some(e)))?;
        Ok(HostLinks {
            stop: Some(tx),
            thread: Some(thread),
            vpc: Some(vpc_file),
            vpc_path,
        })
    }

    /// A path to the VPC namespace while this runs, for `nsenter --net=`
    /// (`/proc/PID/fd/N` when it is our own).
    pub fn vpc_path(&self) -> &std::path::Path {
        &self.vpc_path
    }

    /// Tells the thread to stop (it unplugs everything as it ends);
    /// [`HostLinks::stop_until`] then waits for it.
    pub(crate) fn begin_stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.try_send(());
        }
    }

    /// Stops: every pair is deleted (by the thread, if it ends before
    /// `deadline`) and the VPC namespace released.
    pub fn stop_until(mut self, deadline: Instant) {
        self.finish(deadline);
    }

    fn finish(&mut self, deadline: Instant) {
        self.begin_stop();
        if let Some(t) = self.thread.take() {
            if !eniip_util::thread::join_until(t, deadline) {
                warn!("the simulated links' thread did not end in time; its links go when it does");
            }
        }
        self.vpc.take();
    }
}

impl Drop for HostLinks {
    fn drop(&mut self) {
        self.finish(Instant::now() + Duration::from_secs(3));
    }
}

/// A new network namespace, held only by the file returned: made on a
/// short-lived thread that unshares its own, so the caller never changes
/// namespace.
fn new_netns() -> io::Result<File> {
    let (tx, rx) = bounded(1);
    let handle = std::thread::Builder::new()
        .name("eniip-netns-new".into())
        .spawn(move || {
            let r = unshare(CloneFlags::CLONE_NEWNET)
                .map_err(|e| io::Error::other(format!("unshare(CLONE_NEWNET): {e}")))
                .and_then(|()| File::open("/proc/thread-self/ns/net"));
            let _ = tx.send(r);
        })?;
    let r = rx
        .recv_timeout(NETNS_TIMEOUT)
        .map_err(|_| io::Error::other("no answer from the namespace thread in time"))
        .and_then(|r| r);
    let _ = handle.join();
    r
}

/// `lo` up, strict reverse-path filtering, no forwarding: returns a
/// netlink socket in the namespace.
fn prepare_vpc(ns: &File) -> io::Result<Netlink> {
    let mut nl = netns::netlink_in(ns)?;
    if let Some(lo) = nl.link_by_name("lo")? {
        nl.set_up(lo.index)?;
    }
    netns::run_in(ns, || {
        for (k, v) in [
            ("net/ipv4/conf/all/rp_filter", "1"),
            ("net/ipv4/conf/default/rp_filter", "1"),
            ("net/ipv4/ip_forward", "0"),
            ("net/ipv6/conf/all/forwarding", "0"),
        ] {
            std::fs::write(format!("/proc/sys/{k}"), v)
                .map_err(|e| io::Error::new(e.kind(), format!("sysctl {k}={v}: {e}")))?;
        }
        Ok(())
    })?;
    Ok(nl)
}

/// The thread's state: its sockets and what it made.
struct Actor {
    opts: HostLinksOptions,
    agent: ureq::Agent,
    node: Netlink,
    vpc: Netlink,
    vpc_file: File,
    lo: u32,
    have: Plugged,
    /// Steps whose failure was logged (each is said once, not every pass).
    warned: std::collections::BTreeSet<String>,
}

impl Actor {
    fn node_name(&self, n: usize) -> String {
        format!("e{}n{n}", self.opts.tag)
    }

    fn vpc_name(&self, n: usize) -> String {
        format!("v{}n{n}", self.opts.tag)
    }

    /// Gathers: the emulator's state.
    fn state(&self) -> io::Result<Value> {
        let url = format!("{}/__sim/state", self.opts.ecs_url);
        let mut r = self.agent.get(&url).call().map_err(io::Error::other)?;
        let body = r.body_mut().read_to_string().map_err(io::Error::other)?;
        serde_json::from_str(&body).map_err(io::Error::other)
    }

    fn pass(&mut self) {
        match self.state() {
            Ok(s) => self.pass_on(&s),
            Err(e) => debug!("simulated links: no state from the emulator: {e}"),
        }
    }

    fn pass_on(&mut self, state: &Value) {
        let want = Wanted::from_state(state, &self.opts.instance_id);
        for step in plan(&self.have, &want) {
            let key = format!("{step:?}");
            match self.apply(&step) {
                Ok(()) => {
                    self.warned.remove(&key);
                }
                Err(e) => {
                    if self.warned.insert(key) {
                        warn!("simulated links: {}: {e}", describe(&step));
                    }
                }
            }
        }
    }

    /// Acts: one step, recorded once the kernel took it.
    fn apply(&mut self, step: &Step) -> io::Result<()> {
        match step {
            Step::Gateway4(gw) => {
                self.vpc.add_addr(self.lo, IpAddr::V4(*gw), 32)?;
                self.have.gateways4.insert(*gw);
            }
            Step::Plug { id, mac, n } => {
                let (en, vn) = (self.node_name(*n), self.vpc_name(*n));
                self.node
                    .add_veth_with_mac(&en, mac, &vn, self.vpc_file.as_raw_fd(), MTU)?;
                let made = self
                    .vpc
                    .link_by_name(&vn)
                    .and_then(|l| l.ok_or_else(|| io::Error::other(format!("no link {vn}"))))
                    .and_then(|l| self.vpc.set_up(l.index).map(|()| l))
                    .and_then(|v| {
                        let e = self.node.link_by_name(&en)?;
                        let e = e.ok_or_else(|| io::Error::other(format!("no link {en}")))?;
                        Ok((v, e))
                    });
                let (vpc_end, node_end) = match made {
                    Ok(ends) => ends,
                    Err(e) => {
                        // Not half made: the pair goes, the next pass tries again.
                        if let Ok(Some(l)) = self.vpc.link_by_name(&vn) {
                            let _ = self.vpc.del_link(l.index);
                        }
                        return Err(e);
                    }
                };
                info!("simulated links: ENI {id} ({}) is {en}", format_mac(mac));
                self.have.links.insert(
                    id.clone(),
                    Slot {
                        n: *n,
                        vpc_index: vpc_end.index,
                        vpc_mac: vpc_end.mac,
                        node_index: node_end.index,
                    },
                );
            }
            Step::GatewayNeigh { id, gw } => {
                let slot = self.slot(id)?;
                let (index, mac) = (slot.node_index, slot.vpc_mac.clone());
                self.node.replace_neigh(index, IpAddr::V4(*gw), &mac)?;
                self.have.neighs4.insert((id.clone(), *gw));
            }
            Step::Gateway6 { id, gw } => {
                let index = self.index(id)?;
                self.enable_ipv6_on_vpc_end(id)?;
                self.vpc.add_addr(index, IpAddr::V6(*gw), 128)?;
                self.have.gateways6.insert((id.clone(), *gw));
            }
            Step::Route { id, mac, net } => {
                let index = self.index(id)?;
                // An IPv6 prefix goes through a link-local next hop on the
                // ENI's VPC end (steps::next_hop), taken on-link.
                let hop = next_hop(*net);
                if hop.is_some() {
                    self.enable_ipv6_on_vpc_end(id)?;
                }
                for ip in addresses(*net) {
                    self.vpc.replace_neigh(index, ip, mac)?;
                }
                self.vpc
                    .replace_route(MAIN_TABLE, *net, hop, index, hop.is_some())?;
                self.have.routes.insert(*net, id.clone());
            }
            Step::Unroute { id, net } => {
                let index = self.index(id)?;
                self.vpc.del_route(&Route {
                    table: MAIN_TABLE,
                    dst: *net,
                    gateway: next_hop(*net),
                    oif: Some(index),
                })?;
                self.have.routes.remove(net);
            }
            Step::Unplug { id } => {
                let slot = self.slot(id)?.clone();
                match self.vpc.del_link(slot.vpc_index) {
                    Err(e) if !is_missing(&e) => return Err(e),
                    _ => {}
                }
                info!(
                    "simulated links: ENI {id} detached, {} removed",
                    self.node_name(slot.n)
                );
                self.have.links.remove(id);
                self.have.routes.retain(|_, e| e != id);
                self.have.gateways6.retain(|(e, _)| e != id);
                self.have.neighs4.retain(|(e, _)| e != id);
            }
        }
        Ok(())
    }

    /// IPv6 on an ENI's VPC end (a new link may come with it off).
    fn enable_ipv6_on_vpc_end(&self, id: &str) -> io::Result<()> {
        let knob = format!(
            "/proc/sys/net/ipv6/conf/{}/disable_ipv6",
            self.vpc_name(self.slot(id)?.n)
        );
        netns::run_in(&self.vpc_file, move || std::fs::write(knob, "0"))
    }

    fn slot(&self, id: &str) -> io::Result<&Slot> {
        self.have
            .links
            .get(id)
            .ok_or_else(|| io::Error::other(format!("ENI {id} is not plugged")))
    }

    fn index(&self, id: &str) -> io::Result<u32> {
        self.slot(id).map(|s| s.vpc_index)
    }

    /// Deletes every pair made (a veth goes with its VPC end).
    fn unplug_all(&mut self) {
        let links = std::mem::take(&mut self.have.links);
        for (id, slot) in links {
            match self.vpc.del_link(slot.vpc_index) {
                Err(e) if !is_missing(&e) => {
                    warn!(
                        "simulated links: cannot remove {} (ENI {id}): {e}",
                        self.vpc_name(slot.n)
                    )
                }
                _ => {}
            }
        }
    }
}

/// A step in words, for the log.
fn describe(step: &Step) -> String {
    match step {
        Step::Gateway4(gw) => format!("gateway {gw} on the VPC's lo"),
        Step::Plug { id, mac, .. } => format!("link for ENI {id} ({})", format_mac(mac)),
        Step::GatewayNeigh { id, gw } => format!("neighbour {gw} on ENI {id}'s link"),
        Step::Gateway6 { id, gw } => format!("gateway {gw} on ENI {id}'s VPC end"),
        Step::Route { id, net, .. } => format!("route {}/{} over ENI {id}", net.0, net.1),
        Step::Unroute { id, net } => format!("remove route {}/{} over ENI {id}", net.0, net.1),
        Step::Unplug { id } => format!("remove ENI {id}'s link"),
    }
}

/// The IPv4 gateway of the emulator's first vswitch, from its state (for
/// messages).
pub fn first_gateway(state: &Value) -> Option<Ipv4Addr> {
    state["vswitches"][0]["gateway"].as_str()?.parse().ok()
}
