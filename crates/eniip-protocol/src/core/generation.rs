//! An allocation's identity ([`Generation`]): what a release, a cleanup or
//! a reap names so that it undoes exactly the allocation it was made for,
//! never a newer one that happens to have the same owner, sandbox or
//! address by the time it runs.
//!
//! Invariant (kept by the pool, which hands them out, and by the store,
//! which makes them durable): every `alloc` answered gets a generation no
//! earlier answer had, across restarts and `kill -9` too. The counter is
//! persisted with the allocation records themselves (an answer is sent
//! only once its record is durable, and the state keeps the highest
//! generation ever recorded even after the allocation is gone), so a
//! generation that was answered is never issued again. `0` is no
//! generation: an allocation an older eniipd recorded.

use std::fmt;

use super::AllocError;

/// One allocation's identity: `gen=N` on the wire, `N >= 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Generation(u64);

impl Generation {
    /// No generation (an allocation recorded before generations existed).
    pub const NONE: Generation = Generation(0);
    /// The first one ever handed out.
    pub const FIRST: Generation = Generation(1);

    /// The generation numbered `n` (as stored).
    pub fn from_u64(n: u64) -> Generation {
        Generation(n)
    }

    /// Its number (as stored).
    pub fn get(self) -> u64 {
        self.0
    }

    /// True for an allocation recorded without one.
    pub fn is_none(self) -> bool {
        self.0 == 0
    }

    /// The one after it.
    pub fn next(self) -> Generation {
        Generation(self.0.saturating_add(1))
    }

    /// `gen=`'s value as a client sends it: a decimal number from 1.
    pub fn parse(s: &str) -> Result<Generation, AllocError> {
        match s.parse::<u64>() {
            Ok(n) if n > 0 && !s.starts_with('+') => Ok(Generation(n)),
            _ => Err(AllocError::bad(format!(
                "gen={} is not a generation (a number from 1)",
                s.chars().take(32).collect::<String>()
            ))),
        }
    }
}

impl std::str::FromStr for Generation {
    type Err = AllocError;

    fn from_str(s: &str) -> Result<Generation, AllocError> {
        Generation::parse(s)
    }
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_client_may_send() {
        assert_eq!(Generation::parse("7").unwrap().get(), 7);
        for bad in ["0", "", "-1", "+3", "x", "18446744073709551616"] {
            assert!(Generation::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Generation::FIRST.next().to_string(), "2");
    }
}
