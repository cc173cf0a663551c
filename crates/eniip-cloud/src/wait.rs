//! Wait-with-deadline helpers for the cloud's eventual consistency.
//!
//! OpenAPI polls back off (100 ms, x1.5, up to 1 s): they count against
//! the account's flow control. Metadata polls do not (the service is the
//! instance's own, outside it), so they run every 50 ms: an ENI or an
//! address is seen within 50 ms of metadata showing it, not up to a
//! second later (a node's first pod waits for exactly this).

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use super::{CloudApi, CloudError, CloudErrorKind, Eni, EniQuery, EniStatus, MetadataApi};

/// How often a wait asks.
#[derive(Debug, Clone, Copy)]
enum Every {
    /// The OpenAPI: backing off.
    OpenApi,
    /// Metadata: a fixed short step.
    Metadata,
}

/// The step between metadata polls.
const METADATA_STEP: Duration = Duration::from_millis(50);

/// Asks `probe` until it has an answer, `every` so often, until
/// `deadline` (then `Timeout`, "timed out waiting for `what`").
fn poll<T>(
    what: &str,
    every: Every,
    deadline: Instant,
    mut probe: impl FnMut() -> Result<Option<T>, CloudError>,
) -> Result<T, CloudError> {
    let mut delay = match every {
        Every::OpenApi => Duration::from_millis(100),
        Every::Metadata => METADATA_STEP,
    };
    loop {
        if let Some(v) = probe()? {
            return Ok(v);
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(CloudError::new(
                CloudErrorKind::Timeout,
                "wait",
                format!("timed out waiting for {what}"),
            ));
        }
        std::thread::sleep(delay.min(deadline - now));
        if let Every::OpenApi = every {
            delay = (delay * 3 / 2).min(Duration::from_secs(1));
        }
    }
}

/// Asks the OpenAPI through `probe` (backing off) until it has an answer
/// or `deadline` passes.
pub(crate) fn poll_openapi<T>(
    what: &str,
    deadline: Instant,
    probe: impl FnMut() -> Result<Option<T>, CloudError>,
) -> Result<T, CloudError> {
    poll(what, Every::OpenApi, deadline, probe)
}

/// Asks metadata through `probe` (every [`METADATA_STEP`]) until it has an
/// answer or `deadline` passes.
pub fn poll_metadata<T>(
    what: &str,
    deadline: Instant,
    probe: impl FnMut() -> Result<Option<T>, CloudError>,
) -> Result<T, CloudError> {
    poll(what, Every::Metadata, deadline, probe)
}

/// Waits until metadata lists every given address on `mac`.
pub fn wait_ips_present(
    md: &dyn MetadataApi,
    mac: &str,
    v4: &[Ipv4Addr],
    v6: &[Ipv6Addr],
    deadline: Instant,
) -> Result<(), CloudError> {
    wait_ips(md, mac, v4, v6, true, deadline)
}

/// Waits until metadata lists none of the given addresses on `mac`.
pub fn wait_ips_absent(
    md: &dyn MetadataApi,
    mac: &str,
    v4: &[Ipv4Addr],
    v6: &[Ipv6Addr],
    deadline: Instant,
) -> Result<(), CloudError> {
    wait_ips(md, mac, v4, v6, false, deadline)
}

/// Waits until each given address is `listed` on `mac` or not; an ENI
/// metadata does not know (yet, or any more) lists none.
fn wait_ips(
    md: &dyn MetadataApi,
    mac: &str,
    v4: &[Ipv4Addr],
    v6: &[Ipv6Addr],
    listed: bool,
    deadline: Instant,
) -> Result<(), CloudError> {
    let what = if listed {
        format!("addresses on {mac} in metadata")
    } else {
        format!("addresses to leave {mac} in metadata")
    };
    poll(&what, Every::Metadata, deadline, || {
        match md.eni_ips(mac, !v6.is_empty()) {
            Ok((have4, have6)) => Ok((v4.iter().all(|a| have4.contains(a) == listed)
                && v6.iter().all(|a| have6.contains(a) == listed))
            .then_some(())),
            Err(e) if e.kind == CloudErrorKind::NotFound => Ok((!listed).then_some(())),
            Err(e) => Err(e),
        }
    })
}

/// Waits until metadata lists `mac` among the attached interfaces.
pub fn wait_mac_present(
    md: &dyn MetadataApi,
    mac: &str,
    deadline: Instant,
) -> Result<(), CloudError> {
    poll(
        &format!("{mac} in metadata"),
        Every::Metadata,
        deadline,
        || {
            Ok(md
                .macs()?
                .iter()
                .any(|m| m.eq_ignore_ascii_case(mac))
                .then_some(()))
        },
    )
}

fn describe_one(api: &dyn CloudApi, eni_id: &str) -> Result<Option<Eni>, CloudError> {
    let q = EniQuery {
        eni_ids: vec![eni_id.to_string()],
        ..EniQuery::default()
    };
    Ok(api.describe_enis(&q)?.into_iter().find(|e| e.id == eni_id))
}

/// Waits until the OpenAPI shows the ENI in `want`; `NotFound` if it is gone.
pub fn wait_eni_status(
    api: &dyn CloudApi,
    eni_id: &str,
    want: EniStatus,
    deadline: Instant,
) -> Result<Eni, CloudError> {
    wait_eni_status_by(eni_id, want, deadline, || describe_one(api, eni_id))
}

/// [`wait_eni_status`], the ENI read by `describe` (a batched describe,
/// say): `None` when the OpenAPI does not list it.
pub fn wait_eni_status_by(
    eni_id: &str,
    want: EniStatus,
    deadline: Instant,
    mut describe: impl FnMut() -> Result<Option<Eni>, CloudError>,
) -> Result<Eni, CloudError> {
    poll_openapi(
        &format!("{eni_id} to be {want}"),
        deadline,
        || match describe()? {
            Some(e) if e.status == want => Ok(Some(e)),
            Some(_) => Ok(None),
            None => Err(CloudError::new(
                CloudErrorKind::NotFound,
                "DescribeNetworkInterfaces",
                format!("{eni_id} disappeared while waiting for {want}"),
            )),
        },
    )
}

/// Waits until the OpenAPI no longer lists the ENI.
pub fn wait_eni_gone(
    api: &dyn CloudApi,
    eni_id: &str,
    deadline: Instant,
) -> Result<(), CloudError> {
    poll(
        &format!("{eni_id} to be deleted"),
        Every::OpenApi,
        deadline,
        || Ok(describe_one(api, eni_id)?.is_none().then_some(())),
    )
}
