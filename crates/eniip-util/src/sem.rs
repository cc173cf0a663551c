//! A counting semaphore that never blocks: `try_acquire` hands out an RAII
//! [`Permit`] or refuses. The allocator caps the number of ENIs and the ENI
//! operations in flight with it; because permits travel with the work and
//! release on drop, no error path can leak one (the seed's `maxENI` and
//! `eniOperChan` tokens were returned by hand and could be lost or taken
//! twice).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A fixed-size pool of permits.
#[derive(Debug, Clone)]
pub struct Semaphore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    limit: AtomicUsize,
    used: AtomicUsize,
}

/// One unit of a [`Semaphore`], returned when dropped.
#[derive(Debug)]
pub struct Permit {
    inner: Arc<Inner>,
}

impl Semaphore {
    /// A semaphore with `limit` permits.
    pub fn new(limit: usize) -> Semaphore {
        Semaphore {
            inner: Arc::new(Inner {
                limit: AtomicUsize::new(limit),
                used: AtomicUsize::new(0),
            }),
        }
    }

    /// A permit if one is free, else `None`.
    pub fn try_acquire(&self) -> Option<Permit> {
        let limit = self.inner.limit.load(Ordering::Acquire);
        self.inner
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                (u < limit).then_some(u + 1)
            })
            .ok()
            .map(|_| Permit {
                inner: Arc::clone(&self.inner),
            })
    }

    /// A permit even when all are taken (for ENIs found already attached at
    /// start, which exist whatever the limit says). `available` then reads 0
    /// until enough are returned.
    pub fn acquire_over_limit(&self) -> Permit {
        self.inner.used.fetch_add(1, Ordering::AcqRel);
        Permit {
            inner: Arc::clone(&self.inner),
        }
    }

    /// Permits currently held.
    pub fn used(&self) -> usize {
        self.inner.used.load(Ordering::Acquire)
    }

    /// Permits that `try_acquire` could still hand out.
    pub fn available(&self) -> usize {
        self.limit().saturating_sub(self.used())
    }

    /// The configured number of permits.
    pub fn limit(&self) -> usize {
        self.inner.limit.load(Ordering::Acquire)
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.inner.used.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_are_bounded_and_returned_on_drop() {
        let s = Semaphore::new(2);
        let a = s.try_acquire().unwrap();
        let b = s.try_acquire().unwrap();
        assert!(s.try_acquire().is_none());
        assert_eq!(s.available(), 0);
        drop(a);
        assert_eq!(s.available(), 1);
        let c = s.try_acquire().unwrap();
        drop((b, c));
        assert_eq!(s.used(), 0);
    }

    #[test]
    fn over_limit_permits_count() {
        let s = Semaphore::new(1);
        let a = s.acquire_over_limit();
        let b = s.acquire_over_limit();
        assert_eq!(s.used(), 2);
        assert!(s.try_acquire().is_none());
        drop(a);
        assert!(s.try_acquire().is_none());
        drop(b);
        assert!(s.try_acquire().is_some());
    }
}
