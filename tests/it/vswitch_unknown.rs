//! A configured vswitch the cloud does not know (a typo, one deleted) is
//! skipped with a warning naming it: 8 fresh nodes configured with it and
//! a valid one serve their first `alloc` from the valid one, where about
//! half failed with `ERR cloud InvalidVSwitchId.NotFound`.

use std::time::Duration;

use serde_json::json;

use crate::common::{config, first_vswitch, run, tempdir, Daemon, Sim};

const UNKNOWN: &str = "vsw-nosuchvswitch0";

#[test]
fn an_unknown_configured_vswitch_is_skipped_naming_it() {
    let mut failed = Vec::new();
    let mut unwarned = Vec::new();
    for node in 0..8 {
        let sim = Sim::quick(&[]);
        let state = sim.state();
        let zone = state["instance"]["zone"].as_str().unwrap().to_string();
        let known = first_vswitch(&state);
        let dir = tempdir("vsw-unknown");
        let cfg = config(
            &sim,
            &dir,
            json!({
                "vswitches": {zone: [UNKNOWN, known]},
                "vswitch_selection_policy": "random",
                "min_pool_size": 0,
                "max_pool_size": 0,
            }),
        );
        let d = Daemon::start(&dir, &cfg);
        let r = d.ask("alloc fresh/pod-0");
        if !r.last().is_some_and(|l| l.starts_with("OK ")) {
            failed.push(format!("node {node}: {r:?}"));
            continue;
        }
        let log = d.log_text();
        if !log
            .lines()
            .any(|l| l.contains("WARN") && l.contains(UNKNOWN) && l.contains("skipped"))
        {
            unwarned.push(format!("node {node}:\n{log}"));
        }
        d.audits_consistent_within(Duration::from_secs(10));
    }
    assert!(failed.is_empty(), "first allocs failed: {failed:#?}");
    assert!(
        unwarned.is_empty(),
        "no warning names {UNKNOWN}: {unwarned:#?}"
    );
}

#[test]
fn check_config_names_an_unknown_vswitch_when_it_can_ask_the_cloud() {
    let sim = Sim::quick(&[]);
    let state = sim.state();
    let zone = state["instance"]["zone"].as_str().unwrap().to_string();
    let known = first_vswitch(&state);
    let dir = tempdir("vsw-check");
    let cfg = config(&sim, &dir, json!({"vswitches": {zone: [UNKNOWN, &known]}}));
    let file = dir.join("eni.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    let (code, _, err) = run(std::process::Command::new(env!("CARGO_BIN_EXE_eniipd"))
        .arg("--check-config")
        .arg("--config")
        .arg(&file)
        .env_remove("JOURNAL_STREAM"));
    assert_eq!(code, 0, "{err}");
    assert!(
        err.lines()
            .any(|l| l.contains(UNKNOWN) && l.contains("does not know it")),
        "{err}"
    );
    assert!(
        !err.lines()
            .any(|l| l.contains(&known) && l.contains("does not know")),
        "{err}"
    );
}
