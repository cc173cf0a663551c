//! eniip-util: small self-contained helpers shared by every eniipd program
//! (the daemon, the client, the CNI plugin and the emulator): wall-clock formatting, a seedable PRNG, encodings, secrets and a
//! non-blocking semaphore, namespace identities, a socket peer's credentials, the socket servers' accept
//! loop, the heap's tuning, and the tests' skip policy. None of them does I/O beyond reading the clock, `/dev/urandom`, a
//! node's liveness socket and a namespace file's metadata, and accepting
//! on a listener it is given.

pub mod accept;
pub mod encoding;
pub mod logging;
pub mod memory;
pub mod netns_identity;
pub mod node_liveness;
pub mod peercred;
pub mod rand;
pub mod secret;
pub mod sem;
pub mod spelling;
pub mod systemd;
pub mod testing;
pub mod thread;
pub mod time;

pub use secret::{mask, Secret};
