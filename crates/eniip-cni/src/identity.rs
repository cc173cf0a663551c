//! Who an attachment is to eniipd. The owner is
//! `<network>/<K8S_POD_NAMESPACE>/<K8S_POD_NAME>` when `CNI_ARGS` names the
//! pod (so `ip_stick_time` gives a restarted pod its address back), else
//! `<network>/<CNI_CONTAINERID>`; the sandbox is `CNI_CONTAINERID`.
//!
//! Invariants: a pod's owner has three parts and a container's two, and
//! neither kind is used literally when a part holds `/` or `@` or the
//! whole does not fit eniipd's id alphabet: it is then `<network>/@p-HASH`
//! or `<network>/@c-HASH`, so an owner made from a container id never
//! equals one made from a pod. The network prefix keeps two networks of
//! one pod apart and scopes GC.

use sha1::{Digest, Sha1};

use super::spec::Env;
use eniip_protocol::core::Owner;

fn hex_sha1(s: &str) -> String {
    Sha1::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn hashed(s: &str) -> String {
    format!("h-{}", hex_sha1(s))
}

/// `s` if eniipd accepts it as an id, else a stable hash of it.
fn fit_id(s: &str) -> String {
    if Owner::parse(s).is_ok() {
        s.to_string()
    } else {
        hashed(s)
    }
}

/// The sandbox id of a container.
pub(crate) fn sandbox_of(container_id: &str) -> String {
    fit_id(container_id)
}

/// A part of an owner that can be used as it is: no `/` (it would read as
/// another split) and no `@` (it would read as a hashed form).
fn literal(part: &str) -> bool {
    !part.is_empty() && !part.contains(['/', '@'])
}

/// The owner of an attachment (see the module doc).
pub(crate) fn owner_of(network: &str, env: &Env) -> String {
    let pod = match (
        env.args.get("K8S_POD_NAMESPACE").filter(|s| !s.is_empty()),
        env.args.get("K8S_POD_NAME").filter(|s| !s.is_empty()),
    ) {
        (Some(ns), Some(pod)) => Some((ns, pod)),
        _ => None,
    };
    let (plain, hashed) = match pod {
        Some((ns, pod)) => (
            (literal(ns) && literal(pod)).then(|| format!("{network}/{ns}/{pod}")),
            // The length keeps `a/b` + `c` and `a` + `b/c` apart.
            format!(
                "{network}/@p-{}",
                hex_sha1(&format!("{}:{ns}/{pod}", ns.len()))
            ),
        ),
        None => {
            let id = &env.container_id;
            (
                literal(id).then(|| format!("{network}/{id}")),
                format!("{network}/@c-{}", hex_sha1(id)),
            )
        }
    };
    plain.filter(|o| Owner::parse(o).is_ok()).unwrap_or(hashed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(cid: &str, args: &[(&str, &str)]) -> Env {
        Env {
            container_id: cid.into(),
            ifname: "eth0".into(),
            netns: None,
            profile: None,
            args: args
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn owners_follow_the_pod_when_named() {
        let e = env(
            "abc123",
            &[("K8S_POD_NAMESPACE", "ns"), ("K8S_POD_NAME", "web-1")],
        );
        assert_eq!(owner_of("eni", &e), "eni/ns/web-1");
        assert_eq!(owner_of("eni", &env("abc123", &[])), "eni/abc123");
        // Out of the alphabet or too long: hashed, the network kept.
        let long = "x".repeat(300);
        let o = owner_of("eni", &env(&long, &[]));
        assert!(o.starts_with("eni/@c-") && Owner::parse(&o).is_ok(), "{o}");
        let o = owner_of("eni", &env("a b", &[]));
        assert!(o.starts_with("eni/@c-") && Owner::parse(&o).is_ok(), "{o}");
        assert_eq!(sandbox_of("abc"), "abc");
        assert!(sandbox_of(&long).starts_with("h-"));
    }

    #[test]
    fn owners_of_containers_never_equal_owners_of_pods() {
        let pod = |ns: &str, name: &str| {
            owner_of(
                "eni",
                &env("c", &[("K8S_POD_NAMESPACE", ns), ("K8S_POD_NAME", name)]),
            )
        };
        let ctr = |id: &str| owner_of("eni", &env(id, &[]));
        // The collision reported: no CNI_ARGS and CNI_CONTAINERID=ns/pod.
        assert_ne!(ctr("ns/web-1"), pod("ns", "web-1"));
        // Whatever a container id holds, it is not a pod's owner; hashed
        // forms cannot be forged by an id or a pod name either.
        for id in ["ns/web-1", "@p-x", "ns/@c-y", "a b", "ns/web-1/x", "@c-1"] {
            let o = ctr(id);
            assert_eq!(o.matches('/').count(), 1, "{id} -> {o}");
            assert!(o.starts_with("eni/@c-"), "{id} -> {o}");
            assert!(Owner::parse(&o).is_ok(), "{o}");
        }
        // Pods whose parts would read as another split are hashed apart.
        assert_ne!(pod("a/b", "c"), pod("a", "b/c"));
        assert!(pod("a/b", "c").starts_with("eni/@p-"));
        assert!(pod("ns", "@x").starts_with("eni/@p-"));
        assert_ne!(pod("ns", "@x"), ctr("@x"));
    }
}
