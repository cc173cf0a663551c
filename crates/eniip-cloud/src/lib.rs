//! Everything that speaks to Alibaba Cloud: the signed RPC OpenAPI (ECS and
//! VPC), the instance metadata service, credentials, retries and client-side
//! rate limits.
//!
//! The rest of the daemon sees one trait, [`CloudApi`] (the seed's
//! `ipam.API`), implemented over HTTP by [`aliyun::AliyunCloud`] and in
//! memory by test fakes. Implementations do their own retrying: an error
//! returned from a trait method is final for that call. Release paths treat
//! "already gone" answers as success.

pub mod aliyun;
pub mod credentials;
pub(crate) mod ecs;
pub(crate) mod ecs_prefix;
pub mod error;
mod json;
pub mod metadata;
pub(crate) mod ratelimit;
pub mod retry;
pub mod rpc;
pub mod sign;
pub mod telemetry;
pub(crate) mod vpc;
pub mod wait;

use std::collections::BTreeMap;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

pub use eniip_protocol::core::{Ipv4Prefix, Ipv6Prefix};
pub use error::{CloudError, CloudErrorKind};

/// The ECS OpenAPI version.
pub(crate) const ECS_VERSION: &str = "2014-05-26";
/// The VPC OpenAPI version.
pub const VPC_VERSION: &str = "2016-04-28";

/// The HTTP clients' read and write buffers, and the largest response
/// header they accept. ureq's default is 128 KiB each way, zero-filled
/// when a connection is first used and kept while it is pooled: a quarter
/// of a MiB per idle keep-alive connection, for requests and response
/// headers of a few hundred bytes (bodies stream through the buffer).
pub(crate) fn http_config() -> ureq::config::ConfigBuilder<ureq::typestate::AgentScope> {
    const BUFFER: usize = 16 * 1024;
    ureq::Agent::config_builder()
        .input_buffer_size(BUFFER)
        .output_buffer_size(BUFFER)
        .max_response_header_size(BUFFER)
        .http_status_as_error(false)
        .max_redirects(0)
        .user_agent(concat!("eniipd/", env!("CARGO_PKG_VERSION")))
}

pub use eniip_protocol::core::{
    TAG_CREATOR_KEY, TAG_CREATOR_VALUE, TAG_INSTANCE_KEY, TAG_NODE_KEY,
};

/// Facts about this instance, from the metadata service.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InstanceIdentity {
    /// `i-...`
    pub instance_id: String,
    /// `cn-hangzhou`
    pub region_id: String,
    /// `cn-hangzhou-i`
    pub zone_id: String,
    /// `ecs.g7.xlarge`
    pub instance_type: String,
    /// MAC of the primary ENI (eth0).
    pub primary_mac: String,
    /// The vswitch of the primary ENI.
    pub vswitch_id: String,
    /// The VPC of the instance.
    pub vpc_id: String,
}

/// Per-instance-type ENI limits (DescribeInstanceTypes).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InstanceTypeLimits {
    /// `ecs.g7.xlarge`
    pub instance_type: String,
    /// `EniQuantity`: ENIs the instance can hold, the primary included.
    pub eni_quantity: u32,
    /// `EniPrivateIpAddressQuantity`: IPv4 addresses per ENI, primary included.
    pub ipv4_per_eni: u32,
    /// `EniIpv6AddressQuantity`: IPv6 addresses per ENI.
    pub ipv6_per_eni: u32,
}

/// A vswitch (DescribeVSwitches).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VSwitch {
    /// `vsw-...`
    pub id: String,
    /// Its zone.
    pub zone_id: String,
    /// IPv4 CIDR, e.g. `192.168.0.0/22`.
    pub cidr: String,
    /// IPv6 CIDR when IPv6 is enabled.
    pub ipv6_cidr: Option<String>,
    /// `AvailableIpAddressCount`.
    pub available_ips: u64,
}

/// ENI status strings of the OpenAPI.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EniStatus {
    /// Created, not attached.
    Available,
    /// Attach in progress.
    Attaching,
    /// Attached.
    InUse,
    /// Detach in progress.
    Detaching,
    /// Delete in progress.
    Deleting,
    /// A status this build does not know.
    Other(String),
}

impl EniStatus {
    /// Parses the OpenAPI status string.
    pub fn parse(s: &str) -> EniStatus {
        match s {
            "Available" => EniStatus::Available,
            "Attaching" => EniStatus::Attaching,
            "InUse" => EniStatus::InUse,
            "Detaching" => EniStatus::Detaching,
            "Deleting" => EniStatus::Deleting,
            other => EniStatus::Other(other.to_string()),
        }
    }

    /// The OpenAPI status string.
    pub fn as_str(&self) -> &str {
        match self {
            EniStatus::Available => "Available",
            EniStatus::Attaching => "Attaching",
            EniStatus::InUse => "InUse",
            EniStatus::Detaching => "Detaching",
            EniStatus::Deleting => "Deleting",
            EniStatus::Other(s) => s,
        }
    }
}

impl fmt::Display for EniStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An ENI as the OpenAPI describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eni {
    /// `eni-...`
    pub id: String,
    /// `00:16:3e:..`
    pub mac: String,
    /// Lifecycle status.
    pub status: EniStatus,
    /// `Primary`, `Secondary`, `Trunk`, `Member` (empty if not given).
    pub eni_type: String,
    /// The instance it is attached to (falls back to `Attachment.InstanceId`).
    pub instance_id: Option<String>,
    /// Its vswitch.
    pub vswitch_id: String,
    /// Its zone.
    pub zone_id: String,
    /// The primary private IPv4.
    pub primary_ip: Option<Ipv4Addr>,
    /// Every private IPv4, the primary included.
    pub private_ips: Vec<Ipv4Addr>,
    /// Every IPv6.
    pub ipv6s: Vec<Ipv6Addr>,
    /// IPv4 /28 prefixes (`Ipv4PrefixSets`); their addresses are not in
    /// `private_ips`.
    pub ipv4_prefixes: Vec<Ipv4Prefix>,
    /// IPv6 /80 prefixes (`Ipv6PrefixSets`); their addresses are not in
    /// `ipv6s`.
    pub ipv6_prefixes: Vec<Ipv6Prefix>,
    /// Security groups.
    pub security_group_ids: Vec<String>,
    /// Tags (`TagKey` -> `TagValue`).
    pub tags: BTreeMap<String, String>,
    /// `CreationTime`, Unix seconds, if given.
    pub created_at: Option<u64>,
}

impl Eni {
    /// True when the ENI carries `creator=eniipd` and this instance's tag,
    /// and no other live eniipd on this host created it: its node id is
    /// this node's, absent (from before node ids) or that of a daemon that
    /// no longer runs (whose ENIs this one adopts).
    pub fn is_managed_by(&self, instance_id: &str, node_id: &str) -> bool {
        self.is_for_instance(instance_id) && self.live_peer(instance_id, node_id).is_none()
    }

    /// The node id of another eniipd on this instance that created it and
    /// runs now, if it is one of those.
    pub(crate) fn live_peer(&self, instance_id: &str, node_id: &str) -> Option<&str> {
        self.foreign_node(instance_id, node_id)
            .filter(|n| eniip_util::node_liveness::alive(n))
    }

    /// The node id of another eniipd on this instance that created it,
    /// running or not.
    pub fn foreign_node(&self, instance_id: &str, node_id: &str) -> Option<&str> {
        self.tags
            .get(TAG_NODE_KEY)
            .map(String::as_str)
            .filter(|n| *n != node_id && self.is_for_instance(instance_id))
    }

    fn is_for_instance(&self, instance_id: &str) -> bool {
        self.tags.get(TAG_CREATOR_KEY).map(String::as_str) == Some(TAG_CREATOR_VALUE)
            && self.tags.get(TAG_INSTANCE_KEY).map(String::as_str) == Some(instance_id)
    }
}

/// CreateNetworkInterface parameters.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreateEni {
    /// Where the ENI goes.
    pub vswitch_id: String,
    /// `SecurityGroupIds.N` (at least one).
    pub security_group_ids: Vec<String>,
    /// `SecondaryPrivateIpAddressCount` (0 = primary only).
    pub secondary_ipv4_count: usize,
    /// `Ipv6AddressCount` (0 = none).
    pub ipv6_count: usize,
    /// `Ipv6PrefixCount`: IPv6 /80 prefixes (0 = none). With some,
    /// `ipv6_count` is not sent: the API takes one or the other.
    pub ipv6_prefixes: usize,
    /// `Tag.N.Key` / `Tag.N.Value`.
    pub tags: Vec<(String, String)>,
    /// `Description`.
    pub description: String,
}

/// DescribeNetworkInterfaces filters; the implementation pages through
/// every result.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EniQuery {
    /// `NetworkInterfaceId.N` (empty: any).
    pub eni_ids: Vec<String>,
    /// `InstanceId`.
    pub instance_id: Option<String>,
    /// `Status`.
    pub status: Option<EniStatus>,
    /// `Tag.N.Key` / `Tag.N.Value`.
    pub tags: Vec<(String, String)>,
}

/// An ENI as the metadata service shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataEni {
    /// The MAC (the directory name).
    pub mac: String,
    /// `network-interface-id`
    pub eni_id: String,
    /// `primary-ip-address`
    pub primary_ip: Option<Ipv4Addr>,
    /// `gateway`
    pub gateway: Option<Ipv4Addr>,
    /// `vswitch-id`
    pub vswitch_id: String,
    /// `vswitch-cidr-block`
    pub vswitch_cidr: String,
    /// `private-ipv4s` (primary included)
    pub ipv4s: Vec<Ipv4Addr>,
    /// `ipv6s` (404 = empty)
    pub ipv6s: Vec<Ipv6Addr>,
    /// `ipv6-gateway` (dual stack only)
    pub ipv6_gateway: Option<Ipv6Addr>,
    /// `vswitch-ipv6-cidr-block` (dual stack only)
    pub vswitch_ipv6_cidr: Option<String>,
}

/// The instance metadata service, as the allocator reads it.
pub trait MetadataApi: Send + Sync {
    /// Instance id, region, zone, type, primary MAC, vswitch, VPC.
    fn identity(&self) -> Result<InstanceIdentity, CloudError>;
    /// MACs of every attached ENI (`network/interfaces/macs/`).
    fn macs(&self) -> Result<Vec<String>, CloudError>;
    /// Everything about one attached ENI; `NotFound` if the MAC is not there.
    fn eni(&self, mac: &str) -> Result<MetadataEni, CloudError>;
    /// Only the addresses of one ENI (`private-ipv4s`, `ipv6s` when
    /// `with_ipv6`); cheaper than [`MetadataApi::eni`] for polling.
    fn eni_ips(
        &self,
        mac: &str,
        with_ipv6: bool,
    ) -> Result<(Vec<Ipv4Addr>, Vec<Ipv6Addr>), CloudError>;
}

/// The OpenAPI actions the allocator uses, plus the metadata service.
///
/// Methods block for at most their own retry budget and timeouts.
/// Creates and assigns carry a ClientToken that is reused across retries,
/// so a retried call cannot allocate twice. Unassign, detach and delete
/// return `Ok` when the target is already gone.
pub trait CloudApi: Send + Sync {
    /// DescribeInstanceTypes for one type.
    fn instance_type_limits(&self, instance_type: &str) -> Result<InstanceTypeLimits, CloudError>;
    /// DescribeInstanceAttribute: the instance's security groups.
    fn instance_security_groups(&self, instance_id: &str) -> Result<Vec<String>, CloudError>;
    /// DescribeVSwitches (VPC API) for the given ids.
    fn describe_vswitches(&self, ids: &[String]) -> Result<Vec<VSwitch>, CloudError>;
    /// CreateNetworkInterface; the ENI is `Available` when this returns.
    fn create_eni(&self, req: &CreateEni) -> Result<Eni, CloudError>;
    /// AttachNetworkInterface (asynchronous: poll for `InUse`).
    fn attach_eni(&self, eni_id: &str, instance_id: &str) -> Result<(), CloudError>;
    /// DetachNetworkInterface (asynchronous); `Ok` if the ENI is gone.
    fn detach_eni(&self, eni_id: &str, instance_id: &str) -> Result<(), CloudError>;
    /// DeleteNetworkInterface (asynchronous); `Ok` if the ENI is gone.
    fn delete_eni(&self, eni_id: &str) -> Result<(), CloudError>;
    /// ModifyNetworkInterfaceAttribute: the ENI's security groups become
    /// exactly `ids` (1 to 5).
    fn set_eni_security_groups(&self, eni_id: &str, ids: &[String]) -> Result<(), CloudError>;
    /// DescribeNetworkInterfaces, every page.
    fn describe_enis(&self, query: &EniQuery) -> Result<Vec<Eni>, CloudError>;
    /// AssignPrivateIpAddresses with a count; returns the new addresses.
    fn assign_ipv4(&self, eni_id: &str, count: usize) -> Result<Vec<Ipv4Addr>, CloudError>;
    /// UnassignPrivateIpAddresses; addresses already gone count as success.
    fn unassign_ipv4(&self, eni_id: &str, ips: &[Ipv4Addr]) -> Result<(), CloudError>;
    /// AssignIpv6Addresses with a count; returns the new addresses.
    fn assign_ipv6(&self, eni_id: &str, count: usize) -> Result<Vec<Ipv6Addr>, CloudError>;
    /// UnassignIpv6Addresses; addresses already gone count as success.
    fn unassign_ipv6(&self, eni_id: &str, ips: &[Ipv6Addr]) -> Result<(), CloudError>;
    /// AssignPrivateIpAddresses with `Ipv4PrefixCount` (1 to 10); returns
    /// the new /28s. No free /28 is [`CloudErrorKind::PrefixExhausted`].
    /// The default (implementations without prefixes) refuses.
    fn assign_ipv4_prefixes(
        &self,
        eni_id: &str,
        count: usize,
    ) -> Result<Vec<Ipv4Prefix>, CloudError> {
        let _ = (eni_id, count);
        Err(prefixes_unsupported("AssignPrivateIpAddresses"))
    }
    /// UnassignPrivateIpAddresses with `Ipv4Prefix.N`; prefixes already
    /// gone count as success.
    fn unassign_ipv4_prefixes(
        &self,
        eni_id: &str,
        prefixes: &[Ipv4Prefix],
    ) -> Result<(), CloudError> {
        let _ = eni_id;
        if prefixes.is_empty() {
            return Ok(());
        }
        Err(prefixes_unsupported("UnassignPrivateIpAddresses"))
    }
    /// AssignIpv6Addresses with `Ipv6PrefixCount`; returns the new /80s.
    /// No room for one is [`CloudErrorKind::PrefixExhausted`], the ENI's
    /// IPv6 quota full [`CloudErrorKind::LimitExceeded`]. The default
    /// (implementations without prefixes) refuses.
    fn assign_ipv6_prefixes(
        &self,
        eni_id: &str,
        count: usize,
    ) -> Result<Vec<Ipv6Prefix>, CloudError> {
        let _ = (eni_id, count);
        Err(prefixes_unsupported("AssignIpv6Addresses"))
    }
    /// CreateNetworkInterface with `prefixes` /28s besides the primary
    /// (`req.secondary_ipv4_count` must then be 0) and the /80s
    /// `req.ipv6_prefixes` asks; no room for a prefix of either is
    /// [`CloudErrorKind::PrefixExhausted`]. No prefix at all is
    /// [`CloudApi::create_eni`].
    fn create_eni_with_prefixes(
        &self,
        req: &CreateEni,
        prefixes: usize,
    ) -> Result<Eni, CloudError> {
        if prefixes == 0 && req.ipv6_prefixes == 0 {
            return self.create_eni(req);
        }
        Err(prefixes_unsupported("CreateNetworkInterface"))
    }
    /// The metadata service of this instance.
    fn metadata(&self) -> &dyn MetadataApi;
}

/// What a [`CloudApi`] without prefix support answers a prefix call.
fn prefixes_unsupported(action: &str) -> CloudError {
    CloudError::new(
        CloudErrorKind::Api,
        action,
        "prefixes are not supported by this cloud implementation",
    )
}
