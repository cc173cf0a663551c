//! Which ENIs are this eniipd's. An ENI is managed when its tags say
//! eniipd made it for this instance and no other eniipd that runs on this
//! host made it ([`Eni::is_managed_by`]); one made by another node id
//! whose daemon no longer runs is adopted. Another daemon that does run
//! and manages ENIs attached here is a live peer: this one refuses to run
//! beside it. Read by the maintenance thread, start-up recovery, `audit`
//! and the daemon's start.

use log::warn;

use eniip_cloud::{
    CloudApi, CloudError, Eni, EniQuery, TAG_CREATOR_KEY, TAG_CREATOR_VALUE, TAG_INSTANCE_KEY,
};

/// Every ENI attached to this instance (any status, anyone's).
pub(crate) fn attached(cloud: &dyn CloudApi, instance_id: &str) -> Result<Vec<Eni>, CloudError> {
    let q = EniQuery {
        instance_id: Some(instance_id.to_string()),
        ..EniQuery::default()
    };
    cloud.describe_enis(&q)
}

/// ENIs among `enis` that another eniipd (another node id) made and that
/// runs on this host, with that node: two daemons on one instance would
/// hand out each other's addresses. One whose node does not run here is
/// adopted (logged).
pub(crate) fn live_peers(enis: &[Eni], instance_id: &str, node_id: &str) -> Vec<(String, String)> {
    enis.iter()
        .filter_map(|e| {
            let peer = e.foreign_node(instance_id, node_id)?.to_string();
            if eniip_util::node_liveness::alive(&peer) {
                Some((e.id.clone(), peer))
            } else {
                warn!(
                    "{} was made by eniipd node {peer}, which does not run here: adopting it",
                    e.id
                );
                None
            }
        })
        .collect()
}

/// Why this daemon refuses to run beside the live peers of [`live_peers`].
pub(crate) fn peer_refusal(peers: &[(String, String)]) -> String {
    let list: Vec<String> = peers
        .iter()
        .map(|(eni, node)| format!("{eni} (node {node})"))
        .collect();
    format!(
        "another eniipd (another state directory) runs on this host and manages ENIs attached to this instance: {}; two daemons on one instance would hand out each other's addresses. Stop one of them (once it is gone, this one adopts its ENIs)",
        list.join(", ")
    )
}

/// The managed ENIs attached to this instance (any status).
pub(crate) fn attached_managed(
    cloud: &dyn CloudApi,
    instance_id: &str,
    node_id: &str,
) -> Result<Vec<Eni>, CloudError> {
    Ok(attached(cloud, instance_id)?
        .into_iter()
        .filter(|e| e.is_managed_by(instance_id, node_id))
        .collect())
}

/// ENIs tagged for this instance that are not attached to it.
pub(crate) fn tagged_unattached(
    cloud: &dyn CloudApi,
    instance_id: &str,
    node_id: &str,
) -> Result<Vec<Eni>, CloudError> {
    Ok(unattached(
        tagged_for_instance(cloud, instance_id, node_id)?,
        instance_id,
    ))
}

/// The managed ENIs tagged for this instance, attached anywhere or not.
pub(crate) fn tagged_for_instance(
    cloud: &dyn CloudApi,
    instance_id: &str,
    node_id: &str,
) -> Result<Vec<Eni>, CloudError> {
    let q = EniQuery {
        tags: vec![
            (TAG_CREATOR_KEY.to_string(), TAG_CREATOR_VALUE.to_string()),
            (TAG_INSTANCE_KEY.to_string(), instance_id.to_string()),
        ],
        ..EniQuery::default()
    };
    Ok(cloud
        .describe_enis(&q)?
        .into_iter()
        .filter(|e| e.is_managed_by(instance_id, node_id))
        .collect())
}

/// Of `enis`, those not attached to this instance.
pub(crate) fn unattached(enis: Vec<Eni>, instance_id: &str) -> Vec<Eni> {
    enis.into_iter()
        .filter(|e| e.instance_id.as_deref() != Some(instance_id))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use eniip_cloud::{EniStatus, TAG_NODE_KEY};
    use eniip_util::node_liveness::Beacon;

    /// An ENI eniipd made for `i-1` (by `node`, or before node ids),
    /// attached to `on`.
    fn eni(id: &str, on: Option<&str>, node: Option<&str>) -> Eni {
        let mut tags = BTreeMap::from([
            (TAG_CREATOR_KEY.to_string(), TAG_CREATOR_VALUE.to_string()),
            (TAG_INSTANCE_KEY.to_string(), "i-1".to_string()),
        ]);
        if let Some(n) = node {
            tags.insert(TAG_NODE_KEY.to_string(), n.to_string());
        }
        Eni {
            id: id.into(),
            mac: String::new(),
            status: EniStatus::InUse,
            eni_type: String::new(),
            instance_id: on.map(Into::into),
            vswitch_id: String::new(),
            zone_id: String::new(),
            primary_ip: None,
            private_ips: Vec::new(),
            ipv6s: Vec::new(),
            ipv4_prefixes: Vec::new(),
            ipv6_prefixes: Vec::new(),
            security_group_ids: Vec::new(),
            tags,
            created_at: None,
        }
    }

    #[test]
    fn another_running_eniipd_is_a_live_peer_and_a_gone_one_is_adopted() {
        let other = format!("ownership-test-{}", std::process::id());
        let enis = [
            eni("eni-mine", Some("i-1"), Some("me")),
            eni("eni-old", Some("i-1"), None),
            eni("eni-other", Some("i-1"), Some(&other)),
        ];
        // The other node does not run here: its ENI is adopted.
        assert!(live_peers(&enis, "i-1", "me").is_empty());
        assert!(enis.iter().all(|e| e.is_managed_by("i-1", "me")));
        let beacon = Beacon::hold(&other).unwrap();
        let peers = live_peers(&enis, "i-1", "me");
        assert_eq!(peers, [("eni-other".to_string(), other.clone())]);
        assert!(!enis[2].is_managed_by("i-1", "me"));
        assert!(enis[..2].iter().all(|e| e.is_managed_by("i-1", "me")));
        let refusal = peer_refusal(&peers);
        assert!(
            refusal.contains(&format!("eni-other (node {other})")),
            "{refusal}"
        );
        drop(beacon);
        assert!(live_peers(&enis, "i-1", "me").is_empty());
    }

    #[test]
    fn unattached_are_those_not_on_this_instance() {
        let enis = vec![
            eni("a", Some("i-1"), None),
            eni("b", None, None),
            eni("c", Some("i-2"), None),
        ];
        let ids: Vec<String> = unattached(enis, "i-1").into_iter().map(|e| e.id).collect();
        assert_eq!(ids, ["b", "c"]);
    }
}
