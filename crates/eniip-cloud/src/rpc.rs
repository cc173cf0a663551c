//! The RPC-style OpenAPI client for one endpoint and API version.
//!
//! Each attempt takes a client-side rate-limit token, signs, and sends
//! `POST <endpoint>/?<query>` with an empty body. With signature V3 (the
//! default, as the official SDKs) the query holds only the action's
//! parameters and authentication travels in headers (`x-acs-action`,
//! `x-acs-version`, `x-acs-date`, `x-acs-signature-nonce`,
//! `x-acs-content-sha256`, `x-acs-security-token` for role credentials,
//! `Authorization`); with 1.0 the common parameters (fresh SignatureNonce
//! and Timestamp) and the signature go in the query. The query string is built here, with the signature's own
//! percent-encoding, so no URL library re-encodes it. A ClientToken, when
//! the action takes one, is chosen once per logical call and reused by
//! every retry, so a retried create or assign cannot allocate twice.

use std::sync::Arc;
use std::time::{Duration, Instant};

use log::{debug, warn};
use serde_json::Value;

use super::credentials::{CredentialProvider, Credentials};
use super::error::{CloudError, CloudErrorKind};
use super::ratelimit::RateLimiter;
use super::retry::{backoff, retry_after_ms, retryable, RetryPolicy};
use super::sign::{self, v3, SignatureVersion};
use eniip_util::encoding::percent_encode;

/// Per-call timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP/TLS connect.
    pub connect: Duration,
    /// Assign/Unassign calls (the Go SDK's 10 s).
    pub short: Duration,
    /// ENI create/attach/detach/delete/describe (16 s).
    pub long: Duration,
    /// DescribeInstanceTypes (17 s).
    pub types: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            connect: Duration::from_secs(5),
            short: Duration::from_secs(10),
            long: Duration::from_secs(16),
            types: Duration::from_secs(17),
        }
    }
}

impl Timeouts {
    /// All timeouts set to `d` (tests).
    pub fn all(d: Duration) -> Timeouts {
        Timeouts {
            connect: d,
            short: d,
            long: d,
            types: d,
        }
    }

    fn for_action(&self, action: &str) -> Duration {
        if action.contains("Assign") {
            self.short
        } else if action == "DescribeInstanceTypes" {
            self.types
        } else {
            self.long
        }
    }
}

/// How one call behaves.
#[derive(Debug, Clone, Copy, Default)]
pub struct CallOpts {
    /// Send a ClientToken (same on every retry).
    pub client_token: bool,
    /// Error codes that mean the goal is already reached ("already gone"
    /// on release paths): answered as success with a null body.
    pub success_codes: &'static [&'static str],
}

impl CallOpts {
    /// A call that changes something and must not happen twice: it
    /// carries a ClientToken, the same on every retry.
    pub(crate) const ONCE: CallOpts = CallOpts {
        client_token: true,
        success_codes: &[],
    };

    /// A call whose goal is already reached when the service answers one
    /// of `codes` (a release of something already gone).
    pub(crate) const fn done_if(codes: &'static [&'static str]) -> CallOpts {
        CallOpts {
            client_token: false,
            success_codes: codes,
        }
    }
}

/// A client for one endpoint and version.
#[derive(Debug)]
pub struct RpcClient {
    agent: ureq::Agent,
    endpoint: String,
    version: &'static str,
    region: String,
    creds: Arc<CredentialProvider>,
    limiter: Arc<RateLimiter>,
    policy: RetryPolicy,
    timeouts: Timeouts,
    signature: SignatureVersion,
    /// `host[:port]` of the endpoint, signed in V3.
    host: String,
}

fn first_str(v: &Value, keys: &[&str]) -> Option<String> {
    keys.iter()
        .find_map(|k| v.get(*k).and_then(Value::as_str))
        .map(str::to_string)
}

/// `message` with the access key id masked as elsewhere (first 4
/// characters) and the security token removed, in the plain,
/// percent-encoded and doubly encoded forms a string to sign shows.
fn redact(message: &str, creds: &Credentials) -> String {
    let forms = |s: &str| {
        let once = percent_encode(s);
        let twice = percent_encode(&once);
        [twice, once, s.to_string()]
    };
    let mut out = message.to_string();
    if let Some(t) = &creds.security_token {
        for f in forms(t.expose()).iter().filter(|f| !f.is_empty()) {
            out = out.replace(f.as_str(), "***");
        }
    }
    let id = &creds.access_key_id;
    if id.len() > 4 {
        for f in forms(id) {
            out = out.replace(&f, &eniip_util::mask(id));
        }
    }
    out
}

impl RpcClient {
    /// A client.
    pub(crate) fn new(
        endpoint: &str,
        version: &'static str,
        region: &str,
        creds: Arc<CredentialProvider>,
        limiter: Arc<RateLimiter>,
        policy: RetryPolicy,
        timeouts: Timeouts,
    ) -> RpcClient {
        let agent: ureq::Agent = super::http_config()
            .timeout_connect(Some(timeouts.connect))
            .build()
            .into();
        let endpoint = endpoint.trim_end_matches('/').to_string();
        let host = endpoint
            .split_once("://")
            .map_or(endpoint.as_str(), |(_, rest)| rest)
            .split('/')
            .next()
            .unwrap_or_default()
            .to_string();
        RpcClient {
            agent,
            endpoint,
            host,
            signature: SignatureVersion::default(),
            version,
            region: region.to_string(),
            creds,
            limiter,
            policy,
            timeouts,
        }
    }

    /// The same client sending signature `v` instead.
    pub(crate) fn with_signature_version(mut self, v: SignatureVersion) -> RpcClient {
        self.signature = v;
        self
    }

    /// Calls `action` with `params`, retrying as the policy says.
    pub fn call(
        &self,
        action: &str,
        params: &[(String, String)],
        opts: CallOpts,
    ) -> Result<Value, CloudError> {
        let token = opts.client_token.then(eniip_util::rand::uuid);
        let started = Instant::now();
        let budget_end = started + self.policy.max_elapsed;
        let mut attempt = 0;
        loop {
            attempt += 1;
            if !self.limiter.acquire(action, budget_end) {
                return Err(CloudError::new(
                    CloudErrorKind::Throttled,
                    action,
                    "client-side rate limit: no call slot within the retry budget",
                )
                .with_attempts(attempt));
            }
            let (result, time_left) = self.attempt(action, params, token.as_deref());
            let e = match result {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            if e.code
                .as_deref()
                .is_some_and(|c| opts.success_codes.contains(&c))
            {
                debug!("{action}: {} counts as success here", e.code_or_kind());
                return Ok(Value::Null);
            }
            let wait = backoff(
                &self.policy,
                attempt,
                &e,
                time_left,
                // The whole [0.5, 1.5): a fleet's throttled retries spread.
                eniip_util::rand::jitter(0.5),
            );
            if !retryable(&e)
                || attempt >= self.policy.max_attempts
                || Instant::now() + wait > budget_end
            {
                if retryable(&e) {
                    warn!("{action}: giving up after {attempt} attempt(s): {e}");
                }
                return Err(e.with_attempts(attempt));
            }
            debug!(
                "{action}: attempt {attempt} failed ({}); retrying in {wait:?}",
                e.code_or_kind()
            );
            std::thread::sleep(wait);
        }
    }

    /// One signed request. Returns the outcome and any TimeLeft hint.
    fn attempt(
        &self,
        action: &str,
        params: &[(String, String)],
        token: Option<&str>,
    ) -> (Result<Value, CloudError>, Option<u64>) {
        let creds = match self.creds.get() {
            Ok(c) => c,
            Err(e) => return (Err(e), None),
        };
        let timestamp = eniip_util::time::now_utc();
        let mut query: Vec<(String, String)> = Vec::with_capacity(params.len() + 12);
        if !params.iter().any(|(k, _)| k == "RegionId") && !self.region.is_empty() {
            query.push(("RegionId".into(), self.region.clone()));
        }
        if let Some(t) = token {
            query.push(("ClientToken".into(), t.to_string()));
        }
        query.extend(params.iter().filter(|(_, v)| !v.is_empty()).cloned());
        let mut headers: Vec<(&str, String)> = vec![
            ("accept", "application/json".into()),
            ("x-acs-action", action.into()),
            ("x-acs-version", self.version.into()),
        ];
        match self.signature {
            SignatureVersion::V1 => {
                self.sign_v1(action, &creds, &timestamp, &mut query, &mut headers)
            }
            SignatureVersion::V3 => self.sign_v3(&creds, &timestamp, &query, &mut headers),
        }
        let encoded: Vec<String> = query
            .iter()
            .map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v)))
            .collect();
        let url = format!("{}/?{}", self.endpoint, encoded.join("&"));
        drop(query);
        let t0 = Instant::now();
        let answer = self.send(action, &url, headers, t0);
        let secs = t0.elapsed().as_secs_f64();
        match answer {
            Ok(a) => read_answer(action, a, &creds, &timestamp, secs),
            Err(e) => (Err(e), None),
        }
    }

    /// Signature version 1.0 (HMAC-SHA1): the signature and the key id
    /// travel in the query.
    fn sign_v1(
        &self,
        action: &str,
        creds: &Credentials,
        timestamp: &str,
        query: &mut Vec<(String, String)>,
        headers: &mut Vec<(&str, String)>,
    ) {
        query.extend([
            ("Action".into(), action.into()),
            ("Version".into(), self.version.into()),
            ("Format".into(), "JSON".into()),
            ("AccessKeyId".into(), creds.access_key_id.clone()),
            ("SignatureMethod".into(), "HMAC-SHA1".into()),
            ("SignatureVersion".into(), "1.0".into()),
            ("SignatureNonce".into(), eniip_util::rand::uuid()),
            ("Timestamp".into(), timestamp.to_string()),
        ]);
        if let Some(t) = &creds.security_token {
            query.push(("SecurityToken".into(), t.expose().to_string()));
        }
        let sig = sign::signature(
            creds.access_key_secret.expose(),
            &sign::string_to_sign("POST", query),
        );
        query.push(("Signature".into(), sig));
        headers.push(("content-type", "application/x-www-form-urlencoded".into()));
    }

    /// ACS3-HMAC-SHA256: the signature over the canonical request travels
    /// in the `authorization` header.
    fn sign_v3(
        &self,
        creds: &Credentials,
        timestamp: &str,
        query: &[(String, String)],
        headers: &mut Vec<(&str, String)>,
    ) {
        // The same headers the official SDKs sign, the host as sent.
        headers.extend([
            ("host", self.host.clone()),
            ("x-acs-date", timestamp.to_string()),
            ("x-acs-signature-nonce", eniip_util::rand::uuid()),
            ("x-acs-content-sha256", v3::content_sha256(b"")),
        ]);
        if let Some(t) = &creds.security_token {
            headers.push(("x-acs-accesskey-id", creds.access_key_id.clone()));
            headers.push(("x-acs-security-token", t.expose().to_string()));
        }
        let signed: Vec<String> = headers
            .iter()
            .map(|(k, _)| k.to_string())
            .filter(|k| v3::signs_by_default(k))
            .collect();
        let creq = v3::canonical_request(
            "POST",
            "/",
            query,
            headers,
            &signed,
            &v3::content_sha256(b""),
        );
        let sig = v3::signature(creds.access_key_secret.expose(), &v3::string_to_sign(&creq));
        let (_, names) = v3::canonical_headers(headers, &signed);
        headers.push((
            "authorization",
            v3::authorization(&creds.access_key_id, &names, &sig),
        ));
    }

    /// Sends the signed request; what came back, or why nothing did.
    fn send(
        &self,
        action: &str,
        url: &str,
        headers: Vec<(&str, String)>,
        t0: Instant,
    ) -> Result<RawAnswer, CloudError> {
        let mut req = self
            .agent
            .post(url)
            .config()
            .timeout_global(Some(self.timeouts.for_action(action)))
            .build();
        for (k, v) in &headers {
            req = req.header(*k, v.as_str());
        }
        drop(headers);
        let resp = req.send_empty();
        // No (whole) answer: counted as `timeout` or `transport`.
        let unanswered = |kind: CloudErrorKind, msg: String| {
            let code = if kind == CloudErrorKind::Timeout {
                "timeout"
            } else {
                "transport"
            };
            crate::telemetry::record_openapi(action, code, t0.elapsed().as_secs_f64());
            CloudError::new(kind, action, msg)
        };
        let mut resp = match resp {
            Ok(r) => r,
            Err(ureq::Error::Timeout(t)) => {
                let limit = self.timeouts.for_action(action);
                let msg = format!("no answer within {limit:?} ({t})");
                return Err(unanswered(CloudErrorKind::Timeout, msg));
            }
            Err(e) => {
                let msg = format!("cannot reach {}: {e}", self.endpoint);
                return Err(unanswered(CloudErrorKind::Transport, msg).with_source(e));
            }
        };
        let status = resp.status().as_u16();
        let header = |h: &str| {
            resp.headers()
                .get(h)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let hints: Vec<String> = ["x-ratelimit-user-api", "x-ratelimit-user"]
            .iter()
            .filter_map(|h| header(h))
            .collect();
        let time_left = retry_after_ms(
            header("x-acs-retry-after").as_deref(),
            hints.iter().map(String::as_str),
        );
        let request_id = header("x-acs-request-id");
        let body = match resp
            .body_mut()
            .with_config()
            .limit(16 << 20)
            .read_to_string()
        {
            Ok(b) => b,
            Err(ureq::Error::Timeout(_)) => {
                let msg = "answer body too slow".into();
                return Err(unanswered(CloudErrorKind::Timeout, msg));
            }
            Err(e) => {
                let msg = "reading the answer".into();
                return Err(unanswered(CloudErrorKind::Transport, msg).with_source(e));
            }
        };
        Ok(RawAnswer {
            status,
            time_left,
            request_id,
            body,
        })
    }
}

/// What the service sent back, before it is read.
#[derive(Debug)]
struct RawAnswer {
    status: u16,
    /// How long the service asks to wait before the next try (ms).
    time_left: Option<u64>,
    /// `x-acs-request-id`, for an answer whose body names none.
    request_id: Option<String>,
    body: String,
}

/// The one place an answer is read: a 2xx JSON body is the result; any
/// other answer is the error it names (its `Code` and `RequestId` kept,
/// secrets redacted from its message), with the wait the service asked.
fn read_answer(
    action: &str,
    a: RawAnswer,
    creds: &Credentials,
    timestamp: &str,
    secs: f64,
) -> (Result<Value, CloudError>, Option<u64>) {
    let RawAnswer {
        status,
        time_left,
        request_id: header_rid,
        body,
    } = a;
    let json: Option<Value> = serde_json::from_str(&body).ok();
    if (200..300).contains(&status) {
        crate::telemetry::record_openapi(action, "OK", secs);
        return match json {
            Some(v) => (Ok(v), None),
            None => (
                Err(CloudError::new(
                    CloudErrorKind::Decode,
                    action,
                    format!("HTTP {status} with a body that is not JSON"),
                )
                .with_status(status)),
                None,
            ),
        };
    }
    let (code, message, rid) = match &json {
        Some(v) => (
            first_str(v, &["Code", "code"]),
            first_str(v, &["Message", "message", "description"]).unwrap_or_default(),
            first_str(v, &["RequestId", "requestId"]).or(header_rid),
        ),
        None => (
            None,
            format!(
                "HTTP {status}: {}",
                body.chars().take(200).collect::<String>().trim()
            ),
            header_rid,
        ),
    };
    let e = match code {
        Some(code) => {
            crate::telemetry::record_openapi(action, &code, secs);
            // A refused signature's message echoes the string to sign,
            // which for 1.0 holds the key id and any STS token.
            let mut message = redact(&message, creds);
            if code.starts_with("InvalidTimeStamp") {
                message = format!("{message} (this host's clock said {timestamp} UTC: check its time synchronisation)");
            }
            CloudError::api(action, status, code, message, rid)
        }
        None => {
            crate::telemetry::record_openapi(action, &format!("HTTP{status}"), secs);
            let kind = super::error::classify(status, "");
            CloudError::new(kind, action, message)
                .with_status(status)
                .with_request_id(rid)
        }
    };
    (Err(e), time_left)
}
