//! What each ADD built, kept with its attachment so that DEL and GC undo
//! exactly that ([`Built`]): the host end it made (its name and ifindex:
//! a later ADD of the same container id makes another by the same name)
//! and the allocation it was answered (owner, sandbox and generation: a
//! later ADD of the same sandbox is answered another generation).
//!
//! Where: one file per attachment, `lockDir/built/<host end>` (the host
//! end's name is a hash of the container id and interface name, so one
//! attachment has one file, and a repeated ADD replaces it). It is on
//! `/run` like the locks: a reboot empties it with the host ends it
//! describes. Written whole (a temporary file renamed over it) by ADD
//! once its network is built, under the owner's lock, and removed by the
//! DEL or GC that took that network down, under the same lock; a file
//! that cannot be read is as if there were none (DEL then falls back to
//! what it did before records existed: the host end by name, the release
//! by sandbox).

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use eniip_protocol::core::Generation;

/// The folder, under the plugin's `lockDir`.
const DIR: &str = "built";
/// Largest record read.
const MAX_BYTES: u64 = 4096;

/// One attachment's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Built {
    /// The network (the conflist's `name`): GC looks at its own only.
    pub(crate) network: String,
    /// Its owner, as eniipd knows it.
    pub(crate) owner: String,
    /// Its sandbox, as eniipd knows it.
    pub(crate) sandbox: String,
    /// The generation eniipd answered its `alloc` (none from an eniipd
    /// older than generations).
    #[serde(default)]
    pub(crate) gen: Option<u64>,
    /// The host end's name.
    pub(crate) veth: String,
    /// The host end's ifindex.
    pub(crate) ifindex: u32,
}

impl Built {
    /// The generation eniipd answered, if it answered one.
    pub(crate) fn generation(&self) -> Option<Generation> {
        self.gen.filter(|g| *g > 0).map(Generation::from_u64)
    }

    /// ` gen=N` for a release of this allocation, or nothing.
    pub(crate) fn gen_arg(&self) -> String {
        self.generation()
            .map(|g| format!(" gen={g}"))
            .unwrap_or_default()
    }
}

fn dir(lock_dir: &Path) -> PathBuf {
    lock_dir.join(DIR)
}

fn path(lock_dir: &Path, veth: &str) -> PathBuf {
    dir(lock_dir).join(veth)
}

/// Keeps `b` (replacing the record of an earlier ADD of the attachment).
pub(crate) fn keep(lock_dir: &Path, b: &Built) -> io::Result<()> {
    let d = dir(lock_dir);
    std::fs::create_dir_all(&d)?;
    let tmp = d.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        eniip_util::rand::with_thread_rng(|r| r.hex(4))
    ));
    let text = serde_json::to_vec(b).map_err(io::Error::other)?;
    let written =
        std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path(lock_dir, &b.veth)));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// The record of the attachment whose host end is `veth`, if there is a
/// readable one.
pub(crate) fn find(lock_dir: &Path, veth: &str) -> Option<Built> {
    read(&path(lock_dir, veth))
}

fn read(p: &Path) -> Option<Built> {
    use std::io::Read as _;
    let mut text = Vec::new();
    std::fs::File::open(p)
        .and_then(|f| f.take(MAX_BYTES).read_to_end(&mut text))
        .ok()?;
    serde_json::from_slice(&text).ok()
}

/// Every readable record of `network`.
pub(crate) fn of_network(lock_dir: &Path, network: &str) -> Vec<Built> {
    let Ok(entries) = std::fs::read_dir(dir(lock_dir)) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| read(&e.path()))
        .filter(|b| b.network == network)
        .collect()
}

/// The attachment whose host end is `veth` is taken down.
pub(crate) fn forget(lock_dir: &Path, veth: &str) -> io::Result<()> {
    match std::fs::remove_file(path(lock_dir, veth)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_by_its_host_end_and_its_network() {
        let d = crate::test_support::test_dir("built");
        let b = Built {
            network: "net".into(),
            owner: "net/default/web".into(),
            sandbox: "abc".into(),
            gen: Some(7),
            veth: "enip0123456789a".into(),
            ifindex: 42,
        };
        assert_eq!(find(&d, &b.veth), None);
        keep(&d, &b).unwrap();
        let again = Built {
            gen: Some(9),
            ..b.clone()
        };
        keep(&d, &again).unwrap();
        assert_eq!(find(&d, &b.veth), Some(again.clone()));
        assert_eq!(again.gen_arg(), " gen=9");
        keep(
            &d,
            &Built {
                network: "other".into(),
                veth: "enip0123456789b".into(),
                ..b.clone()
            },
        )
        .unwrap();
        assert_eq!(of_network(&d, "net"), [again]);
        forget(&d, &b.veth).unwrap();
        forget(&d, &b.veth).unwrap();
        assert!(of_network(&d, "net").is_empty());
        let older = Built { gen: None, ..b };
        assert_eq!(older.gen_arg(), "");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
