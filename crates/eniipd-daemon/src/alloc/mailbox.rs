//! Messages to the allocator's actor thread.
//!
//! Three bounded channels feed it: [`eniip_protocol::core::Envelope`]s from clients
//! (connection threads), [`Request`]s from the daemon and its own helpers,
//! and [`Event`]s that its helpers report (per-ENI workers, ENI operation
//! threads, the maintenance thread). Every request carries its own
//! bounded(1) reply channel.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use crossbeam_channel::Sender;

use eniip_cloud::{CloudError, Ipv4Prefix, Ipv6Prefix};
use eniip_protocol::core::EniInfo;

use super::capacity::Capacity;
use super::Snapshot;

/// The removal of a sandbox's datapath, run by the actor once it knows
/// the allocation is still that sandbox's.
pub(crate) struct Teardown(pub(crate) Box<dyn FnOnce() + Send>);

impl std::fmt::Debug for Teardown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Teardown")
    }
}

/// One unit of demand sent to the cloud: an address asked of an ENI.
pub(crate) type TicketId = u64;

/// A ticket as a worker gets it: its id and how the address is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unit {
    /// The ticket.
    pub(crate) ticket: TicketId,
    /// As part of a /28 prefix, or as a single secondary address.
    pub(crate) kind: super::prefix_mode::Kind,
    /// Where its IPv6 pair comes from (dual stack).
    pub(crate) v6: Option<super::prefix_mode::V6From>,
    /// Who asked it: a pod, or the pool's own top-up.
    pub(crate) origin: Origin,
}

/// Who asked a [`Unit`], which decides how long its worker gathers more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A client's demand (or what rides with it): more may be on its
    /// way, so the batch gathers until its oldest demand has waited the
    /// aggregation window. Demand that waited it already (for room in
    /// the backlog, behind the worker's last call) gathers no longer:
    /// it is asked once its batch is whole, like the pool's.
    Pod {
        /// When the oldest client of the planner's batch asked.
        since: Instant,
        /// The last unit of the planner's batch.
        last: bool,
    },
    /// The pool's own top-up, planned as one batch; `last`: the batch is
    /// whole with this unit, nothing more is coming for it.
    Pool {
        /// The last unit of the planner's batch.
        last: bool,
    },
}
/// One ENI create or free operation.
pub(crate) type OpId = u64;

/// What the daemon and the allocator's own helpers ask of the actor
/// (clients speak [`eniip_protocol::core::Command`], on a channel of their own).
#[derive(Debug)]
pub(crate) enum Request {
    /// A copy of the state, for `audit`.
    Snapshot(Sender<Snapshot>),
    /// Ids of every ENI known locally, being created or being freed.
    KnownEnis(Sender<Vec<String>>),
    /// SIGHUP: new pool sizes (min/max idle of `capacity` are applied).
    Reload {
        /// Capacity computed from the reloaded keys.
        capacity: Capacity,
        /// The effective configuration `config` shows from now on.
        view: Vec<(String, String)>,
        /// The capacity now in force.
        reply: Sender<Capacity>,
    },
    /// Liveness probe (watchdog).
    Ping(Sender<()>),
    /// Held allocations with a sandbox network (the sandbox reaper).
    Attached(Sender<Vec<crate::pool::Attached>>),
    /// The reaper found this sandbox gone: if the owner's allocation is
    /// still for that sandbox and that very attachment, `teardown` runs
    /// and then the address is released, with nothing in between.
    Reap {
        /// Whose.
        owner: eniip_protocol::core::Owner,
        /// The sandbox found gone.
        sandbox: Option<eniip_protocol::core::SandboxId>,
        /// Its attachment as the reaper saw it.
        seen: eniip_protocol::core::Attachment,
        /// What removes the attachment's datapath (none: nothing to remove).
        teardown: Option<Teardown>,
        /// `Released(Some(ip))` when released.
        reply: Sender<Result<eniip_protocol::core::Answer, eniip_protocol::core::AllocError>>,
    },
}

/// An ENI that is attached, in use and visible in metadata.
#[derive(Debug, Clone)]
pub(crate) struct ReadyEni {
    /// Its id, MAC, vswitch, and the vswitch's IPv4 CIDR and gateway (as
    /// metadata lists them; the IPv6 half is not read here: `None`).
    pub(crate) link: EniInfo,
    /// Its primary address.
    pub(crate) primary_ip: Ipv4Addr,
    /// Every IPv4 on it, primary included.
    pub(crate) v4: Vec<Ipv4Addr>,
    /// Every IPv6 on it.
    pub(crate) v6: Vec<Ipv6Addr>,
    /// Its IPv4 /28 prefixes (their addresses are not in `v4`).
    pub(crate) prefixes: Vec<Ipv4Prefix>,
    /// Created with single addresses because its vswitch had no free /28
    /// (prefix mode): prefixes are not asked for it for a while.
    pub(crate) prefix_fallback: bool,
    /// Its IPv6 /80s (dual stack; their addresses are carved, not in
    /// `v6`).
    pub(crate) v6_prefixes: Vec<Ipv6Prefix>,
    /// Created with single IPv6 addresses because its vswitch had no /80
    /// to give (dual stack, prefix mode): /80s are not asked on it for a
    /// while.
    pub(crate) v6_prefix_fallback: bool,
}

impl ReadyEni {
    /// `eni-...`
    pub(crate) fn id(&self) -> &str {
        &self.link.eni
    }

    /// Every IPv4 on it: `v4` and the addresses of its prefixes.
    pub(crate) fn all_v4(&self) -> Vec<Ipv4Addr> {
        let mut all = self.v4.clone();
        for p in &self.prefixes {
            all.extend(p.addresses());
        }
        all
    }
}

/// Where freeing an ENI stopped.
#[derive(Debug, Clone)]
pub(crate) enum FreeFailure {
    /// Detach refused: the ENI is still attached and usable.
    Detach(CloudError),
    /// Detached, but not deleted: it is no longer usable; the sweeper
    /// deletes it later.
    Delete(CloudError),
}

/// What the actor's helpers report.
#[derive(Debug)]
pub(crate) enum Event {
    /// A worker's AssignPrivateIpAddresses (+ AssignIpv6Addresses) ended.
    /// Addresses that came back are in `v4`/`v6` even when `error` is set
    /// (IPv4 granted, IPv6 refused).
    Assigned {
        /// The ENI.
        eni: String,
        /// The tickets the batch served, in order.
        tickets: Vec<TicketId>,
        /// A prefix call: the /28s granted (their addresses are in `v4`
        /// too). `None`: a call for single addresses.
        prefixes: Option<Vec<Ipv4Prefix>>,
        /// Granted IPv4.
        v4: Vec<Ipv4Addr>,
        /// Granted IPv6.
        v6: Vec<Ipv6Addr>,
        /// The /80 asked first for this call (dual stack, an ENI without
        /// one), when the cloud granted it: kept even if the IPv4 call
        /// then failed.
        v6_prefixes: Vec<Ipv6Prefix>,
        /// `error` is the cloud's refusal of that /80: no IPv4 was asked.
        v6_refused: bool,
        /// Why fewer than asked came back, if a call failed.
        error: Option<CloudError>,
    },
    /// A worker's unassign ended.
    Unassigned {
        /// The ENI.
        eni: String,
        /// IPv4 asked to give back.
        v4: Vec<Ipv4Addr>,
        /// IPv4 the cloud took back (all of `v4` unless `error`).
        gone_v4: Vec<Ipv4Addr>,
        /// IPv6 the cloud took back (all asked unless `error`).
        gone_v6: Vec<Ipv6Addr>,
        /// Prefixes the cloud took back (their addresses are in `v4` and
        /// `gone_v4` too).
        gone_prefixes: Vec<Ipv4Prefix>,
        /// Where it stopped, if it did: what is not gone is still there.
        error: Option<CloudError>,
    },
    /// CreateNetworkInterface returned this id (before attaching).
    EniCreated {
        /// The operation.
        op: OpId,
        /// The new ENI.
        eni: String,
    },
    /// The ENI of an operation is ready.
    EniReady {
        /// The operation.
        op: OpId,
        /// The ENI.
        eni: ReadyEni,
    },
    /// Creating failed; `leaked` names an ENI the rollback could not delete.
    EniFailed {
        /// The operation.
        op: OpId,
        /// Why.
        error: CloudError,
        /// An ENI left behind (the sweeper deletes it).
        leaked: Option<String>,
    },
    /// Freeing an ENI ended.
    EniFreed {
        /// The ENI.
        eni: String,
        /// Failure stage, if any.
        result: Result<(), FreeFailure>,
    },
    /// A ModifyNetworkInterfaceAttribute of an ENI's security groups
    /// ended (re-purposing it for another set).
    SetChanged {
        /// The ENI.
        eni: String,
        /// The set asked.
        set: eniip_protocol::core::SecurityGroupSet,
        /// Why it failed, if it did.
        error: Option<CloudError>,
    },
    /// The security groups of the managed ENIs attached to this
    /// instance, as DescribeNetworkInterfaces showed them.
    SecurityGroups {
        /// When the Describe call began.
        started: Instant,
        /// Each ENI with its groups.
        enis: Vec<(String, Vec<String>)>,
    },
    /// DescribeVSwitches free counts.
    VSwitchFree(Vec<(String, u64)>),
    /// The forecast's tick: the vswitches read at `at` (`None`: the read
    /// failed), see [`super::vswitch_reads`].
    ForecastTick {
        /// When the read answered.
        at: Instant,
        /// Each configured vswitch.
        read: Option<Vec<VSwitchRead>>,
    },
    /// A vswitch's IPv6 CIDR and gateway, as metadata lists them (read
    /// for `eni`; kept, since they do not change).
    VSwitchV6 {
        /// The vswitch.
        vswitch: String,
        /// Its IPv6 CIDR.
        cidr6: String,
        /// Its IPv6 gateway.
        gateway6: Ipv6Addr,
    },
    /// The cloud's view of the managed ENIs, taken after `started`.
    Reconcile {
        /// When the Describe call began.
        started: Instant,
        /// Managed ENIs attached to this instance.
        enis: Vec<CloudEniView>,
        /// Ids of the ENIs tagged for this instance that exist but are
        /// not in `enis`, read after it, so that one attached or detached
        /// in between is in one of the two (None: that read failed). A
        /// managed ENI in neither list was deleted.
        detached: Option<Vec<String>>,
    },
}

/// One vswitch as the forecast reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VSwitchRead {
    /// `vsw-...`
    pub(crate) id: String,
    /// Its free addresses.
    pub(crate) free: u64,
    /// The addresses it holds for its users.
    pub(crate) limit: u64,
}

/// A managed, attached ENI as the cloud shows it (for reconcile).
#[derive(Debug, Clone)]
pub(crate) struct CloudEniView {
    /// Ready information (metadata included) when it is visible there.
    pub(crate) eni: ReadyEni,
    /// True when metadata had it (gateway and CIDR are real).
    pub(crate) in_metadata: bool,
}
