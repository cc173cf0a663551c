//! The `keep` / `gc` verbs (eniip-cni's GC, and scripts) through the real
//! daemon against the real emulator: a keep-list spread over many lines of
//! one connection, owner-prefix scoping, sandbox ids as keys, the list
//! emptied after each `gc`, and the durability of what `gc` released.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::{config, field, tempdir, Daemon, Sim};
use eniip_protocol::protocol::client::Client;
use serde_json::json;

/// One connection, many requests: every reply's lines, in order.
fn session(socket: &Path, lines: &[&str]) -> Vec<Vec<String>> {
    let wait = Duration::from_secs(60);
    let mut c = Client::connect(socket, wait).unwrap();
    lines
        .iter()
        .map(|line| match c.ask_within(line, wait) {
            Ok(r) => r.into_lines(),
            Err(e) => panic!("{line}: {e}"),
        })
        .collect()
}

fn inuse_owners(d: &Daemon) -> Vec<String> {
    let mut v: Vec<String> = crate::common::list_rows(&d.ask("list"))
        .into_iter()
        .filter(|l| l.state == "inuse")
        .map(|l| l.owner.expect("an address in use has an owner"))
        .collect();
    v.sort();
    v
}

#[test]
fn gc_releases_exactly_what_is_not_kept() {
    let sim = Sim::quick(&[]);
    let dir = tempdir("keepgc");
    let mut d = Daemon::start(&dir, &config(&sim, &dir, json!({})));
    let a = d.ok("alloc net1/ns/a sandbox=ctr-a");
    d.ok("alloc net1/ns/b sandbox=ctr-b");
    let c = d.ok("alloc net1/ns/c sandbox=ctr-c");
    d.ok("alloc net1/ns/d");
    d.ok("alloc net2/ns/a sandbox=ctr-x");

    // Without a prefix gc would release everything: refused, nothing moves.
    assert!(d.ask("gc").last().unwrap().starts_with("ERR bad-request"));
    assert_eq!(inuse_owners(&d).len(), 5);

    // Kept: a by owner, b by sandbox (on another line). c and d go; net2
    // is outside the prefix.
    let r = session(
        &d.socket,
        &[
            "keep net1/ns/a",
            "keep ctr-b other-id",
            "gc owner-prefix=net1/",
        ],
    );
    assert_eq!(r[0], vec!["OK keep=1"]);
    assert_eq!(r[1], vec!["OK keep=3"]);
    let gc = &r[2];
    assert_eq!(gc.last().unwrap(), "OK released=2", "{gc:?}");
    let mut lines = gc[..2].to_vec();
    // By owner (the addresses' order is the pool's).
    lines.sort_by_key(|l| l.split(' ').nth(1).unwrap_or("").to_string());
    assert_eq!(lines[0], format!("{} net1/ns/c ctr-c", field(&c, "ip")));
    assert!(lines[1].ends_with(" net1/ns/d -"), "{lines:?}");
    assert_eq!(
        inuse_owners(&d),
        vec!["net1/ns/a", "net1/ns/b", "net2/ns/a"]
    );

    // A keep-list on another connection protects nothing here, and each
    // gc empties its own list: the second gc of one session keeps nothing.
    let r = session(
        &d.socket,
        &[
            "keep ctr-b",
            "gc owner-prefix=net1/",
            "gc owner-prefix=net1/",
        ],
    );
    assert_eq!(r[1].last().unwrap(), "OK released=1", "{r:?}");
    assert!(r[1][0].contains(&field(&a, "ip")), "{r:?}");
    assert_eq!(r[2].last().unwrap(), "OK released=1", "{r:?}");
    assert!(r[2][0].ends_with(" net1/ns/b ctr-b"), "{r:?}");
    assert_eq!(inuse_owners(&d), vec!["net2/ns/a"]);

    // Durable: a kill -9 and a restart keep exactly that.
    d.kill9();
    let d = Daemon::start(&dir, &config(&sim, &dir, json!({})));
    assert_eq!(inuse_owners(&d), vec!["net2/ns/a"]);
}

#[test]
fn a_keep_list_has_a_bound_per_line_and_ids_are_validated() {
    let sim = Sim::quick(&[]);
    let dir = tempdir("keepbad");
    let d = Daemon::start(&dir, &config(&sim, &dir, json!({})));
    assert!(d.ask("keep").last().unwrap().starts_with("ERR bad-request"));
    assert!(d
        .ask("keep a b$c")
        .last()
        .unwrap()
        .starts_with("ERR bad-request"));
    // A full 4096-byte line of ids is accepted.
    let ids: Vec<String> = (0..400).map(|i| format!("id-{i:05}")).collect();
    let line = format!("keep {}", ids.join(" "));
    assert!(line.len() <= 4096);
    assert_eq!(d.ask(&line), vec!["OK keep=400"]);
}

/// The bound eniipd-protocol(7) gives a keep-list is the daemon's: the
/// page states a number (issue 31: it said "no limit"), a list of that
/// many ids is taken, one more is refused naming the bound, and the list
/// stays as it was.
#[test]
fn a_keep_list_holds_as_many_ids_as_its_page_says_and_no_more() {
    let page = crate::man::words("eniipd-protocol.7").replace('\n', " ");
    let at = page
        .find("a connection's list at most ")
        .unwrap_or_else(|| panic!("eniipd-protocol(7) states no bound for a keep-list"));
    let bound: usize = page[at..]
        .split_whitespace()
        .find_map(|w| w.parse().ok())
        .expect("a number");
    let sim = Sim::quick(&[]);
    let dir = tempdir("keepbound");
    let d = Daemon::start(&dir, &config(&sim, &dir, json!({})));
    d.ok("alloc k/kept");
    d.ok("alloc k/other");
    let per_line = 400;
    let mut lines: Vec<String> = (0..bound.div_ceil(per_line))
        .map(|l| {
            let ids: Vec<String> = (l * per_line..((l + 1) * per_line).min(bound - 1))
                .map(|i| format!("i{i:07}"))
                .collect();
            format!("keep {}", ids.join(" "))
        })
        .filter(|l| l != "keep ")
        .collect();
    lines.push("keep k/kept".into());
    lines.push("keep one-too-many".into());
    lines.push("gc owner-prefix=k/".into());
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let r = session(&d.socket, &refs);
    let n = r.len();
    assert_eq!(r[n - 3], vec![format!("OK keep={bound}")]);
    let refused = r[n - 2].last().unwrap();
    assert!(
        refused.starts_with("ERR bad-request") && refused.contains(&bound.to_string()),
        "{refused}"
    );
    assert_eq!(r[n - 1].last().unwrap(), "OK released=1", "{:?}", r[n - 1]);
    assert_eq!(inuse_owners(&d), vec!["k/kept"]);
}
