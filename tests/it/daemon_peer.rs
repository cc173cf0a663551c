//! Liveness of a node against other local users: the name a running eniipd
//! announces itself under can be read in `/proc/net/unix` and bound by
//! anyone, so a user who squats it must neither keep eniipd from starting
//! nor make a gone node look alive.

use crate::cnienv;
use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{config, eventually, field, tempdir, Daemon, Sim};
use serde_json::json;

/// An unprivileged process (uid 65534) listening on an abstract name;
/// killed on drop.
struct Squatter(Child);

impl Squatter {
    fn bind(name: &str) -> Squatter {
        let child = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .args([
                "socat",
                &format!("ABSTRACT-LISTEN:{name},fork"),
                "/dev/null",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("setpriv socat");
        let s = Squatter(child);
        let shown = format!("@{name}");
        assert!(
            eventually(Duration::from_secs(10), || {
                std::fs::read_to_string("/proc/net/unix")
                    .is_ok_and(|t| t.lines().any(|l| l.ends_with(&shown)))
            }),
            "the squatter never bound @{name}"
        );
        s
    }
}

impl Drop for Squatter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_local_user_holding_the_node_name_neither_locks_eniipd_out_nor_fakes_a_live_peer() {
    if !cnienv::can_run("daemon_peer", &["setpriv", "socat"]) {
        return;
    }
    let sim = Sim::quick(&[]);
    let dir = tempdir("squat-a");
    let cfg = config(&sim, &dir, json!({}));
    let mut first = Daemon::start(&dir, &cfg);
    let held = first.ok("alloc ns/first");
    let eni = field(&held, "eni");
    let (status, _) = first.terminate(Duration::from_secs(15));
    assert!(status.success(), "{}", first.log_text());
    let node = std::fs::read_to_string(dir.join("state/node-id")).unwrap();
    let squat = Squatter::bind(&format!("eniipd-node-{}", node.trim()));

    // The daemon starts again under its own node id and keeps its owner.
    let mut again = Daemon::start(&dir, &cfg);
    assert_eq!(again.ok("show ns/first"), held);
    assert!(
        again.log_text().contains("uid 65534"),
        "the squatter is not named:\n{}",
        again.log_text()
    );
    let (status, _) = again.terminate(Duration::from_secs(15));
    assert!(status.success(), "{}", again.log_text());

    // With that node gone, a daemon with another state directory adopts its
    // ENIs: the squatter's listener is not an eniipd.
    let other = tempdir("squat-b");
    let second = Daemon::start(&other, &config(&sim, &other, json!({})));
    assert!(
        second.ask("enis").iter().any(|l| l.starts_with(&eni)),
        "{:?}\n{}",
        second.ask("enis"),
        second.log_text()
    );
    drop(squat);
}
