//! Tolerant JSON access for the OpenAPI's answers: a field of the wrong
//! JSON type reads as empty rather than failing the whole answer, because
//! the service is not consistent about numbers as strings and single
//! items as objects. Shared by the ECS and VPC calls.

use serde_json::Value;

/// A string field; numbers and booleans as text; null/missing as "".
pub(crate) fn s(v: &Value, key: &str) -> String {
    match v.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        _ => String::new(),
    }
}

/// An integer field (numbers or numeric strings); otherwise 0.
pub(crate) fn u(v: &Value, key: &str) -> u64 {
    match v.get(key) {
        Some(Value::Number(n)) => n
            .as_u64()
            .or_else(|| n.as_f64().map(|f| f.max(0.0) as u64))
            .unwrap_or(0),
        Some(Value::String(s)) => s.trim().parse().unwrap_or(0),
        _ => 0,
    }
}

/// A boolean field (also "true"/"false" strings).
pub(crate) fn b(v: &Value, key: &str) -> bool {
    match v.get(key) {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s.eq_ignore_ascii_case("true"),
        _ => false,
    }
}

/// The items at `path` (e.g. `["Tags", "Tag"]`): an array's items, a
/// single object as one item, and nothing for null, `{}`, `[]` or a
/// missing key anywhere along the path.
pub(crate) fn list<'a>(v: &'a Value, path: &[&str]) -> Vec<&'a Value> {
    let mut cur = v;
    for k in path {
        match cur.get(*k) {
            Some(next) => cur = next,
            None => return Vec::new(),
        }
    }
    match cur {
        Value::Array(a) => a.iter().collect(),
        Value::Object(o) if !o.is_empty() => vec![cur],
        _ => Vec::new(),
    }
}

/// Strings at `path` (items that are strings or numbers).
pub(crate) fn strings(v: &Value, path: &[&str]) -> Vec<String> {
    list(v, path)
        .into_iter()
        .filter_map(|x| match x {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
        .collect()
}
