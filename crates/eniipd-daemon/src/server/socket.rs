//! The client socket's file: binding it (mode and group from the start),
//! telling a stale socket from a live one, removing it only while it is
//! still ours, and resolving the socket group.
//!
//! Invariants: a socket file is removed at start only if nothing answers
//! on it (connect first, as cloud-hypervisor does before it unlinks), so a
//! second instance never takes over a live daemon's socket; at stop it is
//! removed only if it is still the file this process bound (same device
//! and inode), so a stopping daemon never deletes a successor's socket.

use std::fmt;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use log::{info, warn};

/// The listen backlog: connections the kernel queues before the accept
/// thread takes them (the kernel caps it at `net.core.somaxconn`).
/// `systemd/eniipd.socket` sets the same `Backlog=`. A client connecting
/// without blocking (Go, most event loops) gets EAGAIN when it is full.
pub(crate) const LISTEN_BACKLOG: i32 = 4096;

/// Why the client socket could not be bound.
#[derive(Debug)]
pub enum BindError {
    /// A process answers on the socket: another instance serves it.
    InUse {
        /// The socket.
        path: PathBuf,
        /// The pid that listens on it (SO_PEERCRED), when known.
        pid: Option<i32>,
    },
    /// The path exists and is not a socket.
    NotASocket(PathBuf),
    /// Probing, creating, binding or setting up the socket failed.
    Io {
        /// The socket.
        path: PathBuf,
        /// What failed.
        source: io::Error,
    },
}

impl BindError {
    /// Is the socket served by another process?
    pub fn in_use(&self) -> bool {
        matches!(self, BindError::InUse { .. })
    }
}

impl fmt::Display for BindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BindError::InUse {
                path,
                pid: Some(pid),
            } => write!(
                f,
                "socket {} is served by another process (pid {pid})",
                path.display()
            ),
            BindError::InUse { path, pid: None } => write!(
                f,
                "socket {} is served by another process (pid unknown)",
                path.display()
            ),
            BindError::NotASocket(path) => {
                write!(f, "{} exists and is not a socket", path.display())
            }
            BindError::Io { path, .. } => write!(f, "cannot bind {}", path.display()),
        }
    }
}

impl std::error::Error for BindError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BindError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The socket file this process bound: removed at stop only if the path
/// still names it.
#[derive(Debug, Clone)]
pub struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl SocketFile {
    /// Removes the socket file if it is still the one bound here (same
    /// device and inode); true if it was removed.
    pub fn remove_if_ours(&self) -> bool {
        match std::fs::symlink_metadata(&self.path) {
            Ok(m) if m.dev() == self.dev && m.ino() == self.ino => {
                std::fs::remove_file(&self.path).is_ok()
            }
            Ok(_) => {
                warn!(
                    "{} is no longer the socket this daemon bound; left in place",
                    self.path.display()
                );
                false
            }
            Err(_) => false,
        }
    }
}

/// What is at a socket path.
enum Probe {
    /// Nothing.
    Absent,
    /// A socket nobody listens on.
    Stale,
    /// A socket a process answers on (its pid, when known).
    Live(Option<i32>),
}

/// Connects (without blocking) to see whether anything answers at `path`.
fn probe(path: &Path) -> Result<Probe, BindError> {
    use nix::errno::Errno;
    use nix::sys::socket::{
        connect, getsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, UnixAddr,
    };
    let io_err = |source: io::Error| BindError::Io {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {}
        Ok(_) => return Err(BindError::NotASocket(path.to_path_buf())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Probe::Absent),
        Err(e) => return Err(io_err(e)),
    }
    let fd = socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| io_err(e.into()))?;
    let addr = UnixAddr::new(path).map_err(|e| io_err(e.into()))?;
    match connect(fd.as_raw_fd(), &addr) {
        Ok(()) => {
            // On a connected Unix stream, SO_PEERCRED names the process
            // that called listen().
            let pid = getsockopt(&fd, sockopt::PeerCredentials)
                .ok()
                .map(|c| c.pid())
                .filter(|p| *p > 0);
            Ok(Probe::Live(pid))
        }
        // Its backlog is full: someone listens, and is busy.
        Err(Errno::EAGAIN) => Ok(Probe::Live(None)),
        Err(Errno::ECONNREFUSED) => Ok(Probe::Stale),
        Err(Errno::ENOENT) => Ok(Probe::Absent),
        Err(e) => Err(io_err(io::Error::other(format!(
            "cannot tell whether a process serves it: {e}"
        )))),
    }
}

/// Fails with [`BindError::InUse`] if a process answers on `path`; lets a
/// daemon give up before it touches the cloud.
pub fn check_socket_free(path: &Path) -> Result<(), BindError> {
    match probe(path)? {
        Probe::Live(pid) => Err(BindError::InUse {
            path: path.to_path_buf(),
            pid,
        }),
        Probe::Absent | Probe::Stale => Ok(()),
    }
}

/// Binds the client socket. A socket file left at `path` is removed only
/// if nothing answers on it; if something does, another instance serves
/// it and this is [`BindError::InUse`]. The socket is bound under a umask
/// that gives it `mode` from the start (no window with wider permissions),
/// then handed to `gid`.
pub fn bind_socket(
    path: &Path,
    mode: u32,
    gid: Option<u32>,
) -> Result<(UnixListener, SocketFile), BindError> {
    let io_err = |source: io::Error| BindError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent() {
        if !parent.exists() {
            std::fs::create_dir_all(parent).map_err(io_err)?;
            std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755))
                .map_err(io_err)?;
        }
    }
    match probe(path)? {
        Probe::Live(pid) => {
            return Err(BindError::InUse {
                path: path.to_path_buf(),
                pid,
            })
        }
        Probe::Stale => {
            info!(
                "removing stale socket {} (nothing answers on it)",
                path.display()
            );
            std::fs::remove_file(path).map_err(io_err)?;
        }
        Probe::Absent => {}
    }
    let mask = nix::sys::stat::Mode::from_bits_truncate(!mode & 0o777);
    let old = nix::sys::stat::umask(mask);
    let bound = listen_at(path);
    nix::sys::stat::umask(old);
    let listener = bound.map_err(io_err)?;
    let m = std::fs::symlink_metadata(path).map_err(io_err)?;
    let file = SocketFile {
        path: path.to_path_buf(),
        dev: m.dev(),
        ino: m.ino(),
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io_err)?;
    if let Some(g) = gid {
        nix::unistd::chown(path, None, Some(nix::unistd::Gid::from_raw(g)))
            .map_err(|e| io_err(e.into()))?;
    }
    Ok((listener, file))
}

/// socket, bind and listen with [`LISTEN_BACKLOG`] (std's
/// `UnixListener::bind` picks its own backlog).
fn listen_at(path: &Path) -> io::Result<UnixListener> {
    use nix::sys::socket::{bind, listen, socket, AddressFamily, Backlog, SockFlag, SockType};
    let fd = socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    bind(fd.as_raw_fd(), &nix::sys::socket::UnixAddr::new(path)?)?;
    listen(&fd, Backlog::new(LISTEN_BACKLOG)?)?;
    Ok(UnixListener::from(fd))
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
