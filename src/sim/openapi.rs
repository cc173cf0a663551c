//! The OpenAPI listener: request parsing, signature 1.0 verification
//! (with the gateway's timestamp window and nonce reuse checks), fault
//! rules, latency, ClientToken idempotency, and the admin endpoints under
//! `/__sim/`. JSON is served whatever `Format` says (XML is not emulated).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::world::{err, status_of, ApiError, Params};
use super::{FaultRule, Shared};
use crate::cloud::sign;
use crate::httpd::{HttpRequest, HttpResponse};
use crate::util::encoding::parse_form;
use crate::util::time::{parse_rfc3339, unix_secs};

/// Timestamps further than this from the emulator's clock are refused.
const TIMESTAMP_WINDOW_SECS: u64 = 15 * 60;

/// A fault rule with its remaining count.
#[derive(Debug, Clone)]
pub struct Fault {
    pub rule: FaultRule,
    pub remaining: Option<u64>,
}

/// Replay cache entry: parameter fingerprint and the answer.
type Replay = (String, Result<Value, ApiError>);

/// Per-listener mutable state besides the world.
#[derive(Debug, Default)]
pub struct Gateway {
    pub faults: Vec<Fault>,
    pub nonces: HashMap<String, Instant>,
    pub replays: HashMap<(String, String), Replay>,
}

const IDEMPOTENT: &[&str] = &[
    "CreateNetworkInterface",
    "AssignPrivateIpAddresses",
    "AssignIpv6Addresses",
];
const VOLATILE: &[&str] = &[
    "Signature",
    "SignatureNonce",
    "Timestamp",
    "AccessKeyId",
    "SecurityToken",
    "ClientToken",
];

fn error_response(sh: &Shared, action: &str, e: &ApiError, request_id: String) -> HttpResponse {
    let host = if action == "DescribeVSwitches" {
        format!("vpc.{}.aliyuncs.com", sh.region)
    } else {
        format!("ecs.{}.aliyuncs.com", sh.region)
    };
    let body = json!({
        "RequestId": request_id,
        "HostId": host,
        "Code": e.code,
        "Message": e.message,
        "Recommend": format!("https://api.aliyun.com/troubleshoot?q={}&product=Ecs&requestId={request_id}", e.code),
    });
    let mut r = HttpResponse::json(e.status, &body).with_header("x-acs-request-id", request_id);
    if e.code.starts_with("Throttling") {
        let reset = unix_secs() + 1;
        r = r.with_header(
            "x-ratelimit-user-api",
            format!("Limit:100,Remain:0,TimeLeft:1000,Reset:{reset}"),
        );
    }
    r
}

/// Handles one request on the OpenAPI listener.
pub fn handle(sh: &Shared, req: &HttpRequest) -> HttpResponse {
    if let Some(rest) = req.path.strip_prefix("/__sim/") {
        return admin(sh, req, rest);
    }
    let rid = || sh.world.lock().request_id();
    if req.path != "/" {
        return error_response(
            sh,
            "",
            &err(
                404,
                "InvalidApi.NotFound",
                "Specified api is not found, please check your url and method.",
            ),
            rid(),
        );
    }
    if req.method != "GET" && req.method != "POST" {
        return error_response(
            sh,
            "",
            &err(
                400,
                "UnsupportedHTTPMethod",
                format!("HTTP method {} is not supported.", req.method),
            ),
            rid(),
        );
    }
    let Some(mut pairs) = parse_form(&req.query) else {
        return error_response(
            sh,
            "",
            &err(
                400,
                "InvalidParameter",
                "The query string is not properly encoded.",
            ),
            rid(),
        );
    };
    if req.method == "POST" && !req.body.is_empty() {
        let form = std::str::from_utf8(&req.body).ok().and_then(parse_form);
        match form {
            Some(f) => pairs.extend(f),
            None => {
                return error_response(
                    sh,
                    "",
                    &err(
                        400,
                        "InvalidParameter",
                        "The request body is not a valid form.",
                    ),
                    rid(),
                )
            }
        }
    }
    if pairs.len() > 500 {
        return error_response(
            sh,
            "",
            &err(400, "InvalidParameter", "Too many parameters."),
            rid(),
        );
    }
    let params: Params = pairs.iter().cloned().collect();
    let action = params.get("Action").cloned().unwrap_or_default();
    if let Err(e) = authenticate(sh, &req.method, &pairs, &params) {
        return error_response(sh, &action, &e, rid());
    }
    if action.is_empty() {
        return error_response(sh, "", &err(400, "MissingParameter", "The input parameter \"Action\" that is mandatory for processing this request is not supplied."), rid());
    }
    let version = params.get("Version").cloned().unwrap_or_default();

    // Count the call, pick faults, then sleep outside the lock.
    let (delay, fault) = {
        let mut w = sh.world.lock();
        *w.calls.entry(action.clone()).or_default() += 1;
        let mut g = sh.gateway.lock();
        let mut delay = sh.latency;
        let mut fault = None;
        for f in g.faults.iter_mut() {
            if f.rule.action != "*" && f.rule.action != action {
                continue;
            }
            if f.remaining == Some(0) {
                continue;
            }
            if w.rng.unit() >= f.rule.probability {
                continue;
            }
            if let Some(n) = &mut f.remaining {
                *n -= 1;
            }
            delay += Duration::from_millis(f.rule.latency_ms);
            if fault.is_none() {
                if let Some(code) = &f.rule.code {
                    let status = f.rule.status.unwrap_or_else(|| status_of(code));
                    fault = Some(err(
                        status,
                        code,
                        "The request was refused by an injected fault (eniip-sim).",
                    ));
                }
            }
        }
        (delay, fault)
    };
    if !delay.is_zero() {
        std::thread::sleep(delay);
    }
    if let Some(e) = fault {
        return error_response(sh, &action, &e, rid());
    }

    let token = params.get("ClientToken").filter(|t| !t.is_empty()).cloned();
    let fingerprint = || {
        params
            .iter()
            .filter(|(k, _)| !VOLATILE.contains(&k.as_str()))
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&")
    };
    let key = token
        .filter(|_| IDEMPOTENT.contains(&action.as_str()))
        .map(|t| (action.clone(), t));
    let now = Instant::now();
    let (result, request_id) = {
        let mut w = sh.world.lock();
        let request_id = w.request_id();
        let mut g = sh.gateway.lock();
        let replay = key.as_ref().and_then(|k| g.replays.get(k).cloned());
        let result = match replay {
            Some((fp, _)) if fp != fingerprint() => Err(err(
                400,
                "IdempotentParameterMismatch",
                "The request uses the same client token as a previous, but non-identical request.",
            )),
            Some((_, r)) => r,
            None => {
                let r = w.act(&action, &version, &params, now);
                if let Some(k) = key {
                    // Only successes are remembered: a refused request may be
                    // retried with the same token once the cause is gone.
                    if r.is_ok() {
                        if g.replays.len() > 10_000 {
                            g.replays.clear();
                        }
                        g.replays.insert(k, (fingerprint(), r.clone()));
                    }
                }
                r
            }
        };
        (result, request_id)
    };
    match result {
        Ok(mut v) => {
            if let Value::Object(m) = &mut v {
                m.insert("RequestId".into(), Value::String(request_id.clone()));
            }
            HttpResponse::json(200, &v).with_header("x-acs-request-id", request_id)
        }
        Err(e) => error_response(sh, &action, &e, request_id),
    }
}

fn authenticate(
    sh: &Shared,
    method: &str,
    pairs: &[(String, String)],
    p: &Params,
) -> Result<(), ApiError> {
    let get = |k: &str| p.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let ak = get("AccessKeyId").ok_or_else(|| err(400, "MissingParameter", "The input parameter \"AccessKeyId\" that is mandatory for processing this request is not supplied."))?;
    let signature = get("Signature").ok_or_else(|| {
        err(
            400,
            "IncompleteSignature",
            "The request signature does not conform to Aliyun standards.",
        )
    })?;
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
    let ts = get("Timestamp").ok_or_else(|| err(400, "MissingParameter", "The input parameter \"Timestamp\" that is mandatory for processing this request is not supplied."))?;
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
    let nonce = get("SignatureNonce").ok_or_else(|| err(400, "MissingParameter", "The input parameter \"SignatureNonce\" that is mandatory for processing this request is not supplied."))?;
    let (secret, token) = sh.secret_for(ak).ok_or_else(|| {
        err(
            404,
            "InvalidAccessKeyId.NotFound",
            "Specified access key is not found.",
        )
    })?;
    let sts = sign::string_to_sign(method, pairs);
    if sign::signature(&secret, &sts) != signature {
        return Err(err(
            400,
            "SignatureDoesNotMatch",
            format!("Specified signature is not matched with our calculation. server string to sign is:{sts}"),
        ));
    }
    match token {
        Some(Ok(t)) if get("SecurityToken") != Some(t.as_str()) => {
            return Err(err(
                400,
                "InvalidSecurityToken.MismatchWithAccessKey",
                "The security token does not match the access key.",
            ));
        }
        Some(Err(())) => {
            return Err(err(
                400,
                "InvalidSecurityToken.Expired",
                "Specified SecurityToken is expired.",
            ))
        }
        Some(Ok(_)) | None => {}
    }
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

fn admin(sh: &Shared, req: &HttpRequest, rest: &str) -> HttpResponse {
    let bad = |why: String| HttpResponse::json(400, &json!({"error": why}));
    match (req.method.as_str(), rest) {
        ("GET", "state") => HttpResponse::json(200, &sh.world.lock().state_json(Instant::now())),
        ("POST", "faults") => {
            let v: Value = match serde_json::from_slice(&req.body) {
                Ok(v) => v,
                Err(e) => return bad(format!("body is not JSON: {e}")),
            };
            match FaultRule::from_json(&v) {
                Ok(rule) => {
                    let remaining = rule.count;
                    sh.gateway.lock().faults.push(Fault { rule, remaining });
                    HttpResponse::json(200, &json!({"ok": true}))
                }
                Err(why) => bad(why),
            }
        }
        ("DELETE", "faults") => {
            sh.gateway.lock().faults.clear();
            HttpResponse::json(200, &json!({"ok": true}))
        }
        ("POST", "vswitch") => {
            let v: Value = match serde_json::from_slice(&req.body) {
                Ok(v) => v,
                Err(e) => return bad(format!("body is not JSON: {e}")),
            };
            let (Some(id), Some(free)) = (
                v.get("id").and_then(Value::as_str),
                v.get("free").and_then(Value::as_u64),
            ) else {
                return bad("expected {\"id\": \"vsw-...\", \"free\": N}".into());
            };
            if sh.world.lock().set_free(id, free) {
                HttpResponse::json(200, &json!({"ok": true}))
            } else {
                HttpResponse::json(404, &json!({"error": format!("no vswitch {id}")}))
            }
        }
        _ => HttpResponse::json(404, &json!({"error": "unknown admin endpoint"})),
    }
}
