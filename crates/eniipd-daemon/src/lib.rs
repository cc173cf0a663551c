//! eniipd: keeps a warm pool of secondary private IPs on the elastic network
//! interfaces of one Alibaba Cloud ECS instance and hands them out over a
//! Unix-socket line protocol. A synchronous re-implementation of Terway's
//! ENI multi-IP mode: OS threads and crossbeam channels, no async runtime.
//!
//! Layout (the folders follow the architecture):
//! - [`config`]: `eni.json` -> validated [`config::Config`].
//! - [`cloud`]: signed OpenAPI client, metadata, credentials, retries; the
//!   [`cloud::CloudApi`] trait the allocator is written against.
//! - [`alloc`]: the allocator (per-ENI workers, ENI lifecycle, planning).
//! - [`pool`]: pool state (idle, inuse, reserved, cooling, invalid).
//! - [`store`]: durable state; the only code that touches the state files.
//! - [`protocol`]: the line protocol (pure parse and render), which the
//!   daemon serves and eniipctl and eniip-cni speak.
//! - [`releases`]: the releases eniip-cni queues while eniipd is away.
//! - [`server`]: the daemon's socket listener.
//! - [`cni`]: eniip-cni, the CNI plugin.
//! - [`sim`]: `eniip-sim`, the OpenAPI and metadata emulator.
//! - [`daemon`]: wires it all together for `eniipd`.
//! - [`cli`]: what the binaries' command lines share.

pub(crate) mod alloc;
pub mod cli;
pub mod cloud;
pub mod cni;
pub mod config;
pub mod core;
pub mod daemon;
pub(crate) mod httpd;
pub(crate) mod logging;
pub mod metrics;
pub(crate) mod pool;
pub mod protocol;
pub mod releases;
pub mod server;
pub mod sim;
pub mod store;
pub(crate) mod systemd;
pub mod util;
