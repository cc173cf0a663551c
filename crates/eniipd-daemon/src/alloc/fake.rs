//! An in-process fake of the cloud behind the same [`CloudApi`] trait, for
//! the allocator's unit tests: immediate state changes, optional latency on
//! ENI operations, call counting, injected failures, and a probe of how
//! many ENI operations ran at once.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::store::{PersistedState, Record, StoreError};
use eniip_cloud::{
    CloudApi, CloudError, CloudErrorKind, CreateEni, Eni, EniQuery, EniStatus, InstanceIdentity,
    InstanceTypeLimits, MetadataApi, MetadataEni, VSwitch,
};

use super::Journal;

pub(crate) const INSTANCE: &str = "i-fake0001";

#[derive(Debug, Clone)]
pub(crate) struct FakeEni {
    pub(crate) id: String,
    pub(crate) mac: String,
    pub(crate) status: EniStatus,
    pub(crate) instance: Option<String>,
    pub(crate) vswitch: String,
    pub(crate) v4: Vec<Ipv4Addr>,
    pub(crate) v6: Vec<Ipv6Addr>,
    pub(crate) tags: BTreeMap<String, String>,
    pub(crate) sgs: Vec<String>,
    pub(crate) primary: bool,
}

#[derive(Debug)]
struct Vsw {
    prefix: [u8; 2],
    next: u32,
    free: u64,
}

#[derive(Debug)]
struct State {
    enis: BTreeMap<String, FakeEni>,
    vswitches: BTreeMap<String, Vsw>,
    calls: BTreeMap<String, usize>,
    assign_sizes: Vec<usize>,
    log: Vec<String>,
    faults: VecDeque<(String, CloudError, usize)>,
    next: u32,
    /// MACs the metadata service does not list.
    md_hidden: BTreeSet<String>,
}

/// The fake cloud.
pub(crate) struct FakeCloud {
    state: Mutex<State>,
    pub(crate) limits: InstanceTypeLimits,
    pub(crate) op_latency: Duration,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

impl FakeCloud {
    /// A fake instance with `enis` ENIs of `ips` addresses each, on
    /// vswitch `vsw-a` (and `vsw-b`), `free` addresses each.
    pub(crate) fn new(enis: u32, ips: u32, free: u64) -> Arc<FakeCloud> {
        let mut vswitches = BTreeMap::new();
        vswitches.insert(
            "vsw-a".to_string(),
            Vsw {
                prefix: [10, 0],
                next: 10,
                free,
            },
        );
        vswitches.insert(
            "vsw-b".to_string(),
            Vsw {
                prefix: [10, 1],
                next: 10,
                free,
            },
        );
        let mut st = State {
            enis: BTreeMap::new(),
            vswitches,
            calls: BTreeMap::new(),
            assign_sizes: Vec::new(),
            log: Vec::new(),
            faults: VecDeque::new(),
            next: 1,
            md_hidden: BTreeSet::new(),
        };
        let primary = FakeEni {
            id: "eni-primary".into(),
            mac: "00:16:3e:00:00:00".into(),
            status: EniStatus::InUse,
            instance: Some(INSTANCE.into()),
            vswitch: "vsw-a".into(),
            v4: vec![Ipv4Addr::new(10, 0, 0, 5)],
            v6: Vec::new(),
            tags: BTreeMap::new(),
            sgs: vec!["sg-1".into()],
            primary: true,
        };
        st.enis.insert(primary.id.clone(), primary);
        Arc::new(FakeCloud {
            state: Mutex::new(st),
            limits: InstanceTypeLimits {
                instance_type: "ecs.fake".into(),
                eni_quantity: enis,
                ipv4_per_eni: ips,
                ipv6_per_eni: ips,
            },
            op_latency: Duration::ZERO,
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        })
    }

    pub(crate) fn with_latency(self: Arc<Self>, d: Duration) -> Arc<FakeCloud> {
        let mut me = Arc::into_inner(self).expect("configure before sharing");
        me.op_latency = d;
        Arc::new(me)
    }

    /// The next `count` calls of `action` fail with `code`.
    pub(crate) fn fail(&self, action: &str, code: &str, status: u16, count: usize) {
        let e = CloudError::api(
            action,
            status,
            code,
            "injected",
            Some("FAKE-REQUEST".into()),
        );
        self.state
            .lock()
            .faults
            .push_back((action.to_string(), e, count));
    }

    pub(crate) fn set_free(&self, vsw: &str, free: u64) {
        if let Some(v) = self.state.lock().vswitches.get_mut(vsw) {
            v.free = free;
        }
    }

    pub(crate) fn calls(&self, action: &str) -> usize {
        self.state.lock().calls.get(action).copied().unwrap_or(0)
    }

    pub(crate) fn assign_sizes(&self) -> Vec<usize> {
        self.state.lock().assign_sizes.clone()
    }

    pub(crate) fn log(&self) -> Vec<String> {
        self.state.lock().log.clone()
    }

    pub(crate) fn max_concurrent_ops(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }

    pub(crate) fn enis(&self) -> Vec<FakeEni> {
        self.state.lock().enis.values().cloned().collect()
    }

    /// Adds an ENI directly (recovery tests).
    pub(crate) fn insert(&self, e: FakeEni) {
        self.state.lock().enis.insert(e.id.clone(), e);
    }

    /// Assigns one address behind the allocator's back.
    pub(crate) fn assign_ipv4_direct(&self, id: &str) {
        let mut st = self.state.lock();
        let vsw = st.enis[id].vswitch.clone();
        let new = Self::take_ips(&mut st, &vsw, 1).unwrap();
        st.enis.get_mut(id).unwrap().v4.extend(new);
    }

    /// Assigns one IPv6 address behind the allocator's back.
    pub(crate) fn assign_ipv6_direct(&self, id: &str) {
        let mut st = self.state.lock();
        let new = Self::v6s(&mut st, 1);
        st.enis.get_mut(id).unwrap().v6.extend(new);
    }

    /// Makes metadata stop listing an ENI.
    pub(crate) fn hide_from_metadata(&self, mac: &str) {
        self.state.lock().md_hidden.insert(mac.to_string());
    }

    /// Every secondary (non-primary-ENI) address in the cloud.
    pub(crate) fn managed_ips(&self) -> Vec<Ipv4Addr> {
        self.state
            .lock()
            .enis
            .values()
            .filter(|e| !e.primary && e.instance.as_deref() == Some(INSTANCE))
            .flat_map(|e| e.v4.clone())
            .collect()
    }

    fn enter(&self, action: &str) -> Result<(), CloudError> {
        let mut st = self.state.lock();
        *st.calls.entry(action.to_string()).or_default() += 1;
        if let Some(pos) = st.faults.iter().position(|(a, _, n)| a == action && *n > 0) {
            let (_, e, n) = &mut st.faults[pos];
            *n -= 1;
            return Err(e.clone());
        }
        Ok(())
    }

    fn op<T>(
        &self,
        action: &str,
        f: impl FnOnce(&mut State) -> Result<T, CloudError>,
    ) -> Result<T, CloudError> {
        self.enter(action)?;
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(self.op_latency);
        let r = f(&mut self.state.lock());
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        r
    }

    fn take_ips(st: &mut State, vsw: &str, n: usize) -> Result<Vec<Ipv4Addr>, CloudError> {
        let v = st.vswitches.get_mut(vsw).ok_or_else(|| {
            CloudError::api("Create", 404, "InvalidVSwitchId.NotFound", vsw, None)
        })?;
        if v.free < n as u64 {
            return Err(CloudError::api(
                "AssignPrivateIpAddresses",
                403,
                "InvalidVSwitchId.IpNotEnough",
                format!("The specified VSwitch \"{vsw}\" has not enough IpAddress."),
                Some("FAKE".into()),
            ));
        }
        v.free -= n as u64;
        let out = (0..n)
            .map(|_| {
                v.next += 1;
                Ipv4Addr::new(
                    v.prefix[0],
                    v.prefix[1],
                    (v.next / 250) as u8,
                    (v.next % 250) as u8 + 1,
                )
            })
            .collect();
        Ok(out)
    }

    fn v6s(st: &mut State, n: usize) -> Vec<Ipv6Addr> {
        (0..n)
            .map(|_| {
                st.next += 1;
                Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, st.next as u16)
            })
            .collect()
    }

    fn to_eni(e: &FakeEni) -> Eni {
        Eni {
            id: e.id.clone(),
            mac: e.mac.clone(),
            status: e.status.clone(),
            eni_type: if e.primary {
                "Primary".into()
            } else {
                "Secondary".into()
            },
            instance_id: e.instance.clone(),
            vswitch_id: e.vswitch.clone(),
            zone_id: "zone-a".into(),
            primary_ip: e.v4.first().copied(),
            private_ips: e.v4.clone(),
            ipv6s: e.v6.clone(),
            ipv6_prefixes: Vec::new(),
            ipv4_prefixes: Vec::new(),
            security_group_ids: e.sgs.clone(),
            tags: e.tags.clone(),
            created_at: Some(0),
        }
    }
}

fn not_found(action: &str, id: &str) -> CloudError {
    CloudError::api(
        action,
        404,
        "InvalidEniId.NotFound",
        format!("{id} not found"),
        None,
    )
}

impl CloudApi for FakeCloud {
    fn instance_type_limits(&self, _t: &str) -> Result<InstanceTypeLimits, CloudError> {
        self.enter("DescribeInstanceTypes")?;
        Ok(self.limits.clone())
    }

    fn instance_security_groups(&self, _id: &str) -> Result<Vec<String>, CloudError> {
        self.enter("DescribeInstanceAttribute")?;
        Ok(vec!["sg-1".into()])
    }

    fn describe_vswitches(&self, ids: &[String]) -> Result<Vec<VSwitch>, CloudError> {
        self.enter("DescribeVSwitches")?;
        let st = self.state.lock();
        Ok(ids
            .iter()
            .filter_map(|id| {
                st.vswitches.get(id).map(|v| VSwitch {
                    id: id.clone(),
                    zone_id: "zone-a".into(),
                    cidr: format!("{}.{}.0.0/16", v.prefix[0], v.prefix[1]),
                    ipv6_cidr: None,
                    available_ips: v.free,
                })
            })
            .collect())
    }

    fn create_eni(&self, req: &CreateEni) -> Result<Eni, CloudError> {
        self.op("CreateNetworkInterface", |st| {
            let v4 = Self::take_ips(st, &req.vswitch_id, req.secondary_ipv4_count + 1)?;
            let v6 = Self::v6s(st, req.ipv6_count);
            st.next += 1;
            let n = st.next;
            let e = FakeEni {
                id: format!("eni-{n:04}"),
                mac: format!("00:16:3e:00:{:02x}:{:02x}", n / 256, n % 256),
                status: EniStatus::Available,
                instance: None,
                vswitch: req.vswitch_id.clone(),
                v4,
                v6,
                tags: req.tags.iter().cloned().collect(),
                sgs: req.security_group_ids.clone(),
                primary: false,
            };
            st.log.push(format!("create {}", e.id));
            st.enis.insert(e.id.clone(), e.clone());
            Ok(Self::to_eni(&e))
        })
    }

    fn attach_eni(&self, id: &str, instance: &str) -> Result<(), CloudError> {
        self.op("AttachNetworkInterface", |st| {
            let attached = st
                .enis
                .values()
                .filter(|e| e.instance.as_deref() == Some(instance))
                .count();
            if attached >= self.limits.eni_quantity as usize {
                return Err(CloudError::api(
                    "AttachNetworkInterface",
                    403,
                    "EniPerInstanceLimitExceeded",
                    "too many",
                    None,
                ));
            }
            let e = st
                .enis
                .get_mut(id)
                .ok_or_else(|| not_found("AttachNetworkInterface", id))?;
            e.status = EniStatus::InUse;
            e.instance = Some(instance.to_string());
            st.log.push(format!("attach {id}"));
            Ok(())
        })
    }

    fn detach_eni(&self, id: &str, _instance: &str) -> Result<(), CloudError> {
        self.op("DetachNetworkInterface", |st| {
            let Some(e) = st.enis.get_mut(id) else {
                return Ok(());
            };
            e.status = EniStatus::Available;
            e.instance = None;
            st.log.push(format!("detach {id}"));
            Ok(())
        })
    }

    fn delete_eni(&self, id: &str) -> Result<(), CloudError> {
        self.op("DeleteNetworkInterface", |st| {
            if let Some(e) = st.enis.remove(id) {
                let n = e.v4.len() as u64;
                if let Some(v) = st.vswitches.get_mut(&e.vswitch) {
                    v.free += n;
                }
            }
            st.log.push(format!("delete {id}"));
            Ok(())
        })
    }

    fn set_eni_security_groups(&self, id: &str, ids: &[String]) -> Result<(), CloudError> {
        self.op("ModifyNetworkInterfaceAttribute", |st| {
            if let Some(e) = st.enis.get_mut(id) {
                e.sgs = ids.to_vec();
            }
            st.log.push(format!("modify {id}"));
            Ok(())
        })
    }

    fn describe_enis(&self, q: &EniQuery) -> Result<Vec<Eni>, CloudError> {
        self.enter("DescribeNetworkInterfaces")?;
        let st = self.state.lock();
        Ok(st
            .enis
            .values()
            .filter(|e| q.eni_ids.is_empty() || q.eni_ids.contains(&e.id))
            .filter(|e| q.instance_id.is_none() || e.instance == q.instance_id)
            .filter(|e| q.status.as_ref().is_none_or(|s| *s == e.status))
            .filter(|e| q.tags.iter().all(|(k, v)| e.tags.get(k) == Some(v)))
            .map(Self::to_eni)
            .collect())
    }

    fn assign_ipv4(&self, id: &str, count: usize) -> Result<Vec<Ipv4Addr>, CloudError> {
        self.enter("AssignPrivateIpAddresses")?;
        let mut st = self.state.lock();
        let st = &mut *st;
        let e = st
            .enis
            .get(id)
            .ok_or_else(|| not_found("AssignPrivateIpAddresses", id))?;
        if e.v4.len() + count > self.limits.ipv4_per_eni as usize {
            return Err(CloudError::api(
                "AssignPrivateIpAddresses",
                403,
                "InvalidOperation.Ipv4CountExceeded",
                "limit",
                None,
            ));
        }
        let vsw = e.vswitch.clone();
        let new = Self::take_ips(st, &vsw, count)?;
        st.assign_sizes.push(count);
        if let Some(e) = st.enis.get_mut(id) {
            e.v4.extend(&new);
        }
        st.log.push(format!("assign {id} {count}"));
        Ok(new)
    }

    fn unassign_ipv4(&self, id: &str, ips: &[Ipv4Addr]) -> Result<(), CloudError> {
        self.enter("UnassignPrivateIpAddresses")?;
        let mut st = self.state.lock();
        let Some(e) = st.enis.get_mut(id) else {
            return Ok(());
        };
        if ips.contains(&e.v4[0]) {
            return Err(CloudError::api(
                "UnassignPrivateIpAddresses",
                403,
                "InvalidIp.IpUnassigned",
                "primary",
                None,
            ));
        }
        e.v4.retain(|a| !ips.contains(a));
        let vsw = e.vswitch.clone();
        if let Some(v) = st.vswitches.get_mut(&vsw) {
            v.free += ips.len() as u64;
        }
        st.log.push(format!("unassign {id} {}", ips.len()));
        Ok(())
    }

    fn assign_ipv6(&self, id: &str, count: usize) -> Result<Vec<Ipv6Addr>, CloudError> {
        self.enter("AssignIpv6Addresses")?;
        let mut st = self.state.lock();
        let new = Self::v6s(&mut st, count);
        let e = st
            .enis
            .get_mut(id)
            .ok_or_else(|| not_found("AssignIpv6Addresses", id))?;
        e.v6.extend(&new);
        Ok(new)
    }

    fn unassign_ipv6(&self, id: &str, ips: &[Ipv6Addr]) -> Result<(), CloudError> {
        self.enter("UnassignIpv6Addresses")?;
        if let Some(e) = self.state.lock().enis.get_mut(id) {
            e.v6.retain(|a| !ips.contains(a));
        }
        Ok(())
    }

    fn metadata(&self) -> &dyn MetadataApi {
        self
    }
}

impl MetadataApi for FakeCloud {
    fn identity(&self) -> Result<InstanceIdentity, CloudError> {
        Ok(InstanceIdentity {
            instance_id: INSTANCE.into(),
            region_id: "region-a".into(),
            zone_id: "zone-a".into(),
            instance_type: "ecs.fake".into(),
            primary_mac: "00:16:3e:00:00:00".into(),
            vswitch_id: "vsw-a".into(),
            vpc_id: "vpc-a".into(),
        })
    }

    fn macs(&self) -> Result<Vec<String>, CloudError> {
        let st = self.state.lock();
        Ok(st
            .enis
            .values()
            .filter(|e| e.instance.as_deref() == Some(INSTANCE))
            .filter(|e| !st.md_hidden.contains(&e.mac))
            .map(|e| e.mac.clone())
            .collect())
    }

    fn eni(&self, mac: &str) -> Result<MetadataEni, CloudError> {
        let st = self.state.lock();
        let e = st
            .enis
            .values()
            .find(|e| e.mac == mac && e.instance.as_deref() == Some(INSTANCE))
            .ok_or_else(|| CloudError::new(CloudErrorKind::NotFound, "metadata", "404"))?;
        let v = &st.vswitches[&e.vswitch];
        Ok(MetadataEni {
            mac: mac.into(),
            eni_id: e.id.clone(),
            primary_ip: e.v4.first().copied(),
            gateway: Some(Ipv4Addr::new(v.prefix[0], v.prefix[1], 255, 253)),
            vswitch_id: e.vswitch.clone(),
            vswitch_cidr: format!("{}.{}.0.0/16", v.prefix[0], v.prefix[1]),
            ipv4s: e.v4.clone(),
            ipv6s: e.v6.clone(),
            ipv6_gateway: None,
            vswitch_ipv6_cidr: None,
        })
    }

    fn eni_ips(&self, mac: &str, _v6: bool) -> Result<(Vec<Ipv4Addr>, Vec<Ipv6Addr>), CloudError> {
        let e = self.eni(mac)?;
        Ok((e.ipv4s, e.ipv6s))
    }
}

/// A journal in memory, with an optional injected failure.
#[derive(Default)]
pub(crate) struct MemJournal {
    pub(crate) state: Mutex<PersistedState>,
    pub(crate) fail: std::sync::atomic::AtomicBool,
    pub(crate) commits: AtomicUsize,
}

impl Journal for MemJournal {
    fn submit(&self, records: Vec<Record>, done: Box<dyn FnOnce(Result<(), StoreError>) + Send>) {
        if self.fail.load(Ordering::SeqCst) {
            done(Err(StoreError::Closed));
            return;
        }
        let mut s = self.state.lock();
        for r in &records {
            s.apply(r);
        }
        drop(s);
        self.commits.fetch_add(1, Ordering::SeqCst);
        done(Ok(()));
    }
}
