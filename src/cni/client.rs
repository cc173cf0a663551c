//! eniipd's line protocol from the plugin's side: one connection per
//! invocation, requests answered in order, every read with a deadline.
//!
//! An eniipd that cannot be reached, or that answers `busy`,
//! `shutting-down`, `timeout` or `cloud`, is CNI error 11 ("try again
//! later"): the runtime retries and nothing is lost.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use super::spec::{code, CniError};
use crate::server::protocol::is_final_line;

/// How long one answer may take: a cold `alloc` waits for the cloud up to
/// eniipd's `alloc_timeout` (60 s by default).
const REPLY_TIMEOUT: Duration = Duration::from_secs(90);
/// Most data lines one answer may carry (a `gc` of a big node).
const MAX_DATA_LINES: usize = 100_000;

/// A reply: its data lines and the final line's `OK` text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Data lines.
    pub data: Vec<String>,
    /// The text after `OK `.
    pub text: String,
}

/// One connection to eniipd.
#[derive(Debug)]
pub struct Client {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
}

fn unreachable(socket: &Path, e: impl std::fmt::Display) -> CniError {
    CniError::new(
        code::TRY_AGAIN,
        format!(
            "eniipd is down: it is not reachable at {}",
            socket.display()
        ),
    )
    .details(e.to_string())
}

impl Client {
    /// Connects to eniipd's socket.
    pub fn connect(socket: &Path) -> Result<Client, CniError> {
        let s = UnixStream::connect(socket).map_err(|e| unreachable(socket, e))?;
        s.set_read_timeout(Some(REPLY_TIMEOUT))
            .and_then(|()| s.set_write_timeout(Some(REPLY_TIMEOUT)))
            .map_err(|e| unreachable(socket, e))?;
        let r = s.try_clone().map_err(|e| unreachable(socket, e))?;
        Ok(Client {
            writer: s,
            reader: BufReader::new(r),
        })
    }

    /// Sends one request; `Ok` for `OK`, a CNI error for `ERR` or a broken
    /// connection.
    pub fn ask(&mut self, line: &str) -> Result<Answer, CniError> {
        let broken = |e: &dyn std::fmt::Display| {
            CniError::new(code::TRY_AGAIN, "the connection to eniipd broke")
                .details(format!("{}: {e}", verb(line)))
        };
        self.writer
            .write_all(format!("{line}\n").as_bytes())
            .map_err(|e| broken(&e))?;
        let mut data = Vec::new();
        loop {
            let mut l = String::new();
            let n = self.reader.read_line(&mut l).map_err(|e| broken(&e))?;
            if n == 0 {
                return Err(broken(&"closed"));
            }
            let l = l.trim_end_matches(['\n', '\r']).to_string();
            if is_final_line(&l) {
                return match l.strip_prefix("OK") {
                    Some(rest) => Ok(Answer {
                        data,
                        text: rest.trim_start().to_string(),
                    }),
                    None => Err(daemon_error(line, &l)),
                };
            }
            if data.len() >= MAX_DATA_LINES {
                return Err(broken(&"answer too long"));
            }
            data.push(l);
        }
    }
}

fn verb(line: &str) -> &str {
    line.split(' ').next().unwrap_or("")
}

/// Maps an `ERR code message` line to a CNI error.
fn daemon_error(request: &str, line: &str) -> CniError {
    let rest = line.strip_prefix("ERR").unwrap_or(line).trim_start();
    let err_code = rest.split(' ').next().unwrap_or("");
    let cni = match err_code {
        "busy" | "shutting-down" | "timeout" | "cloud" => code::TRY_AGAIN,
        _ => code::DAEMON,
    };
    CniError::new(cni, super::wording::explain(verb(request), err_code, rest)).details(rest)
}

/// The value of `key=` in an `OK` text.
pub fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.split(' ')
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_cni_codes() {
        assert_eq!(
            daemon_error("alloc x", "ERR shutting-down the daemon is stopping").code,
            code::TRY_AGAIN
        );
        assert_eq!(
            daemon_error("alloc x", "ERR cloud Throttling slow down").code,
            code::TRY_AGAIN
        );
        let e = daemon_error("alloc x", "ERR exhausted no IP");
        assert_eq!(e.code, code::DAEMON);
        assert!(e.msg.contains("exhausted"), "{e}");
        assert_eq!(field("released=1.2.3.4", "released"), Some("1.2.3.4"));
        assert_eq!(field("ip=1.2.3.4 ipv6=::1", "ip"), Some("1.2.3.4"));
    }

    #[test]
    fn a_missing_socket_is_try_again() {
        let e = match Client::connect(Path::new("/nonexistent/eniipd.sock")) {
            Err(e) => e,
            Ok(_) => panic!("connected"),
        };
        assert_eq!(e.code, code::TRY_AGAIN);
    }
}
