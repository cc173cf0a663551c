//! Batched ENI status checks. ENI operations running at the same time
//! (up to `max_concurrent_eni_ops`) each need DescribeNetworkInterfaces to
//! confirm a state; requests that arrive within a short window share one
//! call with every id, so a burst that creates three ENIs confirms them
//! with one call instead of three.
//!
//! The first caller with no fetch in flight becomes the leader: it waits
//! the window, takes every id registered so far, calls the cloud (with no
//! lock held) and publishes the results. Others wait (with their deadline)
//! for a fetch that started after they registered.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use eniip_cloud::{CloudApi, CloudError, CloudErrorKind, Eni, EniQuery, EniStatus};

#[derive(Default)]
struct Inner {
    wanted: BTreeSet<String>,
    taken: u64,
    in_flight: bool,
    results: HashMap<String, (u64, Result<Option<Eni>, CloudError>)>,
}

/// Shares DescribeNetworkInterfaces calls between concurrent waits.
pub(crate) struct StatusBatcher {
    cloud: Arc<dyn CloudApi>,
    window: Duration,
    inner: Mutex<Inner>,
    cv: Condvar,
}

impl std::fmt::Debug for StatusBatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusBatcher")
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

impl StatusBatcher {
    /// A batcher gathering requests for `window`.
    pub(crate) fn new(cloud: Arc<dyn CloudApi>, window: Duration) -> StatusBatcher {
        StatusBatcher {
            cloud,
            window,
            inner: Mutex::new(Inner::default()),
            cv: Condvar::new(),
        }
    }

    /// The ENI as the OpenAPI shows it now (`None`: it does not exist).
    pub(crate) fn describe(&self, id: &str, deadline: Instant) -> Result<Option<Eni>, CloudError> {
        let mut g = self.inner.lock();
        g.wanted.insert(id.to_string());
        let target = g.taken + 1;
        loop {
            if let Some((gen, r)) = g.results.get(id) {
                if *gen >= target {
                    return r.clone();
                }
            }
            if !g.in_flight {
                g.in_flight = true;
                drop(g);
                std::thread::sleep(self.window);
                let mut l = self.inner.lock();
                l.taken += 1;
                let gen = l.taken;
                let ids: Vec<String> = std::mem::take(&mut l.wanted).into_iter().collect();
                drop(l);
                let q = EniQuery {
                    eni_ids: ids.clone(),
                    ..EniQuery::default()
                };
                let fetched = self.cloud.describe_enis(&q);
                g = self.inner.lock();
                for i in &ids {
                    let r = match &fetched {
                        Ok(list) => Ok(list.iter().find(|e| e.id == *i).cloned()),
                        Err(e) => Err(e.clone()),
                    };
                    g.results.insert(i.clone(), (gen, r));
                }
                g.in_flight = false;
                // Results nobody will read again are dropped over time.
                if g.results.len() > 256 {
                    let keep = gen.saturating_sub(4);
                    g.results.retain(|_, (gen, _)| *gen >= keep);
                }
                self.cv.notify_all();
                continue;
            }
            if self.cv.wait_until(&mut g, deadline).timed_out() {
                return Err(CloudError::new(
                    CloudErrorKind::Timeout,
                    "DescribeNetworkInterfaces",
                    format!("no status of {id} in time"),
                ));
            }
        }
    }

    /// Polls (batched) until the ENI is in `want`; `NotFound` if it is gone.
    pub(crate) fn wait_status(
        &self,
        id: &str,
        want: EniStatus,
        deadline: Instant,
    ) -> Result<Eni, CloudError> {
        eniip_cloud::wait::wait_eni_status_by(id, want, deadline, || self.describe(id, deadline))
    }
}
