//! `eniip-cni --install DIR`: puts the running plugin binary into a CNI
//! bin dir, as the DaemonSet's init container does on every node (the
//! image has no shell to copy it with).
//!
//! Atomic: the bytes go to a temporary file in DIR, written whole and
//! fsynced, which is then renamed over `DIR/eniip-cni` and the directory
//! fsynced. A runtime that starts the plugin meanwhile runs the old binary
//! or the new one, never a half-written one (a running old binary keeps
//! its file: the rename replaces the name). A binary already identical is
//! left untouched; a failure removes the temporary file.

use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// The plugin's file name in a CNI bin dir (the conflists' `type`).
pub const PLUGIN: &str = "eniip-cni";

/// What `--install` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Installed {
    /// The binary was written.
    Written,
    /// An identical binary was there already.
    Unchanged,
}

/// An install that failed: what it was doing, and why.
#[derive(Debug)]
pub struct InstallError {
    what: String,
    source: io::Error,
}

impl std::fmt::Display for InstallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.source)
    }
}

impl std::error::Error for InstallError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

fn failed(what: String) -> impl FnOnce(io::Error) -> InstallError {
    move |source| InstallError { what, source }
}

/// Installs the running binary as `dir/eniip-cni`.
pub fn install_self(dir: &Path) -> Result<(PathBuf, Installed), InstallError> {
    let exe = std::env::current_exe()
        .map_err(failed("cannot find the running eniip-cni binary".into()))?;
    let bytes = std::fs::read(&exe).map_err(failed(format!("cannot read {}", exe.display())))?;
    install(&bytes, dir)
}

/// Installs `bytes` as `dir/eniip-cni` (see the module doc).
pub fn install(bytes: &[u8], dir: &Path) -> Result<(PathBuf, Installed), InstallError> {
    let meta = std::fs::metadata(dir).map_err(failed(format!(
        "the CNI bin dir {} cannot be used",
        dir.display()
    )))?;
    if !meta.is_dir() {
        return Err(InstallError {
            what: format!("the CNI bin dir {} cannot be used", dir.display()),
            source: io::Error::new(io::ErrorKind::NotADirectory, "not a directory"),
        });
    }
    let target = dir.join(PLUGIN);
    if std::fs::read(&target).is_ok_and(|have| have == bytes) {
        return Ok((target, Installed::Unchanged));
    }
    let tmp = dir.join(format!(".{PLUGIN}.tmp.{}", std::process::id()));
    let written = write_synced(&tmp, bytes).and_then(|()| {
        std::fs::rename(&tmp, &target).map_err(failed(format!(
            "cannot rename {} to {}",
            tmp.display(),
            target.display()
        )))
    });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(failed(format!(
            "cannot sync the directory {}",
            dir.display()
        )))?;
    Ok((target, Installed::Written))
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), InstallError> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o755)
        .open(path)
        .map_err(failed(format!("cannot create {}", path.display())))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(failed(format!("cannot write {}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn tempdir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "eniip-install-{}-{}",
            std::process::id(),
            eniip_util::rand::uuid()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn writes_executable_then_leaves_an_identical_binary_alone() {
        let d = tempdir();
        let (path, how) = install(b"first", &d).unwrap();
        assert_eq!((path.clone(), how), (d.join(PLUGIN), Installed::Written));
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
        assert_eq!(install(b"first", &d).unwrap().1, Installed::Unchanged);
        // An upgrade replaces it; no temporary file is left behind.
        assert_eq!(install(b"second", &d).unwrap().1, Installed::Written);
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        let names: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [PLUGIN]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_running_binary_keeps_its_file() {
        let d = tempdir();
        install(b"old", &d).unwrap();
        // An open (running) old binary still reads its own bytes.
        let mut old = File::open(d.join(PLUGIN)).unwrap();
        install(b"new", &d).unwrap();
        let mut have = Vec::new();
        std::io::Read::read_to_end(&mut old, &mut have).unwrap();
        assert_eq!(have, b"old");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_missing_dir_is_named() {
        let d = tempdir().join("nope");
        let e = install(b"x", &d).unwrap_err().to_string();
        assert!(e.contains(&d.display().to_string()), "{e}");
        let f = tempdir();
        std::fs::write(f.join("file"), b"").unwrap();
        let e = install(b"x", &f.join("file")).unwrap_err().to_string();
        assert!(e.contains("not a directory"), "{e}");
        std::fs::remove_dir_all(&f).unwrap();
    }
}
