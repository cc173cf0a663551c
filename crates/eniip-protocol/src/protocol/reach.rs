//! Why a client could not reach eniipd's socket, in words that say what
//! to do (eniipctl prints them under its error): no socket there (eniipd
//! does not run, or listens elsewhere: `ENIIPD_SOCKET`, `--socket`),
//! nothing listening on it (eniipd stopped), or not allowed (the socket
//! is its group's: which group, and how to join it).

use std::io::{self, ErrorKind};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Where the socket path came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketFrom {
    /// `--socket PATH`
    Flag,
    /// `$ENIIPD_SOCKET`
    Env,
    /// Neither: the default path.
    Default,
}

impl SocketFrom {
    fn said(self) -> &'static str {
        match self {
            SocketFrom::Flag => "given with --socket",
            SocketFrom::Env => "from ENIIPD_SOCKET",
            SocketFrom::Default => "the default; ENIIPD_SOCKET or --socket name another",
        }
    }
}

/// What to do about `err`, met connecting to `socket`.
pub fn unreachable_hint(socket: &Path, from: SocketFrom, err: &io::Error) -> String {
    let path = socket.display();
    match err.kind() {
        ErrorKind::NotFound => format!(
            "no socket at {path} ({}): eniipd is not running, or it listens elsewhere (systemctl status eniipd.socket eniipd)",
            from.said()
        ),
        ErrorKind::ConnectionRefused => format!(
            "nothing listens on {path} ({}): eniipd is not running (systemctl status eniipd.socket eniipd)",
            from.said()
        ),
        ErrorKind::PermissionDenied => match group_of(socket) {
            Some((group, mode)) => format!(
                "{path} is for the members of group {group} (mode {mode:04o}), and you are not one: `sudo usermod -aG {group} $USER`, then log in again (or run as root)"
            ),
            None => format!(
                "you may not reach {path}: the members of its group may (the packages make it group eniipd: `sudo usermod -aG eniipd $USER`, then log in again), or root"
            ),
        },
        _ => format!("is eniipd running? (systemctl status eniipd.socket eniipd; socket {})", from.said()),
    }
}

/// The name (else the number) of the socket file's group, and its mode.
fn group_of(socket: &Path) -> Option<(String, u32)> {
    let meta = std::fs::metadata(socket).ok()?;
    let gid = meta.gid();
    let name = nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid))
        .ok()
        .flatten()
        .map_or_else(|| gid.to_string(), |g| g.name);
    Some((name, meta.mode() & 0o7777))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::{UnixListener, UnixStream};

    #[test]
    fn each_failure_says_what_to_do() {
        let dir = std::env::temp_dir().join(format!("eniipd-reach-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("s.sock");

        let e = UnixStream::connect(&sock).unwrap_err();
        let hint = unreachable_hint(&sock, SocketFrom::Default, &e);
        assert!(
            hint.contains("no socket at") && hint.contains("ENIIPD_SOCKET or --socket"),
            "{hint}"
        );

        // A socket file nobody listens on.
        drop(UnixListener::bind(&sock).unwrap());
        let e = UnixStream::connect(&sock).unwrap_err();
        let hint = unreachable_hint(&sock, SocketFrom::Env, &e);
        assert!(
            hint.contains("nothing listens") && hint.contains("from ENIIPD_SOCKET"),
            "{hint}"
        );

        // Not allowed: the socket's own group is named, with its mode.
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o660)).unwrap();
        let denied = io::Error::from(ErrorKind::PermissionDenied);
        let hint = unreachable_hint(&sock, SocketFrom::Flag, &denied);
        let (group, _) = group_of(&sock).unwrap();
        assert!(
            hint.contains(&format!("group {group} (mode 0660)"))
                && hint.contains(&format!("usermod -aG {group}")),
            "{hint}"
        );
        let hint = unreachable_hint(&dir.join("gone.sock"), SocketFrom::Flag, &denied);
        assert!(hint.contains("group eniipd"), "{hint}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
