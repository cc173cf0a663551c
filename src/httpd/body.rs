//! Request bodies: `Content-Length` or chunked framing, bounded in size,
//! the chunk sizes, extensions and trailers of RFC 9112 section 7.1.

use std::io::{BufRead, Read};

use super::{HttpRequest, ReadError};

/// The body, framed by `Content-Length` or by `Transfer-Encoding:
/// chunked` (RFC 9112 7.1: sizes in hex, extensions and trailers read and
/// dropped), at most `max` bytes in all. Both framings at once is refused:
/// which one a proxy in front believed is unknowable (request smuggling).
pub(super) fn read_body(
    req: &HttpRequest,
    r: &mut impl BufRead,
    max: usize,
) -> Result<Vec<u8>, ReadError> {
    match (
        req.header("transfer-encoding"),
        req.header("content-length"),
    ) {
        (Some(_), Some(_)) => Err(ReadError::Bad(
            400,
            "both Transfer-Encoding and Content-Length",
        )),
        (Some(te), None) if te.trim().eq_ignore_ascii_case("chunked") => read_chunked(r, max),
        (Some(_), None) => Err(ReadError::Bad(
            501,
            "only the chunked transfer coding is supported",
        )),
        (None, len) => {
            let len = match len {
                Some(v) => v
                    .trim()
                    .parse::<usize>()
                    .map_err(|_| ReadError::Bad(400, "bad Content-Length"))?,
                None => 0,
            };
            if len > max {
                return Err(ReadError::Bad(413, "request body too large"));
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body)
                .map_err(|_| ReadError::Bad(400, "truncated body"))?;
            Ok(body)
        }
    }
}

/// One line of a chunked body (a size line or a trailer), without its
/// CRLF; at most 4 KiB.
fn chunk_line(r: &mut impl BufRead) -> Result<String, ReadError> {
    let mut line = Vec::new();
    r.by_ref()
        .take(4097)
        .read_until(b'\n', &mut line)
        .map_err(|_| ReadError::Bad(400, "truncated chunked body"))?;
    if !line.ends_with(b"\n") {
        return Err(ReadError::Bad(400, "truncated or overlong chunk line"));
    }
    let text = String::from_utf8(line).map_err(|_| ReadError::Bad(400, "bad chunk line"))?;
    Ok(text.trim_end_matches(['\r', '\n']).to_string())
}

fn read_chunked(r: &mut impl BufRead, max: usize) -> Result<Vec<u8>, ReadError> {
    let mut body = Vec::new();
    loop {
        let line = chunk_line(r)?;
        let size = line.split(';').next().unwrap_or("").trim();
        if size.is_empty() || size.len() > 16 || !size.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ReadError::Bad(400, "bad chunk size"));
        }
        let n =
            usize::from_str_radix(size, 16).map_err(|_| ReadError::Bad(400, "bad chunk size"))?;
        if n == 0 {
            break;
        }
        if body.len().saturating_add(n) > max {
            return Err(ReadError::Bad(413, "request body too large"));
        }
        let start = body.len();
        body.resize(start + n, 0);
        r.read_exact(&mut body[start..])
            .map_err(|_| ReadError::Bad(400, "truncated chunk"))?;
        let mut crlf = [0u8; 2];
        r.read_exact(&mut crlf)
            .map_err(|_| ReadError::Bad(400, "truncated chunk"))?;
        if &crlf != b"\r\n" {
            return Err(ReadError::Bad(400, "chunk longer than its size"));
        }
    }
    // Trailer fields, up to the empty line; bounded in count.
    for _ in 0..64 {
        if chunk_line(r)?.is_empty() {
            return Ok(body);
        }
    }
    Err(ReadError::Bad(431, "too many trailer fields"))
}
