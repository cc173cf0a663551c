//! The node identity: a random id made at the first start and kept in the
//! state directory (`node-id`), so that the ENIs this daemon creates can be
//! told from those of another eniipd on the same instance (with its own
//! state directory).

use std::path::Path;

use super::snapshot::write_atomic;
use super::{Store, StoreError};

/// The file in the state directory.
pub(crate) const NODE_ID_FILE: &str = "node-id";

impl Store {
    /// This state directory's node id, made (durably) on first use.
    pub(crate) fn node_id(&self) -> Result<String, StoreError> {
        node_id(&self.dir)
    }
}

fn valid(id: &str) -> bool {
    (8..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_hexdigit())
}

fn node_id(dir: &Path) -> Result<String, StoreError> {
    let path = dir.join(NODE_ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let id = text.trim();
            if valid(id) {
                Ok(id.to_string())
            } else {
                Err(StoreError::Corrupt {
                    file: path,
                    offset: None,
                    what: "not a node id (8 to 64 hex digits)".into(),
                })
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = eniip_util::rand::with_thread_rng(|r| r.hex(8));
            write_atomic(dir, NODE_ID_FILE, format!("{id}\n").as_bytes())
                .map_err(|e| StoreError::io(format!("writing {}", path.display()), e))?;
            Ok(id)
        }
        Err(e) => Err(StoreError::io(format!("reading {}", path.display()), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_once_then_kept() {
        let dir = std::env::temp_dir().join(format!("eniipd-node-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let a = node_id(&dir).unwrap();
        assert!(valid(&a), "{a}");
        assert_eq!(node_id(&dir).unwrap(), a);
        std::fs::write(dir.join(NODE_ID_FILE), "zz\n").unwrap();
        assert!(matches!(node_id(&dir), Err(StoreError::Corrupt { .. })));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
