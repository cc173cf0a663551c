//! [`AliyunCloud`]: [`CloudApi`] over the real OpenAPI and metadata
//! service (or the emulator: endpoints are injectable).

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use super::credentials::{CredentialProvider, CredentialSource};
use super::ecs_prefix;
use super::error::{CloudError, CloudErrorKind};
use super::metadata::MetadataClient;
use super::ratelimit::RateLimiter;
use super::retry::RetryPolicy;
use super::rpc::{RpcClient, Timeouts};
use super::sign::SignatureVersion;
use super::{
    ecs, vpc, CloudApi, CreateEni, Eni, EniQuery, InstanceTypeLimits, MetadataApi, VSwitch,
    ECS_VERSION, VPC_VERSION,
};
use super::{Ipv4Prefix, Ipv6Prefix};

/// How to reach the cloud.
#[derive(Debug, Clone)]
pub struct AliyunCloudOptions {
    /// Region of the instance.
    pub region_id: String,
    /// ECS endpoint URL.
    pub ecs_endpoint: String,
    /// VPC endpoint URL.
    pub vpc_endpoint: String,
    /// Metadata service URL.
    pub metadata_endpoint: String,
    /// Credentials.
    pub credentials: CredentialSource,
    /// Call timeouts.
    pub timeouts: Timeouts,
    /// Retry budget.
    pub retry: RetryPolicy,
    /// Signature sent (V3 unless configured otherwise).
    pub signature_version: SignatureVersion,
}

impl AliyunCloudOptions {
    /// The VPC-internal endpoints of a region (ECS, VPC).
    pub(crate) fn default_endpoints(region: &str) -> (String, String) {
        (
            format!("https://ecs-vpc.{region}.aliyuncs.com"),
            format!("https://vpc-vpc.{region}.aliyuncs.com"),
        )
    }

    /// Options for a region with default endpoints and policies.
    pub fn new(
        region: &str,
        metadata_endpoint: &str,
        credentials: CredentialSource,
    ) -> AliyunCloudOptions {
        let (ecs, vpc) = AliyunCloudOptions::default_endpoints(region);
        AliyunCloudOptions {
            region_id: region.to_string(),
            ecs_endpoint: ecs,
            vpc_endpoint: vpc,
            metadata_endpoint: metadata_endpoint.to_string(),
            credentials,
            timeouts: Timeouts::default(),
            retry: RetryPolicy::default(),
            signature_version: SignatureVersion::default(),
        }
    }
}

/// The real cloud.
#[derive(Debug)]
pub struct AliyunCloud {
    ecs: RpcClient,
    vpc: RpcClient,
    metadata: Arc<MetadataClient>,
}

impl AliyunCloud {
    /// A client; no call is made yet.
    pub fn new(opts: AliyunCloudOptions) -> AliyunCloud {
        let metadata = Arc::new(MetadataClient::new(&opts.metadata_endpoint));
        let creds = Arc::new(CredentialProvider::new(
            opts.credentials.clone(),
            Some(Arc::clone(&metadata)),
        ));
        let limiter = Arc::new(RateLimiter::default());
        let client = |endpoint: &str, version| {
            RpcClient::new(
                endpoint,
                version,
                &opts.region_id,
                Arc::clone(&creds),
                Arc::clone(&limiter),
                opts.retry,
                opts.timeouts,
            )
            .with_signature_version(opts.signature_version)
        };
        AliyunCloud {
            ecs: client(&opts.ecs_endpoint, ECS_VERSION),
            vpc: client(&opts.vpc_endpoint, VPC_VERSION),
            metadata,
        }
    }

    /// The ECS client, for actions the trait does not cover.
    pub fn ecs(&self) -> &RpcClient {
        &self.ecs
    }
}

impl CloudApi for AliyunCloud {
    fn instance_type_limits(&self, instance_type: &str) -> Result<InstanceTypeLimits, CloudError> {
        ecs::describe_instance_types(&self.ecs, &[instance_type.to_string()])?
            .into_iter()
            .find(|t| t.instance_type == instance_type)
            .ok_or_else(|| {
                CloudError::new(
                    CloudErrorKind::NotFound,
                    "DescribeInstanceTypes",
                    format!("instance type {instance_type} is not known to the OpenAPI"),
                )
            })
    }

    fn instance_security_groups(&self, instance_id: &str) -> Result<Vec<String>, CloudError> {
        ecs::describe_instance_attribute(&self.ecs, instance_id)
    }

    fn describe_vswitches(&self, ids: &[String]) -> Result<Vec<VSwitch>, CloudError> {
        vpc::describe_vswitches(&self.vpc, ids)
    }

    fn create_eni(&self, req: &CreateEni) -> Result<Eni, CloudError> {
        ecs::create_network_interface(&self.ecs, req)
    }

    fn attach_eni(&self, eni_id: &str, instance_id: &str) -> Result<(), CloudError> {
        ecs::attach_network_interface(&self.ecs, eni_id, instance_id)
    }

    fn detach_eni(&self, eni_id: &str, instance_id: &str) -> Result<(), CloudError> {
        ecs::detach_network_interface(&self.ecs, eni_id, instance_id)
    }

    fn delete_eni(&self, eni_id: &str) -> Result<(), CloudError> {
        ecs::delete_network_interface(&self.ecs, eni_id)
    }

    fn set_eni_security_groups(&self, eni_id: &str, ids: &[String]) -> Result<(), CloudError> {
        ecs::modify_security_groups(&self.ecs, eni_id, ids)
    }

    fn describe_enis(&self, query: &EniQuery) -> Result<Vec<Eni>, CloudError> {
        ecs::describe_network_interfaces(&self.ecs, query)
    }

    fn assign_ipv4(&self, eni_id: &str, count: usize) -> Result<Vec<Ipv4Addr>, CloudError> {
        ecs::assign_private_ip_addresses(&self.ecs, eni_id, count)
    }

    fn unassign_ipv4(&self, eni_id: &str, ips: &[Ipv4Addr]) -> Result<(), CloudError> {
        ecs::unassign_private_ip_addresses(&self.ecs, eni_id, ips)
    }

    fn assign_ipv6(&self, eni_id: &str, count: usize) -> Result<Vec<Ipv6Addr>, CloudError> {
        ecs::assign_ipv6_addresses(&self.ecs, eni_id, count)
    }

    fn unassign_ipv6(&self, eni_id: &str, ips: &[Ipv6Addr]) -> Result<(), CloudError> {
        ecs::unassign_ipv6_addresses(&self.ecs, eni_id, ips)
    }

    fn assign_ipv4_prefixes(
        &self,
        eni_id: &str,
        count: usize,
    ) -> Result<Vec<Ipv4Prefix>, CloudError> {
        ecs_prefix::assign_ipv4_prefixes(&self.ecs, eni_id, count)
    }

    fn unassign_ipv4_prefixes(
        &self,
        eni_id: &str,
        prefixes: &[Ipv4Prefix],
    ) -> Result<(), CloudError> {
        ecs_prefix::unassign_ipv4_prefixes(&self.ecs, eni_id, prefixes)
    }

    fn assign_ipv6_prefixes(
        &self,
        eni_id: &str,
        count: usize,
    ) -> Result<Vec<Ipv6Prefix>, CloudError> {
        ecs_prefix::assign_ipv6_prefixes(&self.ecs, eni_id, count)
    }

    fn create_eni_with_prefixes(
        &self,
        req: &CreateEni,
        prefixes: usize,
    ) -> Result<Eni, CloudError> {
        ecs_prefix::create_network_interface_with_prefixes(&self.ecs, req, prefixes)
    }

    fn metadata(&self) -> &dyn MetadataApi {
        &*self.metadata
    }
}
