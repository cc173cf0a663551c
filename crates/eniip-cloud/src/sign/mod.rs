//! OpenAPI request signatures, shared by the client and the emulator so
//! both canonicalize the same way: this module is RPC signature version
//! 1.0 (HMAC-SHA1, the `signature_version` "v1"); [`v3`] is ACS3-HMAC-SHA256,
//! what today's official SDKs send by default.
//!
//! StringToSign = `METHOD & percent("/") & percent(canonical query)`, where the
//! canonical query is every parameter but `Signature` (empty values kept),
//! sorted byte-wise by name, each side percent-encoded. The key is
//! `secret + "&"`; the signature is base64 of the HMAC-SHA1.

use hmac::{Hmac, Mac};
use sha1::Sha1;

use eniip_util::encoding::{base64_encode, percent_encode};

pub mod v3;

/// Which signature the client sends (config key `signature_version`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SignatureVersion {
    /// RPC signature 1.0, HMAC-SHA1, in the query (`"v1"`).
    V1,
    /// ACS3-HMAC-SHA256 in headers (`"v3"`, the default).
    #[default]
    V3,
}

impl SignatureVersion {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SignatureVersion::V1 => "v1",
            SignatureVersion::V3 => "v3",
        }
    }
}

/// The canonicalized query string: sorted `k=v` pairs joined by `&`,
/// `Signature` excluded. Parameters with the same name keep their order.
pub(crate) fn canonical_query<K: AsRef<str>, V: AsRef<str>>(params: &[(K, V)]) -> String {
    let mut sorted: Vec<(&str, &str)> = params
        .iter()
        .map(|(k, v)| (k.as_ref(), v.as_ref()))
        .filter(|(k, _)| *k != "Signature")
        .collect();
    sorted.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let mut out = String::new();
    for (i, (k, v)) in sorted.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(&percent_encode(k));
        out.push('=');
        out.push_str(&percent_encode(v));
    }
    out
}

/// The StringToSign for `method` (as sent: `GET`, `POST`) and the union of
/// query and form parameters.
pub fn string_to_sign<K: AsRef<str>, V: AsRef<str>>(method: &str, params: &[(K, V)]) -> String {
    format!(
        "{method}&{}&{}",
        percent_encode("/"),
        percent_encode(&canonical_query(params))
    )
}

/// Base64 HMAC-SHA1 of `string_to_sign` keyed with `secret + "&"`.
pub fn signature(secret: &str, string_to_sign: &str) -> String {
    let key = format!("{secret}&");
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac =
        <Hmac<Sha1> as Mac>::new_from_slice(key.as_bytes()).expect("HMAC takes any key length");
    mac.update(string_to_sign.as_bytes());
    base64_encode(&mac.finalize().into_bytes())
}

/// Base64 HMAC-SHA1 with a raw key (no `&` suffix); for the known-answer test
/// of the primitive itself.
#[cfg(test)]
fn hmac_sha1_raw(key: &str, data: &str) -> String {
    let mut mac = <Hmac<Sha1> as Mac>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(data.as_bytes());
    base64_encode(&mac.finalize().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn hmac_primitive() {
        assert_eq!(
            hmac_sha1_raw("secret", "source"),
            "Jv4yi8SobFhg5t1C7nWLbhBSFZQ="
        );
    }

    #[test]
    fn darabonba_vector() {
        let params = p(&[("test", "ok")]);
        let sts = string_to_sign("", &params);
        assert_eq!(sts, "&%2F&test%3Dok");
        assert_eq!(
            signature("accessKeySecret", &sts),
            "jHx/oHoHNrbVfhncHEvPdHXZwHU="
        );
    }

    fn go_sdk_defaults() -> Vec<(String, String)> {
        p(&[
            ("AccessKeyId", "accessKeyId"),
            ("Action", ""),
            ("Format", "JSON"),
            ("RegionId", "regionId"),
            ("SignatureMethod", "HMAC-SHA1"),
            ("SignatureNonce", "MOCK_UUID"),
            ("SignatureType", ""),
            ("SignatureVersion", "1.0"),
            ("Timestamp", "mock date"),
            ("Version", ""),
        ])
    }

    #[test]
    fn go_sdk_vector() {
        let sts = string_to_sign("GET", &go_sdk_defaults());
        assert_eq!(
            sts,
            "GET&%2F&AccessKeyId%3DaccessKeyId%26Action%3D%26Format%3DJSON%26RegionId%3DregionId\
             %26SignatureMethod%3DHMAC-SHA1%26SignatureNonce%3DMOCK_UUID%26SignatureType%3D\
             %26SignatureVersion%3D1.0%26Timestamp%3Dmock%2520date%26Version%3D"
        );
        assert_eq!(
            signature("accessKeySecret", &sts),
            "7loPmFjvDnzOVnQeQNj85S6nFGY="
        );
    }

    #[test]
    fn go_sdk_vector_with_security_token() {
        let mut params = go_sdk_defaults();
        params.push(("SecurityToken".into(), "accessKeyStsToken".into()));
        let sts = string_to_sign("GET", &params);
        assert_eq!(
            signature("accessKeySecret", &sts),
            "5Nxdcler+ihqWqv0Hr2On4PsBf4="
        );
    }

    #[test]
    fn go_sdk_string_to_sign_checks() {
        assert_eq!(
            string_to_sign("GET", &p(&[("key", "value")])),
            "GET&%2F&key%3Dvalue"
        );
        assert_eq!(
            string_to_sign("GET", &p(&[("key", "value"), ("q", "http://domain/?q=value&q2=value2")])),
            "GET&%2F&key%3Dvalue%26q%3Dhttp%253A%252F%252Fdomain%252F%253Fq%253Dvalue%2526q2%253Dvalue2"
        );
    }

    #[test]
    fn assign_private_ip_example() {
        let params = p(&[
            ("AccessKeyId", "testid"),
            ("Action", "AssignPrivateIpAddresses"),
            ("ClientToken", "123e4567-e89b-12d3-a456-426655440000"),
            ("Format", "JSON"),
            ("NetworkInterfaceId", "eni-bp67acfmxazb4p0000"),
            ("RegionId", "cn-hangzhou"),
            ("SecondaryPrivateIpAddressCount", "2"),
            ("SignatureMethod", "HMAC-SHA1"),
            ("SignatureNonce", "3ee8c1b8-83d3-44af-a94f-4e0ad82fd6cf"),
            ("SignatureVersion", "1.0"),
            ("Timestamp", "2024-05-01T12:00:00Z"),
            ("Version", "2014-05-26"),
        ]);
        let sts = string_to_sign("POST", &params);
        assert_eq!(
            sts,
            "POST&%2F&AccessKeyId%3Dtestid%26Action%3DAssignPrivateIpAddresses%26ClientToken%3D\
             123e4567-e89b-12d3-a456-426655440000%26Format%3DJSON%26NetworkInterfaceId%3D\
             eni-bp67acfmxazb4p0000%26RegionId%3Dcn-hangzhou%26SecondaryPrivateIpAddressCount%3D2\
             %26SignatureMethod%3DHMAC-SHA1%26SignatureNonce%3D3ee8c1b8-83d3-44af-a94f-4e0ad82fd6cf\
             %26SignatureVersion%3D1.0%26Timestamp%3D2024-05-01T12%253A00%253A00Z%26Version%3D2014-05-26"
        );
        let sig = signature("testsecret", &sts);
        assert_eq!(sig, "/nWkZpyQzd3QMN3G3JGOqzDfWOI=");
        assert_eq!(percent_encode(&sig), "%2FnWkZpyQzd3QMN3G3JGOqzDfWOI%3D");
    }

    #[test]
    fn encoding_edge_example() {
        // Unsorted on purpose: canonicalization must sort (VSwitchId < Version).
        let params = p(&[
            ("Version", "2014-05-26"),
            ("VSwitchId", "vsw-1"),
            ("AccessKeyId", "STS.testid"),
            ("Action", "CreateNetworkInterface"),
            ("Description", "interface create by test"),
            ("Format", "JSON"),
            ("RegionId", "cn-hangzhou"),
            ("SecurityGroupIds.1", "sg-1"),
            ("SecurityToken", "tok+/="),
            ("SignatureMethod", "HMAC-SHA1"),
            ("SignatureNonce", "n1"),
            ("SignatureVersion", "1.0"),
            ("Tag.1.Key", "k8s.io/owner"),
            ("Tag.1.Value", "a b*c~d"),
            ("Timestamp", "2024-05-01T12:00:00Z"),
            ("Signature", "ignored"),
        ]);
        let q = canonical_query(&params);
        assert!(q.contains("Description=interface%20create%20by%20test"));
        assert!(q.contains("SecurityToken=tok%2B%2F%3D"));
        assert!(q.contains("Tag.1.Value=a%20b%2Ac~d"));
        assert!(q.contains("VSwitchId=vsw-1&Version=2014-05-26"));
        assert!(!q.contains("Signature=ignored"));
        assert_eq!(
            signature("testsecret", &string_to_sign("GET", &params)),
            "xutsKDZLL5wpCnfGP3oMbrfxqf0="
        );
    }

    #[test]
    fn sort_is_bytewise() {
        let q = canonical_query(&p(&[
            ("Tag.2.Key", "b"),
            ("Tag.10.Key", "c"),
            ("Tag.1.Key", "a"),
        ]));
        assert_eq!(q, "Tag.1.Key=a&Tag.10.Key=c&Tag.2.Key=b");
    }
}
