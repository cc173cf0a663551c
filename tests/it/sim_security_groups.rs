//! eniip-sim's security groups over HTTP, as eniipd's signed client
//! meets them: `--security-group` adds groups to the emulated VPC; an ENI
//! is created in any set of them (at most 5, each one the VPC's, with
//! the service's error codes and statuses), changed to another set with
//! ModifyNetworkInterfaceAttribute, described with its groups, listed
//! with `security_group_ids` in `/__sim/state`, counted in `calls`, and
//! kept with the world in `--state-file`.

use crate::common::{by_id, tempdir, Sim};
use crate::openapi_client::{call, client, code};
use serde_json::{json, Value};

const SG_A: &str = "sg-bp1podsa000000000001";
const SG_B: &str = "sg-bp1podsb000000000002";

fn described_sgs(c: &eniip_cloud::aliyun::AliyunCloud, eni: &str) -> Value {
    let d = call(
        c,
        "DescribeNetworkInterfaces",
        &[("NetworkInterfaceId.1", eni)],
    )
    .unwrap();
    d["NetworkInterfaceSets"]["NetworkInterfaceSet"][0]["SecurityGroupIds"]["SecurityGroupId"]
        .clone()
}

#[test]
fn enis_in_sets_of_the_vpcs_groups_changed_described_and_kept() {
    let dir = tempdir("sim-sgs");
    let file = dir.join("world.json");
    let file_arg = file.to_str().unwrap();
    let sim = Sim::quick(&[
        "--security-group",
        SG_A,
        "--security-group",
        SG_B,
        "--state-file",
        file_arg,
    ]);
    let c = client(sim.openapi_options());
    let attr = call(
        &c,
        "DescribeInstanceAttribute",
        &[("InstanceId", &sim.instance)],
    )
    .unwrap();
    let own = attr["SecurityGroupIds"]["SecurityGroupId"][0]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        attr["SecurityGroupIds"]["SecurityGroupId"],
        json!([own]),
        "the instance is in its own group only"
    );
    let groups = call(&c, "DescribeSecurityGroups", &[]).unwrap();
    let listed: Vec<&str> = groups["SecurityGroups"]["SecurityGroup"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["SecurityGroupId"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [own.as_str(), SG_A, SG_B]);
    let vsw = attr["VpcAttributes"]["VSwitchId"]
        .as_str()
        .unwrap()
        .to_string();

    let made = call(
        &c,
        "CreateNetworkInterface",
        &[
            ("VSwitchId", &vsw),
            ("SecurityGroupIds.1", SG_A),
            ("SecurityGroupIds.2", SG_B),
        ],
    )
    .unwrap();
    assert_eq!(
        made["SecurityGroupIds"]["SecurityGroupId"],
        json!([SG_A, SG_B])
    );
    let eni = made["NetworkInterfaceId"].as_str().unwrap().to_string();
    assert_eq!(described_sgs(&c, &eni), json!([SG_A, SG_B]));

    // The service's refusals, with their statuses.
    let unknown = call(
        &c,
        "CreateNetworkInterface",
        &[
            ("VSwitchId", &vsw),
            ("SecurityGroupIds.1", SG_A),
            ("SecurityGroupIds.2", "sg-bp1elsewhere"),
        ],
    );
    assert_eq!(
        code(unknown),
        (404, "InvalidSecurityGroupId.NotFound".into())
    );
    let six: Vec<(String, String)> = (1..=6)
        .map(|i| (format!("SecurityGroupIds.{i}"), format!("sg-bp1many{i}")))
        .collect();
    let mut too_many: Vec<(&str, &str)> = vec![("VSwitchId", &vsw)];
    too_many.extend(six.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    assert_eq!(
        code(call(&c, "CreateNetworkInterface", &too_many)),
        (400, "InstanceSecurityGroupLimitExceeded".into())
    );

    // Another set: the whole list is replaced.
    call(
        &c,
        "ModifyNetworkInterfaceAttribute",
        &[("NetworkInterfaceId", &eni), ("SecurityGroupId.1", &own)],
    )
    .unwrap();
    assert_eq!(described_sgs(&c, &eni), json!([own]));
    assert_eq!(
        code(call(
            &c,
            "ModifyNetworkInterfaceAttribute",
            &[
                ("NetworkInterfaceId", &eni),
                ("SecurityGroupId.1", "sg-bp1elsewhere")
            ],
        )),
        (404, "InvalidSecurityGroupId.NotFound".into())
    );
    assert_eq!(
        code(call(
            &c,
            "ModifyNetworkInterfaceAttribute",
            &[
                ("NetworkInterfaceId", "eni-bp1nothere"),
                ("SecurityGroupId.1", SG_A)
            ],
        )),
        (404, "InvalidEniId.NotFound".into())
    );
    call(
        &c,
        "ModifyNetworkInterfaceAttribute",
        &[
            ("NetworkInterfaceId", &eni),
            ("SecurityGroupId.1", SG_B),
            ("SecurityGroupId.2", SG_A),
        ],
    )
    .unwrap();
    let filtered = call(
        &c,
        "DescribeNetworkInterfaces",
        &[("SecurityGroupId", SG_B)],
    )
    .unwrap();
    assert_eq!(filtered["TotalCount"], 1, "{filtered}");

    let state = sim.state();
    assert_eq!(
        by_id(&state, "enis", &eni)["security_group_ids"],
        json!([SG_B, SG_A])
    );
    assert_eq!(
        state["calls"]["ModifyNetworkInterfaceAttribute"], 4,
        "every signed call counts"
    );
    assert_eq!(state["calls"]["DescribeSecurityGroups"], 1);

    // A restarted emulator on the same file, with no --security-group:
    // the ENI keeps its set and the VPC its groups.
    drop(sim);
    let again = Sim::quick(&["--state-file", file_arg]);
    let c = client(again.openapi_options());
    assert_eq!(described_sgs(&c, &eni), json!([SG_B, SG_A]));
    let made = call(
        &c,
        "CreateNetworkInterface",
        &[("VSwitchId", &vsw), ("SecurityGroupId", SG_A)],
    )
    .unwrap();
    assert_eq!(made["SecurityGroupIds"]["SecurityGroupId"], json!([SG_A]));
    drop(again);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_malformed_security_group_is_a_usage_error() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_eniip-sim"))
        .args(["--security-group", "default"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--security-group") && err.contains("sg-"),
        "{err}"
    );
}
