//! One request read from a connection. The grammar is `httparse`'s (the
//! request line, header and trailer fields, chunk-size lines of RFC 9112);
//! this module frames it and bounds every read: the head, with any blank
//! lines before it, to `max_head` bytes and [`MAX_FIELDS`] fields; the body,
//! by `Content-Length` or chunked coding, to `max_body` bytes, refused
//! before it is read when its declared size is already too large; a
//! chunk-size line to [`MAX_CHUNK_LINE`] bytes; the trailer section to
//! `max_head` bytes and [`MAX_TRAILERS`] fields. The time is bounded by the
//! connection's read timeout. What is wrong comes back as the status to
//! answer and a reason, never a panic.

use std::io::{BufRead, Read};

use super::HttpOptions;

/// Header fields in one request at most (the SDKs send about a dozen).
const MAX_FIELDS: usize = 100;
/// Trailer fields after a chunked body at most.
const MAX_TRAILERS: usize = 64;
/// A chunk-size line (with its extensions) at most.
const MAX_CHUNK_LINE: usize = 4096;

/// A request.
#[derive(Debug, Clone)]
pub struct HttpRequest {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The raw query string (after `?`), possibly empty.
    pub query: String,
    /// Headers in order (names as sent).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl HttpRequest {
    /// A header value by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Why no request was read.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ReadError {
    /// The client closed (or went quiet past the timeout) between requests.
    Closed,
    /// The request is malformed or over a limit: the status to answer and why.
    Bad(u16, &'static str),
}

use ReadError::Bad;

/// Reads the next request: `Closed` when the stream ends before any of it.
/// An HTTP/1.0 request without `Connection: keep-alive` gets a
/// `Connection: close` header, so the caller closes after answering.
pub(super) fn read_request(
    r: &mut impl BufRead,
    opts: &HttpOptions,
) -> Result<HttpRequest, ReadError> {
    let head = read_section(r, opts.max_head, true).map_err(|short| match short {
        Short::Nothing => ReadError::Closed,
        Short::Cut => Bad(400, "truncated request"),
        Short::Over => Bad(431, "request head too large"),
    })?;
    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut parsed = httparse::Request::new(&mut fields);
    match parsed.parse(&head) {
        Ok(httparse::Status::Complete(_)) => {}
        // The head ends with its empty line: nothing more can come.
        Ok(httparse::Status::Partial) => return Err(Bad(400, "bad request head")),
        Err(e) => return Err(head_error(e)),
    }
    let (Some(method), Some(target), Some(minor)) = (parsed.method, parsed.path, parsed.version)
    else {
        return Err(Bad(400, "bad request line"));
    };
    // Only the origin form: nothing here is a proxy.
    if !target.starts_with('/') {
        return Err(Bad(400, "request target is not a path"));
    }
    let mut headers = Vec::with_capacity(parsed.headers.len());
    for field in parsed.headers.iter() {
        let value =
            std::str::from_utf8(field.value).map_err(|_| Bad(400, "header value is not UTF-8"))?;
        headers.push((field.name.to_string(), value.to_string()));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut req = HttpRequest {
        method: method.to_string(),
        path: path.to_string(),
        query: query.to_string(),
        headers,
        body: Vec::new(),
    };
    req.body = read_body(&req, r, opts)?;
    if minor == 0
        && !req
            .header("connection")
            .is_some_and(|c| c.eq_ignore_ascii_case("keep-alive"))
    {
        req.headers.push(("Connection".into(), "close".into()));
    }
    Ok(req)
}

/// The status and reason for a head `httparse` refused.
fn head_error(e: httparse::Error) -> ReadError {
    match e {
        httparse::Error::TooManyHeaders => Bad(431, "too many header fields"),
        httparse::Error::HeaderName => Bad(400, "bad header name"),
        httparse::Error::HeaderValue => Bad(400, "bad header value"),
        httparse::Error::Version => Bad(400, "not HTTP/1.0 or HTTP/1.1"),
        httparse::Error::NewLine | httparse::Error::Token | httparse::Error::Status => {
            Bad(400, "bad request line")
        }
    }
}

/// The body, framed by `Content-Length` or by `Transfer-Encoding:
/// chunked`, at most `max_body` bytes in all. Both framings at once is
/// refused, and so are two different lengths: which one a proxy in front
/// believed is unknowable (request smuggling).
fn read_body(
    req: &HttpRequest,
    r: &mut impl BufRead,
    opts: &HttpOptions,
) -> Result<Vec<u8>, ReadError> {
    let mut lengths = req
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.as_str());
    let length = lengths.next();
    if length.is_some() && lengths.any(|other| Some(other) != length) {
        return Err(Bad(400, "different Content-Length values"));
    }
    match (req.header("transfer-encoding"), length) {
        (Some(_), Some(_)) => Err(Bad(400, "both Transfer-Encoding and Content-Length")),
        (Some(te), None) if te.eq_ignore_ascii_case("chunked") => read_chunked(r, opts),
        (Some(_), None) => Err(Bad(501, "only the chunked transfer coding is supported")),
        (None, length) => {
            let len = match length {
                Some(v) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => v
                    .parse::<usize>()
                    .map_err(|_| Bad(413, "request body too large"))?,
                Some(_) => return Err(Bad(400, "bad Content-Length")),
                None => 0,
            };
            if len > opts.max_body {
                return Err(Bad(413, "request body too large"));
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body)
                .map_err(|_| Bad(400, "truncated body"))?;
            Ok(body)
        }
    }
}

/// A chunked body (RFC 9112 7.1): sizes in hex, extensions ignored, the
/// trailer fields checked and dropped.
fn read_chunked(r: &mut impl BufRead, opts: &HttpOptions) -> Result<Vec<u8>, ReadError> {
    let mut body = Vec::new();
    loop {
        let mut line = Vec::new();
        read_line(r, &mut line, MAX_CHUNK_LINE).map_err(|short| match short {
            Short::Over => Bad(400, "overlong chunk-size line"),
            Short::Nothing | Short::Cut => Bad(400, "truncated chunked body"),
        })?;
        // httparse reads an empty size as 0; the grammar wants a digit.
        let size = match httparse::parse_chunk_size(&line) {
            Ok(httparse::Status::Complete((_, size))) if line[0].is_ascii_hexdigit() => size,
            _ => return Err(Bad(400, "bad chunk size")),
        };
        if size == 0 {
            break;
        }
        let room = opts.max_body - body.len();
        let n = match usize::try_from(size) {
            Ok(n) if n <= room => n,
            _ => return Err(Bad(413, "request body too large")),
        };
        let start = body.len();
        body.resize(start + n, 0);
        r.read_exact(&mut body[start..])
            .map_err(|_| Bad(400, "truncated chunk"))?;
        let mut crlf = [0u8; 2];
        r.read_exact(&mut crlf)
            .map_err(|_| Bad(400, "truncated chunk"))?;
        if &crlf != b"\r\n" {
            return Err(Bad(400, "chunk longer than its size"));
        }
    }
    let trailers = read_section(r, opts.max_head, false).map_err(|short| match short {
        Short::Over => Bad(431, "trailer section too large"),
        Short::Nothing | Short::Cut => Bad(400, "truncated chunked body"),
    })?;
    let mut fields = [httparse::EMPTY_HEADER; MAX_TRAILERS];
    match httparse::parse_headers(&trailers, &mut fields) {
        Ok(httparse::Status::Complete(_)) => Ok(body),
        Err(httparse::Error::TooManyHeaders) => Err(Bad(431, "too many trailer fields")),
        _ => Err(Bad(400, "bad trailer field")),
    }
}

/// How a read of lines ended short.
#[derive(Debug, PartialEq, Eq)]
enum Short {
    /// The stream ended (or failed) before any byte.
    Nothing,
    /// The stream ended (or failed) within.
    Cut,
    /// The limit was reached first.
    Over,
}

/// Lines through the first empty one, at most `max` bytes in all. With
/// `skip_blank`, empty lines before the first are read and dropped (RFC
/// 9112 2.2 lets a server ignore one between requests), their bytes counted
/// against `max`; without it, a first empty line is the whole section.
fn read_section(r: &mut impl BufRead, max: usize, skip_blank: bool) -> Result<Vec<u8>, Short> {
    let mut section = Vec::new();
    let mut room = max;
    loop {
        let start = section.len();
        match read_line(r, &mut section, room) {
            Ok(()) => {}
            Err(Short::Nothing) if start > 0 => return Err(Short::Cut),
            Err(short) => return Err(short),
        }
        room -= section.len() - start;
        let blank = matches!(&section[start..], b"\n" | b"\r\n");
        if blank && start == 0 && skip_blank {
            section.clear();
        } else if blank {
            return Ok(section);
        }
    }
}

/// Appends one line, through its LF, to `buf`, reading at most `room`
/// bytes.
fn read_line(r: &mut impl BufRead, buf: &mut Vec<u8>, room: usize) -> Result<(), Short> {
    let before = buf.len();
    let limit = u64::try_from(room).unwrap_or(u64::MAX).saturating_add(1);
    let read = r.by_ref().take(limit).read_until(b'\n', buf);
    let n = buf.len() - before;
    if n > room {
        Err(Short::Over)
    } else if n == 0 {
        Err(Short::Nothing)
    } else if read.is_ok() && buf.ends_with(b"\n") {
        Ok(())
    } else {
        Err(Short::Cut)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> HttpOptions {
        HttpOptions {
            max_body: 64,
            max_head: 1024,
            ..HttpOptions::default()
        }
    }

    /// Every request in `input`, then what ended the stream.
    fn read_all(input: &[u8]) -> (Vec<HttpRequest>, ReadError) {
        let mut r = input;
        let mut reqs = Vec::new();
        loop {
            match read_request(&mut r, &opts()) {
                Ok(req) => reqs.push(req),
                Err(e) => return (reqs, e),
            }
        }
    }

    /// The status one request is refused with.
    fn refused(input: &[u8]) -> u16 {
        match read_all(input) {
            (reqs, Bad(status, _)) if reqs.is_empty() => status,
            other => panic!("{:?} was read as {other:?}", String::from_utf8_lossy(input)),
        }
    }

    #[test]
    fn requests_follow_each_other_on_one_connection() {
        let (reqs, end) = read_all(
            b"POST /a/b?x=1&y=2 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc\
              \r\nGET /c HTTP/1.1\r\nX-Empty:\r\nX-Pad:  v  \r\n\r\n\
              GET /d HTTP/1.0\r\n\r\n\
              GET /e HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n",
        );
        assert_eq!(end, ReadError::Closed);
        let seen: Vec<_> = reqs
            .iter()
            .map(|r| {
                (
                    r.method.as_str(),
                    r.path.as_str(),
                    r.query.as_str(),
                    &r.body[..],
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("POST", "/a/b", "x=1&y=2", &b"abc"[..]),
                ("GET", "/c", "", b""),
                ("GET", "/d", "", b""),
                ("GET", "/e", "", b""),
            ]
        );
        assert_eq!(reqs[0].header("HOST"), Some("h"));
        assert_eq!(reqs[1].header("x-empty"), Some(""));
        assert_eq!(reqs[1].header("x-pad"), Some("v"));
        // HTTP/1.0 closes unless it asks to keep the connection.
        assert_eq!(reqs[1].header("connection"), None);
        assert_eq!(reqs[2].header("connection"), Some("close"));
        assert_eq!(reqs[3].header("connection"), Some("Keep-Alive"));
    }

    #[test]
    fn chunked_bodies_with_extensions_and_trailers() {
        let (reqs, end) = read_all(
            b"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\
              1;ext=v\r\na\r\n2 ; e\r\nbc\r\nA\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n\
              POST /b HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n0\r\n\r\n",
        );
        assert_eq!(end, ReadError::Closed);
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0].body, b"abc0123456789");
        assert_eq!(reqs[1].body, b"");
    }

    #[test]
    fn bodies_over_the_limit_are_refused_before_they_are_read() {
        // Content-Length and a chunk size past max_body, with none of the body sent.
        assert_eq!(
            refused(b"POST / HTTP/1.1\r\nContent-Length: 65\r\n\r\n"),
            413
        );
        assert_eq!(
            refused(b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n"),
            413
        );
        assert_eq!(
            refused(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n"),
            413
        );
        // The sum of chunks counts, not each one.
        let chunks = format!(
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n20\r\n{0}\r\n20\r\n{0}\r\n1\r\n",
            "a".repeat(32)
        );
        assert_eq!(refused(chunks.as_bytes()), 413);
        // Exactly at the limit is read.
        let at = format!(
            "POST / HTTP/1.1\r\nContent-Length: 64\r\n\r\n{}",
            "a".repeat(64)
        );
        assert_eq!(read_all(at.as_bytes()).0[0].body.len(), 64);
    }

    #[test]
    fn malformed_chunked_bodies_get_4xx_or_501() {
        let te = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        for (body, status) in [
            ("zz\r\nab\r\n0\r\n\r\n", 400), // not hex
            ("\r\nab\r\n0\r\n\r\n", 400),   // an empty size
            ("-1\r\na\r\n0\r\n\r\n", 400),  // a sign
            ("1\na\r\n0\r\n\r\n", 400),     // a size line without its CR
            ("11111111111111111\r\n", 400), // 17 hex digits
            ("2\r\nabc\r\n0\r\n\r\n", 400), // longer than its size
            ("3\r\nab", 400),               // cut in a chunk
            ("3\r\nabc", 400),              // cut before the chunk's CRLF
            ("3\r\nabc\r\n", 400),          // cut before the last chunk
            ("0\r\n", 400),                 // cut before the trailers end
            ("0\r\nno colon\r\n\r\n", 400), // a malformed trailer
            ("0\r\nX Y: z\r\n\r\n", 400),   // a space in a trailer's name
        ] {
            assert_eq!(
                refused(format!("{te}{body}").as_bytes()),
                status,
                "{body:?}"
            );
        }
        let long_ext = format!("{te}1;{}\r\na\r\n0\r\n\r\n", "e".repeat(MAX_CHUNK_LINE));
        assert_eq!(refused(long_ext.as_bytes()), 400);
        let large = format!("{te}0\r\nT: {}\r\n\r\n", "t".repeat(1100));
        assert_eq!(
            read_all(large.as_bytes()).1,
            Bad(431, "trailer section too large")
        );
        let many = format!("{te}0\r\n{}\r\n", "T:t\n".repeat(MAX_TRAILERS + 1));
        assert_eq!(
            read_all(many.as_bytes()).1,
            Bad(431, "too many trailer fields")
        );
        for framing in [
            "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n",
            "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n",
        ] {
            let both = format!("POST / HTTP/1.1\r\n{framing}\r\n3\r\nabc\r\n0\r\n\r\n");
            assert_eq!(refused(both.as_bytes()), 400, "{framing:?}");
        }
        assert_eq!(
            refused(b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"),
            501
        );
        assert_eq!(
            refused(b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
            501
        );
    }

    #[test]
    fn malformed_heads_get_4xx() {
        for bad in [
            &b"\x00\x01\x02\r\n\r\n"[..],
            b"GET\r\n\r\n",
            b"GET /\r\n\r\n",
            b"GET / HTTP/2.0\r\n\r\n",
            b"GET / FTP/1.1\r\n\r\n",
            b"GET  / HTTP/1.1\r\n\r\n",
            b"G(T / HTTP/1.1\r\n\r\n",
            b"GET * HTTP/1.1\r\n\r\n",
            b"GET http://h/ HTTP/1.1\r\n\r\n",
            b"GET /a b HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nno colon\r\n\r\n",
            b"GET / HTTP/1.1\r\n: empty name\r\n\r\n",
            b"GET / HTTP/1.1\r\nX Y: z\r\n\r\n",
            b"GET / HTTP/1.1\r\nX : y\r\n\r\n",
            b"GET / HTTP/1.1\r\n folded: line\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: \xff\xfe\r\n\r\n",
            b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            b"GET / HTTP/1.1\r\nContent-Length: +3\r\n\r\nabc",
            b"GET / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
            b"GET / HTTP/1.1\r\nHost: h\r\n",
            b"GET / HTTP/1.1\r\nHost: h",
            b"GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\nabc",
        ] {
            assert_eq!(refused(bad), 400, "{:?}", String::from_utf8_lossy(bad));
        }
        // The same length twice is one length.
        let (reqs, _) =
            read_all(b"POST / HTTP/1.1\r\nContent-Length: 1\r\ncontent-length: 1\r\n\r\nz");
        assert_eq!(reqs[0].body, b"z");
    }

    #[test]
    fn heads_over_the_limits_get_431() {
        let long = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(1100));
        assert_eq!(refused(long.as_bytes()), 431);
        let long_line = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(1100));
        assert_eq!(refused(long_line.as_bytes()), 431);
        let many = format!("GET / HTTP/1.1\r\n{}\r\n", "A:b\n".repeat(MAX_FIELDS + 1));
        assert_eq!(
            read_all(many.as_bytes()).1,
            Bad(431, "too many header fields")
        );
        // Blank lines before a request count against the head's limit, so
        // a client cannot keep a connection busy with them.
        let blanks = format!("{}GET / HTTP/1.1\r\n\r\n", "\r\n".repeat(600));
        assert_eq!(refused(blanks.as_bytes()), 431);
        let few = format!("{}GET / HTTP/1.1\r\n\r\n", "\r\n".repeat(10));
        assert_eq!(read_all(few.as_bytes()).0.len(), 1);
    }

    #[test]
    fn a_stream_that_ends_between_requests_is_closed_not_bad() {
        assert_eq!(read_all(b"").1, ReadError::Closed);
        assert_eq!(read_all(b"\r\n\n").1, ReadError::Closed);
        assert_eq!(read_all(b"GET / HTTP/1.1\r\n\r\n").1, ReadError::Closed);
        assert_eq!(refused(b"GE"), 400);
        // A read that fails (the timeout) counts as the end of the stream.
        struct TimesOut;
        impl Read for TimesOut {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::WouldBlock.into())
            }
        }
        let read = |sent: &'static [u8]| {
            let mut r = std::io::BufReader::new(sent.chain(TimesOut));
            read_request(&mut r, &opts()).unwrap_err()
        };
        assert_eq!(read(b"\r\n"), ReadError::Closed);
        assert_eq!(read(b"GET / HT"), Bad(400, "truncated request"));
        assert_eq!(read(b"GET / HTTP/1.1\r\n"), Bad(400, "truncated request"));
    }
}
