//! Request parameters and API errors: the checks every action shares,
//! answering with the real codes (MissingParameter, InvalidParameter).

use std::collections::BTreeMap;

/// An error answer of the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError {
    /// HTTP status.
    pub(crate) status: u16,
    /// `Code`.
    pub(crate) code: String,
    /// `Message`.
    pub(crate) message: String,
}

/// Shorthand for an [`ApiError`].
pub(crate) fn err(status: u16, code: &str, message: impl Into<String>) -> ApiError {
    ApiError {
        status,
        code: code.into(),
        message: message.into(),
    }
}

/// The real status of an error code (for fault rules without one).
pub(crate) fn status_of(code: &str) -> u16 {
    match code {
        "InternalError" => 500,
        "ServiceUnavailable" => 503,
        c if c.starts_with("Throttling") => 400,
        c if c.ends_with(".NotFound") => 404,
        "InvalidVSwitchId.IpNotEnough"
        | "Operation.Conflict"
        | "EniPerInstanceLimitExceeded"
        | "MaxEniCountExceeded" => 403,
        c if c.starts_with("InvalidIp.")
            || c.starts_with("InvalidOperation.Ipv")
            || c.starts_with("Forbidden") =>
        {
            403
        }
        "InvalidOperation.Conflict" => 409,
        _ => 400,
    }
}

/// The message the real service sends with a code (for fault rules, which
/// carry only the code). Where no public source gives the text, a neutral
/// sentence naming the code.
pub(crate) fn message_of(code: &str) -> String {
    let m = match code {
        "Throttling" => "Request was denied due to request throttling.",
        "Throttling.User" => "Request was denied due to user flow control.",
        "Throttling.Api" => "Request was denied due to api flow control.",
        "InternalError" => {
            "The request processing has failed due to some unknown error, exception or failure."
        }
        "ServiceUnavailable" => "The request has failed due to a temporary failure of the server.",
        "Operation.Conflict" => "ecs task is conflicted.",
        "InvalidOperation.Conflict" => {
            "Request was denied due to conflict with a previous request, please try again later."
        }
        "InvalidVSwitchId.IpNotEnough" => "The specified VSwitch has not enough IpAddress.",
        "QuotaExceeded.PrivateIpAddress" => "Don't have enough private IPs in this switch",
        "SignatureDoesNotMatch" => "Specified signature is not matched with our calculation.",
        "SignatureNonceUsed" => "Specified signature nonce was used already.",
        "InvalidTimeStamp.Expired" => "Specified time stamp or date value is expired.",
        "InvalidAccessKeyId.NotFound" => "Specified access key is not found.",
        "InvalidAccessKeyId.Inactive" => "Specified access key is disabled.",
        "Forbidden.RAM" => {
            "User not authorized to operate on the specified resource, or this API doesn't support RAM."
        }
        "IncorrectInstanceStatus" => {
            "The current status of the resource does not support this operation."
        }
        "InvalidOperation.InvalidEniState" => {
            "The operation is not allowed in the current ENI state."
        }
        "InvalidEniId.NotFound" => "The specified NetworkInterfaceId does not exist.",
        "InvalidInstanceId.NotFound" => "The specified InstanceId does not exist.",
        other => return format!("The request failed: {other}."),
    };
    m.to_string()
}

/// Request parameters (query and form merged).
pub(crate) type Params = BTreeMap<String, String>;

pub(super) fn missing(name: &str) -> ApiError {
    err(400, "MissingParameter", format!("The input parameter \"{name}\" that is mandatory for processing this request is not supplied."))
}

pub(super) fn invalid(name: &str, why: &str) -> ApiError {
    err(
        400,
        "InvalidParameter",
        format!("The specified parameter \"{name}\" is not valid: {why}."),
    )
}

pub(super) fn need<'a>(p: &'a Params, name: &str) -> Result<&'a str, ApiError> {
    p.get(name)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| missing(name))
}

pub(super) fn int(p: &Params, name: &str, lo: u64, hi: u64) -> Result<Option<u64>, ApiError> {
    match p.get(name) {
        None => Ok(None),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(n) if (lo..=hi).contains(&n) => Ok(Some(n)),
            _ => Err(invalid(
                name,
                &format!("expected an integer from {lo} to {hi}"),
            )),
        },
    }
}

/// What a call asks for: a count of any free ones, or these (as given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Asked {
    /// Any free ones.
    Count(usize),
    /// These ones.
    List(Vec<String>),
}

impl Asked {
    /// How many.
    pub(crate) fn len(&self) -> usize {
        match self {
            Asked::Count(n) => *n,
            Asked::List(l) => l.len(),
        }
    }
}

/// `list_name.N` (up to 10) or `count_key` (1 to 10), never both, as the
/// real API refuses; None when neither is given.
pub(super) fn asked(
    p: &Params,
    list_name: &str,
    count_key: &str,
) -> Result<Option<Asked>, ApiError> {
    let wanted = list(p, list_name, 10)?;
    let count = int(p, count_key, 1, 10)?;
    match (count, wanted.is_empty()) {
        (None, true) => Ok(None),
        (Some(n), true) => Ok(Some(Asked::Count(n as usize))),
        (None, false) => Ok(Some(Asked::List(wanted))),
        (Some(_), false) => Err(invalid(
            count_key,
            &format!("give {count_key} or {list_name}.N, not both"),
        )),
    }
}

/// `Name.1`, `Name.2`, ... (1-based, at most `max`).
pub(super) fn list(p: &Params, name: &str, max: usize) -> Result<Vec<String>, ApiError> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let prefix = format!("{name}.");
    for (k, v) in p {
        if let Some(n) = k.strip_prefix(&prefix) {
            match n.parse::<usize>() {
                Ok(i) if (1..=max).contains(&i) => out.push((i, v.clone())),
                _ => return Err(invalid(k, &format!("the index must be from 1 to {max}"))),
            }
        }
    }
    out.sort();
    Ok(out.into_iter().map(|(_, v)| v).collect())
}

/// A `Tag.N` filter: every given key carried, with the given value when
/// one is given (a key alone matches any value, as the OpenAPI does).
pub(super) fn tags_match(filter: &[(String, String)], tags: &[(String, String)]) -> bool {
    filter.iter().all(|(k, v)| {
        tags.iter()
            .any(|(ek, ev)| ek == k && (v.is_empty() || ev == v))
    })
}

pub(super) fn tags(p: &Params) -> Result<Vec<(String, String)>, ApiError> {
    let mut by_index: BTreeMap<usize, (String, String)> = BTreeMap::new();
    for (k, v) in p {
        let Some(rest) = k.strip_prefix("Tag.") else {
            continue;
        };
        let (n, field) = rest
            .split_once('.')
            .ok_or_else(|| invalid(k, "expected Tag.N.Key or Tag.N.Value"))?;
        let i: usize = n
            .parse()
            .ok()
            .filter(|i| (1..=20).contains(i))
            .ok_or_else(|| invalid(k, "the index must be from 1 to 20"))?;
        let e = by_index.entry(i).or_default();
        match field {
            "Key" => e.0 = v.clone(),
            "Value" => e.1 = v.clone(),
            _ => return Err(invalid(k, "expected Tag.N.Key or Tag.N.Value")),
        }
    }
    let mut out = Vec::new();
    for (i, (k, v)) in by_index {
        let lower = k.to_ascii_lowercase();
        if k.is_empty() || k.len() > 128 || lower.starts_with("aliyun") || lower.starts_with("acs:")
        {
            return Err(err(
                400,
                "InvalidTagKey.Malformed",
                format!("Tag.{i}.Key is not valid."),
            ));
        }
        out.push((k, v));
    }
    Ok(out)
}

/// The prefix parameters of a call (`Ipv4PrefixCount` or `Ipv4Prefix.N`),
/// if any; both forms at once is refused as the real API does.
pub(super) fn prefix_request(p: &Params) -> Result<Option<Asked>, ApiError> {
    asked(p, "Ipv4Prefix", "Ipv4PrefixCount")
}

/// The IPv6 prefix parameters of a call (`Ipv6PrefixCount` or
/// `Ipv6Prefix.N`), if any; both forms at once is refused.
pub(super) fn v6_prefix_request(p: &Params) -> Result<Option<Asked>, ApiError> {
    asked(p, "Ipv6Prefix", "Ipv6PrefixCount")
}

/// The answer to a call that mixes IPv6 prefixes and IPv6 addresses.
pub(super) fn mixed_v6_prefixes() -> ApiError {
    invalid(
        "Ipv6Prefix",
        "IPv6 prefixes and IPv6 addresses cannot be given in one call",
    )
}

/// The answer to a call that mixes prefixes and single addresses.
pub(super) fn mixed_prefixes() -> ApiError {
    invalid(
        "Ipv4Prefix",
        "IPv4 prefixes and private IP addresses cannot be given in one call",
    )
}
