//! The daemon's side of the socket: the Unix-socket listener that serves
//! the line protocol ([`crate::protocol`], which the clients speak too).
//!
//! The listener does framing, limits, peer credentials and access checks;
//! every command it parses goes to the allocator as one
//! [`crate::core::Command`] through [`crate::core::Commands`], and the
//! answer is rendered back by [`crate::protocol::answer_reply`].

mod attach;
pub mod listener;
pub(crate) mod peer;
pub mod socket;
