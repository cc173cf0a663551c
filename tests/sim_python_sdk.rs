//! The official Python SDK, unchanged, against eniip-sim (tests/sdk/sdk_check.py).
//! Needs `aliyun-python-sdk-core` and `aliyun-python-sdk-ecs`: `.ci/run`
//! installs them into target/sdk-venv and sets ENIIPD_SDK_PYTHON and
//! ENIIPD_REQUIRE_SDK=1; without them the test says SKIPPED and passes.

use std::path::PathBuf;
use std::process::Command;

use eniipd::sim::{SimOptions, Simulator};

fn python() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("ENIIPD_SDK_PYTHON").map(PathBuf::from),
        Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/sdk-venv/bin/python")),
    ];
    candidates.into_iter().flatten().find(|p| {
        Command::new(p)
            .args(["-c", "import aliyunsdkcore, aliyunsdkecs"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

#[test]
fn official_python_sdk_works_unchanged() {
    let Some(py) = python() else {
        if std::env::var("ENIIPD_REQUIRE_SDK").as_deref() == Ok("1") {
            panic!("the Alibaba Cloud Python SDK is required (ENIIPD_REQUIRE_SDK=1) but not importable");
        }
        eprintln!("SKIPPED: install aliyun-python-sdk-core and aliyun-python-sdk-ecs (or run .ci/run) to check the SDK");
        return;
    };
    let sim = Simulator::start(SimOptions::default()).unwrap();
    let out = Command::new(py)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/sdk/sdk_check.py"
        ))
        .args([
            sim.ecs_url(),
            sim.region_id(),
            sim.access_key_id().into(),
            sim.access_key_secret().into(),
            sim.instance_id(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("SDK CHECK PASSED"),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let calls = &sim.state()["calls"];
    for action in [
        "DescribeInstanceTypes",
        "CreateNetworkInterface",
        "AttachNetworkInterface",
        "AssignPrivateIpAddresses",
        "DescribeNetworkInterfaces",
    ] {
        assert!(
            calls[action].as_u64().unwrap_or(0) >= 1,
            "{action} never reached the emulator"
        );
    }
    sim.shutdown();
}
