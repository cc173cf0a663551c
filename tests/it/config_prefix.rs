//! `ip_prefix` (and Terway's `enable_ip_prefix`) at the command line:
//! accepted and shown by `--check-config`, with `ip_stack: dual` too (an
//! IPv6 /80 per ENI, issue 32).

use crate::common;

use std::process::Command;

use common::tempdir;
use serde_json::json;

fn check(dir: &std::path::Path, name: &str, cfg: &serde_json::Value) -> (i32, String, String) {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec(cfg).unwrap()).unwrap();
    common::run(
        Command::new(env!("CARGO_BIN_EXE_eniipd"))
            .args(["--check-config", "--config"])
            .arg(&path),
    )
}

#[test]
fn check_config_shows_the_mode_under_either_name() {
    let dir = tempdir("pfxcfg");
    for key in ["ip_prefix", "enable_ip_prefix"] {
        let (code, out, err) = check(&dir, "on.json", &json!({ key: true }));
        assert_eq!(code, 0, "{err}");
        assert!(out.lines().any(|l| l == "ip_prefix=true"), "{out}");
        // The alias is known: not warned about as an unknown key.
        assert!(!err.contains("unknown config key"), "{err}");
    }
    let (code, out, _) = check(&dir, "off.json", &json!({}));
    assert_eq!(code, 0);
    assert!(out.lines().any(|l| l == "ip_prefix=false"), "{out}");
    let (code, _, err) = check(&dir, "bad.json", &json!({"ip_prefix": 1}));
    assert_eq!(code, 78);
    assert!(
        err.contains("`ip_prefix`") && err.contains("true or false"),
        "{err}"
    );
}

#[test]
fn dual_stack_with_prefixes_is_accepted_under_either_name() {
    let dir = tempdir("pfxdual");
    for key in ["ip_prefix", "enable_ip_prefix"] {
        let (code, out, err) = check(&dir, "dual.json", &json!({"ip_stack": "dual", key: true}));
        assert_eq!(code, 0, "{err}");
        assert!(out.lines().any(|l| l == "ip_prefix=true"), "{out}");
    }
}
