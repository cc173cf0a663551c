//! Another eniipd on this instance (another state directory, so another
//! node id): never run beside a live one.

use log::warn;

use crate::cloud::{CloudApi, CloudError};

use super::{exit, DaemonError};

/// ENIs attached to this instance that another eniipd (another state
/// directory, so another node id) created and that runs now:
/// `(eni, node id)`.
pub(super) fn foreign_enis(
    cloud: &dyn CloudApi,
    instance_id: &str,
    node_id: &str,
) -> Result<Vec<(String, String)>, CloudError> {
    let q = crate::cloud::EniQuery {
        instance_id: Some(instance_id.to_string()),
        ..Default::default()
    };
    Ok(cloud
        .describe_enis(&q)?
        .into_iter()
        .filter_map(|e| {
            let peer = e.foreign_node(instance_id, node_id)?.to_string();
            if crate::util::node::alive(&peer) {
                Some((e.id, peer))
            } else {
                warn!(
                    "{} was made by eniipd node {peer}, which does not run here: adopting it",
                    e.id
                );
                None
            }
        })
        .collect())
}

/// Two daemons on one instance would each take the other's addresses for
/// idle ones: refused (75), with what to do.
pub(super) fn refuse_beside_peer(foreign: Vec<(String, String)>) -> Result<(), DaemonError> {
    if foreign.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = foreign
        .iter()
        .map(|(eni, node)| format!("{eni} (node {node})"))
        .collect();
    Err(DaemonError::new(
        exit::TEMPFAIL,
        format!(
            "another eniipd (another state directory) runs on this host and manages ENIs attached to this instance: {}; two daemons on one instance would hand out each other's addresses. Stop one of them (once it is gone, this one adopts its ENIs)",
            list.join(", ")
        ),
    ))
}
