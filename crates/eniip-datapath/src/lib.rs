//! eniip-datapath: the node's datapath over rtnetlink on a blocking
//! socket ([`netlink`]), links read without it ([`ifreq`]), network
//! namespaces ([`netns`]) and a container's attachment (veths,
//! addresses, routes, rules: [`datapath`]). A door
//! shared by eniip-cni, eniipd's sandbox reaper and the emulator's host
//! links; it knows nothing of eniipd, the cloud or the protocol.

pub mod datapath;
pub mod ifreq;
pub mod netlink;
pub mod netns;
