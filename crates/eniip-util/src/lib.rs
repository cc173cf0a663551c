//! Small self-contained helpers shared by the daemon, the client and the
//! emulator: wall-clock formatting, a seedable PRNG, encodings, secrets and a
//! non-blocking semaphore, namespace identities, a socket peer's credentials, the socket servers' accept
//! loop, the heap's tuning, and the tests' skip policy. None of them does I/O beyond reading the clock, `/dev/urandom`, a
//! node's liveness socket and a namespace file's metadata, and accepting
//! on a listener it is given.

pub(crate) mod accept;
pub mod encoding;
pub mod memory;
pub(crate) mod netns_identity;
pub(crate) mod node_liveness;
pub(crate) mod peercred;
pub mod rand;
pub(crate) mod secret;
pub(crate) mod sem;
pub mod testing;
pub mod thread;
pub mod time;

pub use secret::{mask, Secret};
