//! The official Alibaba Cloud Node SDKs, unchanged, against eniip-sim: the
//! legacy RPC client (`@alicloud/pop-core`) and today's generated client
//! (`@alicloud/ecs20140526` with `@alicloud/openapi-client`), each with its
//! default config (tests/sdk/node_check.js). `.ci/run` installs the versions
//! pinned in tests/sdk/node/package.json into target/node-sdk and sets
//! ENIIPD_REQUIRE_SDK=1; ENIIPD_NODE_SDK names another install (the
//! directory holding `node_modules`). Without node or the modules the test
//! skips ([`crate::common::skip`]: loudly, and a failure under ENIIPD_CI=1)
//! or, under ENIIPD_REQUIRE_SDK=1, fails.

use std::path::PathBuf;
use std::process::Command;

use eniip_sim::{SimOptions, Simulator, VSwitchSpec};

const MODULES: [&str; 3] = [
    "@alicloud/pop-core",
    "@alicloud/ecs20140526",
    "@alicloud/openapi-client",
];

/// The `node_modules` directory to run with, or None after saying loudly
/// why the test skips (a panic under ENIIPD_REQUIRE_SDK=1).
fn node_modules_or_skip() -> Option<PathBuf> {
    let dir = std::env::var_os("ENIIPD_NODE_SDK")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/node-sdk"))
        .join("node_modules");
    let probe = format!(
        "{}.forEach((m) => require(m))",
        serde_json::to_string(&MODULES).unwrap()
    );
    let why = match Command::new("node")
        .args(["-e", &probe])
        .env("NODE_PATH", &dir)
        .output()
    {
        Err(e) => format!("`node` cannot run ({e}); install Node.js 18 or later"),
        Ok(o) if !o.status.success() => format!(
            "node cannot load {} from {}: {}; run .ci/run, or npm ci in a copy of tests/sdk/node and set ENIIPD_NODE_SDK",
            MODULES.join(", "),
            dir.display(),
            String::from_utf8_lossy(&o.stderr).lines().find(|l| l.contains("Error")).unwrap_or("").trim()
        ),
        Ok(_) => return Some(dir),
    };
    if std::env::var("ENIIPD_REQUIRE_SDK").as_deref() == Ok("1") {
        panic!("the Alibaba Cloud Node SDKs are required (ENIIPD_REQUIRE_SDK=1): {why}");
    }
    crate::common::skip(&format!("official Node SDK check: {why}"));
    None
}

#[test]
fn official_node_sdks_work_unchanged() {
    let Some(modules) = node_modules_or_skip() else {
        return;
    };
    // The instance's vswitch is dual stack, so a /80 can be carved.
    let sim = Simulator::start(crate::common::with_sdk_pod_groups(SimOptions {
        vswitches: vec![VSwitchSpec::parse(
            "vsw-bp1dual0000000000001=192.168.0.0/22,ipv6=2408:4005:300:ab00::/64",
        )
        .unwrap()],
        ..SimOptions::default()
    }))
    .unwrap();
    let out = Command::new("node")
        .arg(format!(
            "{}/tests/sdk/node_check.js",
            env!("CARGO_MANIFEST_DIR")
        ))
        .args([
            sim.ecs_url(),
            sim.region_id(),
            sim.access_key_id().into(),
            sim.access_key_secret().into(),
            sim.instance_id(),
            crate::common::sdk_pod_groups_arg(),
        ])
        .env("NODE_PATH", &modules)
        .output()
        .unwrap();
    // The secret is an argument and nothing else: the script must never
    // print it, and this test never echoes it.
    let secret = sim.access_key_secret();
    let text = |b: &[u8]| String::from_utf8_lossy(b).replace(secret, "<SECRET>");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    println!("{stdout}");
    assert!(
        !stdout.contains("<SECRET>") && !stderr.contains("<SECRET>"),
        "node_check.js printed the access key secret (shown as <SECRET>):\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        out.status.success() && stdout.lines().last() == Some("passed"),
        "node_check.js failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let state = sim.state();
    for action in [
        "DescribeInstanceAttribute",
        "CreateNetworkInterface",
        "DescribeNetworkInterfaces",
        "AssignPrivateIpAddresses",
        "DeleteNetworkInterface",
        "ModifyNetworkInterfaceAttribute",
    ] {
        assert!(
            state["calls"][action].as_u64().unwrap_or(0) >= 2,
            "{action} did not reach the emulator from both SDKs: {}",
            state["calls"]
        );
    }
    // pop-core signs 1.0 (HMAC-SHA1), ecs20140526 by default V3.
    let sigs = &state["signatures"];
    assert!(crate::common::signed(sigs, "v1") >= 6, "{sigs}");
    assert!(crate::common::signed(sigs, "v3") >= 6, "{sigs}");
    sim.shutdown();
}
