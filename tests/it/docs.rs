//! The man pages document everything the programs accept and answer: every
//! flag each `--help` lists, every config key, command, error code, metric
//! and exit code. The lists come from the code and the binaries, so a new
//! flag or key without documentation fails here.

use std::collections::BTreeSet;
use std::process::Command;

use crate::man::{section, words};
use eniip_protocol::core::ErrCode;
use eniip_protocol::protocol::HELP;
use eniipd_daemon::config::RawConfig;
use eniipd_daemon::metrics::{render, Gauges};

/// The long options a program's `--help` lists.
fn flags(bin: &str) -> BTreeSet<String> {
    let out = Command::new(bin).arg("--help").output().unwrap();
    assert!(out.status.success(), "{bin} --help");
    let text = String::from_utf8(out.stdout).unwrap();
    let mut found = BTreeSet::new();
    for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
        if let Some(name) = word.strip_prefix("--") {
            if !name.is_empty() && !name.starts_with('-') {
                found.insert(format!("--{}", name.trim_end_matches('-')));
            }
        }
    }
    assert!(found.len() >= 3, "{bin}: {found:?}");
    found
}

fn missing<'a>(text: &str, names: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    names.into_iter().filter(|w| !text.contains(w)).collect()
}

#[test]
fn every_flag_is_in_the_options_of_its_page() {
    for (bin, man) in [
        (env!("CARGO_BIN_EXE_eniipd"), "eniipd.8"),
        (env!("CARGO_BIN_EXE_eniipctl"), "eniipctl.1"),
        (env!("CARGO_BIN_EXE_eniip-sim"), "eniip-sim.1"),
    ] {
        let options = section(&words(man), "OPTIONS");
        let fl = flags(bin);
        let gaps = missing(&options, fl.iter().map(String::as_str));
        assert!(gaps.is_empty(), "{man} OPTIONS lacks {gaps:?}");
    }
}

#[test]
fn every_config_key_is_in_eniipd_conf() {
    let cfg = RawConfig::parse("{}").unwrap().validate().unwrap();
    let keys: Vec<String> = cfg.effective().into_iter().map(|(k, _)| k).collect();
    assert!(keys.len() >= 30, "{keys:?}");
    let man = words("eniipd.conf.5");
    let gaps = missing(&man, keys.iter().map(String::as_str));
    assert!(gaps.is_empty(), "eniipd.conf(5) lacks {gaps:?}");
}

#[test]
fn every_command_and_error_code_is_in_the_protocol_page() {
    let man = words("eniipd-protocol.7");
    let commands = section(&man, "COMMANDS");
    let names: Vec<&str> = HELP.iter().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(names.len(), 19);
    let gaps = missing(&commands, names.iter().copied());
    assert!(
        gaps.is_empty(),
        "eniipd-protocol(7) COMMANDS lacks {gaps:?}"
    );
    let ctl = section(&words("eniipctl.1"), "COMMANDS");
    let gaps = missing(&ctl, names.iter().copied());
    assert!(gaps.is_empty(), "eniipctl(1) COMMANDS lacks {gaps:?}");

    let errors = section(&man, "ERRORS");
    let gaps = missing(&errors, ErrCode::ALL.iter().map(|c| c.as_str()));
    assert!(gaps.is_empty(), "eniipd-protocol(7) ERRORS lacks {gaps:?}");
}

#[test]
fn every_metric_is_in_eniipd_8() {
    let text = render(&Gauges::default());
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    assert!(names.len() >= 11, "{names:?}");
    let man = section(&words("eniipd.8"), "METRICS");
    let gaps = missing(&man, names.iter().copied());
    assert!(gaps.is_empty(), "eniipd(8) METRICS lacks {gaps:?}");
}

#[test]
fn every_exit_code_is_in_exit_status() {
    let man = section(&words("eniipd.8"), "EXIT STATUS");
    let documented: BTreeSet<&str> = man.lines().filter_map(|l| l.strip_prefix(".B ")).collect();
    let want: BTreeSet<&str> = ["0", "1", "2", "65", "69", "75", "77", "78"].into();
    assert_eq!(documented, want);
    let ctl = section(&words("eniipctl.1"), "EXIT STATUS");
    for code in ["0", "1", "2"] {
        assert!(
            ctl.contains(&format!(".B {code}\n")),
            "eniipctl(1) exit {code}"
        );
    }
}

/// A man page as `mandoc -T ascii` renders it, overstrikes removed and
/// white space folded; None (said loudly) when mandoc is not installed.
fn rendered(name: &str) -> Option<String> {
    let path = crate::man::path(name);
    let out = match Command::new("mandoc")
        .args(["-T", "ascii"])
        .arg(&path)
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            crate::common::skip(&format!(
                "the rendered man pages need mandoc, which is not installed ({e})"
            ));
            return None;
        }
    };
    assert!(out.status.success(), "mandoc {name}");
    let text = String::from_utf8_lossy(&out.stdout);
    // Overstrike: `c\bc` is bold, `_\bc` underlined; keep the character.
    let mut plain = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if chars.peek() == Some(&'\u{8}') {
            chars.next();
            continue;
        }
        plain.push(c);
    }
    Some(plain.split_whitespace().collect::<Vec<_>>().join(" "))
}

#[test]
fn synopses_and_examples_render_with_their_spaces() {
    let Some(protocol) = rendered("eniipd-protocol.7") else {
        return;
    };
    // Every synopsis `help` prints reads the same in the page.
    for line in HELP {
        let synopsis = line.split("   ").next().unwrap().trim();
        let synopsis = synopsis.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            protocol.contains(&synopsis),
            "eniipd-protocol(7) renders no `{synopsis}`"
        );
    }
    for want in [
        "OK enis=N ips=N idle=N inuse=N reserved=N cooling=N pending=N capacity=N",
        "eni mac vswitch ips=N pending=N inhibited=rfc3339-or-",
        "ip state owner-or--",
    ] {
        assert!(
            protocol.contains(want),
            "eniipd-protocol(7) renders no `{want}`"
        );
    }
    let ctl = rendered("eniipctl.1").unwrap();
    for want in [
        "alloc OWNER [sandbox=ID] [prefer=IP]",
        "release OWNER [sandbox=ID]",
        "gc owner-prefix=P [KEEP-ID...]",
    ] {
        assert!(ctl.contains(want), "eniipctl(1) renders no `{want}`");
    }
    let sim = rendered("eniip-sim.1").unwrap();
    for want in [
        r#"{"action": "<Action or *>", "code": "<error code>"}"#,
        r#"{"id": "vsw-...", "free": N}"#,
        r#"'{"action":"AssignPrivateIpAddresses","code":"Throttling.User","count":2}'"#,
    ] {
        assert!(sim.contains(want), "eniip-sim(1) renders no `{want}`");
    }
    // No page glues a closing bracket to the next option (`[,x]` suffixes
    // of one value, as in `ID=CIDR[,ipv6=CIDR6][,free=N]`, are meant).
    for name in [
        "eniipd.8",
        "eniipd.conf.5",
        "eniipctl.1",
        "eniip-sim.1",
        "eniipd-protocol.7",
    ] {
        let text = rendered(name).unwrap();
        for (i, _) in text.match_indices("][") {
            assert!(
                text[i + 2..].starts_with(','),
                "{name} renders `{}`",
                &text[i.saturating_sub(20)..(i + 20).min(text.len())]
            );
        }
    }
}
