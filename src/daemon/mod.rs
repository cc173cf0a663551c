//! `eniipd` itself: start-up (config, state, cloud, recovery), serving, and
//! shutdown, with the exit codes of SPEC section 2.

pub mod args;
pub mod backend;
