//! Credentials for signing, in SPEC section 2's order: a static pair from
//! the config; the `ALIBABA_CLOUD_*` environment variables; the instance's
//! RAM role from metadata, refreshed before it expires. Secrets live in
//! [`Secret`], so no Debug, log line or error can print them.

use std::sync::Arc;

use log::{info, warn};
use parking_lot::Mutex;

use super::error::{CloudError, CloudErrorKind};
use super::metadata::MetadataClient;
use eniip_util::time::{parse_rfc3339, unix_secs};
use eniip_util::Secret;

/// One set of credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Credentials {
    /// AccessKeyId (`STS.…` for role credentials).
    pub access_key_id: String,
    /// AccessKeySecret.
    pub access_key_secret: Secret,
    /// SecurityToken, for STS credentials.
    pub security_token: Option<Secret>,
    /// Expiry (Unix seconds), for STS credentials.
    pub expires_at: Option<u64>,
}

/// Where credentials come from.
#[derive(Debug, Clone)]
pub enum CredentialSource {
    /// A fixed pair (config or environment), with an optional token.
    Static {
        /// AccessKeyId.
        id: String,
        /// AccessKeySecret.
        secret: Secret,
        /// SecurityToken.
        token: Option<Secret>,
    },
    /// The instance's RAM role (named, or the one metadata lists).
    RamRole(Option<String>),
}

impl CredentialSource {
    /// The environment pair if set (read once, here), else the RAM role.
    pub fn from_env_or_role(role: Option<String>) -> CredentialSource {
        let id = std::env::var("ALIBABA_CLOUD_ACCESS_KEY_ID")
            .ok()
            .filter(|s| !s.is_empty());
        let secret = std::env::var("ALIBABA_CLOUD_ACCESS_KEY_SECRET")
            .ok()
            .filter(|s| !s.is_empty());
        let token = std::env::var("ALIBABA_CLOUD_SECURITY_TOKEN")
            .ok()
            .filter(|s| !s.is_empty());
        CredentialSource::choose(None, id, secret, token, role)
    }

    /// The first source available, in SPEC order (pure, for tests).
    pub(crate) fn choose(
        config: Option<(String, Secret)>,
        env_id: Option<String>,
        env_secret: Option<String>,
        env_token: Option<String>,
        role: Option<String>,
    ) -> CredentialSource {
        if let Some((id, secret)) = config {
            return CredentialSource::Static {
                id,
                secret,
                token: None,
            };
        }
        if let (Some(id), Some(secret)) = (env_id, env_secret) {
            return CredentialSource::Static {
                id,
                secret: Secret::new(secret),
                token: env_token.map(Secret::new),
            };
        }
        CredentialSource::RamRole(role)
    }

    /// A short description for the start-up log (no secret).
    pub fn describe(&self) -> String {
        match self {
            CredentialSource::Static { id, token, .. } => format!(
                "access key {}{}",
                eniip_util::mask(id),
                if token.is_some() {
                    " with a security token"
                } else {
                    ""
                }
            ),
            CredentialSource::RamRole(Some(r)) => format!("RAM role {r}"),
            CredentialSource::RamRole(None) => "the instance's RAM role".into(),
        }
    }
}

/// Hands out current credentials, refreshing role credentials before they
/// expire. Thread-safe; the metadata fetch happens outside the lock.
#[derive(Debug)]
pub(crate) struct CredentialProvider {
    source: CredentialSource,
    metadata: Option<Arc<MetadataClient>>,
    cached: Mutex<Option<(Credentials, u64)>>,
    refresh: Mutex<()>,
}

/// True when `c` should be refreshed at `now`: less than max(5 min, a fifth
/// of its life) remains. `issued` is when it was fetched.
pub(crate) fn needs_refresh(c: &Credentials, issued: u64, now: u64) -> bool {
    match c.expires_at {
        None => false,
        Some(exp) => {
            let life = exp.saturating_sub(issued);
            let margin = (life / 5).max(300);
            now + margin >= exp
        }
    }
}

impl CredentialProvider {
    /// A provider for `source`; `metadata` is needed for a RAM role.
    pub(crate) fn new(
        source: CredentialSource,
        metadata: Option<Arc<MetadataClient>>,
    ) -> CredentialProvider {
        CredentialProvider {
            source,
            metadata,
            cached: Mutex::new(None),
            refresh: Mutex::new(()),
        }
    }

    /// Current credentials.
    pub(crate) fn get(&self) -> Result<Credentials, CloudError> {
        let role = match &self.source {
            CredentialSource::Static { id, secret, token } => {
                return Ok(Credentials {
                    access_key_id: id.clone(),
                    access_key_secret: secret.clone(),
                    security_token: token.clone(),
                    expires_at: None,
                })
            }
            CredentialSource::RamRole(r) => r.clone(),
        };
        let now = unix_secs();
        let current = self.cached.lock().clone();
        if let Some((c, issued)) = &current {
            if !needs_refresh(c, *issued, now) {
                return Ok(c.clone());
            }
        }
        // One refresher at a time; others use what is cached while valid.
        let _guard = match self.refresh.try_lock() {
            Some(g) => g,
            None => {
                if let Some((c, _)) = current
                    .clone()
                    .filter(|(c, _)| c.expires_at.is_some_and(|e| e > now))
                {
                    return Ok(c);
                }
                self.refresh.lock()
            }
        };
        if let Some((c, issued)) = self.cached.lock().clone() {
            if !needs_refresh(&c, issued, unix_secs()) {
                return Ok(c);
            }
        }
        let md = self.metadata.as_ref().ok_or_else(|| {
            CloudError::new(
                CloudErrorKind::Auth,
                "credentials",
                "no credentials configured",
            )
        })?;
        match md.ram_credentials(role.as_deref()) {
            Ok(rc) => {
                let expires_at = parse_rfc3339(&rc.expiration);
                if expires_at.is_none() {
                    warn!(
                        "RAM role credentials have an unreadable Expiration {:?}; refreshing often",
                        rc.expiration
                    );
                }
                let c = Credentials {
                    access_key_id: rc.access_key_id,
                    access_key_secret: Secret::new(rc.access_key_secret),
                    security_token: Some(Secret::new(rc.security_token)),
                    expires_at: Some(expires_at.unwrap_or(unix_secs() + 600)),
                };
                info!(
                    "RAM role credentials refreshed (valid until {})",
                    eniip_util::time::format_utc(c.expires_at.unwrap_or(0))
                );
                *self.cached.lock() = Some((c.clone(), unix_secs()));
                Ok(c)
            }
            Err(e) => match current
                .filter(|(c, _)| c.expires_at.is_some_and(|exp| exp > unix_secs() + 30))
            {
                Some((c, _)) => {
                    warn!("refreshing RAM role credentials failed ({e}); using the current ones until they expire");
                    Ok(c)
                }
                None => Err(e.with_kind(CloudErrorKind::Auth)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(exp: Option<u64>) -> Credentials {
        Credentials {
            access_key_id: "STS.x".into(),
            access_key_secret: Secret::new("hunter2"),
            security_token: Some(Secret::new("tok3n")),
            expires_at: exp,
        }
    }

    #[test]
    fn refresh_margin() {
        // 1 h credentials: refreshed in their last 12 minutes.
        let c = creds(Some(10_000 + 3600));
        assert!(!needs_refresh(&c, 10_000, 10_000 + 2000));
        assert!(needs_refresh(&c, 10_000, 10_000 + 3600 - 700));
        // Short-lived: at least 5 minutes ahead.
        let c = creds(Some(10_000 + 600));
        assert!(needs_refresh(&c, 10_000, 10_000 + 301));
        assert!(!needs_refresh(&creds(None), 0, u64::MAX / 2));
    }

    #[test]
    fn source_order_and_no_secret_in_debug() {
        let s = CredentialSource::choose(
            Some(("LTAIcfg".into(), Secret::new("s1"))),
            Some("LTAIenv".into()),
            Some("s2".into()),
            None,
            None,
        );
        assert!(matches!(&s, CredentialSource::Static { id, .. } if id == "LTAIcfg"));
        let s = CredentialSource::choose(
            None,
            Some("LTAIenv".into()),
            Some("s2".into()),
            Some("t".into()),
            None,
        );
        assert!(
            matches!(&s, CredentialSource::Static { id, token: Some(_), .. } if id == "LTAIenv")
        );
        let s =
            CredentialSource::choose(None, Some("LTAIenv".into()), None, None, Some("r".into()));
        assert!(matches!(&s, CredentialSource::RamRole(Some(r)) if r == "r"));
        let d = format!(
            "{:?} {:?}",
            creds(Some(1)),
            CredentialSource::choose(
                None,
                Some("id".into()),
                Some("hunter2".into()),
                Some("tok3n".into()),
                None
            )
        );
        assert!(!d.contains("hunter2") && !d.contains("tok3n"), "{d}");
        assert!(!s.describe().contains("hunter2"));
    }

    #[test]
    fn static_credentials_need_no_metadata() {
        let p = CredentialProvider::new(
            CredentialSource::Static {
                id: "LTAI".into(),
                secret: Secret::new("s"),
                token: None,
            },
            None,
        );
        assert_eq!(p.get().unwrap().access_key_id, "LTAI");
        let p = CredentialProvider::new(CredentialSource::RamRole(None), None);
        assert_eq!(p.get().unwrap_err().kind, CloudErrorKind::Auth);
    }
}
