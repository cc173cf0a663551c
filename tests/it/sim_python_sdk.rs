//! The official Python SDKs, unchanged, against eniip-sim: the legacy one
//! (`aliyun-python-sdk-core`, `aliyun-python-sdk-ecs`; tests/sdk/sdk_check.py)
//! and today's (`alibabacloud_ecs20140526`, `alibabacloud_vpc20160428` on
//! `alibabacloud_tea_openapi`; tests/sdk/tea_check.py), with its default
//! config (signature V3) and with `signature_algorithm='v2'`. `.ci/run`
//! installs them into target/sdk-venv and sets ENIIPD_SDK_PYTHON and
//! ENIIPD_REQUIRE_SDK=1; without them each test skips ([`crate::common::skip`]:
//! loudly, and a failure under ENIIPD_CI=1).

use std::path::{Path, PathBuf};
use std::process::Command;

use eniip_sim::{SimOptions, Simulator, VSwitchSpec};

/// A Python that imports `modules`, or None (a skip, unless required).
fn python_with(modules: &str) -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("ENIIPD_SDK_PYTHON").map(PathBuf::from),
        Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/sdk-venv/bin/python")),
    ];
    candidates.into_iter().flatten().find(|p| {
        Command::new(p)
            .args(["-c", &format!("import {modules}")])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// The Python to run, or None after saying loudly that the test skips.
fn python_or_skip(modules: &str, packages: &str) -> Option<PathBuf> {
    let py = python_with(modules);
    if py.is_none() {
        if std::env::var("ENIIPD_REQUIRE_SDK").as_deref() == Ok("1") {
            panic!("the Alibaba Cloud Python SDK is required (ENIIPD_REQUIRE_SDK=1) but `import {modules}` fails");
        }
        crate::common::skip(&format!(
            "`import {modules}` fails; install {packages} (or run .ci/run) to check the SDK"
        ));
    }
    py
}

/// Runs `script` (in tests/sdk) with `mode` when given, then the
/// emulator's endpoint, region, key pair and instance; asserts that it
/// exits 0 having printed `passed`.
#[track_caller]
fn run_check(py: &Path, script: &str, mode: Option<&str>, sim: &Simulator, passed: &str) {
    let out = Command::new(py)
        .arg(format!("{}/tests/sdk/{script}", env!("CARGO_MANIFEST_DIR")))
        .args(mode)
        .args([
            sim.ecs_url(),
            sim.region_id(),
            sim.access_key_id().into(),
            sim.access_key_secret().into(),
            sim.instance_id(),
            crate::common::sdk_pod_groups_arg(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.contains(passed),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
}

/// Asserts that each of `actions` reached the emulator.
#[track_caller]
fn assert_reached(state: &serde_json::Value, actions: &[&str]) {
    for action in actions {
        assert!(
            state["calls"][action].as_u64().unwrap_or(0) >= 1,
            "{action} never reached the emulator"
        );
    }
}

#[test]
fn official_python_sdk_works_unchanged() {
    let Some(py) = python_or_skip(
        "aliyunsdkcore, aliyunsdkecs",
        "aliyun-python-sdk-core and aliyun-python-sdk-ecs",
    ) else {
        return;
    };
    let sim = Simulator::start(crate::common::with_sdk_pod_groups(SimOptions::default())).unwrap();
    run_check(&py, "sdk_check.py", None, &sim, "SDK CHECK PASSED");
    assert_reached(
        &sim.state(),
        &[
            "DescribeInstanceTypes",
            "CreateNetworkInterface",
            "AttachNetworkInterface",
            "AssignPrivateIpAddresses",
            "DescribeNetworkInterfaces",
            "ModifyNetworkInterfaceAttribute",
        ],
    );
    sim.shutdown();
}

/// Today's SDK in one mode ("default" or "v2"); returns the emulator's
/// count of requests per signature version.
fn tea_sdk(mode: &str) -> Option<serde_json::Value> {
    let py = python_or_skip(
        "alibabacloud_ecs20140526, alibabacloud_vpc20160428, alibabacloud_tea_openapi",
        "alibabacloud_ecs20140526, alibabacloud_vpc20160428 and alibabacloud_tea_openapi",
    )?;
    // The instance's vswitch is dual stack so the IPv6 actions run too.
    let sim = Simulator::start(crate::common::with_sdk_pod_groups(SimOptions {
        vswitches: vec![VSwitchSpec::parse(
            "vsw-bp1dual0000000000001=192.168.0.0/22,ipv6=2408:4005:300:ab00::/64",
        )
        .unwrap()],
        attach_delay: std::time::Duration::from_millis(50),
        ..SimOptions::default()
    }))
    .unwrap();
    run_check(
        &py,
        "tea_check.py",
        Some(mode),
        &sim,
        &format!("TEA SDK CHECK PASSED {mode}"),
    );
    let state = sim.state();
    assert_reached(
        &state,
        &[
            "DescribeInstanceTypes",
            "DescribeInstanceAttribute",
            "DescribeSecurityGroups",
            "DescribeVSwitches",
            "CreateNetworkInterface",
            "AttachNetworkInterface",
            "DetachNetworkInterface",
            "DeleteNetworkInterface",
            "DescribeNetworkInterfaces",
            "AssignPrivateIpAddresses",
            "UnassignPrivateIpAddresses",
            "AssignIpv6Addresses",
            "UnassignIpv6Addresses",
            "TagResources",
            "UntagResources",
            "ListTagResources",
            "ModifyNetworkInterfaceAttribute",
        ],
    );
    sim.shutdown();
    Some(state["signatures"].clone())
}

#[test]
fn todays_python_sdk_with_its_default_config_signs_v3_and_works() {
    let Some(sigs) = tea_sdk("default") else {
        return;
    };
    assert!(crate::common::signed(&sigs, "v3") >= 16, "{sigs}");
    assert_eq!(crate::common::signed(&sigs, "v1"), 0, "{sigs}");
}

#[test]
fn todays_python_sdk_with_signature_algorithm_v2_works() {
    let Some(sigs) = tea_sdk("v2") else {
        return;
    };
    assert!(crate::common::signed(&sigs, "v1") >= 16, "{sigs}");
    assert_eq!(crate::common::signed(&sigs, "v3"), 0, "{sigs}");
}
