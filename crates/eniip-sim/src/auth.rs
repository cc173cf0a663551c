//! The gateway's authentication of an OpenAPI request, in both signature
//! versions the official SDKs send: 1.0 (HMAC-SHA1, parameters `Signature`,
//! `SignatureNonce`, `Timestamp`, ...) and V3 (ACS3-HMAC-SHA256, an
//! `Authorization` header and `x-acs-*` headers).
//!
//! Both check, in this order: the shape of the signature, the timestamp
//! window, the access key, the signature, the STS token, and last the nonce
//! (so a refused request does not burn its nonce). A V3 request is verified
//! over the headers it lists as signed, exactly as sent, and over the SHA-256
//! of the body actually received: a body that does not match its
//! `x-acs-content-sha256` fails as a signature mismatch whose server string
//! to sign shows it.

use std::time::{Duration, Instant};

use super::world::{err, ApiError, Params};
use super::{KeySecret, RoleToken, Shared};
use eniip_cloud::sign::{self, v3};
use eniip_httpd::HttpRequest;
use eniip_util::time::{parse_rfc3339, unix_secs};

/// Timestamps further than this from the emulator's clock are refused.
pub(crate) const TIMESTAMP_WINDOW_SECS: u64 = 15 * 60;

/// Headers a V3 request must carry and sign.
const V3_REQUIRED: &[&str] = &[
    "host",
    "x-acs-date",
    "x-acs-signature-nonce",
    "x-acs-content-sha256",
];

fn incomplete(detail: &str) -> ApiError {
    err(
        400,
        "IncompleteSignature",
        format!("The request signature does not conform to Aliyun standards. {detail}"),
    )
}

fn mismatch(string_to_sign: &str) -> ApiError {
    err(
        400,
        "SignatureDoesNotMatch",
        format!("Specified signature is not matched with our calculation. server string to sign is:{string_to_sign}"),
    )
}

fn check_time(ts: &str) -> Result<(), ApiError> {
    let when = parse_rfc3339(ts).ok_or_else(|| {
        err(
            400,
            "InvalidTimeStamp.Format",
            "Specified time stamp or date value is not well formatted.",
        )
    })?;
    if when.abs_diff(unix_secs()) > TIMESTAMP_WINDOW_SECS {
        return Err(err(
            400,
            "InvalidTimeStamp.Expired",
            "Specified time stamp or date value is expired.",
        ));
    }
    Ok(())
}

fn lookup(sh: &Shared, ak: &str) -> Result<KeySecret, ApiError> {
    sh.secret_for(ak).ok_or_else(|| {
        err(
            404,
            "InvalidAccessKeyId.NotFound",
            "Specified access key is not found.",
        )
    })
}

/// Role credentials need their own token, unexpired.
fn check_token(expected: Option<RoleToken>, sent: Option<&str>) -> Result<(), ApiError> {
    match expected {
        Some(RoleToken::Valid(t)) if sent != Some(t.as_str()) => Err(err(
            400,
            "InvalidSecurityToken.MismatchWithAccessKey",
            "The security token does not match the access key.",
        )),
        Some(RoleToken::Expired) => Err(err(
            400,
            "InvalidSecurityToken.Expired",
            "Specified SecurityToken is expired.",
        )),
        Some(RoleToken::Valid(_)) | None => Ok(()),
    }
}

/// Records a nonce; a second use within the window is refused.
fn use_nonce(sh: &Shared, nonce: &str) -> Result<(), ApiError> {
    let mut g = sh.gateway.lock();
    let now = Instant::now();
    if g.nonces.len() > 50_000 {
        let window = Duration::from_secs(2 * TIMESTAMP_WINDOW_SECS);
        g.nonces.retain(|_, t| now.duration_since(*t) < window);
    }
    if g.nonces.insert(nonce.to_string(), now).is_some() {
        return Err(err(
            400,
            "SignatureNonceUsed",
            "Specified signature nonce was used already.",
        ));
    }
    Ok(())
}

fn missing_param(name: &str) -> ApiError {
    err(400, "MissingParameter", format!("The input parameter \"{name}\" that is mandatory for processing this request is not supplied."))
}

/// Signature 1.0 over the union of query and form parameters.
pub(crate) fn authenticate_v1(
    sh: &Shared,
    method: &str,
    pairs: &[(String, String)],
    p: &Params,
) -> Result<(), ApiError> {
    let get = |k: &str| p.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let ak = get("AccessKeyId").ok_or_else(|| missing_param("AccessKeyId"))?;
    let signature = get("Signature").ok_or_else(|| incomplete("The Signature is missing."))?;
    if get("SignatureMethod") != Some("HMAC-SHA1") {
        return Err(err(
            400,
            "InvalidSignatureMethod",
            "Specified signature method is not supported.",
        ));
    }
    if get("SignatureVersion") != Some("1.0") {
        return Err(err(
            400,
            "InvalidSignatureVersion",
            "Specified signature version is not supported.",
        ));
    }
    check_time(get("Timestamp").ok_or_else(|| missing_param("Timestamp"))?)?;
    let nonce = get("SignatureNonce").ok_or_else(|| missing_param("SignatureNonce"))?;
    let KeySecret { secret, token } = lookup(sh, ak)?;
    let sts = sign::string_to_sign(method, pairs);
    if sign::signature(&secret, &sts) != signature {
        return Err(mismatch(&sts));
    }
    check_token(token, get("SecurityToken"))?;
    use_nonce(sh, nonce)
}

/// Signature V3: `Authorization` plus the signed headers as sent, the query
/// parameters, and the body received.
pub(crate) fn authenticate_v3(
    sh: &Shared,
    req: &HttpRequest,
    query: &[(String, String)],
) -> Result<(), ApiError> {
    let header = req.header("authorization").unwrap_or_default();
    let auth = v3::parse_authorization(header).ok_or_else(|| {
        incomplete(
            "The Authorization header is not ALGORITHM Credential=..,SignedHeaders=..,Signature=..",
        )
    })?;
    if auth.algorithm != v3::ALGORITHM {
        return Err(err(
            400,
            "InvalidSignatureMethod",
            "Specified signature method is not supported.",
        ));
    }
    for name in V3_REQUIRED {
        if req.header(name).is_none() {
            return Err(incomplete(&format!("The header {name} is missing.")));
        }
    }
    // Every x-acs-* header and the required ones must be covered, or a
    // man in the middle could change them.
    for (name, _) in &req.headers {
        let lower = name.to_ascii_lowercase();
        let must = lower.starts_with("x-acs-") || V3_REQUIRED.contains(&lower.as_str());
        if must && !auth.signed_headers.contains(&lower) {
            return Err(incomplete(&format!("The header {lower} is not signed.")));
        }
    }
    check_time(req.header("x-acs-date").unwrap_or_default())?;
    let KeySecret { secret, token } = lookup(sh, &auth.credential)?;
    let creq = v3::canonical_request(
        &req.method,
        &req.path,
        query,
        &req.headers,
        &auth.signed_headers,
        &v3::content_sha256(&req.body),
    );
    let sts = v3::string_to_sign(&creq);
    if !v3::signature(&secret, &sts).eq_ignore_ascii_case(&auth.signature) {
        return Err(mismatch(&sts));
    }
    check_token(token, req.header("x-acs-security-token"))?;
    use_nonce(sh, req.header("x-acs-signature-nonce").unwrap_or_default())
}
