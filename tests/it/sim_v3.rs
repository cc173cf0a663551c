//! eniip-sim's verification of signature V3 (ACS3-HMAC-SHA256) at the wire
//! level: a hand-made client over a raw TCP stream, so every header, the
//! Host and the body are exactly what the test says.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use eniip_cloud::sign::v3;
use eniip_sim::{SimOptions, Simulator};
use eniip_util::encoding::percent_encode;
use serde_json::{json, Value};

/// One V3 request, built field by field.
#[derive(Clone)]
struct Req {
    method: &'static str,
    action: String,
    version: &'static str,
    query: Vec<(String, String)>,
    body: Vec<u8>,
    content_type: Option<&'static str>,
    host: String,
    date: String,
    nonce: String,
    key_id: String,
    secret: String,
    token: Option<String>,
    /// Extra headers sent (and signed unless listed in `unsigned`).
    extra: Vec<(String, String)>,
    unsigned: Vec<&'static str>,
    /// Overrides the content hash header (else the body's).
    content_sha: Option<String>,
    /// Sign over this host instead of the one sent.
    signed_host: Option<String>,
    /// Send this Authorization instead of the computed one.
    auth: Option<String>,
}

impl Req {
    fn new(sim: &Simulator, method: &'static str, action: &str) -> Req {
        Req {
            method,
            action: action.into(),
            version: "2014-05-26",
            query: vec![("RegionId".into(), sim.region_id())],
            body: Vec::new(),
            content_type: None,
            host: sim.ecs_url().trim_start_matches("http://").to_string(),
            date: eniip_util::time::now_utc(),
            nonce: eniip_util::rand::uuid(),
            key_id: sim.access_key_id().into(),
            secret: sim.access_key_secret().into(),
            token: None,
            extra: Vec::new(),
            unsigned: Vec::new(),
            content_sha: None,
            signed_host: None,
            auth: None,
        }
    }

    fn q(mut self, k: &str, v: &str) -> Req {
        self.query.push((k.into(), v.into()));
        self
    }

    /// The headers sent, and the StringToSign the client signed.
    fn headers(&self) -> (Vec<(String, String)>, String) {
        let mut h: Vec<(String, String)> = vec![
            ("host".into(), self.host.clone()),
            ("x-acs-action".into(), self.action.clone()),
            ("x-acs-version".into(), self.version.into()),
            ("x-acs-date".into(), self.date.clone()),
            ("x-acs-signature-nonce".into(), self.nonce.clone()),
            (
                "x-acs-content-sha256".into(),
                self.content_sha
                    .clone()
                    .unwrap_or_else(|| v3::content_sha256(&self.body)),
            ),
            ("user-agent".into(), "AlibabaCloud (test) TeaDSL/2".into()),
            ("accept".into(), "application/json".into()),
        ];
        if let Some(ct) = self.content_type {
            h.push(("content-type".into(), ct.into()));
        }
        if let Some(t) = &self.token {
            h.push(("x-acs-accesskey-id".into(), self.key_id.clone()));
            h.push(("x-acs-security-token".into(), t.clone()));
        }
        h.extend(self.extra.iter().cloned());
        // Like the Python SDK: sign every header it sets.
        let signed: Vec<String> = h
            .iter()
            .map(|(k, _)| k.clone())
            .filter(|k| !self.unsigned.contains(&k.as_str()))
            .collect();
        let mut for_sig = h.clone();
        if let Some(sh) = &self.signed_host {
            for_sig[0].1 = sh.clone();
        }
        let payload = self
            .content_sha
            .clone()
            .unwrap_or_else(|| v3::content_sha256(&self.body));
        let creq =
            v3::canonical_request(self.method, "/", &self.query, &for_sig, &signed, &payload);
        let sts = v3::string_to_sign(&creq);
        let (_, names) = v3::canonical_headers(&for_sig, &signed);
        let auth = self.auth.clone().unwrap_or_else(|| {
            v3::authorization(&self.key_id, &names, &v3::signature(&self.secret, &sts))
        });
        h.push(("Authorization".into(), auth));
        (h, sts)
    }

    /// Sends over a raw stream; the status and the JSON answer.
    fn send(&self, sim: &Simulator) -> (u16, Value, String) {
        let (headers, sts) = self.headers();
        let query: Vec<String> = self
            .query
            .iter()
            .map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v)))
            .collect();
        let addr = sim.ecs_url().trim_start_matches("http://").to_string();
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut head = format!("{} /?{} HTTP/1.1\r\n", self.method, query.join("&"));
        for (k, v) in &headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str(&format!(
            "content-length: {}\r\nconnection: close\r\n\r\n",
            self.body.len()
        ));
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(&self.body).unwrap();
        let mut resp = Vec::new();
        s.read_to_end(&mut resp).unwrap();
        let text = String::from_utf8_lossy(&resp).to_string();
        let status: u16 = text[9..12].parse().unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        assert!(
            head.to_ascii_lowercase().contains("x-acs-request-id"),
            "{head}"
        );
        (status, v, sts)
    }
}

fn sim() -> Simulator {
    Simulator::start(SimOptions::default()).unwrap()
}

fn code(v: &Value) -> &str {
    v["Code"].as_str().unwrap_or("")
}

#[test]
fn get_and_post_with_query_form_json_and_empty_bodies_are_accepted() {
    let sim = sim();
    let (st, v, _) = Req::new(&sim, "GET", "DescribeInstanceTypes")
        .q("InstanceTypes.1", "ecs.g7.xlarge")
        .send(&sim);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["InstanceTypes"]["InstanceType"][0]["EniQuantity"], 4);

    let (st, v, _) = Req::new(&sim, "POST", "DescribeInstanceAttribute")
        .q("InstanceId", &sim.instance_id())
        .send(&sim);
    assert_eq!(st, 200, "{v}");
    let vsw = v["VpcAttributes"]["VSwitchId"]
        .as_str()
        .unwrap()
        .to_string();
    let sg = v["SecurityGroupIds"]["SecurityGroupId"][0]
        .as_str()
        .unwrap()
        .to_string();

    // Form body: the parameters travel in it, covered by the content hash.
    let mut r = Req::new(&sim, "POST", "CreateNetworkInterface");
    r.body = format!("VSwitchId={vsw}&SecurityGroupIds.1={sg}&SecondaryPrivateIpAddressCount=2")
        .into_bytes();
    r.content_type = Some("application/x-www-form-urlencoded");
    let (st, v, _) = r.send(&sim);
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["PrivateIpSets"]["PrivateIpSet"].as_array().unwrap().len(),
        3
    );

    // JSON body: lists flatten to Name.N.
    let mut r = Req::new(&sim, "POST", "CreateNetworkInterface");
    r.body = serde_json::to_vec(&json!({"VSwitchId": vsw, "SecurityGroupIds": [sg]})).unwrap();
    r.content_type = Some("application/json; charset=utf-8");
    let (st, v, _) = r.send(&sim);
    assert_eq!(st, 200, "{v}");
    assert!(v["NetworkInterfaceId"]
        .as_str()
        .unwrap()
        .starts_with("eni-"));

    // VPC's version goes to the VPC action.
    let mut r = Req::new(&sim, "POST", "DescribeVSwitches");
    r.version = "2016-04-28";
    let (st, v, _) = r.send(&sim);
    assert_eq!(st, 200, "{v}");
    assert!(sim.state()["signatures"]["v3"].as_u64().unwrap() >= 5);
    assert_eq!(sim.state()["signatures"]["v1"].as_u64().unwrap_or(0), 0);
}

#[test]
fn a_wrong_secret_gets_the_message_with_the_servers_string_to_sign() {
    let sim = sim();
    let mut r = Req::new(&sim, "POST", "DescribeInstanceTypes");
    r.secret = "wrong".into();
    let (st, v, sts) = r.send(&sim);
    assert_eq!(st, 400);
    assert_eq!(code(&v), "SignatureDoesNotMatch");
    assert!(sts.starts_with("ACS3-HMAC-SHA256\n"));
    assert_eq!(
        v["Message"].as_str().unwrap(),
        format!("Specified signature is not matched with our calculation. server string to sign is:{sts}")
    );
    assert!(!v["Message"].as_str().unwrap().contains("wrong"));
    // The request that failed did not burn its nonce.
    r.secret = sim.access_key_secret().into();
    assert_eq!(r.send(&sim).0, 200);
}

#[test]
fn the_body_must_match_its_content_hash() {
    let sim = sim();
    let mut r = Req::new(&sim, "POST", "DescribeInstanceTypes");
    r.body = b"InstanceTypes.1=ecs.g7.xlarge".to_vec();
    r.content_type = Some("application/x-www-form-urlencoded");
    r.content_sha = Some(v3::content_sha256(b"InstanceTypes.1=ecs.g7.large"));
    let (st, v, client_sts) = r.send(&sim);
    assert_eq!((st, code(&v)), (400, "SignatureDoesNotMatch"), "{v}");
    // The server hashed what it received, so its string to sign differs.
    assert!(!v["Message"].as_str().unwrap().ends_with(&client_sts));
    r.content_sha = None;
    r.nonce = eniip_util::rand::uuid();
    assert_eq!(r.send(&sim).0, 200);
}

#[test]
fn signed_headers_are_taken_as_sent_and_must_cover_x_acs() {
    let sim = sim();
    // A public host name in Host, signed as sent: accepted.
    let mut r = Req::new(&sim, "POST", "DescribeInstanceTypes");
    r.host = "ecs.cn-hangzhou.aliyuncs.com".into();
    assert_eq!(r.send(&sim).0, 200);
    // Signed over one host, sent with another: refused.
    let mut r = Req::new(&sim, "POST", "DescribeInstanceTypes");
    r.signed_host = Some("ecs.cn-beijing.aliyuncs.com".into());
    let (st, v, _) = r.send(&sim);
    assert_eq!((st, code(&v)), (400, "SignatureDoesNotMatch"));
    // An x-acs-* header left out of the signature: refused.
    for name in [
        "x-acs-action",
        "x-acs-signature-nonce",
        "x-acs-content-sha256",
    ] {
        let mut r = Req::new(&sim, "POST", "DescribeInstanceTypes");
        r.unsigned = vec![name];
        let (st, v, _) = r.send(&sim);
        assert_eq!((st, code(&v)), (400, "IncompleteSignature"), "{name}: {v}");
    }
    // Headers outside the required set may go unsigned.
    let mut r = Req::new(&sim, "POST", "DescribeInstanceTypes");
    r.unsigned = vec!["user-agent", "accept"];
    assert_eq!(r.send(&sim).0, 200);
    // An extra x-acs-* header, signed: accepted.
    let mut r = Req::new(&sim, "POST", "DescribeInstanceTypes");
    r.extra = vec![("x-acs-extra".into(), "1".into())];
    assert_eq!(r.send(&sim).0, 200);
    // A malformed Authorization; another algorithm.
    for (auth, want) in [
        ("ACS3-HMAC-SHA256 Signature=abc", "IncompleteSignature"),
        ("acs LTAI:abc", "IncompleteSignature"),
        (
            "ACS3-HMAC-SM3 Credential=LTAI,SignedHeaders=host,Signature=ab",
            "InvalidSignatureMethod",
        ),
    ] {
        let mut r = Req::new(&sim, "POST", "DescribeInstanceTypes");
        r.auth = Some(auth.into());
        let (st, v, _) = r.send(&sim);
        assert_eq!((st, code(&v)), (400, want), "{auth}: {v}");
    }
}

#[test]
fn dates_nonces_and_keys() {
    let sim = sim();
    let mut r = Req::new(&sim, "POST", "DescribeInstanceTypes");
    r.date = eniip_util::time::format_utc(eniip_util::time::unix_secs() - 3600);
    let (st, v, _) = r.send(&sim);
    assert_eq!((st, code(&v)), (400, "InvalidTimeStamp.Expired"));
    r.date = "yesterday".into();
    let (st, v, _) = r.send(&sim);
    assert_eq!((st, code(&v)), (400, "InvalidTimeStamp.Format"));

    let r = Req::new(&sim, "POST", "DescribeInstanceTypes");
    assert_eq!(r.send(&sim).0, 200);
    let (st, v, _) = r.send(&sim);
    assert_eq!((st, code(&v)), (400, "SignatureNonceUsed"));

    let mut r = Req::new(&sim, "POST", "DescribeInstanceTypes");
    r.key_id = "LTAI5tNoSuchKey".into();
    let (st, v, _) = r.send(&sim);
    assert_eq!((st, code(&v)), (404, "InvalidAccessKeyId.NotFound"));
}

#[test]
fn role_credentials_need_their_security_token() {
    let sim = sim();
    let md = sim.metadata_url();
    let get = |p: &str| -> String {
        let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
        agent
            .get(&format!("{md}/latest/meta-data/{p}"))
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap()
    };
    let role = get("ram/security-credentials/").trim().to_string();
    let c: Value = serde_json::from_str(&get(&format!("ram/security-credentials/{role}"))).unwrap();
    let mut r = Req::new(&sim, "POST", "DescribeInstanceTypes");
    r.key_id = c["AccessKeyId"].as_str().unwrap().into();
    r.secret = c["AccessKeySecret"].as_str().unwrap().into();
    r.token = Some(c["SecurityToken"].as_str().unwrap().into());
    assert_eq!(r.send(&sim).0, 200);
    let mut r2 = r.clone();
    r2.nonce = eniip_util::rand::uuid();
    r2.token = Some("CAES-not-the-token".into());
    let (st, v, _) = r2.send(&sim);
    assert_eq!(
        (st, code(&v)),
        (400, "InvalidSecurityToken.MismatchWithAccessKey")
    );
    r2.token = None;
    let (st, v, _) = r2.send(&sim);
    assert_eq!(
        (st, code(&v)),
        (400, "InvalidSecurityToken.MismatchWithAccessKey")
    );
}
