//! Network namespace identities: the device and inode of a namespace file
//! (`/run/netns/x`, `/proc/PID/ns/net`), the same for every path to one
//! namespace and different for every other namespace.
//!
//! A path a client or a record names is data: [`named`] opens it `O_PATH`
//! without following a link (nothing is opened, so a FIFO cannot block
//! and a device's driver is never called) and checks what it is on the
//! descriptor; [`stat`] only looks.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// `NS_GET_NSTYPE`, `_IO(0xb7, 0x3)`: the kind of a namespace file.
const NS_GET_NSTYPE: nix::libc::c_ulong = 0xb703;

/// The (device, inode) of the network namespace at `path`. An error of
/// kind `NotFound` when nothing is there, `InvalidInput` when what is
/// there is not a network namespace (a regular file, a directory,
/// `/dev/null`, another kind of namespace).
pub fn identity(path: &Path) -> io::Result<(u64, u64)> {
    identity_of(&File::open(path)?, path)
}

/// [`identity`] of a file already open (`path` only names it in errors).
pub fn identity_of(f: &File, path: &Path) -> io::Result<(u64, u64)> {
    let not_netns = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a network namespace", path.display()),
        )
    };
    let st = nix::sys::statfs::fstatfs(f).map_err(io::Error::from)?;
    // nix's constant has the width this target's statfs gives (i64 on
    // 64-bit glibc, u32 on s390x, an unsigned long on musl).
    if st.filesystem_type() != nix::sys::statfs::NSFS_MAGIC {
        return Err(not_netns());
    }
    // SAFETY: NS_GET_NSTYPE takes no argument and only reads the fd.
    #[allow(unsafe_code)]
    let kind = unsafe { nix::libc::ioctl(f.as_raw_fd(), NS_GET_NSTYPE as _) };
    if kind != nix::libc::CLONE_NEWNET {
        return Err(not_netns());
    }
    let m = f.metadata()?;
    Ok((m.dev(), m.ino()))
}

/// [`identity`] of the namespace a client names at `path`, found without
/// blocking or following a link: the file is opened `O_PATH|O_NOFOLLOW`
/// and must be on nsfs (checked on that descriptor) before anything
/// else is done with it. `/proc/PID/ns/net` is the one link followed: the
/// kernel makes it, and it always leads to nsfs (or to nothing).
pub fn named(path: &Path) -> io::Result<(u64, u64)> {
    let mut o = OpenOptions::new();
    o.read(true);
    if is_proc_ns_link(path) {
        o.custom_flags(nix::libc::O_PATH);
    } else {
        o.custom_flags(nix::libc::O_PATH | nix::libc::O_NOFOLLOW);
    }
    let f = o.open(path)?;
    let st = nix::sys::statfs::fstatfs(&f).map_err(io::Error::from)?;
    if st.filesystem_type() != nix::sys::statfs::NSFS_MAGIC {
        let what = describe(&f.metadata()?.file_type());
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is {what}, not a network namespace", path.display()),
        ));
    }
    // An nsfs file: opening it for real cannot block or reach a driver,
    // and its kind needs a descriptor that is not O_PATH.
    let real = File::open(format!("/proc/thread-self/fd/{}", f.as_raw_fd()))?;
    identity_of(&real, path)
}

/// [`identity`] by looking only (`statfs`, `stat`: no file is opened):
/// what the sandbox reaper reads of a recorded path at every look. An
/// nsfs file is taken for a network namespace (the identity compared with
/// one recorded by [`named`] tells the rest).
pub fn stat(path: &Path) -> io::Result<(u64, u64)> {
    let fs = nix::sys::statfs::statfs(path).map_err(io::Error::from)?;
    let m = std::fs::metadata(path)?;
    if fs.filesystem_type() != nix::sys::statfs::NSFS_MAGIC {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is {}, not a network namespace",
                path.display(),
                describe(&m.file_type())
            ),
        ));
    }
    Ok((m.dev(), m.ino()))
}

/// `/proc/<pid>/ns/net`, the kernel's link to a process's namespace.
fn is_proc_ns_link(path: &Path) -> bool {
    let Some(rest) = path.to_str().and_then(|p| p.strip_prefix("/proc/")) else {
        return false;
    };
    rest.strip_suffix("/ns/net")
        .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

/// What a file that is not a namespace is, for an error a client reads.
fn describe(t: &std::fs::FileType) -> &'static str {
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_dir() {
        "a directory"
    } else {
        "a file"
    }
}

/// The boot id of the running kernel (`/proc/sys/kernel/random/boot_id`,
/// read once), which tells identities of this boot from those of an
/// earlier one; `None` when it cannot be read. Debug builds take
/// `ENIIPD_TEST_BOOT_ID` instead when it is set (the tests' "reboot").
pub fn this_boot() -> Option<&'static str> {
    static BOOT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    BOOT.get_or_init(|| {
        #[cfg(debug_assertions)]
        if let Ok(b) = std::env::var("ENIIPD_TEST_BOOT_ID") {
            return Some(b);
        }
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .ok()
            .map(|b| b.trim().to_string())
            .filter(|b| !b.is_empty())
    })
    .as_deref()
}

/// The identity of the caller's own network namespace.
pub fn own() -> io::Result<(u64, u64)> {
    identity(Path::new("/proc/thread-self/ns/net"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_file_has_an_identity_and_other_files_do_not() {
        let me = own().unwrap();
        assert_eq!(identity(Path::new("/proc/self/ns/net")).unwrap(), me);
        for p in ["/dev/null", "/proc/self/status", "/", "/proc/self/ns/uts"] {
            assert_eq!(
                identity(Path::new(p)).unwrap_err().kind(),
                io::ErrorKind::InvalidInput,
                "{p}"
            );
        }
        assert_eq!(
            identity(Path::new("/run/netns/eniipd-no-such-namespace"))
                .unwrap_err()
                .kind(),
            io::ErrorKind::NotFound
        );
    }

    #[test]
    fn a_named_path_is_never_opened_blocking_nor_followed() {
        let me = own().unwrap();
        let pid = std::process::id();
        assert_eq!(
            named(Path::new(&format!("/proc/{pid}/ns/net"))).unwrap(),
            me
        );
        assert_eq!(stat(Path::new(&format!("/proc/{pid}/ns/net"))).unwrap(), me);
        let dir = std::env::temp_dir().join(format!("eniipd-netns-named-{pid}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let fifo = dir.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let link = dir.join("link");
        std::os::unix::fs::symlink(format!("/proc/{pid}/ns/net"), &link).unwrap();
        // Each would block (the FIFO) or be followed (the link) by a plain open.
        for (p, what) in [
            (fifo.as_path(), "a FIFO"),
            (link.as_path(), "a symbolic link"),
            (Path::new("/dev/null"), "a device"),
            (Path::new("/proc/self/ns/net"), "a symbolic link"),
            (Path::new("/proc/self/status"), "a file"),
            (Path::new("/"), "a directory"),
        ] {
            let e = named(p).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{}", p.display());
            assert!(e.to_string().contains(what), "{}: {e}", p.display());
        }
        assert_eq!(
            named(Path::new(&format!("/proc/{pid}/ns/uts")))
                .unwrap_err()
                .kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(stat(&fifo).unwrap_err().kind(), io::ErrorKind::InvalidInput);
        assert_eq!(
            named(&dir.join("none")).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
