//! The client socket's file: binding it (mode and group from the start)
//! and resolving the socket group.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::Path;

use log::info;

/// Binds the client socket. The caller holds the state lock, so a socket
/// file left at `path` is stale and may be removed (only if it is a
/// socket). The socket is bound under a umask that gives it `mode` from
/// the start (no window with wider permissions), then handed to `gid`.
pub fn bind_socket(path: &Path, mode: u32, gid: Option<u32>) -> io::Result<UnixListener> {
    use std::os::unix::fs::FileTypeExt;
    if let Some(parent) = path.parent() {
        if !parent.exists() {
            std::fs::create_dir_all(parent)?;
            std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            info!("removing stale socket {}", path.display());
            std::fs::remove_file(path)?;
        }
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mask = nix::sys::stat::Mode::from_bits_truncate(!mode & 0o777);
    let old = nix::sys::stat::umask(mask);
    let bound = UnixListener::bind(path);
    nix::sys::stat::umask(old);
    let listener = bound?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    if let Some(g) = gid {
        nix::unistd::chown(path, None, Some(nix::unistd::Gid::from_raw(g)))?;
    }
    Ok(listener)
}

/// A group name or numeric gid.
pub fn resolve_group(spec: &str) -> io::Result<u32> {
    if let Ok(n) = spec.parse::<u32>() {
        return Ok(n);
    }
    match nix::unistd::Group::from_name(spec)? {
        Some(g) => Ok(g.gid.as_raw()),
        None => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no group named {spec}"),
        )),
    }
}
