//! The releases eniip-cni queues for eniipd while eniipd is away (a
//! restart, a DaemonSet rollout, a crash): the one code that writes and
//! reads them, for both sides.
//!
//! Where: the folder `releases` beside eniipd's socket ([`dir_for`]): the
//! one path both know (the plugin from its conflist's `socket`), and one
//! that every deployment shares between them (`/run/eniipd` under systemd
//! and as the DaemonSet's hostPath). It is on `/run`, so a reboot empties
//! it; the sandboxes are gone then too, and eniipd's sandbox reaper takes
//! their addresses back (`netns-gone`).
//!
//! What: one file per (owner, sandbox), `<sha1 of both>.release`, holding
//! the protocol line `release OWNER sandbox=ID [gen=N]`, written whole (a
//! temporary file, fsynced, renamed, the folder fsynced). The same DEL
//! again writes the same file.
//!
//! eniipd applies every queued release before it serves and then every
//! [`RESCAN`] (a DEL that queued while eniipd was starting), removing
//! each once its release is durable. Applying one twice changes nothing
//! and a late one never touches a newer sandbox of the same pod: a
//! release names its sandbox, and eniipd releases only an address held by
//! that sandbox; nor a newer allocation of the same sandbox (a runtime
//! that reuses container ids re-adds it): a release names the generation
//! its ADD was answered, and every `alloc` answered since has a newer
//! one. So a crash between the release and the removal loses
//! nothing and takes nothing from anyone. A file that does not hold
//! such a line is renamed `*.refused` (kept for the operator, never read
//! again).

use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha1::{Digest, Sha1};

use crate::core::{Command, Generation, Owner, SandboxId};
use crate::protocol::ClientRequest;

/// The folder's name, beside the socket.
pub const DIR: &str = "releases";
/// A queued release's file name ends so.
const SUFFIX: &str = ".release";
/// How often eniipd looks for releases queued after its start.
pub const RESCAN: Duration = Duration::from_secs(5);
/// Largest queue file read (one protocol line).
const MAX_BYTES: u64 = 4096;
/// Most releases applied in one pass (the rest wait for the next).
pub const MAX_PER_PASS: usize = 10_000;

/// The queue folder for eniipd's socket `socket`: beside the socket, and
/// where a symlink at `socket` points, beside its target (a conflist may
/// name a link to the socket; eniipd knows only the socket itself).
pub fn dir_for(socket: &Path) -> PathBuf {
    let mut at = socket.to_path_buf();
    // Bounded, as the kernel bounds a chain of links.
    for _ in 0..8 {
        match std::fs::read_link(&at) {
            Ok(target) => {
                at = match at.parent() {
                    Some(dir) => dir.join(target),
                    None => target,
                }
            }
            Err(_) => break,
        }
    }
    at.parent().unwrap_or_else(|| Path::new("/")).join(DIR)
}

fn file_name(owner: &Owner, sandbox: &SandboxId) -> String {
    let h = Sha1::digest(format!("{} {}", owner.as_str(), sandbox.as_str()).as_bytes());
    let hex: String = h.iter().map(|b| format!("{b:02x}")).collect();
    format!("{hex}{SUFFIX}")
}

/// The line a queued release holds.
fn line(owner: &Owner, sandbox: &SandboxId, gen: Option<Generation>) -> String {
    ClientRequest::Command(Command::Release {
        owner: owner.clone(),
        sandbox: Some(sandbox.clone()),
        gen,
    })
    .to_line()
}

/// Queues the release of `owner`'s address held by `sandbox` for the
/// eniipd whose socket is `socket` (the plugin's side): with `gen`, only
/// that allocation's (what an ADD of the sandbox answered since makes it
/// stale). Returns the file; ids eniipd would refuse are `InvalidInput`.
pub fn queue(
    socket: &Path,
    owner: &str,
    sandbox: &str,
    gen: Option<Generation>,
) -> io::Result<PathBuf> {
    let invalid =
        |e: crate::core::AllocError| io::Error::new(io::ErrorKind::InvalidInput, e.to_string());
    let owner = Owner::parse(owner).map_err(invalid)?;
    let sandbox = SandboxId::parse(sandbox).map_err(invalid)?;
    let (owner, sandbox) = (&owner, &sandbox);
    let dir = dir_for(socket);
    match std::fs::create_dir(&dir) {
        Ok(()) => {
            std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let path = dir.join(file_name(owner, sandbox));
    let tmp = dir.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        eniip_util::rand::with_thread_rng(|r| r.hex(4))
    ));
    let written = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(format!("{}\n", line(owner, sandbox, gen)).as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        File::open(&dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map(|()| path)
}

/// How many releases are queued at `socket`'s folder (for STATUS).
pub fn count(socket: &Path) -> usize {
    std::fs::read_dir(dir_for(socket))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(SUFFIX))
                .count()
        })
        .unwrap_or(0)
}

/// One queued release found by [`pending`].
#[derive(Debug)]
pub struct Queued {
    /// Its file.
    pub path: PathBuf,
    /// The release it asks for, or why it is refused.
    pub release: Result<Command, String>,
}

/// The releases queued in `dir`, at most [`MAX_PER_PASS`] (eniipd's
/// side). A missing folder is an empty queue; one that someone other than
/// root (or this process's user) owns, or that others may write to, is
/// refused (`PermissionDenied`): a queued release is applied without the
/// socket's access check, so only who may release may queue.
pub fn pending(dir: &Path) -> io::Result<Vec<Queued>> {
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    trusted(&meta)?;
    let entries = std::fs::read_dir(dir)?;
    let mut out = Vec::new();
    for e in entries.flatten() {
        if out.len() >= MAX_PER_PASS {
            break;
        }
        let name = e.file_name();
        if !name.to_string_lossy().ends_with(SUFFIX) {
            continue;
        }
        let path = e.path();
        let release = read(&path);
        out.push(Queued { path, release });
    }
    Ok(out)
}

fn trusted(meta: &std::fs::Metadata) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let me = nix::unistd::geteuid().as_raw();
    let why = if !meta.is_dir() {
        Some("it is not a directory".to_string())
    } else if meta.uid() != 0 && meta.uid() != me {
        Some(format!("it is owned by uid {}", meta.uid()))
    } else if meta.mode() & 0o022 != 0 {
        Some(format!(
            "its mode {:o} lets others write to it",
            meta.mode() & 0o777
        ))
    } else {
        None
    };
    match why {
        None => Ok(()),
        Some(w) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("not applied: {w}"),
        )),
    }
}

fn read(path: &Path) -> Result<Command, String> {
    let mut text = Vec::new();
    File::open(path)
        .and_then(|f| f.take(MAX_BYTES).read_to_end(&mut text))
        .map_err(|e| format!("cannot read it: {e}"))?;
    let line = text.strip_suffix(b"\n").unwrap_or(&text);
    match crate::protocol::parse_request(line) {
        Ok(ClientRequest::Command(
            c @ Command::Release {
                sandbox: Some(_), ..
            },
        )) => Ok(c),
        Ok(_) => Err("it holds no `release OWNER sandbox=ID`".into()),
        Err(e) => Err(format!("it holds no request: {e}")),
    }
}

/// A queued release is applied (eniipd's side): its file goes.
pub fn done(q: &Queued) -> io::Result<()> {
    std::fs::remove_file(&q.path)?;
    if let Some(dir) = q.path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// A file that is no queued release is put aside as `*.refused`.
pub fn refuse(q: &Queued) -> io::Result<PathBuf> {
    let mut aside = q.path.clone().into_os_string();
    aside.push(".refused");
    let aside = PathBuf::from(aside);
    std::fs::rename(&q.path, &aside)?;
    Ok(aside)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("eniip-releases-{}", eniip_util::rand::uuid()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_queued_release_reads_back_once_per_owner_and_sandbox() {
        let d = tempdir();
        let sock = d.join("eniipd.sock");
        let o = "eniip/default/web-0";
        let p = queue(&sock, o, "abc123", None).unwrap();
        // The same DEL again: the same file.
        assert_eq!(queue(&sock, o, "abc123", None).unwrap(), p);
        queue(&sock, o, "def456", Some(Generation::from_u64(12))).unwrap();
        let bad = queue(&sock, o, "white space", None).unwrap_err();
        assert_eq!(bad.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(count(&sock), 2);
        let mut q = pending(&dir_for(&sock)).unwrap();
        q.sort_by_key(|q| format!("{:?}", q.release));
        let got: Vec<String> = q
            .iter()
            .map(|q| ClientRequest::Command(q.release.clone().unwrap()).to_line())
            .collect();
        assert_eq!(
            got,
            [
                "release eniip/default/web-0 sandbox=abc123",
                "release eniip/default/web-0 sandbox=def456 gen=12"
            ]
        );
        for x in &q {
            done(x).unwrap();
        }
        assert_eq!(count(&sock), 0);
        assert!(pending(&dir_for(&sock)).unwrap().is_empty());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn anything_but_a_release_with_its_sandbox_is_refused() {
        let d = tempdir();
        let q = d.join(DIR);
        std::fs::create_dir_all(&q).unwrap();
        for (name, text) in [
            ("a.release", "release eniip/x\n"),
            ("b.release", "alloc eniip/x sandbox=1\n"),
            ("c.release", "\u{0}garbage"),
        ] {
            std::fs::write(q.join(name), text).unwrap();
        }
        std::fs::write(q.join(".tmp-1-ab"), "release eniip/x sandbox=1\n").unwrap();
        let found = pending(&q).unwrap();
        assert_eq!(found.len(), 3, "{found:?}");
        for f in &found {
            assert!(f.release.is_err(), "{f:?}");
            let aside = refuse(f).unwrap();
            assert!(aside.to_string_lossy().ends_with(".release.refused"));
        }
        assert!(pending(&q).unwrap().is_empty());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_link_to_the_socket_queues_beside_its_target() {
        let d = tempdir();
        std::fs::create_dir_all(d.join("real")).unwrap();
        std::fs::create_dir_all(d.join("shipped")).unwrap();
        // The target need not exist (eniipd removed its socket at stop).
        std::os::unix::fs::symlink("../real/eniipd.sock", d.join("shipped/eniipd.sock")).unwrap();
        assert_eq!(
            dir_for(&d.join("shipped/eniipd.sock")),
            d.join("shipped/../real").join(DIR)
        );
        assert_eq!(
            dir_for(&d.join("real/eniipd.sock")),
            d.join("real").join(DIR)
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_queue_others_may_write_to_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let d = tempdir();
        let sock = d.join("eniipd.sock");
        queue(&sock, "eniip/x", "s1", None).unwrap();
        let q = dir_for(&sock);
        std::fs::set_permissions(&q, std::fs::Permissions::from_mode(0o733)).unwrap();
        let e = pending(&q).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        assert!(e.to_string().contains("733"), "{e}");
        std::fs::set_permissions(&q, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(pending(&q).unwrap().len(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn no_folder_is_an_empty_queue() {
        let d = tempdir();
        assert!(pending(&d.join("none")).unwrap().is_empty());
        assert_eq!(count(&d.join("eniipd.sock")), 0);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
