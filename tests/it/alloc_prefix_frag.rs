//! /28 fragmentation (issue 38, item 3), real binaries against eniip-sim:
//! vswitch A has free addresses but no free /28, B has room. A burst gets
//! /28 addresses from B and no single address anywhere; once A has room
//! again, the next new ENI on A takes /28s; `enis` says which ENIs are on
//! fallback.

use crate::common;

use std::collections::BTreeSet;

use common::{config, field, tempdir, Daemon, Sim};
use eniip_protocol::protocol::reply::parse_eni_line;
use serde_json::{json, Value};

const VSW_A: &str = "vsw-bp1frag00000000000000a";
const VSW_B: &str = "vsw-bp1frag00000000000000b";

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// Per managed ENI in the cloud: (id, vswitch, single secondary
/// addresses, /28s).
fn managed(sim: &Sim) -> Vec<(String, String, usize, usize)> {
    sim.managed()
        .iter()
        .map(|e| {
            (
                e["id"].as_str().unwrap().to_string(),
                e["vswitch_id"].as_str().unwrap().to_string(),
                // private_ips includes the primary.
                strings(&e["private_ips"]).len().saturating_sub(1),
                strings(&e["ipv4_prefixes"]).len(),
            )
        })
        .collect()
}

/// `fallback=` of each `enis` line, by ENI.
fn fallbacks(d: &Daemon) -> Vec<(String, String)> {
    let r = d.ask("enis");
    r[..r.len() - 1]
        .iter()
        .map(|l| {
            parse_eni_line(l).unwrap_or_else(|e| panic!("{l:?}: {e}"));
            let fb = l
                .split(' ')
                .find_map(|w| w.strip_prefix("fallback="))
                .unwrap_or_else(|| panic!("no fallback= in {l:?}"));
            (l.split(' ').next().unwrap().to_string(), fb.to_string())
        })
        .collect()
}

#[test]
fn no_slash_28_on_one_vswitch_takes_them_from_another_then_comes_back() {
    let sim = Sim::quick(&[
        "--instance-type",
        "ecs.g7.4xlarge",
        "--vswitch",
        &format!("{VSW_A}=192.168.0.0/22,free=1000"),
        "--vswitch",
        &format!("{VSW_B}=192.168.8.0/22,free=500"),
    ]);
    sim.vswitch(&format!(r#"{{"id":"{VSW_A}","free_prefixes":0}}"#));
    let zone = sim.state()["instance"]["zone"]
        .as_str()
        .unwrap()
        .to_string();
    let dir = tempdir("pfxfrag2");
    // `ordered`: A, with more free addresses, is tried first.
    let d = Daemon::start(
        &dir,
        &config(
            &sim,
            &dir,
            json!({"ip_prefix": true, "max_pool_size": 0,
                   "vswitches": {zone: [VSW_A, VSW_B]},
                   "vswitch_selection_policy": "ordered"}),
        ),
    );
    let replies = crate::alloc_prefix_sim::burst(&d, "storm", 100);
    let ips: BTreeSet<String> = replies.values().map(|r| field(r, "ip")).collect();
    assert_eq!(ips.len(), 100);
    for r in replies.values() {
        assert_eq!(field(r, "vswitch"), VSW_B, "{r}");
    }
    let enis = managed(&sim);
    assert!(!enis.is_empty());
    for (id, vsw, singles, prefixes) in &enis {
        assert_eq!(vsw, VSW_B, "{id} on {vsw}");
        assert_eq!(*singles, 0, "{id} fell back to single addresses");
        assert!(*prefixes > 0, "{id} holds no /28");
    }
    for ip in &ips {
        let ip: std::net::Ipv4Addr = ip.parse().unwrap();
        let p = eniip_cloud::Ipv4Prefix::containing(ip).to_string();
        assert!(
            sim.managed()
                .iter()
                .any(|e| strings(&e["ipv4_prefixes"]).contains(&p)),
            "{ip} is in no /28"
        );
    }
    for (eni, fb) in fallbacks(&d) {
        assert_eq!(fb, "-", "{eni} on fallback");
    }
    // A has room again: the next new ENI there takes /28s.
    sim.vswitch(&format!(r#"{{"id":"{VSW_A}","free_prefixes":null}}"#));
    let r = d.ok(&format!("alloc back/pod-0 vswitch={VSW_A}"));
    assert_eq!(field(&r, "vswitch"), VSW_A, "{r}");
    let on_a: Vec<_> = managed(&sim)
        .into_iter()
        .filter(|(_, v, _, _)| v == VSW_A)
        .collect();
    assert_eq!(on_a.len(), 1, "{on_a:?}");
    assert!(on_a[0].2 == 0 && on_a[0].3 > 0, "{on_a:?}");
    assert_eq!(field(&r, "eni"), on_a[0].0);
    assert!(fallbacks(&d).iter().all(|(_, fb)| fb == "-"));
    assert_eq!(d.ask("audit"), vec!["OK consistent"]);
}

#[test]
fn an_eni_on_fallback_says_so_and_goes_back_to_slash_28s() {
    let sim = Sim::quick(&[
        "--instance-type",
        "ecs.g7.4xlarge",
        "--vswitch",
        &format!("{VSW_A}=192.168.0.0/22,free=1000"),
    ]);
    sim.vswitch(&format!(r#"{{"id":"{VSW_A}","free_prefixes":0}}"#));
    let zone = sim.state()["instance"]["zone"]
        .as_str()
        .unwrap()
        .to_string();
    let dir = tempdir("pfxfrag3");
    let d = Daemon::start(
        &dir,
        &config(
            &sim,
            &dir,
            json!({"ip_prefix": true, "max_pool_size": 0, "vswitches": {zone: [VSW_A]}}),
        ),
    );
    // A alone: no other vswitch has room, so single addresses.
    let r = d.ok("alloc one/pod-0");
    let eni = field(&r, "eni");
    assert_eq!(managed(&sim)[0].3, 0, "no /28 could be had");
    assert_eq!(fallbacks(&d), vec![(eni.clone(), "v4".to_string())]);
    // Room again: the next ask on A tries a /28 within the retry period
    // (10 s), and the same ENI's new capacity comes as /28s. Each pod
    // goes as it came, so the ENI never fills with single addresses.
    sim.vswitch(&format!(r#"{{"id":"{VSW_A}","free_prefixes":null}}"#));
    let mut n = 1;
    let back = common::eventually(std::time::Duration::from_secs(30), || {
        let r = d.ok(&format!("alloc one/pod-{n}"));
        d.ok(&format!("release one/pod-{n}"));
        n += 1;
        assert_eq!(field(&r, "eni"), eni, "a second ENI was made");
        managed(&sim)
            .iter()
            .any(|(id, _, _, p)| *id == eni && *p > 0)
    });
    assert!(back, "{eni} never went back to /28s");
    assert_eq!(managed(&sim).len(), 1);
    assert_eq!(fallbacks(&d), vec![(eni, "-".to_string())]);
}
