//! eniipd-daemon: eniipd itself. Keeps a warm pool of secondary private IPs
//! on the elastic network interfaces of one Alibaba Cloud ECS instance and
//! hands them out over a Unix-socket line protocol. A synchronous
//! re-implementation of Terway's ENI multi-IP mode: OS threads and
//! crossbeam channels, no async runtime.
//!
//! Layout (the folders follow the architecture):
//! - [`config`]: `eni.json` -> validated [`config::Config`].
//! - [`alloc`]: the allocator (per-ENI workers, ENI lifecycle, planning).
//! - [`pool`]: pool state (idle, inuse, reserved, cooling, invalid).
//! - [`store`]: durable state; the only code that touches the state files.
//! - [`server`]: the daemon's socket listener.
//! - [`metrics`]: the Prometheus families it exports.
//! - [`daemon`]: wires it all together for `eniipd`.
//!
//! What it shares with the other programs is in their crates: the
//! vocabulary and line protocol (`eniip_protocol`), the cloud client
//! (`eniip_cloud`), the datapath its reaper tears down (`eniip_datapath`).
//! It never links the emulator: `eniipd --simulate` runs the `eniip-sim`
//! program beside it.

pub(crate) mod alloc;
pub mod config;
pub mod daemon;
pub mod metrics;
pub(crate) mod pool;
pub mod server;
pub mod store;
