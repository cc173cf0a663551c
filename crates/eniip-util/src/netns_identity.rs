//! Network namespace identities: the device and inode of a namespace file
//! (`/run/netns/x`, `/proc/PID/ns/net`), the same for every path to one
//! namespace and different for every other namespace.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
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
}
