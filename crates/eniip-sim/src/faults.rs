//! Fault rules (`POST /__sim/faults`, [`super::Simulator::add_fault`]):
//! what a rule says, how the admin JSON is read into one, and which rules
//! fire for a call.
//!
//! Invariants: a rule with a count fires at most that many times (its
//! `remaining` counts down, and at 0 it is skipped); every rule that fires
//! adds its latency, and the first error among them is the answer. Chance
//! comes from the world's seeded generator: a seeded run draws the same
//! chances in the same order.

use std::time::Duration;

use serde_json::Value;

use super::world::{err, message_of, status_of, ApiError};
use eniip_util::rand::Rng;

/// A fault rule (`POST /__sim/faults`).
#[derive(Debug, Clone, PartialEq)]
pub struct FaultRule {
    /// An Action, or `*`.
    pub action: String,
    /// The error code to answer (none: only `latency_ms`).
    pub code: Option<String>,
    /// The HTTP status (default: the code's real status).
    pub status: Option<u16>,
    /// Chance per matching call (0..=1).
    pub probability: f64,
    /// How many times it fires at most (none: unlimited).
    pub count: Option<u64>,
    /// Delay added when it fires.
    pub latency_ms: u64,
    /// The action is carried out first and only its answer is replaced by
    /// the error: a lost answer (the cloud did it, the caller heard a
    /// failure).
    pub after: bool,
}

impl FaultRule {
    /// An error on every call of `action`.
    pub fn error(action: &str, code: &str) -> FaultRule {
        FaultRule {
            action: action.into(),
            code: Some(code.into()),
            status: None,
            probability: 1.0,
            count: None,
            latency_ms: 0,
            after: false,
        }
    }

    /// From the admin JSON.
    pub(crate) fn from_json(v: &Value) -> Result<FaultRule, String> {
        let action = v
            .get("action")
            .and_then(Value::as_str)
            .ok_or("\"action\" (an Action or \"*\") is required")?;
        let code = match v.get("code") {
            None | Some(Value::Null) => None,
            Some(Value::String(c)) if !c.is_empty() => Some(c.clone()),
            _ => return Err("\"code\" must be a non-empty string".into()),
        };
        let latency_ms = match v.get("latency_ms") {
            None | Some(Value::Null) => 0,
            Some(x) => x
                .as_u64()
                .filter(|n| *n <= 600_000)
                .ok_or("\"latency_ms\" must be an integer up to 600000")?,
        };
        if code.is_none() && latency_ms == 0 {
            return Err("give \"code\", or \"latency_ms\" for a latency-only rule".into());
        }
        let status = match v.get("status") {
            None | Some(Value::Null) => None,
            Some(x) => Some(
                x.as_u64()
                    .filter(|s| (400..=599).contains(s))
                    .ok_or("\"status\" must be from 400 to 599")? as u16,
            ),
        };
        let probability = match v.get("probability") {
            None | Some(Value::Null) => 1.0,
            Some(x) => x
                .as_f64()
                .filter(|p| (0.0..=1.0).contains(p))
                .ok_or("\"probability\" must be from 0 to 1")?,
        };
        let count = match v.get("count") {
            None | Some(Value::Null) => None,
            Some(x) => Some(
                x.as_u64()
                    .ok_or("\"count\" must be a non-negative integer")?,
            ),
        };
        let after = match v.get("after") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            _ => return Err("\"after\" must be true or false".into()),
        };
        if after && code.is_none() {
            return Err("\"after\" needs a \"code\" to answer in place of the result".into());
        }
        Ok(FaultRule {
            action: action.to_string(),
            code,
            status,
            probability,
            count,
            latency_ms,
            after,
        })
    }
}

/// A fault rule with its remaining count.
#[derive(Debug, Clone)]
pub(crate) struct Fault {
    pub(crate) rule: FaultRule,
    pub(crate) remaining: Option<u64>,
}

impl Fault {
    /// `rule`, none of its `count` used yet.
    pub(crate) fn new(rule: FaultRule) -> Fault {
        let remaining = rule.count;
        Fault { rule, remaining }
    }
}

/// The fault rules that fire for `call` (an Action, or `metadata` for the
/// metadata listener; `*` matches every Action when `any_action`): the
/// latency they add and the first error among them, with its `after`.
pub(crate) fn pick(
    faults: &mut [Fault],
    rng: &mut Rng,
    call: &str,
    any_action: bool,
) -> (Duration, Option<(ApiError, bool)>) {
    let mut delay = Duration::ZERO;
    let mut fault = None;
    for f in faults.iter_mut() {
        if !(f.rule.action == call || any_action && f.rule.action == "*") {
            continue;
        }
        if f.remaining == Some(0) {
            continue;
        }
        if rng.unit() >= f.rule.probability {
            continue;
        }
        if let Some(n) = &mut f.remaining {
            *n -= 1;
        }
        delay += Duration::from_millis(f.rule.latency_ms);
        if fault.is_none() {
            if let Some(code) = &f.rule.code {
                let status = f.rule.status.unwrap_or_else(|| status_of(code));
                fault = Some((err(status, code, message_of(code)), f.rule.after));
            }
        }
    }
    (delay, fault)
}
