//! What a pod asks eniipd for through its annotations (SPEC section 6a):
//! a runtime that sees the `io.kubernetes.cri.pod-annotations` capability
//! in the conflist hands the pod's annotations to the plugin as
//! `runtimeConfig."io.kubernetes.cri.pod-annotations"` (containerd 1.5 and
//! later, CRI-O), an object of strings, or `null` for a pod without
//! annotations. Pure: that value in, the [`Intent`] an `alloc` carries
//! (as its `vswitch=`, `ip-stick-time=`, `ip-stack=`, `security-groups=`
//! arguments) out.
//!
//! The annotations read: `eniipd/vswitch` (a vswitch id), `eniipd/ip-
//! stick-time` (whole seconds), `eniipd/ip-stack` (`ipv4`) and
//! `eniipd/security-groups` (`sg-a,sg-b`: 1 to 5 security group ids, a
//! set: order and repeats do not matter, sent sorted and once). Every other
//! annotation is ignored, `eniipd/`-prefixed ones included (a later
//! plugin's). A value of one of them that is not of its form fails the ADD
//! (CNI error 7, naming the annotation) before eniipd is asked: a pod is
//! never served other than it asked. Whether eniipd can honour a well-formed
//! value (a vswitch of this node, a stick time within `max_ip_stick_time`)
//! is eniipd's to say; its refusals begin with the `alloc` argument, which
//! [`annotation_of`] turns back into the annotation's name.

use serde_json::Value;

use super::spec::{code, CniError, POD_ANNOTATIONS as CAPABILITY};
use eniip_protocol::core::{
    AllocError, Intent, ARG_SECURITY_GROUPS, ARG_STACK, ARG_STICK, ARG_VSWITCH,
};
use eniip_protocol::protocol::{parse_security_groups, parse_stack, parse_stick, parse_vswitch};

/// `eniipd/vswitch`: the vswitch the pod's address must be on.
pub(crate) const VSWITCH: &str = "eniipd/vswitch";
/// `eniipd/ip-stick-time`: the pod's own `ip_stick_time`, in seconds.
pub(crate) const STICK: &str = "eniipd/ip-stick-time";
/// `eniipd/ip-stack`: `ipv4`, IPv4 only on a dual-stack node.
pub(crate) const STACK: &str = "eniipd/ip-stack";
/// `eniipd/security-groups`: the security groups the pod's address's ENI
/// must be in, exactly.
pub(crate) const SECURITY_GROUPS: &str = "eniipd/security-groups";

/// Each annotation read, with the `alloc` argument that carries it.
const READ: [(&str, &str); 4] = [
    (VSWITCH, ARG_VSWITCH),
    (STICK, ARG_STICK),
    (STACK, ARG_STACK),
    (SECURITY_GROUPS, ARG_SECURITY_GROUPS),
];

/// The annotation an `alloc` argument (`vswitch`, ...) carries, if it is
/// one of them.
pub(crate) fn annotation_of(arg: &str) -> Option<&'static str> {
    READ.iter().find(|(_, a)| *a == arg).map(|(n, _)| *n)
}

fn invalid(annotation: &str, why: impl std::fmt::Display) -> CniError {
    CniError::new(
        code::INVALID_CONFIG,
        format!("invalid pod annotation {annotation}: {why}"),
    )
}

/// What the pod's annotations (`runtimeConfig`'s [`CAPABILITY`] value,
/// `None` when the runtime passed none) ask; the default when they ask
/// nothing this plugin reads.
pub(crate) fn intent_of(annotations: Option<&Value>) -> Result<Intent, CniError> {
    let map = match annotations {
        None | Some(Value::Null) => return Ok(Intent::default()),
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(CniError::new(
                code::INVALID_CONFIG,
                format!(
                    "invalid network config: runtimeConfig.{CAPABILITY}: must be an object of \
                     strings (the pod's annotations) or null"
                ),
            ))
        }
    };
    let mut intent = Intent::default();
    for (annotation, arg) in READ {
        let Some(v) = map.get(annotation) else {
            continue;
        };
        let Some(v) = v.as_str() else {
            return Err(invalid(annotation, format!("{v} is not a string")));
        };
        // The protocol's own checks; their words begin `<arg>=<value>`.
        let why = |e: AllocError| {
            let said = format!("{arg}={v}");
            let rest = e
                .message
                .strip_prefix(&said)
                .map(|r| r.trim_start_matches([':', ' ']))
                .unwrap_or(&e.message);
            invalid(annotation, format!("{v:?}: {rest}"))
        };
        match arg {
            ARG_VSWITCH => intent.vswitch = Some(parse_vswitch(v).map_err(why)?),
            ARG_STICK => intent.stick_s = Some(parse_stick(v).map_err(why)?),
            ARG_SECURITY_GROUPS => {
                intent.security_groups = Some(parse_security_groups(v).map_err(why)?)
            }
            _ => intent.ipv4_only = parse_stack(v).map_err(why)?,
        }
    }
    Ok(intent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(v: Value) -> Result<Intent, CniError> {
        intent_of(Some(&v))
    }

    #[test]
    fn no_annotations_null_or_none_of_ours_ask_nothing() {
        assert_eq!(intent_of(None).unwrap(), Intent::default());
        assert_eq!(read(Value::Null).unwrap(), Intent::default());
        assert_eq!(read(json!({})).unwrap(), Intent::default());
        // Others' annotations, and eniipd/ ones this plugin does not read.
        let others = json!({
            "kubernetes.io/config.source": "api",
            "eniipd/future": "anything at all",
            "eniipd/VSWITCH": "not ours either",
        });
        assert_eq!(read(others).unwrap(), Intent::default());
    }

    #[test]
    fn each_annotation_in_its_form() {
        let got = read(json!({
            "eniipd/vswitch": "vsw-bp1x9",
            "eniipd/ip-stick-time": "600",
            "eniipd/ip-stack": "ipv4",
            "eniipd/security-groups": "sg-bp1b, sg-bp1a,sg-bp1b",
            "other": "x",
        }))
        .unwrap();
        assert_eq!(
            got,
            Intent {
                vswitch: Some("vsw-bp1x9".into()),
                stick_s: Some(600),
                ipv4_only: true,
                security_groups: Some(
                    eniip_protocol::core::SecurityGroupSet::parse("sg-bp1a,sg-bp1b").unwrap()
                ),
            }
        );
        // Sent canonical: sorted, each once, no blanks.
        assert_eq!(
            eniip_protocol::protocol::intent_args(&got).last().unwrap(),
            "security-groups=sg-bp1a,sg-bp1b"
        );
        assert_eq!(
            read(json!({"eniipd/ip-stick-time": "0"})).unwrap().stick_s,
            Some(0)
        );
    }

    #[test]
    fn a_bad_value_fails_naming_the_annotation() {
        for (annotations, begins) in [
            (
                json!({"eniipd/vswitch": "vsw-ABC"}),
                "invalid pod annotation eniipd/vswitch: \"vsw-ABC\": is not a vswitch id",
            ),
            (
                json!({"eniipd/vswitch": "vsw-a b"}),
                "invalid pod annotation eniipd/vswitch: \"vsw-a b\":",
            ),
            (
                json!({"eniipd/ip-stick-time": "10m"}),
                "invalid pod annotation eniipd/ip-stick-time: \"10m\": is not a number of seconds",
            ),
            (
                json!({"eniipd/ip-stick-time": "604801"}),
                "invalid pod annotation eniipd/ip-stick-time: \"604801\"",
            ),
            (
                json!({"eniipd/ip-stack": "dual"}),
                "invalid pod annotation eniipd/ip-stack: \"dual\": only ipv4 can be asked",
            ),
            (
                json!({"eniipd/ip-stick-time": 600}),
                "invalid pod annotation eniipd/ip-stick-time: 600 is not a string",
            ),
            (
                json!({"eniipd/security-groups": "sg-a,web"}),
                "invalid pod annotation eniipd/security-groups: \"sg-a,web\": \"web\" is not a security group id",
            ),
            (
                json!({"eniipd/security-groups": "sg-1,sg-2,sg-3,sg-4,sg-5,sg-6"}),
                "invalid pod annotation eniipd/security-groups: \"sg-1,sg-2,sg-3,sg-4,sg-5,sg-6\": 6 security groups: an ENI can be in at most 5",
            ),
            (
                json!({"eniipd/security-groups": ""}),
                "invalid pod annotation eniipd/security-groups: \"\": no security group given",
            ),
            (
                json!({"eniipd/security-groups": "sg-a,,sg-b"}),
                "invalid pod annotation eniipd/security-groups: \"sg-a,,sg-b\": an empty id",
            ),
            (
                json!({"eniipd/security-groups": ["sg-a"]}),
                "invalid pod annotation eniipd/security-groups: [\"sg-a\"] is not a string",
            ),
        ] {
            let e = read(annotations.clone()).unwrap_err();
            assert_eq!(e.code, code::INVALID_CONFIG, "{annotations}");
            assert!(e.msg.starts_with(begins), "{annotations}: {e}");
        }
        let e = read(json!(["eniipd/vswitch"])).unwrap_err();
        assert_eq!(e.code, code::INVALID_CONFIG);
        assert!(e.msg.contains(CAPABILITY), "{e}");
    }

    #[test]
    fn each_argument_names_its_annotation() {
        assert_eq!(annotation_of("vswitch"), Some(VSWITCH));
        assert_eq!(annotation_of("ip-stick-time"), Some(STICK));
        assert_eq!(annotation_of("ip-stack"), Some(STACK));
        assert_eq!(annotation_of("security-groups"), Some(SECURITY_GROUPS));
        assert_eq!(annotation_of("prefer"), None);
    }
}
