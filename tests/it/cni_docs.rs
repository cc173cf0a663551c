//! eniip-cni(8) documents what the plugin accepts and answers: every CNI
//! command, every error code it can return, every configuration key, and
//! the options its `--help` lists.

use crate::man::{section, source};
use eniip_cni::spec::code;

#[test]
fn the_page_names_every_command_code_key_and_option() {
    let p = source("eniip-cni.8");
    let commands = section(&p, "COMMANDS");
    for c in ["ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION"] {
        assert!(
            commands.contains(&format!(".B {c}\n")),
            "COMMANDS lacks {c}"
        );
    }
    let errors = section(&p, "ERRORS");
    for c in [
        code::INCOMPATIBLE_VERSION,
        code::INVALID_ENV,
        code::IO,
        code::DECODE,
        code::INVALID_CONFIG,
        code::TRY_AGAIN,
        code::NOT_AVAILABLE,
        code::LIMITED,
        code::DAEMON,
        code::DATAPATH,
    ] {
        assert!(errors.contains(&format!(".B {c}\n")), "ERRORS lacks {c}");
    }
    let conf = section(&p, "CONFIGURATION");
    for k in ["socket", "mtu", "dns", "name"] {
        assert!(
            conf.contains(&format!("B {k}\n")),
            "CONFIGURATION lacks {k}"
        );
    }
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_eniip-cni"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(help.status.success());
    let options = section(&p, "OPTIONS");
    for w in String::from_utf8_lossy(&help.stdout).split_whitespace() {
        if let Some(flag) = w.strip_prefix("--") {
            assert!(
                options.contains(&format!("--{flag}")),
                "OPTIONS lacks --{flag}"
            );
        }
    }
    // The example conflist is valid JSON and uses the plugin.
    let ex = std::fs::read_to_string(format!("{}/cni/eniip.conflist", env!("CARGO_MANIFEST_DIR")))
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&ex).unwrap();
    assert_eq!(v["plugins"][0]["type"], "eniip-cni");
}
