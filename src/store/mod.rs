//! TEMPORARY in-memory stand-in with the API of the durable store being
//! built on branch `store`; replaced wholesale when that branch merges.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// An IP held by an owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    pub owner: String,
    pub sandbox: Option<String>,
    pub ipv4: Ipv4Addr,
    pub ipv6: Option<Ipv6Addr>,
    pub eni: String,
    pub at_ms: u64,
}

/// A released IP kept for its last owner and/or from other owners.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    pub ipv4: Ipv4Addr,
    pub ipv6: Option<Ipv6Addr>,
    pub eni: String,
    pub last_owner: Option<String>,
    pub reserved_until_ms: u64,
    pub cooling_until_ms: u64,
}

/// One state change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    Alloc(Allocation),
    Release { owner: String, hold: Option<Hold> },
    ClearHold { ipv4: Ipv4Addr },
    Forget { owner: String },
}

/// Everything stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PersistedState {
    pub allocations: BTreeMap<String, Allocation>,
    pub holds: BTreeMap<Ipv4Addr, Hold>,
}

impl PersistedState {
    /// Applies one record.
    pub fn apply(&mut self, r: &Record) {
        match r {
            Record::Alloc(a) => {
                self.holds.remove(&a.ipv4);
                self.allocations.insert(a.owner.clone(), a.clone());
            }
            Record::Release { owner, hold } => {
                self.allocations.remove(owner);
                if let Some(h) = hold {
                    self.holds.insert(h.ipv4, h.clone());
                }
            }
            Record::ClearHold { ipv4 } => {
                self.holds.remove(ipv4);
            }
            Record::Forget { owner } => {
                self.allocations.remove(owner);
            }
        }
    }
}

/// Store failures.
#[derive(Debug, Clone)]
pub enum StoreError {
    Locked {
        dir: PathBuf,
    },
    Corrupt {
        file: PathBuf,
        offset: Option<u64>,
        what: String,
    },
    Io {
        context: String,
        source: Arc<std::io::Error>,
    },
    Closed,
}

impl StoreError {
    /// Exit code for eniipd.
    pub fn exit_code(&self) -> i32 {
        match self {
            StoreError::Locked { .. } => 75,
            StoreError::Corrupt { .. } => 65,
            _ => 1,
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for StoreError {}

/// Queues records.
pub struct Committer {
    state: parking_lot::Mutex<PersistedState>,
}

impl Committer {
    /// In-memory only.
    pub fn in_memory() -> Committer {
        Committer {
            state: parking_lot::Mutex::new(PersistedState::default()),
        }
    }

    /// Applies and acknowledges at once.
    pub fn submit(
        &self,
        records: Vec<Record>,
        done: Box<dyn FnOnce(Result<(), StoreError>) + Send>,
    ) {
        let mut s = self.state.lock();
        for r in &records {
            s.apply(r);
        }
        drop(s);
        done(Ok(()));
    }

    /// Submit and wait.
    pub fn commit(&self, records: Vec<Record>, _timeout: Duration) -> Result<(), StoreError> {
        self.submit(records, Box::new(|_| {}));
        Ok(())
    }
}
