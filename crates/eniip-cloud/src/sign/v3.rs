//! Signature V3, ACS3-HMAC-SHA256: the default of today's official SDKs
//! (darabonba/tea-openapi `DoRequest`).
//!
//! CanonicalRequest = `METHOD \n URI \n canonical query \n canonical headers
//! \n signed header names \n hex SHA-256 of the body`; StringToSign =
//! `ACS3-HMAC-SHA256 \n hex SHA-256 of the CanonicalRequest`; the signature
//! is the hex HMAC-SHA256 of that keyed with the bare secret. The canonical
//! query is every query parameter, sorted by name, each side percent-encoded
//! (the same `%20`/`%2A`/`~` rules as 1.0), empty values kept as `k=`.
//! Canonical headers are the signed ones, names lowercased, values trimmed,
//! repeated headers joined with `,` in sorted order, each line `name:value\n`.
//! The signed set is the sender's choice (the Python SDK signs every header
//! it sets); it travels in the `Authorization` header, so a verifier takes
//! it from there.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use eniip_util::encoding::percent_encode;

/// The algorithm name, first word of `Authorization` and of StringToSign.
pub const ALGORITHM: &str = "ACS3-HMAC-SHA256";

/// Lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

/// Hex SHA-256 of a body (`x-acs-content-sha256`; the empty body's is
/// `e3b0c442...b855`).
pub fn content_sha256(body: &[u8]) -> String {
    hex(&Sha256::digest(body))
}

/// The canonical query string: `k=v` sorted by name (then value), encoded.
pub(crate) fn canonical_query<K: AsRef<str>, V: AsRef<str>>(params: &[(K, V)]) -> String {
    let mut pairs: Vec<(String, String)> = params
        .iter()
        .map(|(k, v)| (percent_encode(k.as_ref()), percent_encode(v.as_ref())))
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// Would a client sign this header? (`host`, `content-type`, `x-acs-*`,
/// the set every official SDK signs at least.)
pub(crate) fn signs_by_default(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n == "host" || n == "content-type" || n.starts_with("x-acs-")
}

/// Canonical headers and the `;`-joined signed names, for the headers named
/// in `signed` (lowercase, any order). A signed name absent from `headers`
/// contributes `name:` with an empty value, as a verifier must.
pub fn canonical_headers<K: AsRef<str>, V: AsRef<str>>(
    headers: &[(K, V)],
    signed: &[String],
) -> (String, String) {
    let mut names: Vec<String> = signed.iter().map(|s| s.to_ascii_lowercase()).collect();
    names.sort();
    names.dedup();
    let mut out = String::new();
    for name in &names {
        let mut values: Vec<&str> = headers
            .iter()
            .filter(|(k, _)| k.as_ref().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_ref().trim())
            .collect();
        values.sort_unstable();
        out.push_str(name);
        out.push(':');
        out.push_str(&values.join(","));
        out.push('\n');
    }
    (out, names.join(";"))
}

/// The CanonicalRequest.
pub fn canonical_request<K: AsRef<str>, V: AsRef<str>, H: AsRef<str>, W: AsRef<str>>(
    method: &str,
    path: &str,
    query: &[(K, V)],
    headers: &[(H, W)],
    signed: &[String],
    payload_hash: &str,
) -> String {
    let (canon_headers, signed_names) = canonical_headers(headers, signed);
    let uri = if path.is_empty() { "/" } else { path };
    format!(
        "{method}\n{uri}\n{}\n{canon_headers}\n{signed_names}\n{payload_hash}",
        canonical_query(query)
    )
}

/// StringToSign of a CanonicalRequest.
pub fn string_to_sign(canonical_request: &str) -> String {
    format!(
        "{ALGORITHM}\n{}",
        hex(&Sha256::digest(canonical_request.as_bytes()))
    )
}

/// Hex HMAC-SHA256 of `string_to_sign` keyed with the secret.
pub fn signature(secret: &str, string_to_sign: &str) -> String {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes())
        .expect("HMAC takes any key length");
    mac.update(string_to_sign.as_bytes());
    hex(&mac.finalize().into_bytes())
}

/// The `Authorization` header value.
pub fn authorization(access_key_id: &str, signed_names: &str, signature: &str) -> String {
    format!(
        "{ALGORITHM} Credential={access_key_id},SignedHeaders={signed_names},Signature={signature}"
    )
}

/// An `Authorization` header taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    /// The first word (`ACS3-HMAC-SHA256` unless a client sent another).
    pub algorithm: String,
    /// The access key id.
    pub credential: String,
    /// Lowercased signed header names, as listed.
    pub signed_headers: Vec<String>,
    /// The hex signature.
    pub signature: String,
}

/// Parses `ALGO Credential=..,SignedHeaders=a;b,Signature=..`; None when a
/// part is missing or empty.
pub fn parse_authorization(value: &str) -> Option<Authorization> {
    let (algorithm, rest) = value.trim().split_once(' ')?;
    let (mut credential, mut signed, mut signature) = (None, None, None);
    for part in rest.split(',') {
        let (k, v) = part.trim().split_once('=')?;
        match k.trim() {
            "Credential" => credential = Some(v.trim().to_string()),
            "SignedHeaders" => signed = Some(v.trim().to_string()),
            "Signature" => signature = Some(v.trim().to_string()),
            _ => {}
        }
    }
    let signed_headers: Vec<String> = signed?
        .split(';')
        .filter(|s| !s.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    let (credential, signature) = (credential?, signature?);
    if credential.is_empty() || signature.is_empty() || signed_headers.is_empty() {
        return None;
    }
    Some(Authorization {
        algorithm: algorithm.to_string(),
        credential,
        signed_headers,
        signature,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn empty_body_hash() {
        assert_eq!(content_sha256(b""), EMPTY_SHA256);
    }

    /// The published example of the V3 signature documentation
    /// (RunInstances, cn-shanghai).
    #[test]
    fn published_vector() {
        let query = [
            (
                "ImageId",
                "win2019_1809_x64_dtc_zh-cn_40G_alibase_20230811.vhd",
            ),
            ("RegionId", "cn-shanghai"),
        ];
        let headers = [
            ("host", "ecs.cn-shanghai.aliyuncs.com"),
            ("x-acs-action", "RunInstances"),
            ("x-acs-content-sha256", EMPTY_SHA256),
            ("x-acs-date", "2023-10-26T09:01:01Z"),
            ("x-acs-signature-nonce", "d410180a5abf7fe235dd9b74aca91fc0"),
            ("x-acs-version", "2014-05-26"),
        ];
        let signed: Vec<String> = headers.iter().map(|(k, _)| k.to_string()).collect();
        let creq = canonical_request("POST", "/", &query, &headers, &signed, EMPTY_SHA256);
        assert_eq!(
            creq,
            "POST\n/\nImageId=win2019_1809_x64_dtc_zh-cn_40G_alibase_20230811.vhd&RegionId=cn-shanghai\n\
             host:ecs.cn-shanghai.aliyuncs.com\nx-acs-action:RunInstances\n\
             x-acs-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n\
             x-acs-date:2023-10-26T09:01:01Z\nx-acs-signature-nonce:d410180a5abf7fe235dd9b74aca91fc0\n\
             x-acs-version:2014-05-26\n\n\
             host;x-acs-action;x-acs-content-sha256;x-acs-date;x-acs-signature-nonce;x-acs-version\n\
             e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            signature("YourAccessKeySecret", &string_to_sign(&creq)),
            "e521358f7776c97df52e6b2891a8bc73026794a071b50c3323388c4e0df64804"
        );
    }

    /// darabonba `Test_GetAuthorization`: empty method and path, an empty
    /// query value, two spellings of one header joined in sorted order.
    #[test]
    fn darabonba_vector() {
        let query = [("test", "ok"), ("empty", "")];
        let headers = [("x-acs-test", "http"), ("x-acs-TEST", "https")];
        let payload = "55e12e91650d2fec56ec74e1d3e4ddbfce2ef3a65890c2a19ecf88a307e76a23";
        let creq = canonical_request("", "", &query, &headers, &s(&["x-acs-test"]), payload);
        assert!(creq.starts_with("\n/\nempty=&test=ok\nx-acs-test:http,https\n"));
        let auth = authorization(
            "acesskey",
            "x-acs-test",
            &signature("secret", &string_to_sign(&creq)),
        );
        assert_eq!(
            auth,
            "ACS3-HMAC-SHA256 Credential=acesskey,SignedHeaders=x-acs-test,\
             Signature=4ab59fffe3c5738ff8a2729f90cc04fe18b02a4b15b2102cbaf92f9ff3df2ea3"
        );
    }

    #[test]
    fn query_is_sorted_and_encoded() {
        let q = canonical_query(&[
            ("Tag.2.Key", "b c"),
            ("Tag.10.Key", "x*y~z"),
            ("Tag.1.Key", "a/b"),
        ]);
        assert_eq!(q, "Tag.1.Key=a%2Fb&Tag.10.Key=x%2Ay~z&Tag.2.Key=b%20c");
    }

    #[test]
    fn authorization_round_trip() {
        let a = authorization("LTAIx", "host;x-acs-date", "abc");
        let p = parse_authorization(&a).unwrap();
        assert_eq!(p.algorithm, ALGORITHM);
        assert_eq!(p.credential, "LTAIx");
        assert_eq!(p.signed_headers, s(&["host", "x-acs-date"]));
        assert_eq!(p.signature, "abc");
        for bad in [
            "",
            "ACS3-HMAC-SHA256",
            "ACS3-HMAC-SHA256 Credential=a,Signature=b",
            "ACS3-HMAC-SHA256 Credential=,SignedHeaders=host,Signature=b",
            "ACS3-HMAC-SHA256 Credential=a,SignedHeaders=host,Signature=",
            "ACS3-HMAC-SHA256 garbage",
        ] {
            assert!(parse_authorization(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn default_signed_set() {
        for n in ["host", "Host", "content-type", "x-acs-date", "X-Acs-Action"] {
            assert!(signs_by_default(n), "{n}");
        }
        for n in ["user-agent", "accept", "authorization", "content-length"] {
            assert!(!signs_by_default(n), "{n}");
        }
    }
}
