//! The snapshot `state.json`: the whole state at one generation, replaced
//! only atomically (temporary file, fsync, rename, fsync of the directory),
//! so a snapshot that does not parse or fails its checksum is corruption,
//! never a crash artefact.
//!
//! Version 2: `checksum` is the CRC-32 of the compact JSON of every other
//! top-level field (keys sorted), so nothing the loader trusts —
//! `generation`, `supersedes`, the state — can change unseen.
//! `supersedes` names the log this snapshot absorbed (its generation and
//! frame count), which is how the loader tells a log that is legitimately
//! older (a crash between writing a snapshot and starting its new log)
//! from one that does not belong. Version 1 (checksum over `state` only)
//! is still read so an upgrade starts; the loader rewrites it at once.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use eniip_util::encoding::crc32;

use super::record::PersistedState;

/// `format` value.
pub(crate) const FORMAT: &str = "eniipd-state";
/// Version written.
pub(crate) const VERSION: u32 = 2;

/// A log, by its generation and how many frames it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LogRef {
    /// The log header's generation.
    pub(crate) generation: u64,
    /// Its frame count.
    pub(crate) frames: u64,
}

/// A decoded snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// Format version of the file.
    pub(crate) version: u32,
    /// Its generation.
    pub(crate) generation: u64,
    /// The log it absorbed (`None` in version 1, or when there was none).
    pub(crate) supersedes: Option<LogRef>,
    /// Its checksum, which a log that follows it records in its header.
    pub(crate) checksum: u32,
    /// The state.
    pub(crate) state: PersistedState,
}

#[derive(Deserialize)]
struct File2 {
    generation: u64,
    #[serde(default)]
    supersedes: Option<LogRef>,
    state: PersistedState,
}

#[derive(Deserialize)]
struct File1 {
    generation: u64,
    checksum: String,
    state: Value,
}

/// The checksum of a version 2 snapshot: over every top-level field but
/// `checksum`, in one canonical form (sorted keys, compact), so it does
/// not depend on how the file was pretty-printed.
fn checksum_of(fields: &serde_json::Map<String, Value>) -> u32 {
    let canonical: BTreeMap<&String, &Value> =
        fields.iter().filter(|(k, _)| *k != "checksum").collect();
    crc32(&serde_json::to_vec(&canonical).unwrap_or_default())
}

/// Encodes a snapshot; returns the bytes and the checksum.
pub(crate) fn encode(
    generation: u64,
    supersedes: Option<LogRef>,
    state: &PersistedState,
) -> (Vec<u8>, u32) {
    let mut fields = serde_json::Map::new();
    fields.insert("format".into(), FORMAT.into());
    fields.insert("version".into(), VERSION.into());
    fields.insert("generation".into(), generation.into());
    fields.insert("written_at".into(), eniip_util::time::now_utc().into());
    // Plain data always serializes.
    fields.insert(
        "supersedes".into(),
        serde_json::to_value(supersedes).unwrap_or(Value::Null),
    );
    fields.insert(
        "state".into(),
        serde_json::to_value(state).unwrap_or(Value::Null),
    );
    let checksum = checksum_of(&fields);
    fields.insert("checksum".into(), format!("{checksum:08x}").into());
    let mut out = serde_json::to_vec_pretty(&fields).unwrap_or_default();
    out.push(b'\n');
    (out, checksum)
}

/// Decodes a snapshot; `Err` says what is wrong. Whether the state adds
/// up is the loader's question: a plain open refuses it, a recovering one
/// salvages what does not collide.
pub(crate) fn decode(bytes: &[u8]) -> Result<Snapshot, String> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("not valid JSON: {e}"))?;
    let Value::Object(fields) = v else {
        return Err("not a JSON object".into());
    };
    if fields.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
        return Err(format!(
            "not an eniipd state file (format is not \"{FORMAT}\")"
        ));
    }
    let file_checksum = fields
        .get("checksum")
        .and_then(|c| c.as_str())
        .map(str::to_owned);
    match fields.get("version").and_then(|f| f.as_u64()) {
        Some(2) => {
            let want = checksum_of(&fields);
            let said = file_checksum.ok_or("no checksum")?;
            if said != format!("{want:08x}") {
                return Err(format!(
                    "checksum mismatch (file says {said}, content gives {want:08x})"
                ));
            }
            let f: File2 = serde_json::from_value(Value::Object(fields))
                .map_err(|e| format!("malformed: {e}"))?;
            Ok(Snapshot {
                version: 2,
                generation: f.generation,
                supersedes: f.supersedes,
                checksum: want,
                state: f.state,
            })
        }
        Some(1) => decode_v1(fields),
        Some(x) => Err(format!(
            "format version {x} is not supported (this build reads versions 1 and {VERSION})"
        )),
        None => Err("no version".into()),
    }
}

/// Version 1: the checksum covers `state` only.
fn decode_v1(fields: serde_json::Map<String, Value>) -> Result<Snapshot, String> {
    let f: File1 =
        serde_json::from_value(Value::Object(fields)).map_err(|e| format!("malformed: {e}"))?;
    let compact = serde_json::to_vec(&f.state).unwrap_or_default();
    let want = crc32(&compact);
    if f.checksum != format!("{want:08x}") {
        return Err(format!(
            "checksum mismatch (file says {}, content gives {want:08x})",
            f.checksum
        ));
    }
    let state: PersistedState =
        serde_json::from_value(f.state).map_err(|e| format!("malformed state: {e}"))?;
    Ok(Snapshot {
        version: 1,
        generation: f.generation,
        supersedes: None,
        checksum: want,
        state,
    })
}

/// Writes `bytes` to `dir/name` atomically and durably.
pub(crate) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, dir.join(name))?;
    sync_dir(dir)
}

/// Makes a rename or create in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record::{Allocation, Hold, Record};

    fn state() -> PersistedState {
        let mut s = PersistedState::default();
        s.apply(&Record::Alloc(Allocation {
            owner: "ns/a".into(),
            sandbox: Some("sb".into()),
            ipv4: "10.0.0.1".parse().unwrap(),
            ipv6: Some("fd00::1".parse().unwrap()),
            ipv6_prefix: None,
            eni: "eni-1".into(),
            at_ms: 7,
            gen: 0,
            attach: None,
            asked: Default::default(),
        }));
        s.apply(&Record::Release {
            owner: String::new(),
            hold: Some(Hold {
                ipv4: "10.0.0.2".parse().unwrap(),
                ipv6: None,
                ipv6_prefix: None,
                eni: "eni-1".into(),
                last_owner: Some("ns/b".into()),
                reserved_until_ms: 9,
                cooling_until_ms: 10,
            }),
        });
        s
    }

    #[test]
    fn round_trip_and_readable() {
        let sup = Some(LogRef {
            generation: 3,
            frames: 12,
        });
        let (b, crc) = encode(4, sup, &state());
        let text = String::from_utf8(b.clone()).unwrap();
        assert!(text.contains("\"owner\": \"ns/a\""), "{text}");
        let s = decode(&b).unwrap();
        assert_eq!(
            (s.version, s.generation, s.supersedes, s.checksum),
            (2, 4, sup, crc)
        );
        assert_eq!(s.state, state());
    }

    #[test]
    fn every_trusted_field_is_under_the_checksum() {
        let sup = Some(LogRef {
            generation: 3,
            frames: 12,
        });
        let text = String::from_utf8(encode(4, sup, &state()).0).unwrap();
        for (from, to) in [
            ("\"generation\": 4", "\"generation\": 5"),
            ("\"frames\": 12", "\"frames\": 13"),
            ("\"generation\": 3", "\"generation\": 2"),
            ("\"written_at\": \"", "\"written_at\": \"1"),
        ] {
            assert!(text.contains(from), "{from}");
            let e = decode(text.replace(from, to).as_bytes()).unwrap_err();
            assert!(e.contains("checksum"), "{from}: {e}");
        }
        // Formatting is not content.
        let compact: Value = serde_json::from_str(&text).unwrap();
        assert!(decode(&serde_json::to_vec(&compact).unwrap()).is_ok());
    }

    #[test]
    fn version_1_is_still_read() {
        let body = serde_json::to_value(state()).unwrap();
        let v1 = serde_json::json!({
            "format": FORMAT, "version": 1, "generation": 7,
            "written_at": "x",
            "checksum": format!("{:08x}", crc32(&serde_json::to_vec(&body).unwrap())),
            "state": body,
        });
        let s = decode(&serde_json::to_vec(&v1).unwrap()).unwrap();
        assert_eq!((s.version, s.generation, s.supersedes), (1, 7, None));
        assert_eq!(s.state, state());
    }

    #[test]
    fn damage_is_named() {
        let b = encode(4, None, &state()).0;
        let text = String::from_utf8(b).unwrap();
        let tampered = text.replace("10.0.0.1", "10.0.0.9");
        assert!(decode(tampered.as_bytes())
            .unwrap_err()
            .contains("checksum"));
        let newer = text.replace("\"version\": 2", "\"version\": 3");
        assert!(decode(newer.as_bytes()).unwrap_err().contains("version 3"));
        assert!(decode(b"{").unwrap_err().contains("JSON"));
        assert!(decode(b"{\"format\":\"x\"}")
            .unwrap_err()
            .contains("not an eniipd"));
    }
}
