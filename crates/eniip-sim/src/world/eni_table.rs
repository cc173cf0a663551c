//! The ENIs by id ([`SimEnis`]): a deleted ENI lingers for the metadata
//! lag (metadata still lists it) but is answered for as an unknown one;
//! no two ENIs ever get the same MAC.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use super::params::{err, ApiError};
use super::sim_eni::{Freed, SimEni};
use eniip_util::rand::Rng;

/// Every ENI by id (deleted ones linger for the metadata lag), and every
/// MAC handed out.
#[derive(Debug, Default)]
pub(crate) struct SimEnis {
    by_id: BTreeMap<String, SimEni>,
    macs: HashSet<String>,
}

fn not_found(id: &str) -> ApiError {
    err(
        404,
        "InvalidEniId.NotFound",
        format!("The specified NetworkInterfaceId \"{id}\" does not exist."),
    )
}

impl SimEnis {
    /// The ENI `id`, unless unknown or deleted.
    pub(crate) fn get(&self, id: &str) -> Result<&SimEni, ApiError> {
        self.by_id
            .get(id)
            .filter(|e| !e.deleted())
            .ok_or_else(|| not_found(id))
    }

    /// The ENI `id` to change, unless unknown or deleted.
    pub(crate) fn get_mut(&mut self, id: &str) -> Result<&mut SimEni, ApiError> {
        self.by_id
            .get_mut(id)
            .filter(|e| !e.deleted())
            .ok_or_else(|| not_found(id))
    }

    /// The ENIs not deleted.
    pub(crate) fn live(&self) -> impl Iterator<Item = &SimEni> {
        self.by_id.values().filter(|e| !e.deleted())
    }

    /// Every ENI, deleted ones included (metadata lags).
    pub(crate) fn all(&self) -> impl Iterator<Item = &SimEni> {
        self.by_id.values()
    }

    /// ENIs attached (or being attached) to `instance`.
    pub(crate) fn attached_to(&self, instance: &str) -> usize {
        self.live()
            .filter(|e| e.instance() == Some(instance))
            .count()
    }

    /// A MAC no ENI had.
    pub(crate) fn new_mac(&mut self, rng: &mut Rng) -> String {
        loop {
            let b = rng.next_u64();
            let mac = format!(
                "00:16:3e:{:02x}:{:02x}:{:02x}",
                (b >> 16) as u8,
                (b >> 8) as u8,
                b as u8
            );
            if self.macs.insert(mac.clone()) {
                return mac;
            }
        }
    }

    /// Adds an ENI.
    pub(crate) fn insert(&mut self, e: SimEni) {
        self.macs.insert(e.mac().to_string());
        self.by_id.insert(e.id().to_string(), e);
    }

    /// Ends the transitions due at `now` and forgets what the lag no
    /// longer needs; what deleted ENIs give back.
    pub(crate) fn settle(&mut self, now: Instant, lag: Duration) -> Vec<Freed> {
        let freed = self
            .by_id
            .values_mut()
            .filter_map(|e| e.settle(now, lag))
            .collect();
        self.by_id.retain(|_, e| !e.forgotten(now, lag));
        freed
    }

    /// The ENIs of a restored world (nothing else is kept).
    pub(crate) fn restored(enis: Vec<SimEni>) -> SimEnis {
        let mut s = SimEnis::default();
        for e in enis {
            s.insert(e);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::time::{Duration, Instant};

    use super::SimEnis;
    use crate::world::sim_eni::tests::eni;
    use eniip_util::rand::Rng;

    #[test]
    fn a_deleted_eni_gives_its_addresses_back_once_and_lingers_for_the_lag() {
        let t0 = Instant::now();
        let lag = Duration::from_secs(2);
        let mut enis = SimEnis::default();
        enis.insert(eni(t0));
        let gone = enis
            .get_mut("eni-1")
            .unwrap()
            .unassign_v4(&["10.0.0.2".into()], t0)
            .unwrap();
        assert_eq!(gone, [Ipv4Addr::new(10, 0, 0, 2)]);
        assert!(
            enis.get_mut("eni-1")
                .unwrap()
                .unassign_v4(&["10.0.0.1".into()], t0)
                .is_err(),
            "the primary address"
        );
        enis.get_mut("eni-1")
            .unwrap()
            .delete(t0, Duration::ZERO)
            .unwrap();
        let freed = enis.settle(t0, lag);
        assert_eq!(
            freed,
            [(
                "vsw-a".to_string(),
                vec![Ipv4Addr::new(10, 0, 0, 1)],
                Vec::new(),
                vec![Ipv4Addr::new(10, 0, 0, 16)],
                Vec::new()
            )]
        );
        assert!(enis.get("eni-1").is_err(), "deleted is unknown");
        assert_eq!(enis.all().count(), 1, "kept for the lag");
        assert!(enis.settle(t0 + lag / 2, lag).is_empty(), "given back once");
        enis.settle(t0 + lag, lag);
        assert_eq!(enis.all().count(), 0);
    }

    #[test]
    fn no_two_enis_get_one_mac() {
        let mut enis = SimEnis::default();
        enis.insert(eni(Instant::now()));
        let mut rng = Rng::seeded(3);
        let macs: std::collections::HashSet<String> =
            (0..200).map(|_| enis.new_mac(&mut rng)).collect();
        assert_eq!(macs.len(), 200);
        assert!(!macs.contains("00:16:3e:00:00:01"));
    }
}
