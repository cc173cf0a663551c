//! `CloudError`: what a failed OpenAPI or metadata call tells the caller.
//!
//! It keeps what operators grep for (the service's `Code`, `Message`,
//! `RequestId` and HTTP status) and a [`CloudErrorKind`] the allocator acts
//! on. It never holds request parameters, so no credential can leak through
//! it. Errors are `Clone` because one failed batch answers many requests.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

/// The action name of a metadata call's errors (not an OpenAPI action).
pub const METADATA_ACTION: &str = "metadata";

/// The class of a failure, as the allocator needs to see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloudErrorKind {
    /// No connection, reset, DNS, TLS: the request may not have arrived.
    Transport,
    /// The call (or a wait) ran past its deadline.
    Timeout,
    /// `Throttling*` still refused after the retry budget.
    Throttled,
    /// HTTP 5xx, `InternalError`, `ServiceUnavailable` after retries.
    Server,
    /// The vswitch has no free IP (`InvalidVSwitchId.IpNotEnough`,
    /// `QuotaExceeded.PrivateIpAddress`): inhibit the vswitch.
    Exhausted,
    /// The vswitch has no free /28 for an IPv4 prefix (a call carrying
    /// prefixes refused with `InvalidVSwitchId.IpNotEnough`, or a
    /// prefix-specific code): single addresses may still be had, so the
    /// vswitch is not inhibited for them.
    PrefixExhausted,
    /// A per-ENI or per-instance limit (`EniPerInstanceLimitExceeded`,
    /// `InvalidOperation.Ipv4CountExceeded`, `MaxEniCountExceeded`, ...).
    LimitExceeded,
    /// The resource does not exist (`InvalidEniId.NotFound`, metadata 404).
    NotFound,
    /// The resource is in the wrong state (`InvalidOperation.InvalidEniState`,
    /// `Operation.Conflict` after retries).
    InvalidState,
    /// The server refused our timestamp (`InvalidTimeStamp.*`): clock skew.
    ClockSkew,
    /// Credentials refused or missing (`SignatureDoesNotMatch`,
    /// `InvalidAccessKeyId.*`, `Forbidden.*`, no credential source).
    Auth,
    /// Any other error answer of the service (4xx with a Code).
    Api,
    /// A 2xx answer we could not read.
    Decode,
}

impl CloudErrorKind {
    /// A short lowercase name, for metrics labels and logs.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CloudErrorKind::Transport => "transport",
            CloudErrorKind::Timeout => "timeout",
            CloudErrorKind::Throttled => "throttled",
            CloudErrorKind::Server => "server",
            CloudErrorKind::Exhausted => "exhausted",
            CloudErrorKind::PrefixExhausted => "prefix-exhausted",
            CloudErrorKind::LimitExceeded => "limit",
            CloudErrorKind::NotFound => "not-found",
            CloudErrorKind::InvalidState => "invalid-state",
            CloudErrorKind::ClockSkew => "clock-skew",
            CloudErrorKind::Auth => "auth",
            CloudErrorKind::Api => "api",
            CloudErrorKind::Decode => "decode",
        }
    }
}

/// A failed cloud call. Cheap to clone and pointer-sized; the details are
/// read through `Deref` (`err.kind`, `err.code`, ...).
#[derive(Clone)]
pub struct CloudError(Arc<Detail>);

/// The details of a [`CloudError`].
#[derive(Clone)]
pub struct Detail {
    /// What failed.
    pub kind: CloudErrorKind,
    /// The OpenAPI action (`AssignPrivateIpAddresses`) or `metadata`.
    pub action: String,
    /// The service's error `Code`, if it answered with one.
    pub code: Option<String>,
    /// The service's `Message`, or our description of the failure.
    pub message: String,
    /// The service's `RequestId`, if any.
    pub request_id: Option<String>,
    /// The HTTP status, if a response arrived.
    pub http_status: Option<u16>,
    /// How many attempts were made (1 = no retry).
    pub attempts: u32,
    source: Option<Arc<dyn Error + Send + Sync>>,
}

impl std::ops::Deref for CloudError {
    type Target = Detail;

    fn deref(&self) -> &Detail {
        &self.0
    }
}

impl CloudError {
    /// An error of `kind` for `action` with a description.
    pub fn new(
        kind: CloudErrorKind,
        action: impl Into<String>,
        message: impl Into<String>,
    ) -> CloudError {
        CloudError(Arc::new(Detail {
            kind,
            action: action.into(),
            code: None,
            message: message.into(),
            request_id: None,
            http_status: None,
            attempts: 1,
            source: None,
        }))
    }

    /// An error answer of the service, classified by its code and status.
    pub fn api(
        action: impl Into<String>,
        status: u16,
        code: impl Into<String>,
        message: impl Into<String>,
        request_id: Option<String>,
    ) -> CloudError {
        let code = code.into();
        CloudError(Arc::new(Detail {
            kind: classify(status, &code),
            action: action.into(),
            message: message.into(),
            code: Some(code),
            request_id,
            http_status: Some(status),
            attempts: 1,
            source: None,
        }))
    }

    /// Attaches the underlying cause.
    pub(crate) fn with_source(mut self, source: impl Error + Send + Sync + 'static) -> CloudError {
        Arc::make_mut(&mut self.0).source = Some(Arc::new(source));
        self
    }

    /// Records how many attempts were made.
    pub(crate) fn with_attempts(mut self, attempts: u32) -> CloudError {
        Arc::make_mut(&mut self.0).attempts = attempts;
        self
    }

    /// Records the HTTP status of the answer.
    pub(crate) fn with_status(mut self, status: u16) -> CloudError {
        Arc::make_mut(&mut self.0).http_status = Some(status);
        self
    }

    /// Records the service's RequestId.
    pub(crate) fn with_request_id(mut self, id: Option<String>) -> CloudError {
        Arc::make_mut(&mut self.0).request_id = id;
        self
    }

    /// Overrides the kind (e.g. a `Server` error that ran out of retries
    /// stays `Server`; a wait that expired becomes `Timeout`).
    pub(crate) fn with_kind(mut self, kind: CloudErrorKind) -> CloudError {
        Arc::make_mut(&mut self.0).kind = kind;
        self
    }

    /// The service code, or the kind's name when there is none: what the
    /// protocol prints after `ERR cloud`. A metadata failure without a code
    /// says `metadata`, so a client does not take it for an OpenAPI error.
    pub fn code_or_kind(&self) -> &str {
        match &self.code {
            Some(c) => c,
            None if self.action == METADATA_ACTION => "metadata",
            None => self.kind.as_str(),
        }
    }

    /// True when the vswitch is out of addresses.
    pub fn is_exhausted(&self) -> bool {
        self.kind == CloudErrorKind::Exhausted
    }

    /// True when the vswitch has no free /28 for a prefix (it may still
    /// have single addresses).
    #[cfg(test)]
    pub(crate) fn is_prefix_exhausted(&self) -> bool {
        self.kind == CloudErrorKind::PrefixExhausted
    }
}

/// Classifies a service error by code first (the gateway's statuses vary),
/// then by HTTP status.
pub(crate) fn classify(status: u16, code: &str) -> CloudErrorKind {
    match code {
        "InvalidVSwitchId.IpNotEnough" | "QuotaExceeded.PrivateIpAddress" => {
            CloudErrorKind::Exhausted
        }
        // No prefix-specific code is published; should the service answer
        // one, it is exhaustion of prefixes only.
        c if c.contains("Prefix")
            && (c.contains("NotEnough") || c.contains("Insufficient") || c.contains("Exhaust")) =>
        {
            CloudErrorKind::PrefixExhausted
        }
        "EniPerInstanceLimitExceeded"
        | "MaxEniCountExceeded"
        | "InvalidOperation.Ipv4CountExceeded"
        | "InvalidOperation.Ipv6CountExceeded"
        | "MaxEniIpv6IpsCountExceeded" => CloudErrorKind::LimitExceeded,
        "InternalError" | "ServiceUnavailable" | "LimitedOperation.ServiceUnavailable" => {
            CloudErrorKind::Server
        }
        "Operation.Conflict"
        | "InvalidOperation.Conflict"
        | "InvalidOperation.InvalidEniState"
        | "InvalidOperation.InvalidEcsState"
        | "IncorrectInstanceStatus" => CloudErrorKind::InvalidState,
        c if c.starts_with("Throttling") || c == "Rejected.Throttling" => CloudErrorKind::Throttled,
        c if c.starts_with("InvalidTimeStamp") => CloudErrorKind::ClockSkew,
        c if c.starts_with("SignatureDoesNotMatch")
            || c == "IncompleteSignature"
            || c.starts_with("InvalidAccessKeyId")
            || c.starts_with("InvalidSecurityToken")
            || c.starts_with("Forbidden") =>
        {
            CloudErrorKind::Auth
        }
        c if c.ends_with(".NotFound") => CloudErrorKind::NotFound,
        _ if status >= 500 => CloudErrorKind::Server,
        _ if status == 429 => CloudErrorKind::Throttled,
        _ if status == 404 => CloudErrorKind::NotFound,
        _ => CloudErrorKind::Api,
    }
}

impl fmt::Display for CloudError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed", self.action)?;
        match &self.code {
            Some(code) => write!(f, ": {code}: {}", self.message)?,
            None => write!(f, ": {}", self.message)?,
        }
        let mut extra = Vec::new();
        if let Some(s) = self.http_status {
            extra.push(format!("HTTP {s}"));
        }
        if let Some(r) = &self.request_id {
            extra.push(format!("RequestId {r}"));
        }
        if self.attempts > 1 {
            extra.push(format!("{} attempts", self.attempts));
        }
        if !extra.is_empty() {
            write!(f, " ({})", extra.join(", "))?;
        }
        Ok(())
    }
}

impl fmt::Debug for CloudError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for Detail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CloudError")
            .field("kind", &self.kind)
            .field("action", &self.action)
            .field("code", &self.code)
            .field("message", &self.message)
            .field("request_id", &self.request_id)
            .field("http_status", &self.http_status)
            .field("attempts", &self.attempts)
            .finish()
    }
}

impl Error for CloudError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.0
            .source
            .as_deref()
            .map(|e| e as &(dyn Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_by_code_then_status() {
        assert_eq!(
            classify(403, "InvalidVSwitchId.IpNotEnough"),
            CloudErrorKind::Exhausted
        );
        assert_eq!(
            classify(400, "QuotaExceeded.PrivateIpAddress"),
            CloudErrorKind::Exhausted
        );
        assert_eq!(classify(400, "Throttling.User"), CloudErrorKind::Throttled);
        assert_eq!(classify(400, "Throttling"), CloudErrorKind::Throttled);
        assert_eq!(classify(500, "InternalError"), CloudErrorKind::Server);
        assert_eq!(classify(503, "ServiceUnavailable"), CloudErrorKind::Server);
        assert_eq!(classify(502, "Whatever"), CloudErrorKind::Server);
        assert_eq!(
            classify(403, "Operation.Conflict"),
            CloudErrorKind::InvalidState
        );
        assert_eq!(
            classify(400, "InvalidTimeStamp.Expired"),
            CloudErrorKind::ClockSkew
        );
        assert_eq!(classify(400, "SignatureDoesNotMatch"), CloudErrorKind::Auth);
        assert_eq!(
            classify(404, "InvalidAccessKeyId.NotFound"),
            CloudErrorKind::Auth
        );
        assert_eq!(
            classify(404, "InvalidEniId.NotFound"),
            CloudErrorKind::NotFound
        );
        assert_eq!(classify(400, "MissingParameter"), CloudErrorKind::Api);
    }

    #[test]
    fn display_names_code_and_request_id() {
        let e = CloudError::api(
            "AssignPrivateIpAddresses",
            403,
            "InvalidVSwitchId.IpNotEnough",
            "no ip",
            Some("RID-1".into()),
        );
        let s = e.to_string();
        assert!(s.contains("AssignPrivateIpAddresses failed: InvalidVSwitchId.IpNotEnough: no ip"));
        assert!(s.contains("HTTP 403"));
        assert!(s.contains("RequestId RID-1"));
        assert!(e.is_exhausted());
    }
}
