//! The life of an ENI's addresses (or /28 prefixes), [`Addrs`]: when each
//! was added and when removed, so the metadata service can list an ENI's
//! addresses as they were `metadata_lag` ago.
//!
//! Invariants, kept by [`Addrs`]' methods: an entry is live until it is
//! removed, and is removed once (a removal never moves); a removed entry
//! is kept only until the lag no longer needs it ([`Addrs::forget`]); an
//! unassign names live, non-primary entries only, all or none.

use std::time::{Duration, Instant};

use super::params::{err, ApiError};

/// An address and its life.
#[derive(Debug, Clone)]
struct Addr<T> {
    ip: T,
    primary: bool,
    added: Instant,
    removed: Option<Instant>,
}

/// One kind of address of one ENI, in the order they were added.
#[derive(Debug, Clone)]
pub(crate) struct Addrs<T> {
    list: Vec<Addr<T>>,
}

impl<T: Copy + PartialEq> Addrs<T> {
    /// None.
    pub(crate) fn none() -> Addrs<T> {
        Addrs { list: Vec::new() }
    }

    /// `ips` added at `now` (`primary_first`: the first is the ENI's
    /// primary).
    pub(crate) fn added(ips: &[T], now: Instant, primary_first: bool) -> Addrs<T> {
        let mut a = Addrs::none();
        a.push(ips, now, primary_first);
        a
    }

    /// Adds `ips` at `now`.
    pub(crate) fn extend(&mut self, ips: &[T], now: Instant) {
        self.push(ips, now, false);
    }

    fn push(&mut self, ips: &[T], now: Instant, primary_first: bool) {
        let first = self.list.is_empty();
        self.list.extend(ips.iter().enumerate().map(|(i, ip)| Addr {
            ip: *ip,
            primary: primary_first && first && i == 0,
            added: now,
            removed: None,
        }));
    }

    /// The live entries, with whether each is the primary.
    pub(crate) fn live(&self) -> impl Iterator<Item = (T, bool)> + '_ {
        self.list
            .iter()
            .filter(|a| a.removed.is_none())
            .map(|a| (a.ip, a.primary))
    }

    /// The live entries.
    pub(crate) fn live_ips(&self) -> impl Iterator<Item = T> + '_ {
        self.live().map(|(ip, _)| ip)
    }

    /// The primary entry (live or not).
    pub(crate) fn primary(&self) -> Option<T> {
        self.list.iter().find(|a| a.primary).map(|a| a.ip)
    }

    /// The entries listed at `t` (added by then, not yet removed).
    pub(crate) fn listed_at(&self, t: Instant) -> Vec<T> {
        self.list
            .iter()
            .filter(|a| a.added <= t && a.removed.is_none_or(|r| r > t))
            .map(|a| a.ip)
            .collect()
    }

    /// Removes the live, non-primary entries each of `wanted` names
    /// (`names`), all or none: an unassign naming anything not assigned
    /// (`what`, as the error says it), or the primary, fails whole. The
    /// entries removed.
    pub(crate) fn unassign(
        &mut self,
        wanted: &[String],
        names: impl Fn(&T, &str) -> bool,
        what: &str,
        now: Instant,
    ) -> Result<Vec<T>, ApiError> {
        let gone: Vec<T> = wanted
            .iter()
            .map(|w| {
                self.list
                    .iter()
                    .find(|a| a.removed.is_none() && !a.primary && names(&a.ip, w))
                    .map(|a| a.ip)
                    .ok_or_else(|| {
                        err(
                            403,
                            "InvalidIp.IpUnassigned",
                            format!("The specified {what} \"{w}\" is not assigned on this ENI."),
                        )
                    })
            })
            .collect::<Result<_, _>>()?;
        for a in self
            .list
            .iter_mut()
            .filter(|a| a.removed.is_none() && gone.contains(&a.ip))
        {
            a.removed = Some(now);
        }
        Ok(gone)
    }

    /// Removes every live entry at `at`; those removed.
    pub(crate) fn remove_all(&mut self, at: Instant) -> Vec<T> {
        let live: Vec<T> = self.live_ips().collect();
        for a in &mut self.list {
            a.removed.get_or_insert(at);
        }
        live
    }

    /// Forgets entries removed longer than `lag` before `now`.
    pub(crate) fn forget(&mut self, now: Instant, lag: Duration) {
        self.list
            .retain(|a| a.removed.is_none_or(|r| r + lag > now));
    }

    /// Entries restored from a saved world, all listed since `since`.
    pub(crate) fn restored(ips: impl IntoIterator<Item = (T, bool)>, since: Instant) -> Addrs<T> {
        Addrs {
            list: ips
                .into_iter()
                .map(|(ip, primary)| Addr {
                    ip,
                    primary,
                    added: since,
                    removed: None,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::Addrs;

    #[test]
    fn removed_once_listed_until_then_forgotten_after_the_lag() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        let mut a = Addrs::added(&[1u32, 2, 3], t0, true);
        assert_eq!(a.primary(), Some(1));
        let w = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let names = |ip: &u32, s: &str| ip.to_string() == s;
        assert!(
            a.unassign(&w(&["1"]), names, "IP", t1).is_err(),
            "the primary"
        );
        assert!(
            a.unassign(&w(&["2", "9"]), names, "IP", t1).is_err(),
            "all or none"
        );
        assert_eq!(a.live_ips().count(), 3);
        assert_eq!(a.unassign(&w(&["2"]), names, "IP", t1).unwrap(), [2]);
        assert!(a.unassign(&w(&["2"]), names, "IP", t1).is_err(), "once");
        assert_eq!(a.listed_at(t0), [1, 2, 3], "as it was");
        assert_eq!(a.listed_at(t1), [1, 3]);
        // A later removal of everything does not move the first.
        let t2 = t1 + Duration::from_secs(1);
        assert_eq!(a.remove_all(t2), [1, 3]);
        assert_eq!(a.listed_at(t1), [1, 3]);
        a.forget(t2, Duration::from_millis(500));
        assert_eq!(a.listed_at(t1), [1, 3], "t2's removals are within the lag");
        a.forget(t2 + Duration::from_secs(1), Duration::from_millis(500));
        assert!(a.listed_at(t1).is_empty());
        a.extend(&[4], t2);
        assert_eq!(a.primary(), None, "forgotten with its entry");
        assert_eq!(a.live_ips().collect::<Vec<_>>(), [4]);
    }
}
