//! The OpenAPI listener: request parsing (query, form or JSON body),
//! authentication (V3 or 1.0, in [`super::auth`]), fault rules (in
//! [`super::faults`]), latency, ClientToken idempotency, and the admin
//! endpoints under `/__sim/`. JSON is served whatever `Format` says (XML
//! is not emulated).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::faults::{self, Fault, FaultRule};
use super::world::{err, message_of, status_of, ApiError, Params};
use super::{auth, Shared};
use eniip_httpd::{HttpRequest, HttpResponse};
use eniip_util::encoding::parse_form;
use eniip_util::time::unix_secs;

/// Replay cache entry: parameter fingerprint and the answer.
type Replay = (String, Result<Value, ApiError>);

/// Per-listener mutable state besides the world.
#[derive(Debug, Default)]
pub(crate) struct Gateway {
    pub(crate) faults: Vec<Fault>,
    pub(crate) nonces: HashMap<String, Instant>,
    pub(crate) replays: HashMap<(String, String), Replay>,
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

/// How long a throttled client should wait, in ms (`x-acs-retry-after`,
/// which today's Tea SDKs turn into `ThrottlingException.retry_after`).
const RETRY_AFTER_MS: u64 = 1000;

fn error_response(
    sh: &Shared,
    action: &str,
    version: &str,
    e: &ApiError,
    request_id: String,
) -> HttpResponse {
    let (host, product) = if version == eniip_cloud::VPC_VERSION || action == "DescribeVSwitches" {
        (format!("vpc.{}.aliyuncs.com", sh.region), "Vpc")
    } else {
        (format!("ecs.{}.aliyuncs.com", sh.region), "Ecs")
    };
    let body = json!({
        "RequestId": request_id,
        "HostId": host,
        "Code": e.code,
        "Message": e.message,
        "Recommend": format!("https://api.aliyun.com/troubleshoot?q={}&product={product}&requestId={request_id}", e.code),
    });
    let mut r = HttpResponse::json(e.status, &body).with_header("x-acs-request-id", request_id);
    if e.code.starts_with("Throttling") {
        let reset = unix_secs() + 1;
        r = r
            .with_header("x-acs-retry-after", RETRY_AFTER_MS.to_string())
            .with_header(
                "x-ratelimit-user-api",
                format!("Limit:100,Remain:0,TimeLeft:{RETRY_AFTER_MS},Reset:{reset}"),
            );
    }
    r
}

/// The account's flow control: a call over its Action's quota is answered
/// `Throttling.User`, its retry hints saying when the window turns.
fn flow_step(sh: &Shared, action: &str, version: &str) -> Option<HttpResponse> {
    let wait = sh.flow.lock().admit(action, Instant::now()).err()?;
    let code = "Throttling.User";
    let e = err(status_of(code), code, message_of(code));
    let ms = (wait.as_millis() as u64).max(1);
    let reset = unix_secs() + ms.div_ceil(1000);
    let r = error_response(sh, action, version, &e, sh.world.lock().request_id())
        .with_header("x-acs-retry-after", ms.to_string())
        .with_header(
            "x-ratelimit-user-api",
            format!("Limit:1,Remain:0,TimeLeft:{ms},Reset:{reset}"),
        );
    Some(r)
}

/// Flattens a JSON body the Tea way: `a.b`, `list.1`, scalars as text.
fn flatten_json(prefix: &str, v: &Value, out: &mut Vec<(String, String)>) {
    let key = |k: &str| {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    };
    match v {
        Value::Object(m) => m.iter().for_each(|(k, v)| flatten_json(&key(k), v, out)),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, v)| flatten_json(&key(&(i + 1).to_string()), v, out)),
        Value::Null => {}
        Value::String(s) => out.push((prefix.to_string(), s.clone())),
        other => out.push((prefix.to_string(), other.to_string())),
    }
}

/// The parameters a POST body carries: a form, a JSON object, or nothing.
fn body_params(req: &HttpRequest) -> Result<Vec<(String, String)>, ApiError> {
    if req.method != "POST" || req.body.is_empty() {
        return Ok(Vec::new());
    }
    let ctype = req
        .header("content-type")
        .unwrap_or_default()
        .to_ascii_lowercase();
    if ctype.starts_with("application/json") {
        match serde_json::from_slice::<Value>(&req.body) {
            Ok(v @ Value::Object(_)) => {
                let mut out = Vec::new();
                flatten_json("", &v, &mut out);
                Ok(out)
            }
            _ => Err(err(
                400,
                "InvalidParameter",
                "The request body is not a valid JSON object.",
            )),
        }
    } else if ctype.is_empty() || ctype.starts_with("application/x-www-form-urlencoded") {
        std::str::from_utf8(&req.body)
            .ok()
            .and_then(parse_form)
            .ok_or_else(|| {
                err(
                    400,
                    "InvalidParameter",
                    "The request body is not a valid form.",
                )
            })
    } else {
        // Another payload (octet-stream) carries no parameters; it is
        // still covered by a V3 signature's content hash.
        Ok(Vec::new())
    }
}

/// A request refused before the world acts on it, with what it named of
/// itself (the error's host depends on the version).
struct Refused {
    action: String,
    version: String,
    error: ApiError,
}

impl Refused {
    fn early(error: ApiError) -> Refused {
        Refused {
            action: String::new(),
            version: String::new(),
            error,
        }
    }
}

/// An authenticated call, ready for the world.
struct Call {
    action: String,
    version: String,
    params: Params,
    v3: bool,
}

/// Handles one request on the OpenAPI listener: route, method and
/// parameters, authentication, then faults, replay and the world's answer.
pub(crate) fn handle(sh: &Shared, req: &HttpRequest) -> HttpResponse {
    if let Some(rest) = req.path.strip_prefix("/__sim/") {
        return admin(sh, req, rest);
    }
    match accept(sh, req) {
        Ok(call) => answer(sh, &call),
        Err(r) => {
            let rid = sh.world.lock().request_id();
            error_response(sh, &r.action, &r.version, &r.error, rid)
        }
    }
}

/// Everything that may refuse a request before it is counted: the path,
/// the method, the parameters, the signature and the action.
fn accept(sh: &Shared, req: &HttpRequest) -> Result<Call, Refused> {
    route(req).map_err(Refused::early)?;
    let (query, pairs) = read_params(req).map_err(Refused::early)?;
    let v3 = req.header("authorization").is_some();
    let mut params: Params = pairs.iter().cloned().collect();
    if v3 {
        // V3 carries the action and version in headers.
        for (header, name) in [("x-acs-action", "Action"), ("x-acs-version", "Version")] {
            if let Some(v) = req.header(header).filter(|v| !v.is_empty()) {
                params.insert(name.into(), v.to_string());
            }
        }
    }
    let action = params.get("Action").cloned().unwrap_or_default();
    let version = params.get("Version").cloned().unwrap_or_default();
    let authenticated = if v3 {
        auth::authenticate_v3(sh, req, &query)
    } else {
        auth::authenticate_v1(sh, &req.method, &pairs, &params)
    };
    if let Err(error) = authenticated {
        return Err(Refused {
            action,
            version,
            error,
        });
    }
    if action.is_empty() {
        return Err(Refused {
            action,
            version,
            error: err(400, "MissingParameter", "The input parameter \"Action\" that is mandatory for processing this request is not supplied."),
        });
    }
    Ok(Call {
        action,
        version,
        params,
        v3,
    })
}

/// Only `/`, by GET or POST.
fn route(req: &HttpRequest) -> Result<(), ApiError> {
    if req.path != "/" {
        return Err(err(
            404,
            "InvalidApi.NotFound",
            "Specified api is not found, please check your url and method.",
        ));
    }
    if req.method != "GET" && req.method != "POST" {
        return Err(err(
            400,
            "UnsupportedHTTPMethod",
            format!("HTTP method {} is not supported.", req.method),
        ));
    }
    Ok(())
}

/// Parameters in the order sent.
type Pairs = Vec<(String, String)>;

/// The query's pairs, and the query's and the body's together (at most
/// 500).
fn read_params(req: &HttpRequest) -> Result<(Pairs, Pairs), ApiError> {
    let query = parse_form(&req.query).ok_or_else(|| {
        err(
            400,
            "InvalidParameter",
            "The query string is not properly encoded.",
        )
    })?;
    let mut pairs = query.clone();
    pairs.extend(body_params(req)?);
    if pairs.len() > 500 {
        return Err(err(400, "InvalidParameter", "Too many parameters."));
    }
    Ok((query, pairs))
}

/// A counted call: its faults and latency, then the world's answer (or a
/// replay of it), then a fault that loses the answer.
fn answer(sh: &Shared, call: &Call) -> HttpResponse {
    if let Some(r) = flow_step(sh, &call.action, &call.version) {
        return r;
    }
    let (delay, fault) = count_and_pick_faults(sh, call);
    if !delay.is_zero() {
        std::thread::sleep(delay);
    }
    // A fault "after" the action replaces only its answer (a lost answer).
    let lost_answer = match fault {
        Some((e, false)) => {
            let rid = sh.world.lock().request_id();
            return error_response(sh, &call.action, &call.version, &e, rid);
        }
        Some((e, true)) => Some(e),
        None => None,
    };
    let (result, request_id) = dispatch(sh, call);
    let reads_only = call.action.starts_with("Describe") || call.action.starts_with("List");
    if result.is_ok() && !reads_only {
        sh.changed();
    }
    if let Some(e) = lost_answer {
        return error_response(sh, &call.action, &call.version, &e, request_id);
    }
    match result {
        Ok(mut v) => {
            if let Value::Object(m) = &mut v {
                m.insert("RequestId".into(), Value::String(request_id.clone()));
            }
            HttpResponse::json(200, &v).with_header("x-acs-request-id", request_id)
        }
        Err(e) => error_response(sh, &call.action, &call.version, &e, request_id),
    }
}

/// Counts the call (by action, by prefix use, by signature) and picks its
/// faults; the latency is slept by the caller, outside the lock.
fn count_and_pick_faults(sh: &Shared, call: &Call) -> (Duration, Option<(ApiError, bool)>) {
    let mut w = sh.world.lock();
    // Counted apart: how many calls carried prefixes is what prefix
    // mode's call economy is judged by.
    let prefixes = call
        .params
        .keys()
        .any(|k| k == "Ipv4PrefixCount" || k.starts_with("Ipv4Prefix."));
    w.count_call(&call.action, if call.v3 { "v3" } else { "v1" }, prefixes);
    let (extra, fault) = faults::pick(&mut sh.gateway.lock().faults, w.rng(), &call.action, true);
    (sh.latency + extra, fault)
}

/// The world acts, or a ClientToken's earlier success is replayed (the
/// same token with other parameters is refused); with the request id.
fn dispatch(sh: &Shared, call: &Call) -> (Result<Value, ApiError>, String) {
    let fingerprint = || {
        call.params
            .iter()
            .filter(|(k, _)| !VOLATILE.contains(&k.as_str()))
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&")
    };
    let key = call
        .params
        .get("ClientToken")
        .filter(|t| !t.is_empty() && IDEMPOTENT.contains(&call.action.as_str()))
        .map(|t| (call.action.clone(), t.clone()));
    let now = Instant::now();
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
            let r = w.act(&call.action, &call.version, &call.params, now);
            // Only successes are remembered: a refused request may be
            // retried with the same token once the cause is gone.
            if let (Some(k), true) = (key, r.is_ok()) {
                if g.replays.len() > 10_000 {
                    g.replays.clear();
                }
                g.replays.insert(k, (fingerprint(), r.clone()));
            }
            r
        }
    };
    (result, request_id)
}

fn admin(sh: &Shared, req: &HttpRequest, rest: &str) -> HttpResponse {
    let bad = |why: String| HttpResponse::json(400, &json!({"error": why}));
    match (req.method.as_str(), rest) {
        ("GET", "state") => HttpResponse::json(200, &sh.state_json()),
        ("POST", "faults") => {
            let v: Value = match serde_json::from_slice(&req.body) {
                Ok(v) => v,
                Err(e) => return bad(format!("body is not JSON: {e}")),
            };
            match FaultRule::from_json(&v) {
                Ok(rule) => {
                    sh.gateway.lock().faults.push(Fault::new(rule));
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
            let usage = "expected {\"id\": \"vsw-...\", \"free\": N, \"free_prefixes\": N or null, \"free_v6_prefixes\": N or null} (any of the three)";
            let Some(id) = v.get("id").and_then(Value::as_str) else {
                return bad(usage.into());
            };
            let free = v.get("free").map(|f| f.as_u64().ok_or(()));
            // `free_prefixes`: a number caps the /28s still to be carved
            // (0: a fragmented vswitch), null lifts the cap.
            // `free_v6_prefixes` likewise for IPv6 /80s (0: no room).
            let cap = |key: &str| {
                v.get(key).map(|f| {
                    if f.is_null() {
                        Ok(None)
                    } else {
                        f.as_u64().map(Some).ok_or(())
                    }
                })
            };
            let (prefixes, v6_prefixes) = (cap("free_prefixes"), cap("free_v6_prefixes"));
            let (free, prefixes, v6_prefixes) = match (free, prefixes, v6_prefixes) {
                (None, None, None)
                | (Some(Err(())), _, _)
                | (_, Some(Err(())), _)
                | (_, _, Some(Err(()))) => return bad(usage.into()),
                (f, p, q) => (
                    f.and_then(Result::ok),
                    p.and_then(Result::ok),
                    q.and_then(Result::ok),
                ),
            };
            let known = {
                let mut w = sh.world.lock();
                free.is_none_or(|f| w.set_free(id, f))
                    && prefixes.is_none_or(|p| w.set_free_prefixes(id, p))
                    && v6_prefixes.is_none_or(|p| w.set_free_v6_prefixes(id, p))
            };
            if known {
                sh.changed();
                HttpResponse::json(200, &json!({"ok": true}))
            } else {
                HttpResponse::json(404, &json!({"error": format!("no vswitch {id}")}))
            }
        }
        ("POST", "metadata") => {
            let lag = serde_json::from_slice::<Value>(&req.body)
                .ok()
                .and_then(|v| v.get("lag_ms").and_then(Value::as_u64));
            let Some(ms) = lag else {
                return bad("expected {\"lag_ms\": N}".into());
            };
            sh.world
                .lock()
                .set_metadata_lag(std::time::Duration::from_millis(ms));
            HttpResponse::json(200, &json!({"ok": true}))
        }
        _ => HttpResponse::json(404, &json!({"error": "unknown admin endpoint"})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_bodies_flatten_the_tea_way() {
        let v = json!({"VSwitchId": "vsw-1", "SecurityGroupIds": ["sg-1", "sg-2"],
            "Tag": [{"Key": "k", "Value": "v"}], "Count": 2, "Flag": true, "Gone": null});
        let mut out = Vec::new();
        flatten_json("", &v, &mut out);
        out.sort();
        let want: Vec<(String, String)> = [
            ("Count", "2"),
            ("Flag", "true"),
            ("SecurityGroupIds.1", "sg-1"),
            ("SecurityGroupIds.2", "sg-2"),
            ("Tag.1.Key", "k"),
            ("Tag.1.Value", "v"),
            ("VSwitchId", "vsw-1"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(out, want);
    }

    #[test]
    fn fault_messages_are_the_services() {
        assert_eq!(
            message_of("Throttling.User"),
            "Request was denied due to user flow control."
        );
        assert_eq!(status_of("Throttling.User"), 400);
        assert_eq!(message_of("Made.Up"), "The request failed: Made.Up.");
        for code in [
            "Throttling",
            "InternalError",
            "ServiceUnavailable",
            "Made.Up",
        ] {
            assert!(!message_of(code).to_ascii_lowercase().contains("sim"));
        }
    }
}
