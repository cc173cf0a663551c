//! Which CNI version a caller speaks, read from the `cniVersion` of the
//! configuration on stdin: VERSION's answer is in it when this plugin
//! speaks it, and so is an error object (a runtime reads an error in the
//! version it called with, even one this plugin refuses).

use serde_json::{json, Value};

use super::spec::SUPPORTED_VERSIONS;

/// The newest version spoken: what a caller that names none gets.
fn newest() -> &'static str {
    SUPPORTED_VERSIONS[SUPPORTED_VERSIONS.len() - 1]
}

/// The `cniVersion` the configuration on stdin names, if it names one.
fn asked(stdin: &[u8]) -> Option<String> {
    serde_json::from_slice::<Value>(stdin)
        .ok()?
        .get("cniVersion")?
        .as_str()
        .map(String::from)
}

/// The version an error object is written in: the caller's, else the
/// newest.
pub fn of_errors(stdin: &[u8]) -> String {
    asked(stdin).unwrap_or_else(|| newest().to_string())
}

/// The VERSION answer, in the caller's version when this plugin speaks it.
pub(crate) fn answer(stdin: &[u8]) -> String {
    let version = asked(stdin)
        .filter(|v| SUPPORTED_VERSIONS.contains(&v.as_str()))
        .unwrap_or_else(|| newest().to_string());
    json!({"cniVersion": version, "supportedVersions": SUPPORTED_VERSIONS}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_answers_in_the_callers_version() {
        let v: Value = serde_json::from_str(&answer(br#"{"cniVersion":"1.0.0"}"#)).unwrap();
        assert_eq!(v["cniVersion"], "1.0.0");
        assert_eq!(v["supportedVersions"], json!(["0.4.0", "1.0.0", "1.1.0"]));
        let v: Value = serde_json::from_str(&answer(br#"{"cniVersion":"0.4.0"}"#)).unwrap();
        assert_eq!(v["cniVersion"], "0.4.0");
        let v: Value = serde_json::from_str(&answer(b"")).unwrap();
        assert_eq!(v["cniVersion"], "1.1.0");
        let v: Value = serde_json::from_str(&answer(br#"{"cniVersion":"0.3.1"}"#)).unwrap();
        assert_eq!(v["cniVersion"], "1.1.0");
    }

    #[test]
    fn errors_are_in_the_callers_version_even_one_refused() {
        assert_eq!(of_errors(br#"{"cniVersion":"1.0.0"}"#), "1.0.0");
        assert_eq!(of_errors(br#"{"cniVersion":"0.3.1"}"#), "0.3.1");
        assert_eq!(of_errors(b"not json"), "1.1.0");
        assert_eq!(of_errors(br#"{"cniVersion":1}"#), "1.1.0");
    }
}
