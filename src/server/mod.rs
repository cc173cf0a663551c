//! The daemon's client surface: the pure line protocol ([`protocol`]) and the
//! Unix-socket listener that serves it.
//!
//! The listener does framing, limits, peer credentials and access checks;
//! every command it parses goes to the allocator as one
//! [`crate::core::Command`] through [`crate::core::Commands`], and the
//! answer is rendered back by [`protocol::answer_reply`].

mod attach;
pub mod listener;
pub(crate) mod peer;
pub mod protocol;
pub mod socket;
