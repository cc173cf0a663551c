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
    use std::os::unix::fs::FileTypeExt;
    let path = socket.display();
    // Something that is no socket: whatever connect said, that is why.
    if let Ok(m) = std::fs::metadata(socket) {
        if !m.file_type().is_socket() {
            let what = if m.is_dir() {
                "a directory"
            } else {
                "not a socket"
            };
            return format!(
                "{path} ({}) is {what}: name eniipd's socket itself (its socket_path)",
                from.said()
            );
        }
    }
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
            // Its group may not reach it: joining the group changes nothing.
            Some((_, mode)) if mode & 0o060 != 0o060 => format!(
                "{path} is for its owner only (mode {mode:04o}): run as root (sudo), or let a group in with socket_mode \"0660\" and socket_group (eniipd.conf(5))"
            ),
            // Joining group root is no advice to give.
            Some((group, mode)) if group == "root" || group == "0" => format!(
                "{path} is for root and the members of group {group} (mode {mode:04o}): run as root (sudo), or give it a group of its own with socket_group (the packages use eniipd; eniipd.conf(5))"
            ),
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

        // Not allowed: the socket's own group is named, with its mode;
        // joining it is advised unless it is root's.
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o660)).unwrap();
        let denied = io::Error::from(ErrorKind::PermissionDenied);
        let hint = unreachable_hint(&sock, SocketFrom::Flag, &denied);
        let (group, _) = group_of(&sock).unwrap();
        assert!(
            hint.contains(&format!("group {group} (mode 0660)")),
            "{hint}"
        );
        if group == "root" {
            assert!(
                hint.contains("socket_group") && !hint.contains("usermod"),
                "{hint}"
            );
        } else {
            assert!(hint.contains(&format!("usermod -aG {group}")), "{hint}");
        }
        // Its owner's alone: no group to join.
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600)).unwrap();
        let hint = unreachable_hint(&sock, SocketFrom::Flag, &denied);
        assert!(
            hint.contains("owner only (mode 0600)") && !hint.contains("usermod"),
            "{hint}"
        );
        // A directory named as the socket.
        let e = UnixStream::connect(&dir).unwrap_err();
        let hint = unreachable_hint(&dir, SocketFrom::Flag, &e);
        assert!(
            hint.contains("is a directory") && !hint.contains("not running"),
            "{hint}"
        );
        let hint = unreachable_hint(&dir.join("gone.sock"), SocketFrom::Flag, &denied);
        assert!(hint.contains("group eniipd"), "{hint}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
