//! The four binaries' command lines (SPEC sections 2 and 5, on one
//! parser): `-h`/`--help` and `-V`/`--version` the same in each, a flag's
//! value as the next argument or after `=`, and usage errors that exit 2
//! naming the flag.

use std::process::Command;

use crate::common::{run, tempdir, Sim};

const BINS: [(&str, &str); 4] = [
    (env!("CARGO_BIN_EXE_eniipd"), "eniipd"),
    (env!("CARGO_BIN_EXE_eniipctl"), "eniipctl"),
    (env!("CARGO_BIN_EXE_eniip-sim"), "eniip-sim"),
    (env!("CARGO_BIN_EXE_eniip-cni"), "eniip-cni"),
];

fn bin(name: &str) -> &'static str {
    BINS.iter().find(|(_, n)| *n == name).unwrap().0
}

fn with(name: &str, args: &[&str]) -> (i32, String, String) {
    run(Command::new(bin(name))
        .args(args)
        .env_remove("ENIIPD_SOCKET"))
}

#[test]
fn help_and_version_are_asked_the_same_way_of_every_binary() {
    for (_, name) in BINS {
        let version = format!("{name} {}\n", env!("CARGO_PKG_VERSION"));
        for flag in ["-V", "--version"] {
            assert_eq!(
                with(name, &[flag]),
                (0, version.clone(), String::new()),
                "{name} {flag}"
            );
        }
        for flag in ["-h", "--help"] {
            let (code, out, err) = with(name, &[flag]);
            assert_eq!((code, err.as_str()), (0, ""), "{name} {flag}");
            assert!(
                out.starts_with(&format!("{name} - ")),
                "{name} {flag}: {out}"
            );
            assert!(
                out.contains("-h, --help") || out.contains("-h|--help"),
                "{name}: {out}"
            );
        }
        // Either one ends the command line wherever it stands.
        assert_eq!(with(name, &["--version", "--bogus"]).1, version, "{name}");
        assert_eq!(
            with(name, &["--bogus", "--version"]),
            (
                2,
                String::new(),
                format!("{name}: unknown option --bogus (try --help)\n")
            ),
            "{name}"
        );
    }
}

#[test]
fn usage_errors_exit_2_and_name_the_flag() {
    for (name, args, says) in [
        ("eniipd", &["--config"][..], "--config needs a value"),
        ("eniipd", &["--socket="][..], "--socket needs a value"),
        (
            "eniipd",
            &["--simulate=yes"][..],
            "--simulate takes no value",
        ),
        ("eniipd", &["stray"][..], "unexpected argument stray"),
        (
            "eniipctl",
            &["ping", "--socket"][..],
            "--socket needs a value",
        ),
        (
            "eniipctl",
            &["--timeout=-1", "ping"][..],
            "--timeout needs a positive number of seconds",
        ),
        ("eniipctl", &[][..], "no command given"),
        (
            "eniip-sim",
            &["--seed", "x"][..],
            "--seed: \"x\" is not a number",
        ),
        (
            "eniip-sim",
            &["--metadata-hardened=1"][..],
            "--metadata-hardened takes no value",
        ),
        ("eniip-sim", &["--vswitch=bad"][..], "--vswitch "),
        ("eniip-cni", &["ADD"][..], "unexpected argument ADD"),
        ("eniip-cni", &["-x"][..], "unknown option -x"),
    ] {
        let (code, out, err) = with(name, args);
        assert_eq!((code, out.as_str()), (2, ""), "{name} {args:?}: {err}");
        assert!(
            err.starts_with(&format!("{name}: {says}")) && err.ends_with(" (try --help)\n"),
            "{name} {args:?}: {err}"
        );
    }
}

#[test]
fn a_value_after_equals_is_taken_by_every_binary() {
    // eniip-sim refused `--vswitch=...` before.
    let sim = Sim::start(&[
        "--vswitch=vsw-eq000000000000000000001=10.9.0.0/24,free=100",
        "--seed=7",
    ]);
    let state = sim.state();
    assert_eq!(state["vswitches"][0]["id"], "vsw-eq000000000000000000001");
    assert_eq!(state["vswitches"][0]["cidr"], "10.9.0.0/24");
    drop(sim);

    let dir = tempdir("cli-eq");
    let config = dir.join("eni.json");
    std::fs::write(&config, "{}").unwrap();
    let socket = dir.join("eq.sock");
    let (code, out, err) = with(
        "eniipd",
        &[
            "--check-config",
            &format!("--config={}", config.display()),
            &format!("--socket={}", socket.display()),
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.lines()
            .any(|l| l == format!("socket_path={}", socket.display())),
        "{out}"
    );

    // Nothing listens there: exit 2, naming the socket it was given.
    let (code, _, err) = with(
        "eniipctl",
        &[
            &format!("--socket={}", socket.display()),
            "--timeout=5",
            "ping",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with(&format!(
            "eniipctl: cannot connect to {}: ",
            socket.display()
        )),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
