//! eniip-cni's logic, the CNI plugin (spec 0.4.0, 1.0.0 and 1.1.0): gets a
//! container's address from eniipd over its socket ([`eniipd_client`]) and
//! builds the container's network ([`datapath`]) over netlink,
//! synchronously.
//!
//! The parts: the verbs on one container, ADD, DEL and CHECK
//! ([`container`]); the verbs on the whole network, GC and STATUS
//! ([`network`]); what a pod asks through its annotations
//! ([`annotations`]); where an ADD's time went, on request
//! ([`add_profile`]); VERSION and the version a caller speaks ([`version`]);
//! who an attachment is to eniipd, its owner and sandbox ([`identity`]);
//! one invocation per owner at a time ([`lock`]); the container's netns
//! ([`netns`]); the CNI contract's types ([`spec`]); eniipd's refusals in
//! words a user can act on ([`wording`]).
//!
//! Invariants: an eniipd that cannot be asked (away: restarting, replaced
//! by a rollout, hung) is waited for by ADD up to `daemonWait` and
//! [`eniipd_client::ADD_BUDGET`] (then CNI error 11, before anything changes),
//! and never fails a DEL: the node's side is torn down and the release
//! queued for eniipd ([`eniip_protocol::releases`]); the environment is checked
//! before anything is asked or built (CNI error 4); the rest is kept by
//! the verbs (see [`container`]).

pub mod add_profile;
pub(crate) mod annotations;
pub(crate) mod built;
pub(crate) mod container;
mod container_netns;
pub(crate) mod eniipd_client;
pub(crate) mod identity;
pub mod install;
pub mod lock;
pub(crate) mod network;
pub mod spec;
#[cfg(test)]
pub(crate) mod test_support;
pub mod version;

// The datapath is its own crate (shared with eniipd's reaper and the
// emulator's host links); the plugin names it as its own parts.
pub use eniip_datapath::{datapath, netlink, netns};
pub(crate) mod wording;

use std::time::Duration;

use spec::{code, CniError, Command, Env, NetConf};

/// How long ADD waits for the ENI's link to appear after the attach.
pub(crate) const LINK_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs one command; `Ok` is what goes to stdout (possibly nothing).
pub fn run(cmd: Command, env: &Env, stdin: &[u8]) -> Result<String, CniError> {
    if cmd == Command::Version {
        return Ok(version::answer(stdin));
    }
    let conf = NetConf::parse(stdin, cmd)?;
    match cmd {
        Command::Add => container::add(&conf, env),
        Command::Del => container::del(&conf, env).map(|()| String::new()),
        Command::Check => container::check(&conf, env).map(|()| String::new()),
        Command::Gc => network::gc(&conf).map(|()| String::new()),
        Command::Status => network::status(&conf).map(|()| String::new()),
        Command::Version => unreachable!("handled above"),
    }
}

fn datapath_error(e: datapath::DatapathError) -> CniError {
    CniError::new(code::DATAPATH, e.to_string())
}
