//! The metadata listener (`/latest/meta-data/...`), fed from the world as
//! it was `metadata_lag` ago, with token mode (`PUT /latest/api/token`),
//! hardened mode (tokenless GETs refused) and RAM role credentials.

use std::time::{Duration, Instant};

use serde_json::json;

use super::world::MdEni;
use super::Shared;
use eniip_httpd::{HttpRequest, HttpResponse};

const TOKEN_TTL_HEADER: &str = "X-aliyun-ecs-metadata-token-ttl-seconds";
const TOKEN_HEADER: &str = "X-aliyun-ecs-metadata-token";

fn not_found() -> HttpResponse {
    HttpResponse::text(404, "Not Found\n")
}

/// Handles one request on the metadata listener of the account's
/// `instance`-th instance (0: the first, the one of the `ready` line).
pub(crate) fn handle(sh: &Shared, req: &HttpRequest, instance: usize) -> HttpResponse {
    if req.path == "/latest/api/token" {
        if req.method != "PUT" {
            return HttpResponse::text(405, "Method Not Allowed\n");
        }
        if req.header("X-Forwarded-For").is_some() {
            return HttpResponse::text(403, "Forbidden\n");
        }
        let ttl = req
            .header(TOKEN_TTL_HEADER)
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|t| (1..=21_600).contains(t));
        let Some(ttl) = ttl else {
            return HttpResponse::text(400, "Missing or Invalid Parameters\n");
        };
        let token = sh.world.lock().rng().hex(24);
        let mut tokens = sh.md_tokens.lock();
        let now = Instant::now();
        tokens.retain(|_, until| *until > now);
        tokens.insert(token.clone(), now + Duration::from_secs(ttl));
        return HttpResponse::text(200, token);
    }
    if req.method != "GET" {
        return HttpResponse::text(405, "Method Not Allowed\n");
    }
    let token_ok = |t: &str| {
        sh.md_tokens
            .lock()
            .get(t)
            .is_some_and(|until| *until > Instant::now())
    };
    match req.header(TOKEN_HEADER) {
        Some(t) if !token_ok(t) => return HttpResponse::text(401, "Unauthorized\n"),
        Some(_) => {}
        None if sh.metadata_hardened => return HttpResponse::text(403, "Forbidden\n"),
        None => {}
    }
    // Fault rules for "metadata" apply here (never "*", which is the
    // OpenAPI's); the service answers with a bare status, no error code.
    let (delay, fault) = {
        let mut w = sh.world.lock();
        super::faults::pick(&mut sh.gateway.lock().faults, w.rng(), "metadata", false)
    };
    if !delay.is_zero() {
        std::thread::sleep(delay);
    }
    if let Some((e, _)) = fault {
        let reason = match e.status {
            429 => "Too Many Requests",
            500 => "Internal Server Error",
            502 => "Bad Gateway",
            503 => "Service Unavailable",
            504 => "Gateway Timeout",
            _ => "Error",
        };
        return HttpResponse::text(e.status, format!("{reason}\n"));
    }
    let Some(path) = req
        .path
        .strip_prefix("/latest/meta-data/")
        .or_else(|| (req.path == "/latest/meta-data").then_some(""))
    else {
        return not_found();
    };
    serve(sh, path, instance)
}

fn listing(items: &[&str]) -> HttpResponse {
    HttpResponse::text(200, items.join("\n"))
}

fn serve(sh: &Shared, path: &str, instance: usize) -> HttpResponse {
    let now = Instant::now();
    let (enis, ids) = {
        let mut w = sh.world.lock();
        let Some((id, itype)) = w.account().fleet().get(instance).cloned() else {
            return not_found();
        };
        let enis = w.metadata_enis(now, &id);
        let a = w.account();
        (
            enis,
            (
                id.clone(),
                a.vpc_id().to_string(),
                a.region().to_string(),
                a.zone().to_string(),
                itype.id,
                a.identity_of(&id),
            ),
        )
    };
    let (instance_id, vpc_id, region, zone, itype, me) = ids;
    let primary: Option<&MdEni> = enis.iter().find(|e| e.primary);
    let vpc_cidr = sh.vpc_cidr.clone();
    let text = |s: String| HttpResponse::text(200, s);
    match path {
        "" => listing(&[
            "dns-conf/",
            "hostname",
            "image-id",
            "instance-id",
            "owner-account-id",
            "region-id",
            "serial-number",
            "network-type",
            "zone-id",
            "instance/",
            "mac",
            "private-ipv4",
            "vpc-id",
            "vswitch-id",
            "vpc-cidr-block",
            "vswitch-cidr-block",
            "network/",
            "ram/",
        ]),
        "instance-id" => text(instance_id),
        "region-id" => text(region),
        "zone-id" => text(zone),
        "instance/" => listing(&["instance-name", "instance-type"]),
        "instance/instance-type" => text(itype.to_string()),
        "instance/instance-name" => text(me.instance_name),
        "hostname" => text(me.hostname),
        "image-id" => text(me.image_id.to_string()),
        "owner-account-id" => text(me.owner_id.to_string()),
        "serial-number" => text(me.serial_number),
        "network-type" => text("vpc".into()),
        "dns-conf/" => listing(&["nameservers"]),
        // The VPC resolvers every ECS instance is given.
        "dns-conf/nameservers" => text("100.100.2.136\n100.100.2.138".into()),
        "vpc-id" => text(vpc_id),
        "vpc-cidr-block" => text(vpc_cidr),
        "mac" => primary
            .map(|e| text(e.mac.clone()))
            .unwrap_or_else(not_found),
        "private-ipv4" => primary
            .and_then(|e| e.primary_ip)
            .map(|ip| text(ip.to_string()))
            .unwrap_or_else(not_found),
        "vswitch-id" => primary
            .map(|e| text(e.vswitch.clone()))
            .unwrap_or_else(not_found),
        "vswitch-cidr-block" => primary
            .and_then(|e| e.cidr)
            .map(|c| text(c.to_string()))
            .unwrap_or_else(not_found),
        "network/" => listing(&["interfaces/"]),
        "network/interfaces/" => listing(&["macs/"]),
        "network/interfaces/macs/" | "network/interfaces/macs" => text(
            enis.iter()
                .map(|e| format!("{}/", e.mac))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        "ram/" => listing(&["security-credentials/"]),
        "ram/security-credentials/" | "ram/security-credentials" => match &sh.ram_role {
            Some(r) => text(r.clone()),
            None => not_found(),
        },
        p if p.starts_with("ram/security-credentials/") => {
            let role = &p["ram/security-credentials/".len()..];
            match &sh.ram_role {
                Some(r) if r == role => {
                    let c = sh.sts_credentials();
                    HttpResponse::json(
                        200,
                        &json!({"AccessKeyId": c.id, "AccessKeySecret": c.secret, "SecurityToken": c.token,
                                "Expiration": eniip_util::time::format_utc(c.expires_unix),
                                "LastUpdated": eniip_util::time::format_utc(c.issued_unix), "Code": "Success"}),
                    )
                }
                _ => not_found(),
            }
        }
        p if p.starts_with("network/interfaces/macs/") => {
            let rest = &p["network/interfaces/macs/".len()..];
            let (mac, item) = rest.split_once('/').unwrap_or((rest, ""));
            let Some(e) = enis.iter().find(|e| e.mac.eq_ignore_ascii_case(mac)) else {
                return not_found();
            };
            eni_item(e, item, &vpc_id, &vpc_cidr)
        }
        _ => not_found(),
    }
}

fn eni_item(e: &MdEni, item: &str, vpc_id: &str, vpc_cidr: &str) -> HttpResponse {
    let text = |s: String| HttpResponse::text(200, s);
    match item {
        "" => {
            let mut items = vec![
                "network-interface-id",
                "primary-ip-address",
                "private-ipv4s",
                "netmask",
                "gateway",
                "vswitch-id",
                "vpc-id",
                "vswitch-cidr-block",
                "vpc-cidr-block",
            ];
            if !e.v4_prefixes.is_empty() {
                items.push("ipv4-prefixes");
            }
            if !e.v6_prefixes.is_empty() {
                items.push("ipv6-prefixes");
            }
            if e.cidr6.is_some() {
                items.extend([
                    "ipv6s",
                    "ipv6-gateway",
                    "vswitch-ipv6-cidr-block",
                    "vpc-ipv6-cidr-blocks",
                ]);
            }
            listing(&items)
        }
        "network-interface-id" => text(e.id.clone()),
        "primary-ip-address" => e
            .primary_ip
            .map(|ip| text(ip.to_string()))
            .unwrap_or_else(not_found),
        "private-ipv4s" => text(
            serde_json::to_string(&e.v4.iter().map(|a| a.to_string()).collect::<Vec<_>>())
                .unwrap_or_default(),
        ),
        // Assumed format (not confirmed by public material): the JSON list
        // of `private-ipv4s`, 404 when the ENI holds none, as `ipv6s`.
        "ipv4-prefixes" if !e.v4_prefixes.is_empty() => text(
            serde_json::to_string(
                &e.v4_prefixes
                    .iter()
                    .map(|a| format!("{a}/28"))
                    .collect::<Vec<_>>(),
            )
            .unwrap_or_default(),
        ),
        "netmask" => e
            .cidr
            .map(|c| text(c.netmask().to_string()))
            .unwrap_or_else(not_found),
        "gateway" => e
            .cidr
            .map(|c| text(c.gateway().to_string()))
            .unwrap_or_else(not_found),
        "vswitch-id" => text(e.vswitch.clone()),
        "vpc-id" => text(vpc_id.to_string()),
        "vswitch-cidr-block" => e
            .cidr
            .map(|c| text(c.to_string()))
            .unwrap_or_else(not_found),
        "vpc-cidr-block" => text(vpc_cidr.to_string()),
        "ipv6s" if !e.v6.is_empty() => text(format!(
            "[{}]",
            e.v6.iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(",")
        )),
        // As the metadata doc shows it, `x::/80`; several (eniipd asks
        // one) comma-separated (assumed: no public sample has two). 404
        // when the ENI holds none.
        "ipv6-prefixes" if !e.v6_prefixes.is_empty() => text(
            e.v6_prefixes
                .iter()
                .map(|a| format!("{a}/80"))
                .collect::<Vec<_>>()
                .join(","),
        ),
        "ipv6-gateway" => e
            .cidr6
            .map(|c| text(c.gateway().to_string()))
            .unwrap_or_else(not_found),
        "vswitch-ipv6-cidr-block" => e
            .cidr6
            .map(|c| text(c.to_string()))
            .unwrap_or_else(not_found),
        // The VPC's /56 around the vswitch's block, in the bracketed list
        // form of `ipv6s`.
        "vpc-ipv6-cidr-blocks" => e
            .cidr6
            .map(|c| {
                let base = std::net::Ipv6Addr::from(c.base & (u128::MAX << 72));
                text(format!("[{base}/56]"))
            })
            .unwrap_or_else(not_found),
        _ => not_found(),
    }
}
