//! The keys that serve eniip-cni from eniipd's side: the sandbox reaper's
//! `sandbox_reap_interval` and `sandbox_reap_grace` (see `daemon/reaper`)
//! and the conflist eniipd installs once the pool is ready
//! (`cni_conflist`, `cni_conflist_source`).

use super::effective::or_dash;
use super::validate::{invalid_str, secs};
use super::*;

/// Validated CNI-side settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CniSettings {
    /// How often the reaper looks; zero: never.
    pub(crate) sandbox_reap_interval: Duration,
    /// How long a sandbox must look gone at every look before it is
    /// reaped.
    pub(crate) sandbox_reap_grace: Duration,
    /// Where to install the conflist once the pool is ready.
    pub(crate) conflist: Option<PathBuf>,
    /// The conflist to install there (default: the shipped one with
    /// eniipd's socket).
    pub(crate) conflist_source: Option<PathBuf>,
}

impl CniSettings {
    /// `key=value` pairs for the effective view.
    pub(super) fn effective(&self) -> Vec<(&'static str, String)> {
        let path = |p: &Option<PathBuf>| or_dash(p.as_ref().map(|p| p.display()));
        vec![
            (
                "sandbox_reap_interval",
                self.sandbox_reap_interval.as_secs().to_string(),
            ),
            (
                "sandbox_reap_grace",
                self.sandbox_reap_grace.as_secs().to_string(),
            ),
            ("cni_conflist", path(&self.conflist)),
            ("cni_conflist_source", path(&self.conflist_source)),
        ]
    }
}

/// `sandbox_reap_grace`'s default: twice kubelet's longest restart
/// back-off (CrashLoopBackOff doubles from 10 s up to 300 s), so a pod
/// whose runtime keeps no infra process in its namespace (CRI-O's
/// `drop_infra_ctr`) keeps its address while its container waits to be
/// restarted, with room for kubelet's resync and the container's start.
const DEFAULT_REAP_GRACE: u64 = 600;

fn absolute(key: &str, v: &Option<String>) -> Result<Option<PathBuf>, ConfigError> {
    match v {
        None => Ok(None),
        Some(p) if p.starts_with('/') && p.len() > 1 && !p.ends_with('/') => {
            Ok(Some(PathBuf::from(p)))
        }
        Some(p) => Err(invalid_str(key, p, "an absolute path of a file")),
    }
}

impl RawConfig {
    pub(super) fn cni_settings(&self) -> Result<CniSettings, ConfigError> {
        let conflist = absolute("cni_conflist", &self.cni_conflist)?;
        let conflist_source = absolute("cni_conflist_source", &self.cni_conflist_source)?;
        if let (None, Some(src)) = (&conflist, &conflist_source) {
            return Err(invalid_str(
                "cni_conflist_source",
                &src.display().to_string(),
                "a source only together with `cni_conflist`, the path to install it at",
            ));
        }
        if let Some(p) = &conflist {
            let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
            if !matches!(ext, "conflist" | "conf" | "json") {
                return Err(invalid_str(
                    "cni_conflist",
                    &p.display().to_string(),
                    "a path ending in .conflist, .conf or .json (the only files runtimes load)",
                ));
            }
        }
        Ok(CniSettings {
            sandbox_reap_interval: secs(
                "sandbox_reap_interval",
                &self.sandbox_reap_interval,
                60,
                0,
                86_400,
            )?,
            sandbox_reap_grace: secs(
                "sandbox_reap_grace",
                &self.sandbox_reap_grace,
                DEFAULT_REAP_GRACE,
                0,
                86_400,
            )?,
            conflist,
            conflist_source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Config, ConfigError> {
        RawConfig::parse(json)?.validate()
    }

    #[test]
    fn defaults_and_bounds() {
        let c = parse("{}").unwrap().cni;
        assert_eq!(c.sandbox_reap_interval, Duration::from_secs(60));
        assert_eq!(c.sandbox_reap_grace, Duration::from_secs(600));
        assert_eq!(c.conflist, None);
        let off = parse(r#"{"sandbox_reap_interval": 0}"#).unwrap().cni;
        assert!(off.sandbox_reap_interval.is_zero());
        let e = parse(r#"{"sandbox_reap_interval": -1}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("sandbox_reap_interval"), "{e}");
        let none = parse(r#"{"sandbox_reap_grace": 0}"#).unwrap().cni;
        assert!(none.sandbox_reap_grace.is_zero());
        for bad in ["-1", "86401", "\"10m\"", "1.5"] {
            let e = parse(&format!(r#"{{"sandbox_reap_grace": {bad}}}"#))
                .unwrap_err()
                .to_string();
            assert!(e.contains("sandbox_reap_grace"), "{bad}: {e}");
        }
    }

    #[test]
    fn conflist_paths_are_checked() {
        let c = parse(r#"{"cni_conflist": "/etc/cni/net.d/10-eniip.conflist"}"#)
            .unwrap()
            .cni;
        assert_eq!(
            c.conflist.as_deref(),
            Some(Path::new("/etc/cni/net.d/10-eniip.conflist"))
        );
        for bad in [
            r#"{"cni_conflist": "net.d/x.conflist"}"#,
            r#"{"cni_conflist": "/etc/cni/net.d/eniip"}"#,
            r#"{"cni_conflist_source": "/etc/eniipd/x.conflist"}"#,
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains("cni_conflist"), "{bad}: {e}");
        }
    }
}
