//! eniip-protocol: what every eniipd program says to another. The shared
//! vocabulary ([`core`]: owners, sandboxes, allocations, commands and the
//! allocator's errors), the line protocol ([`protocol`]: pure parse and
//! render, and its one client), the command-line parser the four binaries
//! share ([`cli`]), and the release queue's files eniip-cni writes and
//! eniipd reads ([`releases`]). No cloud, no datapath, no daemon state.

pub mod cli;
pub mod core;
pub mod protocol;
pub mod releases;
