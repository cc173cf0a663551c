//! The write-ahead log: a header, then one frame per group commit.
//!
//! Header (20 bytes): `ENIIPWAL` (8 bytes), format version (u32 LE, 1), the
//! generation of the snapshot it follows (u64 LE). Frame: magic
//! `0x31494E45` (u32 LE, "ENI1"), payload length (u32 LE), CRC-32 of the
//! payload (u32 LE), payload (a JSON array of records).
//!
//! Scanning distinguishes the torn tail a crash leaves (the last frame
//! incomplete or failing its checksum, or zeros to the end) from corruption
//! (a bad frame with more data after it), which must stop start-up.

use crate::util::encoding::crc32;

use super::record::Record;

/// Header magic.
pub const WAL_MAGIC: &[u8; 8] = b"ENIIPWAL";
/// Format version written and understood.
pub const WAL_VERSION: u32 = 1;
/// Header length.
pub const HEADER_LEN: usize = 20;
/// Frame magic.
pub const FRAME_MAGIC: u32 = 0x3149_4E45;
/// Frame header length.
pub const FRAME_HEADER_LEN: usize = 12;
/// Largest frame payload accepted (a batch is far smaller).
pub const MAX_FRAME: usize = 64 << 20;

/// Encodes the header.
pub fn header(generation: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_LEN);
    v.extend_from_slice(WAL_MAGIC);
    v.extend_from_slice(&WAL_VERSION.to_le_bytes());
    v.extend_from_slice(&generation.to_le_bytes());
    v
}

/// Encodes one frame.
pub fn frame(records: &[Record]) -> Vec<u8> {
    // Serializing plain data into a Vec cannot fail.
    let payload = serde_json::to_vec(records).unwrap_or_else(|_| b"[]".to_vec());
    let mut v = Vec::with_capacity(FRAME_HEADER_LEN + payload.len());
    v.extend_from_slice(&FRAME_MAGIC.to_le_bytes());
    v.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    v.extend_from_slice(&crc32(&payload).to_le_bytes());
    v.extend_from_slice(&payload);
    v
}

/// What a scan found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// Generation from the header.
    pub generation: u64,
    /// Records of every valid frame, in order.
    pub frames: Vec<Vec<Record>>,
    /// Offset just past the last valid frame.
    pub valid_len: u64,
    /// Bytes after it that are a torn tail (to truncate).
    pub torn: u64,
}

/// Why a log cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanError {
    /// Where.
    pub offset: Option<u64>,
    /// What.
    pub what: String,
    /// Records of the valid frames before the damage (for salvage).
    pub salvage: Vec<Vec<Record>>,
    /// The header's generation, if it could be read.
    pub generation: Option<u64>,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Parses a whole log file.
pub fn scan(bytes: &[u8]) -> Result<Scan, ScanError> {
    let err = |offset: Option<u64>,
               what: String,
               salvage: Vec<Vec<Record>>,
               generation: Option<u64>| ScanError {
        offset,
        what,
        salvage,
        generation,
    };
    if bytes.len() < HEADER_LEN || &bytes[..8] != WAL_MAGIC {
        return Err(err(
            Some(0),
            "missing or bad header".into(),
            Vec::new(),
            None,
        ));
    }
    let version = u32_at(bytes, 8);
    if version != WAL_VERSION {
        return Err(err(
            Some(8),
            format!("format version {version} is not supported (this build reads version {WAL_VERSION})"),
            Vec::new(),
            None,
        ));
    }
    let mut g = [0u8; 8];
    g.copy_from_slice(&bytes[12..20]);
    let generation = u64::from_le_bytes(g);
    let mut frames = Vec::new();
    let mut at = HEADER_LEN;
    loop {
        let rest = &bytes[at..];
        if rest.is_empty() {
            return Ok(Scan {
                generation,
                frames,
                valid_len: at as u64,
                torn: 0,
            });
        }
        let torn = |frames: Vec<Vec<Record>>| Scan {
            generation,
            frames,
            valid_len: at as u64,
            torn: rest.len() as u64,
        };
        if rest.iter().all(|b| *b == 0) || rest.len() < FRAME_HEADER_LEN {
            return Ok(torn(frames));
        }
        let magic = u32_at(rest, 0);
        let len = u32_at(rest, 4) as usize;
        let crc = u32_at(rest, 8);
        if magic != FRAME_MAGIC {
            return Err(err(
                Some(at as u64),
                format!("bad frame magic {magic:#010x}"),
                frames,
                Some(generation),
            ));
        }
        if len > MAX_FRAME {
            return Err(err(
                Some(at as u64),
                format!("frame length {len} is implausible"),
                frames,
                Some(generation),
            ));
        }
        if rest.len() < FRAME_HEADER_LEN + len {
            // Runs past the end: the last write did not finish.
            return Ok(torn(frames));
        }
        let payload = &rest[FRAME_HEADER_LEN..FRAME_HEADER_LEN + len];
        let end = at + FRAME_HEADER_LEN + len;
        let last = end == bytes.len() || bytes[end..].iter().all(|b| *b == 0);
        if crc32(payload) != crc {
            if last {
                return Ok(torn(frames));
            }
            return Err(err(
                Some(at as u64),
                "frame checksum mismatch".into(),
                frames,
                Some(generation),
            ));
        }
        match serde_json::from_slice::<Vec<Record>>(payload) {
            Ok(records) => frames.push(records),
            Err(e) => {
                return Err(err(
                    Some(at as u64),
                    format!("frame with a valid checksum does not parse: {e}"),
                    frames,
                    Some(generation),
                ))
            }
        }
        at = end;
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
            eni: "eni-1".into(),
            at_ms: u64::from(i),
        })
    }

    fn log(n: u8) -> (Vec<u8>, Vec<usize>) {
        let mut b = header(3);
        let mut ends = Vec::new();
        for i in 0..n {
            b.extend(frame(&[rec(i), rec(i + 100)]));
            ends.push(b.len());
        }
        (b, ends)
    }

    #[test]
    fn round_trip() {
        let (b, ends) = log(3);
        let s = scan(&b).unwrap();
        assert_eq!(s.generation, 3);
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
    fn zero_tail_is_torn() {
        let (mut b, ends) = log(2);
        b.extend(std::iter::repeat_n(0u8, 4096));
        let s = scan(&b).unwrap();
        assert_eq!(s.frames.len(), 2);
        assert_eq!(s.valid_len as usize, ends[1]);
        assert_eq!(s.torn, 4096);
    }

    #[test]
    fn flipped_byte_last_frame_is_torn_earlier_is_corrupt() {
        let (b, ends) = log(3);
        let mut last = b.clone();
        last[ends[1] + FRAME_HEADER_LEN + 3] ^= 0x20;
        let s = scan(&last).unwrap();
        assert_eq!(s.frames.len(), 2);
        let mut mid = b.clone();
        mid[ends[0] + FRAME_HEADER_LEN + 3] ^= 0x20;
        let e = scan(&mid).unwrap_err();
        assert_eq!(e.offset, Some(ends[0] as u64));
        assert!(e.what.contains("checksum"), "{e:?}");
        assert_eq!(e.salvage.len(), 1);
        let mut magic = b.clone();
        magic[ends[0]] ^= 0xff;
        assert!(scan(&magic).unwrap_err().what.contains("magic"));
    }

    #[test]
    fn bad_headers() {
        assert!(scan(b"").is_err());
        assert!(scan(b"NOTAWAL0000000000000").is_err());
        let mut b = header(1);
        b[8] = 9;
        assert!(scan(&b).unwrap_err().what.contains("version 9"));
    }
}
