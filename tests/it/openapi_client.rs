//! eniipd's own signed OpenAPI client pointed at an emulator (the
//! in-process `Simulator`'s `client_options`, or eniip-sim's
//! [`crate::common::Sim::openapi_options`]), for the tests that call the
//! OpenAPI themselves: one attempt per call and 5 s per call, so every
//! fault and throttled answer shows as the emulator gave it.

// `pub` here means "for the tests", not an API.
#![allow(unreachable_pub)]

use std::time::Duration;

use eniip_cloud::aliyun::{AliyunCloud, AliyunCloudOptions};
use eniip_cloud::retry::RetryPolicy;
use eniip_cloud::rpc::{CallOpts, Timeouts};
use eniip_cloud::CloudError;
use serde_json::Value;

/// The client on `opts`, one attempt and 5 s per call.
pub fn client(opts: AliyunCloudOptions) -> AliyunCloud {
    AliyunCloud::new(AliyunCloudOptions {
        timeouts: Timeouts::all(Duration::from_secs(5)),
        retry: RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        },
        ..opts
    })
}

/// Owned `(key, value)` parameters.
pub fn params(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// One ECS action: the answer, or the error as the client reports it.
pub fn call(c: &AliyunCloud, action: &str, pairs: &[(&str, &str)]) -> Result<Value, CloudError> {
    c.ecs().call(action, &params(pairs), CallOpts::default())
}

/// An error answer's HTTP status and code; panics on success.
pub fn code(r: Result<Value, CloudError>) -> (u16, String) {
    let e = r.expect_err("an error answer");
    (
        e.http_status.unwrap_or(0),
        e.code.clone().unwrap_or_default(),
    )
}
