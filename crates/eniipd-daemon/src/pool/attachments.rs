//! Which sandbox network each allocation was made for ([`Attachment`]),
//! as eniip-cni named it ([`Attachments`]): kept beside the allocation and
//! persisted with it.
//!
//! Invariants: an owner has at most one attachment, named for one sandbox
//! (or for none); an `alloc` for another sandbox that names none drops the
//! old sandbox's; an attachment counts only while its owner holds its
//! address for that sandbox (read from the [`Owners`] the pool passes in).

use std::collections::HashMap;

use super::Owners;
use eniip_protocol::core::{Attachment, Owner, SandboxId};

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

/// The attachments, by owner, with the sandbox each was named for.
#[derive(Debug, Clone, Default)]
pub(crate) struct Attachments {
    by_owner: HashMap<Owner, (Option<SandboxId>, Attachment)>,
}

impl Attachments {
    /// `owner`'s attachment, if it holds its address for the sandbox the
    /// attachment was named for.
    pub(crate) fn current(&self, owner: &Owner, owners: &Owners) -> Option<&Attachment> {
        let (sandbox, a) = self.by_owner.get(owner)?;
        owners.holds_for(owner, sandbox.as_ref()).then_some(a)
    }

    /// Every held allocation whose attachment counts.
    pub(crate) fn attached(&self, owners: &Owners) -> Vec<Attached> {
        self.by_owner
            .iter()
            .filter_map(|(owner, (sandbox, attach))| {
                let held = owners.get(owner)?;
                (held.sandbox() == sandbox.as_ref()).then(|| Attached {
                    owner: owner.clone(),
                    sandbox: sandbox.clone(),
                    attach: attach.clone(),
                    since_ms: held.since_ms(),
                })
            })
            .collect()
    }

    // ---- what only the pool does -------------------------------------------

    /// An `alloc` of `owner` for `sandbox` named `attach`, or none: a named
    /// one replaces the owner's; none drops one named for another sandbox
    /// (an `alloc` without one keeps its sandbox's earlier one).
    pub(super) fn note(
        &mut self,
        owner: &Owner,
        sandbox: Option<&SandboxId>,
        attach: Option<Attachment>,
    ) {
        match attach {
            Some(a) => {
                self.by_owner.insert(owner.clone(), (sandbox.cloned(), a));
            }
            None => {
                if sandbox.is_some()
                    && self
                        .by_owner
                        .get(owner)
                        .is_some_and(|(s, _)| s.as_ref() != sandbox)
                {
                    self.by_owner.remove(owner);
                }
            }
        }
    }

    /// Records `owner`'s attachment as restored from the state file.
    pub(super) fn restore(&mut self, owner: &Owner, sandbox: Option<SandboxId>, a: Attachment) {
        self.by_owner.insert(owner.clone(), (sandbox, a));
    }

    /// `owner` holds nothing any more: its attachment goes.
    pub(super) fn forget(&mut self, owner: &Owner) {
        self.by_owner.remove(owner);
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::super::tests::owner;
    use super::{Attachments, Owners};
    use eniip_protocol::core::{Attachment, NsId, SandboxId};

    fn attachment(veth: &str) -> Attachment {
        Attachment {
            netns: "/run/netns/x".into(),
            netns_id: NsId {
                dev: 4,
                ino: 4026532000,
            },
            veth: veth.into(),
            host_id: NsId::default(),
            boot: None,
            noted_ns: 0,
        }
    }

    #[test]
    fn one_attachment_per_owner_counting_while_held_for_its_sandbox() {
        let mut at = Attachments::default();
        let mut owners = Owners::default();
        let (x, y) = (
            SandboxId::parse("x").unwrap(),
            SandboxId::parse("y").unwrap(),
        );
        let a = owner("a");
        let veth =
            |at: &Attachments, owners: &Owners| at.current(&a, owners).map(|v| v.veth.clone());
        at.note(&a, Some(&x), Some(attachment("veth1")));
        assert_eq!(veth(&at, &owners), None, "a holds nothing yet");
        assert!(owners.take(
            &a,
            Ipv4Addr::new(10, 0, 0, 1),
            Some(x.clone()),
            7,
            Default::default(),
            None
        ));
        at.note(&a, Some(&x), Some(attachment("veth2")));
        assert_eq!(veth(&at, &owners).as_deref(), Some("veth2"), "the newest");
        assert_eq!(at.attached(&owners).len(), 1);
        assert_eq!(at.attached(&owners)[0].since_ms, 7);
        // The same sandbox, or no sandbox, naming none: kept.
        at.note(&a, Some(&x), None);
        at.note(&a, None, None);
        assert!(veth(&at, &owners).is_some());
        // The allocation moved to another sandbox: the old one's does not
        // count, and an alloc of the new one naming none drops it.
        assert!(owners.move_sandbox(&a, &y));
        assert_eq!(veth(&at, &owners), None);
        assert!(at.attached(&owners).is_empty());
        at.note(&a, Some(&y), None);
        owners.move_sandbox(&a, &x);
        assert_eq!(veth(&at, &owners), None, "dropped");
        at.restore(&a, Some(x.clone()), attachment("veth3"));
        assert_eq!(veth(&at, &owners).as_deref(), Some("veth3"));
        at.forget(&a);
        assert_eq!(veth(&at, &owners), None);
    }
}
