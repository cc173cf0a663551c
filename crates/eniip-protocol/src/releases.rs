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
//! such a line, or that eniipd cannot trust (not a regular file, a link,
//! owned by another user than root or eniipd's, writable by group or
//! others, larger than [`MAX_BYTES`]), is renamed `*.refused` (kept for
//! the operator, never read again). A file is opened without following a
//! link or blocking (`O_NOFOLLOW|O_NONBLOCK`: a FIFO there never stalls
//! eniipd) and judged on that descriptor.

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
/// Largest queue file taken (one protocol line).
const MAX_BYTES: u64 = 4096;

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

/// Every release queued in `dir`, however many (eniipd's side: all are
/// applied before it serves). A missing folder is an empty queue; one that someone other than
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

/// The folder's owner may queue: root, or the user eniipd runs as.
fn may_queue(uid: u32) -> bool {
    uid == 0 || uid == nix::unistd::geteuid().as_raw()
}

fn trusted(meta: &std::fs::Metadata) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let why = if !meta.is_dir() {
        Some("it is not a directory".to_string())
    } else if !may_queue(meta.uid()) {
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
    let text = read_trusted(path)?;
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

/// The bytes of the queue file at `path` if eniipd may trust it, else
/// why not. Opened without following a link or blocking, and judged on
/// that descriptor (the path may change under us, the descriptor not):
/// a regular file, owned by root or eniipd's user, that neither group
/// nor others may write, of at most [`MAX_BYTES`].
fn read_trusted(path: &Path) -> Result<Vec<u8>, String> {
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(nix::libc::ELOOP) => "it is a symbolic link".to_string(),
            _ => format!("cannot read it: {e}"),
        })?;
    let m = f.metadata().map_err(|e| format!("cannot read it: {e}"))?;
    let t = m.file_type();
    if !t.is_file() {
        return Err(format!(
            "it is not a regular file but {}",
            if t.is_fifo() {
                "a FIFO"
            } else if t.is_dir() {
                "a directory"
            } else if t.is_socket() {
                "a socket"
            } else {
                "a device"
            }
        ));
    }
    if !may_queue(m.uid()) {
        return Err(format!("it is owned by uid {}", m.uid()));
    }
    if m.mode() & 0o022 != 0 {
        return Err(format!(
            "its mode {:o} lets others write to it",
            m.mode() & 0o777
        ));
    }
    if m.len() > MAX_BYTES {
        return Err(format!("it is {} bytes, more than {MAX_BYTES}", m.len()));
    }
    let mut text = Vec::new();
    f.take(MAX_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if text.len() as u64 > MAX_BYTES {
        return Err(format!("it grew past {MAX_BYTES} bytes while read"));
    }
    Ok(text)
}

/// A queued release is applied (eniipd's side): its file goes. The
/// removal is made durable by [`settle`] once per pass (a removal lost
/// to a crash only applies the release again, which changes nothing).
pub fn done(q: &Queued) -> io::Result<()> {
    std::fs::remove_file(&q.path)
}

/// Makes the removals of a pass in `dir` durable.
pub fn settle(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
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
    fn a_file_eniipd_cannot_trust_is_refused_without_being_opened_for_real() {
        use std::os::unix::fs::PermissionsExt as _;
        let d = tempdir();
        let q = d.join(DIR);
        std::fs::create_dir_all(&q).unwrap();
        let line = "release eniip/x sandbox=1\n";
        let outside = d.join("outside");
        std::fs::write(&outside, line).unwrap();
        std::os::unix::fs::symlink(&outside, q.join("link.release")).unwrap();
        // A FIFO with no writer: a blocking open would wait for ever.
        nix::unistd::mkfifo(
            &q.join("fifo.release"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        std::fs::create_dir(q.join("dir.release")).unwrap();
        std::fs::write(q.join("open.release"), line).unwrap();
        std::fs::set_permissions(
            q.join("open.release"),
            std::fs::Permissions::from_mode(0o620),
        )
        .unwrap();
        // A valid line, then more than a line's worth.
        let mut big = line.as_bytes().to_vec();
        big.resize(MAX_BYTES as usize + 1, b' ');
        std::fs::write(q.join("big.release"), big).unwrap();
        let mut expect = vec![
            ("link.release", "symbolic link"),
            ("fifo.release", "FIFO"),
            ("dir.release", "directory"),
            ("open.release", "620"),
            ("big.release", "4097 bytes"),
        ];
        if nix::unistd::geteuid().is_root() {
            std::fs::write(q.join("nobody.release"), line).unwrap();
            std::os::unix::fs::chown(q.join("nobody.release"), Some(65534), Some(65534)).unwrap();
            expect.push(("nobody.release", "uid 65534"));
        }
        std::fs::write(q.join("good.release"), line).unwrap();
        let found = pending(&q).unwrap();
        assert_eq!(found.len(), expect.len() + 1, "{found:?}");
        for (name, why) in expect {
            let f = found.iter().find(|f| f.path.ends_with(name)).unwrap();
            let e = f.release.as_ref().unwrap_err();
            assert!(e.contains(why), "{name}: {e}");
        }
        let good = found
            .iter()
            .find(|f| f.path.ends_with("good.release"))
            .unwrap();
        assert!(good.release.is_ok(), "{good:?}");
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
