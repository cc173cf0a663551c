//! systemd integration: readiness/status/watchdog notifications to
//! `$NOTIFY_SOCKET` (a path or an `@abstract` name) and socket activation
//! (`LISTEN_FDS`/`LISTEN_PID`). The environment is read once and parsed by
//! pure functions; nothing here changes the process environment.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram, UnixListener};
use std::time::Duration;

/// Where notifications go, if anywhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotifyTarget {
    /// A filesystem socket.
    Path(String),
    /// An abstract-namespace socket (`@name`).
    Abstract(Vec<u8>),
}

/// Parses `$NOTIFY_SOCKET`.
pub fn parse_notify_socket(v: Option<&str>) -> Option<NotifyTarget> {
    match v? {
        "" => None,
        s if s.starts_with('@') => Some(NotifyTarget::Abstract(s.as_bytes()[1..].to_vec())),
        s if s.starts_with('/') => Some(NotifyTarget::Path(s.to_string())),
        _ => None,
    }
}

/// Sends sd_notify messages.
#[derive(Debug, Clone)]
pub struct Notifier {
    target: Option<NotifyTarget>,
}

impl Notifier {
    /// From `$NOTIFY_SOCKET`.
    pub fn from_env() -> Notifier {
        Notifier {
            target: parse_notify_socket(std::env::var("NOTIFY_SOCKET").ok().as_deref()),
        }
    }

    /// A notifier for an explicit target (tests).
    #[cfg(test)]
    pub fn to(target: Option<NotifyTarget>) -> Notifier {
        Notifier { target }
    }

    /// True when there is a `$NOTIFY_SOCKET` to send to.
    pub fn is_active(&self) -> bool {
        self.target.is_some()
    }

    /// Sends one datagram; `Ok(false)` when not under systemd.
    pub fn notify(&self, msg: &str) -> io::Result<bool> {
        let Some(t) = &self.target else {
            return Ok(false);
        };
        let sock = UnixDatagram::unbound()?;
        let addr = match t {
            NotifyTarget::Path(p) => SocketAddr::from_pathname(p)?,
            NotifyTarget::Abstract(name) => SocketAddr::from_abstract_name(name)?,
        };
        sock.send_to_addr(msg.as_bytes(), &addr)?;
        Ok(true)
    }

    /// `READY=1`
    pub fn ready(&self) -> io::Result<bool> {
        self.notify("READY=1\n")
    }

    /// `STATUS=...` (one line).
    pub fn status(&self, s: &str) -> io::Result<bool> {
        self.notify(&format!("STATUS={}\n", s.replace('\n', " ")))
    }

    /// `STOPPING=1`
    pub fn stopping(&self) -> io::Result<bool> {
        self.notify("STOPPING=1\n")
    }

    /// `WATCHDOG=1`
    pub fn watchdog(&self) -> io::Result<bool> {
        self.notify("WATCHDOG=1\n")
    }
}

/// The watchdog interval from `WATCHDOG_USEC` / `WATCHDOG_PID` values.
pub fn parse_watchdog(usec: Option<&str>, pid: Option<&str>, my_pid: u32) -> Option<Duration> {
    if let Some(p) = pid {
        if p.trim().parse::<u32>().ok() != Some(my_pid) {
            return None;
        }
    }
    let us: u64 = usec?.trim().parse().ok()?;
    (us > 0).then(|| Duration::from_micros(us))
}

/// The watchdog interval systemd asked for, if any.
pub fn watchdog_interval() -> Option<Duration> {
    parse_watchdog(
        std::env::var("WATCHDOG_USEC").ok().as_deref(),
        std::env::var("WATCHDOG_PID").ok().as_deref(),
        std::process::id(),
    )
}

/// How many inherited fds `LISTEN_FDS`/`LISTEN_PID` grant this process.
pub fn parse_listen_fds(fds: Option<&str>, pid: Option<&str>, my_pid: u32) -> usize {
    // An unset LISTEN_PID is accepted (some launchers do not set it).
    if let Some(p) = pid {
        if p.trim().parse::<u32>().ok() != Some(my_pid) {
            return 0;
        }
    }
    fds.and_then(|n| n.trim().parse().ok()).unwrap_or(0)
}

/// The listening socket passed by socket activation (fd 3), if any. It
/// must be a listening Unix stream socket.
pub fn take_listener() -> io::Result<Option<UnixListener>> {
    // fd 3 has one owner: a second call gets nothing.
    static TAKEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if TAKEN.swap(true, std::sync::atomic::Ordering::AcqRel) {
        return Ok(None);
    }
    let n = parse_listen_fds(
        std::env::var("LISTEN_FDS").ok().as_deref(),
        std::env::var("LISTEN_PID").ok().as_deref(),
        std::process::id(),
    );
    if n == 0 {
        return Ok(None);
    }
    if n > 1 {
        log::warn!("{n} sockets passed by systemd; using the first");
    }
    const FD: i32 = 3;
    use nix::sys::socket::{getsockopt, sockopt, AddressFamily, SockType};
    // SAFETY: systemd hands this process fd 3 (LISTEN_FDS >= 1 and
    // LISTEN_PID matches) and nothing else in the process owns it.
    #[allow(unsafe_code)]
    let fd = unsafe { OwnedFd::from_raw_fd(FD) };
    nix::fcntl::fcntl(
        &fd,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )?;
    let ty = getsockopt(&fd, sockopt::SockType)?;
    let listening = getsockopt(&fd, sockopt::AcceptConn)?;
    let family = nix::sys::socket::getsockname::<nix::sys::socket::UnixAddr>(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
    );
    if ty != SockType::Stream || !listening || family.is_err() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "fd 3 is not a listening Unix stream socket ({ty:?}, listening {listening}, {:?})",
                AddressFamily::Unix
            ),
        ));
    }
    Ok(Some(UnixListener::from(fd)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_socket_parsing() {
        assert_eq!(parse_notify_socket(None), None);
        assert_eq!(parse_notify_socket(Some("")), None);
        assert_eq!(
            parse_notify_socket(Some("/run/systemd/notify")),
            Some(NotifyTarget::Path("/run/systemd/notify".into()))
        );
        assert_eq!(
            parse_notify_socket(Some("@x/y")),
            Some(NotifyTarget::Abstract(b"x/y".to_vec()))
        );
        assert_eq!(parse_notify_socket(Some("relative")), None);
    }

    #[test]
    fn watchdog_and_listen_fds_parsing() {
        assert_eq!(
            parse_watchdog(Some("30000000"), None, 7),
            Some(Duration::from_secs(30))
        );
        assert_eq!(parse_watchdog(Some("30000000"), Some("8"), 7), None);
        assert_eq!(
            parse_watchdog(Some("30000000"), Some("7"), 7),
            Some(Duration::from_secs(30))
        );
        assert_eq!(parse_watchdog(Some("0"), None, 7), None);
        assert_eq!(parse_watchdog(None, None, 7), None);
        assert_eq!(parse_listen_fds(Some("1"), Some("7"), 7), 1);
        assert_eq!(parse_listen_fds(Some("1"), Some("8"), 7), 0);
        assert_eq!(parse_listen_fds(Some("2"), None, 7), 2);
        assert_eq!(parse_listen_fds(None, Some("7"), 7), 0);
        assert_eq!(parse_listen_fds(Some("x"), Some("7"), 7), 0);
    }

    #[test]
    fn ready_reaches_a_path_socket_and_an_abstract_one() {
        let dir = std::env::temp_dir().join(format!("eniipd-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("n.sock");
        let _ = std::fs::remove_file(&path);
        let rx = UnixDatagram::bind(&path).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let n = Notifier::to(Some(NotifyTarget::Path(path.display().to_string())));
        assert!(n.ready().unwrap());
        let mut buf = [0u8; 64];
        let len = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"READY=1\n");

        let name = format!("eniipd-test-{}", std::process::id());
        let rx = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
            .unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let n = Notifier::to(parse_notify_socket(Some(&format!("@{name}"))));
        assert!(n.status("enis=1 ips=3").unwrap());
        let len = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"STATUS=enis=1 ips=3\n");
        assert!(!Notifier::to(None).ready().unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
