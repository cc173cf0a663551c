//! `eniipd --check-config` as a new user meets it: typos of known keys,
//! contradicting pool bounds, groups that do not exist, and the example
//! configs of README.md and eniipd.conf(5) as pasted on a fresh host.

use crate::cnienv;
use crate::common::tempdir;

use std::path::Path;
use std::process::{Command, Output};

fn check(dir: &Path, text: &str) -> Output {
    let f = dir.join("eni.json");
    std::fs::write(&f, text).unwrap();
    Command::new(env!("CARGO_BIN_EXE_eniipd"))
        .args(["--check-config", "--config"])
        .arg(&f)
        .env_remove("STATE_DIRECTORY")
        .env_remove("RUNTIME_DIRECTORY")
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A config with its paths in `dir`, plus `more` (a JSON object's inside).
fn local(dir: &Path, more: &str) -> String {
    format!(
        r#"{{"socket_path": "{}/d.sock", "state_dir": "{}/state"{}{more}}}"#,
        dir.display(),
        dir.display(),
        if more.is_empty() { "" } else { ", " }
    )
}

#[test]
fn a_typo_of_a_known_key_is_an_error_naming_the_key_it_resembles() {
    let dir = tempdir("cc-typo");
    let o = check(&dir, &local(&dir, r#""min_pool_sise": 3"#));
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("min_pool_sise") && stderr(&o).contains("did you mean `min_pool_size`"),
        "{}",
        stderr(&o)
    );
    // A Terway file's own keys, and keys like nothing known, stay warnings.
    let o = check(
        &dir,
        &local(
            &dir,
            r#""version": "1", "service_cidr": "172.21.0.0/20", "frobnicate": 1"#,
        ),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("frobnicate"), "{}", stderr(&o));
}

#[test]
fn pool_bounds_that_contradict_each_other_are_reported_by_check_config() {
    let dir = tempdir("cc-bounds");
    let o = check(
        &dir,
        &local(&dir, r#""min_pool_size": 30, "max_pool_size": 10"#),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("min_pool_size 30 exceeds max_pool_size 10"),
        "{}",
        stderr(&o)
    );
    // The listing shows what will be used, as the warning says.
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.lines().any(|l| l == "max_pool_size=30"), "{out}");
}

#[test]
fn a_numeric_gid_with_no_group_and_an_empty_group_are_refused() {
    let dir = tempdir("cc-gid");
    let gid = (3_999_000..3_999_999)
        .find(|g| {
            nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(*g)).is_ok_and(|x| x.is_none())
        })
        .unwrap();
    let o = check(&dir, &local(&dir, &format!(r#""socket_group": {gid}"#)));
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    // The error is what is read: no listing of 40 keys before it.
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(
        stderr(&o).contains(&format!("no group has gid {gid}")),
        "{}",
        stderr(&o)
    );
    let o = check(&dir, &local(&dir, r#""socket_group": """#));
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    assert!(stderr(&o).contains("socket_group"), "{}", stderr(&o));
}

/// The examples: README's under "## Configuration" (```json), and
/// eniipd.conf(5)'s in EXAMPLES (.EX/.EE), each with the text before it.
fn examples() -> Vec<(String, String, String)> {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut out = Vec::new();
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let conf = &readme[readme.find("## Configuration").unwrap()..];
    let conf = &conf[..conf[3..].find("\n## ").map_or(conf.len(), |i| i + 3)];
    let mut rest = conf;
    while let Some(i) = rest.find("```json\n") {
        let body = &rest[i + 8..];
        let end = body.find("```").unwrap();
        out.push((
            "README.md".to_string(),
            rest[..i].to_string(),
            body[..end].to_string(),
        ));
        rest = &body[end..];
    }
    let man = std::fs::read_to_string(format!("{root}/man/eniipd.conf.5")).unwrap();
    let ex = &man[man.find(".SH EXAMPLES").unwrap()..];
    let mut before = String::new();
    let mut rest = ex;
    while let Some(i) = rest.find(".EX\n") {
        before.push_str(&rest[..i]);
        let body = &rest[i + 4..];
        let end = body.find(".EE").unwrap();
        out.push((
            "eniipd.conf(5)".to_string(),
            before.replace("\\-", "-"),
            body[..end].replace("\\-", "-"),
        ));
        rest = &body[end..];
    }
    assert!(out.len() >= 3, "examples not found: {out:?}");
    out
}

/// `--check-config` in a host of its own: a private network namespace
/// (the example's metrics port is nobody else's) and `/etc/group` as
/// `groups` says.
fn check_fresh(dir: &Path, text: &str, groups: &str) -> Output {
    let f = dir.join("example.json");
    std::fs::write(&f, text).unwrap();
    let g = dir.join("group");
    std::fs::write(&g, groups).unwrap();
    Command::new("unshare")
        .args(["--mount", "--net", "--", "sh", "-c"])
        .arg(r#"ip link set lo up && mount --bind "$1" /etc/group && exec "$2" --check-config --config "$3""#)
        .args(["sh"])
        .arg(&g)
        .arg(env!("CARGO_BIN_EXE_eniipd"))
        .arg(&f)
        .env_remove("STATE_DIRECTORY")
        .env_remove("RUNTIME_DIRECTORY")
        .output()
        .unwrap()
}

#[test]
fn the_documented_examples_pass_check_config_on_a_fresh_host_after_what_the_docs_say_first() {
    if !cnienv::can_run("config_check docs examples", &["unshare", "mount"]) {
        return;
    }
    let host_groups = std::fs::read_to_string("/etc/group").unwrap();
    let dir = tempdir("cc-docs");
    for (doc, before, example) in examples() {
        let v: serde_json::Value = serde_json::from_str(&example)
            .unwrap_or_else(|e| panic!("{doc}: the example is not JSON ({e}):\n{example}"));
        let group = v["socket_group"].as_str().map(str::to_string);
        // A fresh host: the example's group does not exist yet.
        let fresh: String = host_groups
            .lines()
            .filter(|l| {
                group
                    .as_ref()
                    .is_none_or(|g| !l.starts_with(&format!("{g}:")))
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let o = check_fresh(&dir, &example, &fresh);
        if o.status.success() {
            continue;
        }
        let g = group.unwrap_or_else(|| {
            panic!(
                "{doc}: the example fails --check-config:\n{example}\n{}",
                stderr(&o)
            )
        });
        assert!(
            before.contains(&format!("groupadd --system {g}")),
            "{doc}: the example needs the group {g} and the text before it does not say to create it (groupadd --system {g}):\n{}",
            stderr(&o)
        );
        let o = check_fresh(&dir, &example, &format!("{fresh}{g}:x:3999999:\n"));
        assert!(
            o.status.success(),
            "{doc}: after groupadd the example still fails:\n{example}\n{}",
            stderr(&o)
        );
    }
}

/// SPEC: every key is optional, so no /etc/eniipd/eni.json at all is every
/// key's default (it was exit 78, "cannot read config file"). A file named
/// with --config must still exist.
#[test]
fn no_config_file_at_the_default_path_means_all_defaults() {
    let default = Path::new("/etc/eniipd/eni.json");
    if default.exists() {
        crate::common::skip(&format!(
            "the missing-config test: {} exists on this host (an installed eniipd?)",
            default.display()
        ));
        return;
    }
    let o = Command::new(env!("CARGO_BIN_EXE_eniipd"))
        .arg("--check-config")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("min_pool_size=0") && out.contains("state_dir=/var/lib/eniipd"),
        "{out}"
    );
    let dir = tempdir("cc-missing");
    let o = Command::new(env!("CARGO_BIN_EXE_eniipd"))
        .args(["--check-config", "--config"])
        .arg(dir.join("eni.json"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    assert!(stderr(&o).contains("eni.json"), "{}", stderr(&o));
}
