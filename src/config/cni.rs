//! The keys that serve eniip-cni from eniipd's side: the sandbox reaper's
//! `sandbox_reap_interval` (see `daemon/reaper.rs`) and the conflist eniipd installs once the pool is ready
//! (`cni_conflist`, `cni_conflist_source`).

use super::validate::{invalid_str, secs};
use super::*;

/// Validated CNI-side settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CniSettings {
    /// How often the reaper looks; zero: never.
    pub(crate) sandbox_reap_interval: Duration,
    /// Where to install the conflist once the pool is ready.
    pub(crate) conflist: Option<PathBuf>,
    /// The conflist to install there (default: the shipped one with
    /// eniipd's socket).
    pub(crate) conflist_source: Option<PathBuf>,
}

impl CniSettings {
    /// `key=value` pairs for the effective view.
    pub(super) fn effective(&self) -> Vec<(&'static str, String)> {
        let path = |p: &Option<PathBuf>| {
            p.as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "-".into())
        };
        vec![
            (
                "sandbox_reap_interval",
                self.sandbox_reap_interval.as_secs().to_string(),
            ),
            ("cni_conflist", path(&self.conflist)),
            ("cni_conflist_source", path(&self.conflist_source)),
        ]
    }
}

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
        assert_eq!(c.conflist, None);
        let off = parse(r#"{"sandbox_reap_interval": 0}"#).unwrap().cni;
        assert!(off.sandbox_reap_interval.is_zero());
        let e = parse(r#"{"sandbox_reap_interval": -1}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("sandbox_reap_interval"), "{e}");
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
