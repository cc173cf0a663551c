//! The write-ahead log: a header, then one frame per group commit.
//!
//! Format version 2, all integers little endian:
//!
//! - Header (28 bytes): `ENIIPWAL`; format version (u32, 2); generation
//!   (u64, the snapshot this log follows); that snapshot's checksum (u32,
//!   0 when the log follows no snapshot); CRC-32 of the 24 bytes before it.
//! - Frame header (24 bytes): magic `0x31494E45` ("ENI1"); sequence number
//!   (u64, 1 for a log's first frame, then +1); payload length (u32);
//!   CRC-32 of the payload (u32); CRC-32 of the 20 bytes before it (u32).
//!   Then the payload: a compact JSON array of records.
//!
//! Invariants: nothing a header says is used before its checksum passes,
//! so a damaged length, sequence number or generation is seen as damage,
//! never as a frame running past the end of the file. A crash can only
//! tear the LAST write, and a write only ever adds bytes at the end, so
//! the only damage forgiven as a torn tail is one that a partly persisted
//! append can produce and a flipped bit in a complete log cannot (see
//! [`is_torn`]). A JSON payload never contains a zero byte (serde_json
//! escapes control characters), which is what lets zeros stand for
//! "never written". Anything else is corruption, which stops start-up.
//!
//! Version 1 (20-byte header without checksum or snapshot link, 12-byte
//! frame header without sequence number or checksum) is still read, with
//! its weaker checks, so an upgrade starts; the loader then rewrites the
//! state in version 2 at once.

use eniip_util::encoding::crc32;

use super::record::Record;

/// Header magic.
pub(crate) const WAL_MAGIC: &[u8; 8] = b"ENIIPWAL";
/// Format version written.
pub(crate) const WAL_VERSION: u32 = 2;
/// The older version still read.
pub(crate) const WAL_VERSION_1: u32 = 1;
/// Header length.
pub(crate) const HEADER_LEN: usize = 28;
/// Frame magic.
pub(crate) const FRAME_MAGIC: u32 = 0x3149_4E45;
/// Frame header length.
pub(crate) const FRAME_HEADER_LEN: usize = 24;
/// Largest frame payload accepted (a batch is far smaller).
pub(crate) const MAX_FRAME: usize = 64 << 20;
/// The unit in which a disk persists or loses a write: an unwritten one
/// reads back as zeros.
const SECTOR: usize = 512;

const V1_HEADER_LEN: usize = 20;
const V1_FRAME_HEADER_LEN: usize = 12;

/// Encodes the header of a log following the snapshot of `generation`
/// whose checksum is `snapshot_crc` (0: no snapshot).
pub(crate) fn header(generation: u64, snapshot_crc: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_LEN);
    v.extend_from_slice(WAL_MAGIC);
    v.extend_from_slice(&WAL_VERSION.to_le_bytes());
    v.extend_from_slice(&generation.to_le_bytes());
    v.extend_from_slice(&snapshot_crc.to_le_bytes());
    let crc = crc32(&v);
    v.extend_from_slice(&crc.to_le_bytes());
    v
}

/// Encodes frame number `seq` of a log.
pub(crate) fn frame(seq: u64, records: &[Record]) -> Vec<u8> {
    // Serializing plain data into a Vec cannot fail.
    let payload = serde_json::to_vec(records).unwrap_or_else(|_| b"[]".to_vec());
    let mut v = Vec::with_capacity(FRAME_HEADER_LEN + payload.len());
    v.extend_from_slice(&FRAME_MAGIC.to_le_bytes());
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    v.extend_from_slice(&crc32(&payload).to_le_bytes());
    let crc = crc32(&v);
    v.extend_from_slice(&crc.to_le_bytes());
    v.extend_from_slice(&payload);
    v
}

/// What a scan found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Scan {
    /// Format version of the file.
    pub(crate) version: u32,
    /// Generation from the header.
    pub(crate) generation: u64,
    /// Checksum of the snapshot the log follows (0: none); `None` for a
    /// version 1 log, which does not record it.
    pub(crate) snapshot_crc: Option<u32>,
    /// Records of every valid frame, in order.
    pub(crate) frames: Vec<Vec<Record>>,
    /// Offset just past the last valid frame.
    pub(crate) valid_len: u64,
    /// Bytes after it that are a torn tail (to truncate).
    pub(crate) torn: u64,
}

/// Why a log cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScanError {
    /// Where.
    pub(crate) offset: Option<u64>,
    /// What.
    pub(crate) what: String,
    /// Records of the valid frames before the damage (for salvage).
    pub(crate) salvage: Vec<Vec<Record>>,
    /// The header's generation, if it could be read and trusted.
    pub(crate) generation: Option<u64>,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// A version 2 frame header whose checksum passed.
struct FrameHeader {
    seq: u64,
    len: usize,
    payload_crc: u32,
}

/// Reads the frame header at the start of `b`; `Err` says what is wrong.
fn frame_header(b: &[u8]) -> Result<FrameHeader, String> {
    if b.len() < FRAME_HEADER_LEN {
        return Err(format!(
            "frame header cut short ({} of {FRAME_HEADER_LEN} bytes)",
            b.len()
        ));
    }
    let magic = u32_at(b, 0);
    if magic != FRAME_MAGIC {
        return Err(format!("bad frame magic {magic:#010x}"));
    }
    if crc32(&b[..FRAME_HEADER_LEN - 4]) != u32_at(b, FRAME_HEADER_LEN - 4) {
        return Err("frame header checksum mismatch".into());
    }
    let len = u32_at(b, 12) as usize;
    if len > MAX_FRAME {
        // Only reachable if a writer produced it: the checksum passed.
        return Err(format!("frame length {len} is implausible"));
    }
    Ok(FrameHeader {
        seq: u64_at(b, 4),
        len,
        payload_crc: u32_at(b, 16),
    })
}

/// Whether `rest` (from the start of a frame that does not check out to
/// the end of the file) is what an interrupted append leaves, given the
/// sequence number that frame should have. An append persists some of its
/// sectors; those it lost are missing (the file is shorter) or read as
/// zeros (the size was updated first). So the tail is torn when:
///
/// - without its trailing zeros it is shorter than a frame header; or
/// - it starts with a frame header that checks out and is next in
///   sequence, and without its trailing zeros it is shorter than that
///   frame; or
/// - it holds a whole sector of zeros (a sector lost in the middle of the
///   append) and no frame header that checks out starts anywhere after
///   its beginning.
///
/// A flipped bit in a complete log is none of these: every frame ends in
/// `]`, a flip cannot turn that into a zero, nor make a run of zeros,
/// and it leaves later frames in place.
fn is_torn(rest: &[u8], seq: u64) -> bool {
    let written = rest.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
    if written < FRAME_HEADER_LEN {
        return true;
    }
    if let Ok(h) = frame_header(rest) {
        if h.seq == seq && written < FRAME_HEADER_LEN + h.len {
            return true;
        }
    }
    let lost_sector = rest.split(|b| *b != 0).any(|zeros| zeros.len() >= SECTOR);
    lost_sector
        && !(1..rest.len()).any(|i| {
            rest[i..].starts_with(&FRAME_MAGIC.to_le_bytes()) && frame_header(&rest[i..]).is_ok()
        })
}

/// Parses a whole log file.
pub(crate) fn scan(bytes: &[u8]) -> Result<Scan, ScanError> {
    let bad_header = |offset: u64, what: String| ScanError {
        offset: Some(offset),
        what,
        salvage: Vec::new(),
        generation: None,
    };
    if bytes.len() < 12 || &bytes[..8] != WAL_MAGIC {
        return Err(bad_header(0, "missing or bad header".into()));
    }
    let version = u32_at(bytes, 8);
    match version {
        WAL_VERSION => {}
        WAL_VERSION_1 => return scan_v1(bytes),
        _ => {
            return Err(bad_header(
                8,
                format!(
                "format version {version} is not supported (this build reads versions {WAL_VERSION_1} and {WAL_VERSION})"
            ),
            ))
        }
    }
    // The header is written whole, atomically (a temporary file renamed
    // into place), so a short or failing one is damage, never a crash.
    if bytes.len() < HEADER_LEN {
        return Err(bad_header(0, "header cut short".into()));
    }
    if crc32(&bytes[..HEADER_LEN - 4]) != u32_at(bytes, HEADER_LEN - 4) {
        return Err(bad_header(0, "header checksum mismatch".into()));
    }
    let generation = u64_at(bytes, 12);
    let snapshot_crc = u32_at(bytes, 20);
    let mut frames = Vec::new();
    let mut at = HEADER_LEN;
    loop {
        let rest = &bytes[at..];
        let seq = frames.len() as u64 + 1;
        let done = |frames, torn: usize| Scan {
            version,
            generation,
            snapshot_crc: Some(snapshot_crc),
            frames,
            valid_len: at as u64,
            torn: torn as u64,
        };
        if rest.is_empty() {
            return Ok(done(frames, 0));
        }
        let checked = frame_header(rest).and_then(|h| {
            if h.seq != seq {
                return Err(format!(
                    "frame sequence number {} where {seq} was expected",
                    h.seq
                ));
            }
            let Some(payload) = rest.get(FRAME_HEADER_LEN..FRAME_HEADER_LEN + h.len) else {
                return Err(format!(
                    "frame of {} byte(s) runs past the end of the file",
                    h.len
                ));
            };
            if crc32(payload) != h.payload_crc {
                return Err("frame checksum mismatch".into());
            }
            Ok(payload)
        });
        let payload = match checked {
            Ok(p) => p,
            Err(_) if is_torn(rest, seq) => return Ok(done(frames, rest.len())),
            Err(what) => {
                return Err(ScanError {
                    offset: Some(at as u64),
                    what,
                    salvage: frames,
                    generation: Some(generation),
                })
            }
        };
        match serde_json::from_slice::<Vec<Record>>(payload) {
            Ok(records) => frames.push(records),
            Err(e) => {
                return Err(ScanError {
                    offset: Some(at as u64),
                    what: format!("frame with a valid checksum does not parse: {e}"),
                    salvage: frames,
                    generation: Some(generation),
                })
            }
        }
        at += FRAME_HEADER_LEN + payload.len();
    }
}

/// Parses a version 1 log with that version's rules: no header checksum,
/// so a bad frame is a torn tail when it runs past the end of the file or
/// is the last one.
fn scan_v1(bytes: &[u8]) -> Result<Scan, ScanError> {
    if bytes.len() < V1_HEADER_LEN {
        return Err(ScanError {
            offset: Some(0),
            what: "header cut short".into(),
            salvage: Vec::new(),
            generation: None,
        });
    }
    let generation = u64_at(bytes, 12);
    let err = |at: usize, what: String, salvage| ScanError {
        offset: Some(at as u64),
        what,
        salvage,
        generation: Some(generation),
    };
    let mut frames = Vec::new();
    let mut at = V1_HEADER_LEN;
    loop {
        let rest = &bytes[at..];
        let done = |frames, torn: usize| Scan {
            version: WAL_VERSION_1,
            generation,
            snapshot_crc: None,
            frames,
            valid_len: at as u64,
            torn: torn as u64,
        };
        if rest.is_empty() {
            return Ok(done(frames, 0));
        }
        if rest.iter().all(|b| *b == 0) || rest.len() < V1_FRAME_HEADER_LEN {
            return Ok(done(frames, rest.len()));
        }
        let magic = u32_at(rest, 0);
        let len = u32_at(rest, 4) as usize;
        if magic != FRAME_MAGIC {
            return Err(err(at, format!("bad frame magic {magic:#010x}"), frames));
        }
        if len > MAX_FRAME {
            return Err(err(
                at,
                format!("frame length {len} is implausible"),
                frames,
            ));
        }
        let end = at + V1_FRAME_HEADER_LEN + len;
        if end > bytes.len() {
            return Ok(done(frames, rest.len()));
        }
        let payload = &bytes[at + V1_FRAME_HEADER_LEN..end];
        if crc32(payload) != u32_at(rest, 8) {
            if bytes[end..].iter().all(|b| *b == 0) {
                return Ok(done(frames, rest.len()));
            }
            return Err(err(at, "frame checksum mismatch".into(), frames));
        }
        match serde_json::from_slice::<Vec<Record>>(payload) {
            Ok(records) => frames.push(records),
            Err(e) => {
                return Err(err(
                    at,
                    format!("frame with a valid checksum does not parse: {e}"),
                    frames,
                ))
            }
        }
        at = end;
    }
}

/// Version 1 encoders, for the tests that check version 1 is still read.
#[cfg(test)]
pub(crate) mod v1 {
    use super::*;

    /// A version 1 header.
    pub(crate) fn header(generation: u64) -> Vec<u8> {
        let mut v = WAL_MAGIC.to_vec();
        v.extend_from_slice(&WAL_VERSION_1.to_le_bytes());
        v.extend_from_slice(&generation.to_le_bytes());
        v
    }

    /// A version 1 frame.
    pub(crate) fn frame(records: &[Record]) -> Vec<u8> {
        let payload = serde_json::to_vec(records).unwrap();
        let mut v = FRAME_MAGIC.to_le_bytes().to_vec();
        v.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        v.extend_from_slice(&crc32(&payload).to_le_bytes());
        v.extend_from_slice(&payload);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record::Allocation;

    fn rec(i: u8) -> Record {
        Record::Alloc(Allocation {
            owner: format!("o{i}"),
            sandbox: None,
            ipv4: std::net::Ipv4Addr::new(10, 0, 0, i),
            ipv6: None,
            ipv6_prefix: None,
            eni: "eni-1".into(),
            at_ms: u64::from(i),
            gen: 0,
            attach: None,
            asked: Default::default(),
        })
    }

    fn log(n: u8) -> (Vec<u8>, Vec<usize>) {
        let mut b = header(3, 0xabcd);
        let mut ends = Vec::new();
        for i in 0..n {
            b.extend(frame(u64::from(i) + 1, &[rec(i), rec(i + 100)]));
            ends.push(b.len());
        }
        (b, ends)
    }

    #[test]
    fn round_trip() {
        let (b, ends) = log(3);
        let s = scan(&b).unwrap();
        assert_eq!(s.generation, 3);
        assert_eq!(s.snapshot_crc, Some(0xabcd));
        assert_eq!(s.frames.len(), 3);
        assert_eq!(s.valid_len as usize, ends[2]);
        assert_eq!(s.torn, 0);
        assert_eq!(s.frames[1][0], rec(1));
    }

    #[test]
    fn every_truncation_point_is_a_clean_prefix() {
        let (b, ends) = log(4);
        for cut in HEADER_LEN..=b.len() {
            let s = scan(&b[..cut]).unwrap_or_else(|e| panic!("cut at {cut}: {e:?}"));
            let whole = ends.iter().filter(|e| **e <= cut).count();
            assert_eq!(s.frames.len(), whole, "cut at {cut}");
            assert_eq!(s.valid_len as usize + s.torn as usize, cut);
        }
    }

    #[test]
    fn a_lost_end_or_lost_middle_of_the_last_append_is_torn() {
        let (b, ends) = log(2);
        let mut zero_tail = b.clone();
        zero_tail.extend(std::iter::repeat_n(0u8, 4096));
        let s = scan(&zero_tail).unwrap();
        assert_eq!((s.frames.len(), s.torn), (2, 4096));
        // The size was updated but the end of the last frame never
        // reached the disk: zeros from some point to the end.
        for from in [
            ends[0],
            ends[0] + 5,
            ends[0] + FRAME_HEADER_LEN + 3,
            b.len() - 1,
        ] {
            let mut z = b.clone();
            z[from..].fill(0);
            let s = scan(&z).unwrap_or_else(|e| panic!("zeros from {from}: {e:?}"));
            assert_eq!((s.frames.len(), s.valid_len as usize), (1, ends[0]));
        }
        // A big last frame whose middle sector was lost, and one whose
        // first sector (its header) was lost while later ones arrived.
        let big: Vec<Record> = (0..40).map(rec).collect();
        let mut b = header(3, 0);
        b.extend(frame(1, &[rec(1)]));
        let start = b.len();
        b.extend(frame(2, &big));
        assert!(b.len() - start > 3 * SECTOR);
        let mut middle = b.clone();
        middle[SECTOR * 2..SECTOR * 3].fill(0);
        let mut first = b.clone();
        first[start..SECTOR * 2].fill(0);
        for z in [middle, first] {
            let s = scan(&z).unwrap();
            assert_eq!((s.frames.len(), s.valid_len as usize), (1, start));
        }
    }

    #[test]
    fn a_flipped_bit_is_corruption_even_in_the_last_frame() {
        let (b, ends) = log(3);
        // Payload of the last frame (acknowledged: it is complete).
        let mut last = b.clone();
        last[ends[1] + FRAME_HEADER_LEN + 3] ^= 0x20;
        let e = scan(&last).unwrap_err();
        assert_eq!(e.offset, Some(ends[1] as u64));
        assert_eq!(e.salvage.len(), 2);
        assert!(e.what.contains("checksum"), "{e:?}");
        // The length of a middle frame, made larger (it would run past
        // the end) and smaller; and the last frame's length.
        for (at, bit) in [
            (ends[0] + 14, 0x01),
            (ends[0] + 12, 0x04),
            (ends[1] + 12, 0x80),
        ] {
            let mut l = b.clone();
            l[at] ^= bit;
            let e = scan(&l).unwrap_err();
            assert!(e.what.contains("header checksum"), "{at}: {e:?}");
        }
        let mut seq = b.clone();
        seq[ends[0] + 4] ^= 0x02;
        assert!(scan(&seq).unwrap_err().what.contains("checksum"));
        let mut magic = b.clone();
        magic[ends[0]] ^= 0xff;
        assert!(scan(&magic).unwrap_err().what.contains("magic"));
        // A frame with a valid header out of sequence (a frame repeated).
        let mut again = b[..ends[0]].to_vec();
        again.extend_from_slice(&b[HEADER_LEN..ends[0]]);
        let e = scan(&again).unwrap_err();
        assert!(e.what.contains("sequence number 1 where 2"), "{e:?}");
        // The header's generation.
        let mut g = b.clone();
        g[12] ^= 0x01;
        assert!(scan(&g).unwrap_err().what.contains("header checksum"));
    }

    #[test]
    fn bad_headers() {
        assert!(scan(b"").is_err());
        assert!(scan(b"NOTAWAL0000000000000").is_err());
        let mut b = header(1, 0);
        b[8] = 9;
        assert!(scan(&b).unwrap_err().what.contains("version 9"));
        assert!(scan(&header(1, 0)[..27])
            .unwrap_err()
            .what
            .contains("cut short"));
    }

    #[test]
    fn version_1_is_still_read() {
        let mut b = v1::header(4);
        b.extend(v1::frame(&[rec(1)]));
        b.extend(v1::frame(&[rec(2)]));
        let s = scan(&b).unwrap();
        assert_eq!((s.version, s.generation, s.frames.len()), (1, 4, 2));
        assert_eq!(s.snapshot_crc, None);
        let cut = scan(&b[..b.len() - 3]).unwrap();
        assert_eq!((cut.frames.len(), cut.torn), (1, cut.torn));
        assert!(cut.torn > 0);
    }
}
