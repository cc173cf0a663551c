//! Small self-contained helpers shared by the daemon, the client and the
//! emulator: wall-clock formatting, a seedable PRNG, encodings, secrets and a
//! non-blocking semaphore. None of them does I/O beyond reading the clock or
//! `/dev/urandom`.

pub mod encoding;
pub mod node;
pub mod rand;
pub mod secret;
pub mod sem;
pub mod thread;
pub mod time;

pub use secret::{mask, Secret};
