//! Another eniipd on this instance: found before the first cloud call
//! that could take its addresses, and refused.

use crate::alloc::ownership::{attached, live_peers, peer_refusal};
use eniip_cloud::{CloudApi, CloudError};

use super::{exit, DaemonError};

/// ENIs attached to this instance that a live eniipd with another node id
/// made, with that node id.
pub(super) fn foreign_enis(
    cloud: &dyn CloudApi,
    instance_id: &str,
    node_id: &str,
) -> Result<Vec<(String, String)>, CloudError> {
    Ok(live_peers(
        &attached(cloud, instance_id)?,
        instance_id,
        node_id,
    ))
}

/// Exit 75 when a live peer manages ENIs of this instance.
pub(super) fn refuse_beside_peer(foreign: Vec<(String, String)>) -> Result<(), DaemonError> {
    if foreign.is_empty() {
        return Ok(());
    }
    Err(DaemonError::new(exit::TEMPFAIL, peer_refusal(&foreign)))
}
