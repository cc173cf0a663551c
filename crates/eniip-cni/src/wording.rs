//! Why eniipd refused, in words a user can act on: runtimes show a CNI
//! error's `msg` as the pod's event (`kubectl describe pod`, `podman run`),
//! so it says which failure it was (the vswitch out of addresses, and
//! which; the instance's ENI quota; the cloud throttling; a timeout;
//! eniipd stopping or busy) and what happens next. Pure: the `ERR` line's
//! code and text in, a sentence out; eniipd's own text stays in the
//! error's `details`.

use super::annotations::{annotation_of, SECURITY_GROUPS, VSWITCH};
use eniip_protocol::protocol::reply::ErrReply;

/// The words for `err` answered to `verb`.
pub(crate) fn explain(verb: &str, err: &ErrReply) -> String {
    let (err_code, text) = (err.code(), err.message());
    match err_code {
        "exhausted" => exhausted(text),
        "cloud" => {
            let cloud_code = err.cloud_code().unwrap_or("");
            if cloud_code.starts_with("Throttling") || cloud_code.contains("FlowControl") {
                format!(
                    "the cloud is throttling eniipd's calls ({cloud_code}): no address yet, \
                     the runtime's retry will get one once the rate allows"
                )
            } else {
                format!("the cloud refused eniipd ({cloud_code}): {text}")
            }
        }
        "timeout" => format!(
            "timed out: eniipd had no address for this pod in time ({text}); \
             the cloud may be slow or throttling eniipd's calls; the runtime's retry continues the wait"
        ),
        "shutting-down" => "eniipd is stopping: try again once it is back".to_string(),
        "draining" => "this node is draining (eniipctl drain: it is being retired) and takes \
                       no new pods; schedule the pod elsewhere (cordon the node), or end the \
                       drain with eniipctl undrain"
            .to_string(),
        "busy" if err.is_starting() => {
            "eniipd is starting and not ready yet: try again once it is".to_string()
        }
        "busy" => "eniipd is busy (too many requests in flight): try again".to_string(),
        "bad-request" if verb == "alloc" => asked(text)
            .unwrap_or_else(|| format!("eniipd refused {verb}: {err_code}: {text}")),
        "denied" => format!(
            "eniipd denied {verb}: this plugin's user is neither in allowed_uids nor in \
             socket_group"
        ),
        _ if text.is_empty() => format!("eniipd refused {verb}: {err_code}"),
        _ => format!("eniipd refused {verb}: {err_code}: {text}"),
    }
}

/// An `alloc` refused for what the pod's annotations asked: eniipd's
/// refusals of an ask begin `<argument>=<value>`, and one older than the
/// annotations says `unexpected argument <argument>=<value>`.
fn asked(text: &str) -> Option<String> {
    let (old, said) = match text.strip_prefix("unexpected argument ") {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let arg = said.split_once('=')?.0;
    let annotation = annotation_of(arg)?;
    Some(if old && annotation == SECURITY_GROUPS {
        format!(
            "the pod's annotation {annotation} cannot be honoured: this eniipd does not \
             support per-pod security groups ({text}); upgrade eniipd, or remove the annotation"
        )
    } else if old {
        format!(
            "the pod's annotation {annotation} cannot be honoured: this eniipd is older than \
             pod annotations ({text}); upgrade eniipd, or remove the annotation"
        )
    } else {
        format!("eniipd refused the pod's annotation {annotation}: {text}")
    })
}

/// The vswitch named in `text` (`vsw-...`), if any.
fn vswitches(text: &str) -> Vec<&str> {
    let mut v: Vec<&str> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("vsw-"))
        .collect();
    v.dedup();
    v
}

fn exhausted(text: &str) -> String {
    // eniipd names the ceiling first (`eni_slots: `, `vswitch <id>: `,
    // `prefix: `); an older one does not.
    let (ceiling, text) = match text.split_once(": ") {
        Some((c, rest)) if c == "eni_slots" || c == "prefix" || c.starts_with("vswitch vsw-") => {
            (c, rest)
        }
        _ => ("", text),
    };
    if ceiling == "prefix" {
        return format!(
            "no /28 prefix can be had on this node's ENIs or vswitches ({text}); \
             pods on this node must give addresses back first"
        );
    }
    let vsw = vswitches(text);
    if text.contains("the vswitch asked") {
        return format!(
            "no address on the vswitch the pod's annotation {VSWITCH} asks, {}: \
             free addresses there, or let the pod ask another ({text})",
            vsw.join(", ")
        );
    }
    if !vsw.is_empty() {
        return format!(
            "vswitch {} is out of addresses: free addresses there or add a vswitch to \
             eni.json's vswitches ({text})",
            vsw.join(", ")
        );
    }
    if text.contains("IpNotEnough") || text.contains("vswitch") {
        return format!("the vswitch is out of addresses ({text})");
    }
    if ceiling == "eni_slots" || text.starts_with("capacity reached") {
        return format!(
            "no address left on this node: the instance's ENI quota is reached and every \
             ENI is full ({text}); pods on this node must give addresses back first"
        );
    }
    format!("no address can be had (exhausted): {text}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn explain(verb: &str, line: &str) -> String {
        super::explain(verb, &ErrReply::parse(line).unwrap())
    }

    #[test]
    fn each_failure_says_what_it_was() {
        let vsw = explain(
            "alloc",
            "ERR exhausted no vswitch has free addresses (vsw-abc until 2026-12-04T03:00:00Z)",
        );
        assert!(vsw.contains("vswitch vsw-abc is out of addresses"), "{vsw}");
        let quota = explain("alloc", "ERR exhausted capacity reached: 12 addresses on 2 of 2 ENIs (12 in use, 0 reserved, 0 cooling, 1 requested)",
        );
        assert!(quota.contains("ENI quota is reached"), "{quota}");
        assert!(quota.contains("2 of 2 ENIs"), "{quota}");
        let t = explain("alloc", "ERR cloud Throttling.User Request was denied");
        assert!(
            t.contains("throttling") && t.contains("Throttling.User"),
            "{t}"
        );
        let t = explain("alloc", "ERR timeout no address within 30 s");
        assert!(t.starts_with("timed out") && t.contains("30 s"), "{t}");
        let other = explain("alloc", "ERR cloud Forbidden.RAM not allowed");
        assert!(other.contains("Forbidden.RAM"), "{other}");
        assert_eq!(
            explain("show", "ERR not-found"),
            "eniipd refused show: not-found"
        );
        // What a pod's annotations asked, named.
        let e = explain(
            "alloc",
            "ERR bad-request vswitch=vsw-zz is not one of this node's vswitches (vsw-a; eni.json's vswitches for its zone)",
        );
        assert!(
            e.starts_with(
                "eniipd refused the pod's annotation eniipd/vswitch: vswitch=vsw-zz is not one of"
            ),
            "{e}"
        );
        let e = explain("alloc", "ERR bad-request ip-stick-time=7200 is more than this node allows (max_ip_stick_time 3600 s)");
        assert!(
            e.contains("annotation eniipd/ip-stick-time: ip-stick-time=7200"),
            "{e}"
        );
        let e = explain("alloc", "ERR bad-request unexpected argument ip-stack=ipv4");
        assert!(
            e.starts_with(
                "the pod's annotation eniipd/ip-stack cannot be honoured: this eniipd is older"
            ),
            "{e}"
        );
        // An eniipd older than per-pod security groups, and one that
        // refuses the set.
        let e = explain(
            "alloc",
            "ERR bad-request unexpected argument security-groups=sg-a,sg-b",
        );
        assert!(
            e.starts_with(
                "the pod's annotation eniipd/security-groups cannot be honoured: this eniipd \
                 does not support per-pod security groups"
            ),
            "{e}"
        );
        let e = explain(
            "alloc",
            "ERR bad-request security-groups=sg-x: sg-x is not in pod_security_groups",
        );
        assert!(
            e.starts_with(
                "eniipd refused the pod's annotation eniipd/security-groups: security-groups=sg-x"
            ),
            "{e}"
        );
        let e = explain("alloc", "ERR bad-request unexpected argument prefer=x");
        assert_eq!(
            e,
            "eniipd refused alloc: bad-request: unexpected argument prefer=x"
        );
        for text in [
            "the vswitch asked, vsw-b, has no free addresses (until 2026-12-04T03:00:00Z)",
            "capacity reached for the vswitch asked, vsw-b: no ENI on it has room and no ENI can be created: 4 addresses on 1 of 2 ENIs (0 in use, 0 reserved, 0 cooling, 0 requested)",
        ] {
            let e = explain("alloc", &format!("ERR exhausted {text}"));
            assert!(
                e.starts_with("no address on the vswitch the pod's annotation eniipd/vswitch asks, vsw-b:"),
                "{e}"
            );
        }
        // The ceiling named first reads the same.
        let e = explain("alloc", "ERR exhausted eni_slots: capacity reached: 12 addresses on 2 of 2 ENIs (12 in use, 0 reserved, 0 cooling, 1 requested)");
        assert!(
            e.contains("ENI quota is reached") && e.contains("(capacity reached: 12"),
            "{e}"
        );
        let e = explain("alloc", "ERR exhausted vswitch vsw-abc: no vswitch has free addresses (vsw-abc until 2026-12-04T03:00:00Z)");
        assert!(e.contains("vswitch vsw-abc is out of addresses"), "{e}");
        let e = explain("alloc", "ERR exhausted prefix: no /28");
        assert!(e.starts_with("no /28 prefix can be had"), "{e}");
        let e = explain("alloc", "ERR draining this node is draining");
        assert!(e.starts_with("this node is draining"), "{e}");
        let starting = explain(
            "ping",
            "ERR busy eniipd is starting (for 6 s) and answers once",
        );
        assert!(
            starting.contains("starting and not ready yet"),
            "{starting}"
        );
    }
}
