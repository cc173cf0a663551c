//! The snapshot `state.json`: the whole state at one generation, replaced
//! only atomically (temporary file, fsync, rename, fsync of the directory),
//! so a snapshot that does not parse or fails its checksum is corruption,
//! never a crash artefact.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::util::encoding::crc32;

use super::record::PersistedState;

/// `format` value.
pub const FORMAT: &str = "eniipd-state";
/// Version written and understood.
pub const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct File1 {
    format: String,
    version: u32,
    generation: u64,
    written_at: String,
    /// CRC-32 (hex) of the compact JSON of `state`.
    checksum: String,
    state: serde_json::Value,
}

/// Encodes a snapshot.
pub fn encode(generation: u64, state: &PersistedState) -> Vec<u8> {
    let body = serde_json::to_value(state).unwrap_or(serde_json::Value::Null);
    let compact = serde_json::to_vec(&body).unwrap_or_default();
    let f = File1 {
        format: FORMAT.into(),
        version: VERSION,
        generation,
        written_at: crate::util::time::now_utc(),
        checksum: format!("{:08x}", crc32(&compact)),
        state: body,
    };
    let mut out = serde_json::to_vec_pretty(&f).unwrap_or_default();
    out.push(b'\n');
    out
}

/// Decodes a snapshot; `Err` says what is wrong.
pub fn decode(bytes: &[u8]) -> Result<(u64, PersistedState), String> {
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("not valid JSON: {e}"))?;
    if v.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
        return Err(format!(
            "not an eniipd state file (format is not \"{FORMAT}\")"
        ));
    }
    match v.get("version").and_then(|f| f.as_u64()) {
        Some(x) if x == u64::from(VERSION) => {}
        Some(x) => {
            return Err(format!(
                "format version {x} is not supported (this build reads version {VERSION})"
            ))
        }
        None => return Err("no version".into()),
    }
    let f: File1 = serde_json::from_value(v).map_err(|e| format!("malformed: {e}"))?;
    let compact = serde_json::to_vec(&f.state).unwrap_or_default();
    let want = format!("{:08x}", crc32(&compact));
    if f.checksum != want {
        return Err(format!(
            "checksum mismatch (file says {}, content gives {want})",
            f.checksum
        ));
    }
    let state: PersistedState =
        serde_json::from_value(f.state).map_err(|e| format!("malformed state: {e}"))?;
    // Whether the state adds up is the loader's question: a plain open
    // refuses it, a recovering one salvages what does not collide.
    Ok((f.generation, state))
}

/// Writes `bytes` to `dir/name` atomically and durably.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
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
pub fn sync_dir(dir: &Path) -> io::Result<()> {
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
            eni: "eni-1".into(),
            at_ms: 7,
        }));
        s.apply(&Record::Release {
            owner: String::new(),
            hold: Some(Hold {
                ipv4: "10.0.0.2".parse().unwrap(),
                ipv6: None,
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
        let b = encode(4, &state());
        let text = String::from_utf8(b.clone()).unwrap();
        assert!(text.contains("\"owner\": \"ns/a\""), "{text}");
        assert_eq!(decode(&b).unwrap(), (4, state()));
    }

    #[test]
    fn damage_is_named() {
        let b = encode(4, &state());
        let text = String::from_utf8(b).unwrap();
        let tampered = text.replace("10.0.0.1", "10.0.0.9");
        assert!(decode(tampered.as_bytes())
            .unwrap_err()
            .contains("checksum"));
        let newer = text.replace("\"version\": 1", "\"version\": 2");
        assert!(decode(newer.as_bytes()).unwrap_err().contains("version 2"));
        assert!(decode(b"{").unwrap_err().contains("JSON"));
        assert!(decode(b"{\"format\":\"x\"}")
            .unwrap_err()
            .contains("not an eniipd"));
    }
}
