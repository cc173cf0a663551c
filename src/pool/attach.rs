//! Which sandbox network each allocation was made for ([`Attachment`]),
//! as eniip-cni named it: kept beside the allocation, persisted with it,
//! and valid only while the owner holds its address for that sandbox.

use super::{IpState, PoolState};
use crate::core::{Allocation, Attachment, Owner, SandboxId};

/// A held allocation with a recorded attachment (for the sandbox reaper).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attached {
    /// The holder.
    pub(crate) owner: Owner,
    /// Its sandbox.
    pub(crate) sandbox: Option<SandboxId>,
    /// Where its network lives.
    pub(crate) attach: Attachment,
    /// When the address was handed out (Unix ms).
    pub(crate) since_ms: u64,
}

impl PoolState {
    /// An `alloc` names (or does not name) its sandbox's network: noted
    /// before the address is taken, so the record that makes it durable
    /// carries it. True when `owner` already holds its address for this
    /// sandbox and the attachment is new (its record must be written
    /// again). An `alloc` without one keeps the sandbox's earlier one.
    pub(crate) fn note_attachment(
        &mut self,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
        attach: Option<Attachment>,
    ) -> bool {
        match attach {
            Some(a) => {
                let before = self.attachment(owner).cloned();
                self.attachments
                    .insert(owner.clone(), (sandbox.cloned(), a.clone()));
                self.holds_for(owner, sandbox) && before.as_ref() != Some(&a)
            }
            None => {
                if self
                    .attachments
                    .get(owner)
                    .is_some_and(|(s, _)| s.as_ref() != sandbox && sandbox.is_some())
                {
                    self.attachments.remove(owner);
                }
                false
            }
        }
    }

    /// The attachment of `owner`'s allocation, if it holds one for the
    /// sandbox the attachment was named for.
    pub(crate) fn attachment(&self, owner: &Owner) -> Option<&Attachment> {
        let (sandbox, a) = self.attachments.get(owner)?;
        self.holds_for(owner, sandbox.as_ref()).then_some(a)
    }

    /// Every held allocation with an attachment.
    pub(crate) fn attached(&self) -> Vec<Attached> {
        self.attachments
            .iter()
            .filter_map(|(owner, (sandbox, attach))| {
                let v4 = self.owners.get(owner)?;
                match &self.ips.get(v4)?.state {
                    IpState::InUse {
                        sandbox: s,
                        since_ms,
                        ..
                    } if s == sandbox => Some(Attached {
                        owner: owner.clone(),
                        sandbox: sandbox.clone(),
                        attach: attach.clone(),
                        since_ms: *since_ms,
                    }),
                    _ => None,
                }
            })
            .collect()
    }

    /// `owner`'s allocation, if it holds one.
    pub(crate) fn allocation(&self, owner: &Owner) -> Option<Allocation> {
        let v4 = *self.owners.get(owner)?;
        let ip = self.ips.get(&v4)?;
        let IpState::InUse {
            sandbox, since_ms, ..
        } = &ip.state
        else {
            return None;
        };
        Some(Allocation {
            owner: owner.clone(),
            sandbox: sandbox.clone(),
            ip: v4,
            ipv6: ip.v6,
            eni: ip.eni.clone(),
            since_ms: *since_ms,
            attach: self.attachment(owner).cloned(),
        })
    }

    fn holds_for(&self, owner: &Owner, sandbox: Option<&SandboxId>) -> bool {
        self.owners
            .get(owner)
            .and_then(|v4| self.ips.get(v4))
            .is_some_and(|ip| {
                matches!(&ip.state, IpState::InUse { sandbox: s, .. } if s.as_ref() == sandbox)
            })
    }
}
