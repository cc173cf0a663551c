//! The state directory's filesystem stops answering (`fsfreeze -f` on a
//! loop-mounted ext4): a commit that cannot finish answers `ERR timeout`
//! within `alloc_timeout` while the daemon keeps answering, and SIGTERM
//! ends serving within the stop deadline with the documented exit code.
//!
//! Needs root, `mkfs.ext4`, `mount` and `fsfreeze`; without them it says so
//! loudly and, under CI (`ENIIPD_CI=1`), fails.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{config, eventually, tempdir, Daemon, Sim};
use serde_json::json;

/// A loop-mounted ext4 that is thawed and unmounted whatever happens.
struct Frozen {
    image: PathBuf,
    mnt: PathBuf,
    frozen: bool,
}

impl Frozen {
    fn mount(dir: &Path) -> Result<Frozen, String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("not root".into());
        }
        let image = dir.join("fs.img");
        let mnt = dir.join("mnt");
        std::fs::create_dir_all(&mnt).map_err(|e| e.to_string())?;
        let run = |cmd: &mut Command| -> Result<(), String> {
            let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "{cmd:?}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        };
        run(Command::new("truncate").args(["-s", "64M"]).arg(&image))?;
        run(Command::new("mkfs.ext4").arg("-q").arg(&image))?;
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&image)
            .arg(&mnt))?;
        Ok(Frozen {
            image,
            mnt,
            frozen: false,
        })
    }

    fn freeze(&mut self) {
        let ok = Command::new("fsfreeze")
            .arg("-f")
            .arg(&self.mnt)
            .status()
            .unwrap()
            .success();
        assert!(ok, "fsfreeze -f");
        self.frozen = true;
    }

    fn thaw(&mut self) {
        if self.frozen {
            let _ = Command::new("fsfreeze").arg("-u").arg(&self.mnt).status();
            self.frozen = false;
        }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        self.thaw();
        // The daemon may still be on its way out: retry the unmount.
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let ok = Command::new("umount")
                .arg(&self.mnt)
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if ok {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = std::fs::remove_file(&self.image);
    }
}

#[test]
fn a_frozen_state_disk_times_out_commits_and_does_not_hold_up_the_stop() {
    let dir = tempdir("frozen");
    let mut fs = match Frozen::mount(&dir) {
        Ok(f) => f,
        Err(why) => {
            crate::common::skip(&format!(
                "the frozen-disk test needs root and mkfs.ext4/mount/fsfreeze: {why}"
            ));
            return;
        }
    };
    let sim = Sim::quick(&[]);
    let state = fs.mnt.join("state");
    let cfg = config(
        &sim,
        &dir,
        json!({"state_dir": state.display().to_string(), "alloc_timeout": 3, "min_pool_size": 4}),
    );
    let mut d = Daemon::start(&dir, &cfg);
    let first = d.ok("alloc acked/one");
    assert!(eventually(Duration::from_secs(20), || d
        .ok("status")
        .contains(" idle=4 ")));

    fs.freeze();
    let t = Instant::now();
    let r = d.ask("alloc frozen/two");
    let took = t.elapsed();
    assert!(
        r.last().unwrap().starts_with("ERR timeout"),
        "{r:?}\n{}",
        d.log_text()
    );
    assert!(took < Duration::from_secs(6), "ERR timeout after {took:?}");
    // Still answering.
    assert_eq!(d.ask("ping"), vec!["OK pong"]);
    assert!(d.ok("status").contains("inuse="));

    // SIGTERM: serving ends and the failure is named within the deadline.
    let pid = nix::unistd::Pid::from_raw(d.pid());
    let signalled = Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    assert!(
        eventually(Duration::from_secs(10), || d
            .log_text()
            .contains("did not answer within the stop deadline")),
        "{}",
        d.log_text()
    );
    assert!(signalled.elapsed() < Duration::from_secs(10));
    // A thread inside a write to a frozen filesystem cannot be killed by
    // anyone: the kernel reaps the process once the disk answers again.
    fs.thaw();
    let status = d.wait_exit(Duration::from_secs(10));
    assert_eq!(status.code(), Some(1), "{}", d.log_text());

    // Nothing acknowledged was lost.
    let d = Daemon::start(&dir, &cfg);
    assert_eq!(d.ok("show acked/one"), first);
}
