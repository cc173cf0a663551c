//! The instance metadata service client (`http://100.100.100.200`).
//!
//! Token mode is tried first (`PUT /latest/api/token`, the token cached
//! for half its 6 h life and refetched once on 401); if the PUT is not
//! supported the client falls back to plain GETs, and a plain GET refused
//! with 403 (a hardened instance) switches back to token mode. Every
//! request has a 2 s timeout; 429 and 5xx are retried (500 ms x1.2, 4
//! attempts); 404 is [`CloudErrorKind::NotFound`] (an empty list for
//! `ipv6s`). Parsing follows the service's formats: a leaf is its first
//! line without surrounding whitespace or `/`; a listing is one item per
//! line with trailing `/` removed; `private-ipv4s` is a JSON array;
//! `ipv6s` is `[a,b]`.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Deserialize;

use super::error::{CloudError, CloudErrorKind, METADATA_ACTION as ACTION};
use super::{InstanceIdentity, MetadataApi, MetadataEni};

const TOKEN_TTL_SECS: u64 = 21_600;

/// Credentials of the instance's RAM role.
#[derive(Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct RamCredentials {
    /// `STS.…`
    pub access_key_id: String,
    /// The secret.
    pub access_key_secret: String,
    /// The STS token.
    pub security_token: String,
    /// `yyyy-MM-ddTHH:mm:ssZ`
    pub expiration: String,
    /// Must be `Success`.
    #[serde(default)]
    pub code: String,
}

impl std::fmt::Debug for RamCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RamCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("expiration", &self.expiration)
            .finish_non_exhaustive()
    }
}

/// The metadata client.
#[derive(Debug)]
pub struct MetadataClient {
    base: String,
    agent: ureq::Agent,
    token: Mutex<Option<(String, Instant)>>,
    use_token: AtomicBool,
    timeout: Duration,
}

/// First line, without surrounding whitespace or `/`.
pub(crate) fn leaf(body: &str) -> String {
    body.lines()
        .next()
        .unwrap_or("")
        .trim()
        .trim_matches('/')
        .to_string()
}

/// One item per line, trailing `/` removed, empty lines dropped.
pub(crate) fn listing(body: &str) -> Vec<String> {
    body.lines()
        .map(|l| l.trim().trim_end_matches('/').to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// `[a,b]` (brackets optional) as IPv6 addresses.
pub(crate) fn bracket_list(body: &str) -> Result<Vec<Ipv6Addr>, String> {
    let inner = body.trim().trim_start_matches('[').trim_end_matches(']');
    inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse()
                .map_err(|_| format!("{s:?} is not an IPv6 address"))
        })
        .collect()
}

/// `["a","b"]` as IPv4 addresses.
pub(crate) fn json_ipv4s(body: &str) -> Result<Vec<Ipv4Addr>, String> {
    let v: Vec<String> =
        serde_json::from_str(body.trim()).map_err(|e| format!("not a JSON array: {e}"))?;
    v.iter()
        .map(|s| {
            s.trim()
                .parse()
                .map_err(|_| format!("{s:?} is not an IPv4 address"))
        })
        .collect()
}

fn decode_err(path: &str, what: String) -> CloudError {
    CloudError::new(CloudErrorKind::Decode, ACTION, format!("{path}: {what}"))
}

impl MetadataClient {
    /// A client for `endpoint` (`http://100.100.100.200`).
    pub fn new(endpoint: &str) -> MetadataClient {
        MetadataClient::with_timeout(endpoint, Duration::from_secs(2))
    }

    /// With a per-request timeout.
    pub fn with_timeout(endpoint: &str, timeout: Duration) -> MetadataClient {
        let agent: ureq::Agent = super::http_config()
            .timeout_global(Some(timeout))
            .build()
            .into();
        MetadataClient {
            base: endpoint.trim_end_matches('/').to_string(),
            agent,
            token: Mutex::new(None),
            use_token: AtomicBool::new(true),
            timeout,
        }
    }

    fn fetch_token(&self) -> Result<Option<String>, CloudError> {
        if let Some((t, until)) = &*self.token.lock() {
            if Instant::now() < *until {
                return Ok(Some(t.clone()));
            }
        }
        let url = format!("{}/latest/api/token", self.base);
        let r = self
            .agent
            .put(&url)
            .header(
                "X-aliyun-ecs-metadata-token-ttl-seconds",
                TOKEN_TTL_SECS.to_string(),
            )
            .send_empty();
        match r {
            Ok(mut resp) if resp.status().as_u16() == 200 => {
                let t = resp
                    .body_mut()
                    .with_config()
                    .limit(4096)
                    .read_to_string()
                    .map_err(|e| {
                        CloudError::new(
                            CloudErrorKind::Transport,
                            ACTION,
                            "reading the metadata token",
                        )
                        .with_source(e)
                    })?
                    .trim()
                    .to_string();
                *self.token.lock() = Some((
                    t.clone(),
                    Instant::now() + Duration::from_secs(TOKEN_TTL_SECS / 2),
                ));
                Ok(Some(t))
            }
            // Token mode not offered: plain GETs.
            Ok(_) | Err(_) => Ok(None),
        }
    }

    /// An error message that names the metadata service, so it is not
    /// mistaken for an OpenAPI failure.
    fn failed(&self, path: &str, what: &str) -> String {
        format!("the metadata service {} {what} for {path}", self.base)
    }

    /// GETs a path under `/latest/meta-data/`; `Ok(None)` on 404.
    pub fn get(&self, path: &str) -> Result<Option<String>, CloudError> {
        let url = format!("{}/latest/meta-data/{}", self.base, path);
        let mut delay = Duration::from_millis(500);
        let mut refreshed = false;
        let mut switched = false;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let token = if self.use_token.load(Ordering::Relaxed) {
                match self.fetch_token()? {
                    Some(t) => Some(t),
                    None => {
                        self.use_token.store(false, Ordering::Relaxed);
                        None
                    }
                }
            } else {
                None
            };
            let mut req = self.agent.get(&url);
            if let Some(t) = &token {
                req = req.header("X-aliyun-ecs-metadata-token", t);
            }
            let e = match req.call() {
                Ok(mut resp) => {
                    let status = resp.status().as_u16();
                    match status {
                        200 => match resp
                            .body_mut()
                            .with_config()
                            .limit(1 << 20)
                            .read_to_string()
                        {
                            Ok(body) => {
                                crate::telemetry::record_metadata("ok");
                                return Ok(Some(body));
                            }
                            Err(e) => CloudError::new(
                                CloudErrorKind::Transport,
                                ACTION,
                                format!("reading {path}"),
                            )
                            .with_source(e),
                        },
                        404 => {
                            crate::telemetry::record_metadata("not-found");
                            return Ok(None);
                        }
                        401 if !refreshed => {
                            refreshed = true;
                            *self.token.lock() = None;
                            self.use_token.store(true, Ordering::Relaxed);
                            continue;
                        }
                        403 if token.is_none() && !switched => {
                            // Hardened instance: tokens required.
                            switched = true;
                            self.use_token.store(true, Ordering::Relaxed);
                            continue;
                        }
                        429 | 500..=599 => CloudError::new(
                            CloudErrorKind::Server,
                            ACTION,
                            self.failed(path, &format!("answered HTTP {status}")),
                        ),
                        _ => {
                            crate::telemetry::record_metadata("error");
                            let e = CloudError::new(
                                CloudErrorKind::Api,
                                ACTION,
                                self.failed(path, &format!("answered HTTP {status}")),
                            );
                            return Err(e);
                        }
                    }
                }
                Err(ureq::Error::Timeout(_)) => CloudError::new(
                    CloudErrorKind::Timeout,
                    ACTION,
                    self.failed(path, &format!("gave no answer within {:?}", self.timeout)),
                ),
                Err(e) => CloudError::new(
                    CloudErrorKind::Transport,
                    ACTION,
                    self.failed(path, &format!("could not be reached ({e})")),
                )
                .with_source(e),
            };
            crate::telemetry::record_metadata("error");
            if attempt >= 4 {
                return Err(e.with_attempts(attempt));
            }
            std::thread::sleep(delay);
            delay = delay.mul_f64(1.2);
        }
    }

    fn need(&self, path: &str) -> Result<String, CloudError> {
        self.get(path)?.ok_or_else(|| {
            CloudError::new(
                CloudErrorKind::NotFound,
                ACTION,
                format!("{path} is not in metadata"),
            )
        })
    }

    /// Credentials of the RAM role (`role`, or the one listed).
    pub(crate) fn ram_credentials(&self, role: Option<&str>) -> Result<RamCredentials, CloudError> {
        let role = match role {
            Some(r) => r.to_string(),
            None => listing(&self.need("ram/security-credentials/")?)
                .into_iter()
                .next()
                .ok_or_else(|| {
                    CloudError::new(
                        CloudErrorKind::Auth,
                        ACTION,
                        "no RAM role is attached to this instance",
                    )
                })?,
        };
        let body = self.need(&format!("ram/security-credentials/{role}"))?;
        let c: RamCredentials = serde_json::from_str(&body)
            .map_err(|e| decode_err("ram/security-credentials", e.to_string()))?;
        if c.code != "Success"
            || c.access_key_id.is_empty()
            || c.access_key_secret.is_empty()
            || c.security_token.is_empty()
        {
            return Err(CloudError::new(
                CloudErrorKind::Auth,
                ACTION,
                format!("RAM role {role}: the metadata service did not return usable credentials (Code {:?})", c.code),
            ));
        }
        Ok(c)
    }
}

impl MetadataApi for MetadataClient {
    fn identity(&self) -> Result<InstanceIdentity, CloudError> {
        Ok(InstanceIdentity {
            instance_id: leaf(&self.need("instance-id")?),
            region_id: leaf(&self.need("region-id")?),
            zone_id: leaf(&self.need("zone-id")?),
            instance_type: leaf(&self.need("instance/instance-type")?),
            primary_mac: leaf(&self.need("mac")?),
            vswitch_id: leaf(&self.need("vswitch-id")?),
            vpc_id: leaf(&self.need("vpc-id")?),
        })
    }

    fn macs(&self) -> Result<Vec<String>, CloudError> {
        Ok(listing(&self.need("network/interfaces/macs/")?))
    }

    fn eni(&self, mac: &str) -> Result<MetadataEni, CloudError> {
        let p = |item: &str| format!("network/interfaces/macs/{mac}/{item}");
        let eni_id = leaf(&self.need(&p("network-interface-id"))?);
        let opt_leaf = |item: &str| -> Result<Option<String>, CloudError> {
            Ok(self
                .get(&p(item))?
                .map(|b| leaf(&b))
                .filter(|s| !s.is_empty()))
        };
        let ipv4s = json_ipv4s(&self.need(&p("private-ipv4s"))?)
            .map_err(|w| decode_err(&p("private-ipv4s"), w))?;
        let ipv6s = match self.get(&p("ipv6s"))? {
            Some(b) => bracket_list(&b).map_err(|w| decode_err(&p("ipv6s"), w))?,
            None => Vec::new(),
        };
        // The vswitch's IPv6 facts, read when the ENI has IPv6: single
        // addresses, or only an IPv6 prefix (/80), whose addresses eniipd
        // hands out and the pods route through the same gateway.
        let has_v6 = !ipv6s.is_empty()
            || self
                .get(&p("ipv6-prefixes"))?
                .is_some_and(|b| !b.trim().is_empty());
        let (ipv6_gateway, vswitch_ipv6_cidr) = if !has_v6 {
            (None, None)
        } else {
            (
                opt_leaf("ipv6-gateway")?.and_then(|s| s.parse().ok()),
                opt_leaf("vswitch-ipv6-cidr-block")?,
            )
        };
        Ok(MetadataEni {
            mac: mac.to_string(),
            eni_id,
            primary_ip: opt_leaf("primary-ip-address")?.and_then(|s| s.parse().ok()),
            gateway: opt_leaf("gateway")?.and_then(|s| s.parse().ok()),
            vswitch_id: opt_leaf("vswitch-id")?.unwrap_or_default(),
            vswitch_cidr: self
                .get(&p("vswitch-cidr-block"))?
                .map(|b| b.lines().next().unwrap_or("").trim().to_string())
                .unwrap_or_default(),
            ipv4s,
            ipv6s,
            ipv6_gateway,
            vswitch_ipv6_cidr,
        })
    }

    fn eni_ips(
        &self,
        mac: &str,
        with_ipv6: bool,
    ) -> Result<(Vec<Ipv4Addr>, Vec<Ipv6Addr>), CloudError> {
        let p = |item: &str| format!("network/interfaces/macs/{mac}/{item}");
        let v4 = json_ipv4s(&self.need(&p("private-ipv4s"))?)
            .map_err(|w| decode_err(&p("private-ipv4s"), w))?;
        let v6 = if with_ipv6 {
            match self.get(&p("ipv6s"))? {
                Some(b) => bracket_list(&b).map_err(|w| decode_err(&p("ipv6s"), w))?,
                None => Vec::new(),
            }
        } else {
            Vec::new()
        };
        Ok((v4, v6))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsing_rules() {
        assert_eq!(leaf("i-bp13znx0m0me8cquu\n"), "i-bp13znx0m0me8cquu");
        assert_eq!(leaf("  vsw-1/ \nextra"), "vsw-1");
        assert_eq!(
            listing("00:16:3e:12:e7:aa/\n00:16:3e:12:16:bb/\n\n"),
            vec!["00:16:3e:12:e7:aa", "00:16:3e:12:16:bb"]
        );
        assert_eq!(
            json_ipv4s(r#"["192.168.1.10","192.168.1.11"]"#)
                .unwrap()
                .len(),
            2
        );
        assert!(json_ipv4s("[192.168.1.10]").is_err());
        assert_eq!(
            bracket_list("[fd00:4004:400::1,fd00:4004:400::2]")
                .unwrap()
                .len(),
            2
        );
        assert_eq!(
            bracket_list("[2408:4005:325:a204:1875:217f:184a:e4e]")
                .unwrap()
                .len(),
            1
        );
        assert_eq!(bracket_list("[]").unwrap(), Vec::<Ipv6Addr>::new());
        assert!(bracket_list("[nope]").is_err());
    }

    #[test]
    fn ram_credentials_debug_hides_the_secret() {
        let c: RamCredentials = serde_json::from_str(
            r#"{"AccessKeyId":"STS.x","AccessKeySecret":"hunter2","SecurityToken":"tok3n","Expiration":"2018-08-20T22:30:02Z","Code":"Success"}"#,
        )
        .unwrap();
        let d = format!("{c:?}");
        assert!(!d.contains("hunter2") && !d.contains("tok3n"), "{d}");
    }
}
