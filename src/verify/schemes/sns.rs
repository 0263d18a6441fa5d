//! Amazon SNS HTTP(S) deliveries: RSASSA-PKCS1-v1_5 over the canonical
//! string of the message's fields (`SignatureVersion` 1: SHA-1, 2:
//! SHA-256), with the key of the certificate at `SigningCertURL`.
//! https://docs.aws.amazon.com/sns/latest/dg/sns-verify-signature-of-message.html
//!
//! The canonical string is `Name\nValue\n` for, in this order:
//! `Notification`: Message, MessageId, Subject (when present), Timestamp,
//! TopicArn, Type; `SubscriptionConfirmation` and
//! `UnsubscribeConfirmation`: Message, MessageId, SubscribeURL, Timestamp,
//! Token, TopicArn, Type.
//!
//! Rule: a certificate is fetched only from `https://sns.<region>.amazonaws.com`
//! (or `.amazonaws.com.cn`) with a path ending `.pem`, through the same
//! cache and per-source fetch budget as PayPal's ([`KeyCache`]); the
//! topic must be one the source lists, checked before anything is fetched;
//! a `SubscriptionConfirmation` is confirmed (a GET of its `SubscribeURL`,
//! same host rule) only after its signature verified, and neither
//! confirmation message is ever stored (the provider file answers them).
//! Chain trust comes from the TLS connection to the SNS host, as in AWS's
//! own SDK validators. The only other hosts are loopback ones a test
//! lists in `cert_hosts`; config refuses any other entry there.

use super::{Cover, Ctx, Defaults, FetchedKey, Part, Scheme, SchemeDef, SchemeSettings};
use crate::primitives::crypto::{Algorithm, Encoding};
use crate::verify::key_cache::{self, Fetched, KeyCache};
use crate::verify::locator::Locator;
use crate::verify::provider::Provider;
use crate::verify::sign::{Signed, Signer};
use crate::verify::source::{Resolve, SettingsTable, Source};
use crate::verify::{Incoming, VerifyError};
use rsa::pkcs1v15::{Signature, VerifyingKey};
use rsa::pkcs8::DecodePublicKey;
use rsa::signature::Verifier;
use serde::Deserialize;
use std::fmt;
use std::sync::Arc;
use x509_cert::Certificate;
use x509_cert::der::Encode;

pub const NOTIFICATION: &str = "Notification";
pub const SUBSCRIPTION_CONFIRMATION: &str = "SubscriptionConfirmation";
pub const UNSUBSCRIBE_CONFIRMATION: &str = "UnsubscribeConfirmation";

const MAX_CERT_BYTES: usize = 64 * 1024;
/// Certificate URLs remembered per source, with a key or a failure.
const MAX_CACHED: u64 = 64;
const MAX_URL: usize = 2048;
/// Seconds a certificate URL that failed is not fetched again.
const FAILED_FOR: i64 = 60;

/// The signed fields of an SNS message, in canonical-string order.
const NOTIFICATION_FIELDS: &[&str] = &["Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"];
const CONFIRMATION_FIELDS: &[&str] = &[
    "Message",
    "MessageId",
    "SubscribeURL",
    "Timestamp",
    "Token",
    "TopicArn",
    "Type",
];

pub struct Sns;

impl SchemeDef for Sns {
    const SUMMARY: &'static str = "RSA (SignatureVersion 1: SHA-1, 2: SHA-256) with the certificate SNS names (SNS hosts only) over the canonical string of the message fields";

    const HANDSHAKE: Option<&'static str> =
        Some("`SubscriptionConfirmation`: confirmed (GET `SubscribeURL`) after its signature verifies; not stored");

    const DEFAULTS: Defaults = Defaults {
        needs_secret: false,
        ..Defaults::keyed(false, Algorithm::Sha256, Encoding::Base64)
    };

    /// The canonical fields are signed; the rest of the body (the
    /// certificate URL, the signature itself) is not.
    fn covers(_: &Provider, part: Part<'_>) -> Cover {
        match part {
            Part::At(Locator::Json(p)) => Cover::signed_if(
                p.strip_prefix('/')
                    .is_some_and(|f| CONFIRMATION_FIELDS.contains(&f) || f == "Subject"),
            ),
            _ => Cover::Unsigned,
        }
    }

    fn verify(ctx: &Ctx<'_, '_>) -> Result<Option<usize>, VerifyError> {
        let Some(SchemeSettings::Sns(settings)) = &ctx.source.settings else {
            return Err(VerifyError::MissingSignature);
        };
        let Some(FetchedKey::Sns(key)) = ctx.fetched else {
            return Err(VerifyError::MissingSignature);
        };
        let msg = Message::parse(ctx.fields.body())?;
        settings.check_topic(&msg)?;
        msg.verify(key)?;
        Ok(None)
    }

    fn sign(s: &Signer<'_>, out: &mut Signed) -> Result<(), String> {
        let pem = s
            .req
            .private_key
            .ok_or("SNS signs with AWS's private key: pass --private-key (a test key)")?;
        out.body = Some(sign(s.req.body, pem, s.req.cert_url)?);
        Ok(())
    }

    async fn fetch(
        source: &Source,
        incoming: &Incoming<'_>,
        now: i64,
    ) -> Result<Option<FetchedKey>, VerifyError> {
        let Some(SchemeSettings::Sns(settings)) = &source.settings else {
            return Ok(None);
        };
        let msg = Message::parse(&incoming.body)?;
        settings.check_topic(&msg)?;
        // Boxed: see `SchemeDef::fetch`.
        let key = Box::pin(settings.key_for(&msg, incoming.client_ip, now)).await?;
        if msg.kind == SUBSCRIPTION_CONFIRMATION && settings.confirm {
            msg.verify(&key)?;
            Box::pin(settings.confirm(&msg)).await?;
        }
        Ok(Some(FetchedKey::Sns(key)))
    }
}

/// An SNS message as posted (JSON with string fields).
#[derive(Debug)]
struct Message {
    kind: String,
    fields: serde_json::Map<String, serde_json::Value>,
}

impl Message {
    fn parse(body: &[u8]) -> Result<Self, VerifyError> {
        let not = VerifyError::MalformedSignature("not an SNS message");
        let fields: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(body).map_err(|_| not)?;
        let kind = fields.get("Type").and_then(|v| v.as_str()).ok_or(not)?.to_owned();
        Ok(Self { kind, fields })
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.fields.get(name).and_then(|v| v.as_str())
    }

    fn require(&self, name: &str) -> Result<&str, VerifyError> {
        self.get(name)
            .ok_or(VerifyError::MalformedSignature("a signed SNS field is missing"))
    }

    /// The canonical string SNS signs.
    fn canonical(&self) -> Result<String, VerifyError> {
        let fields = match self.kind.as_str() {
            NOTIFICATION => NOTIFICATION_FIELDS,
            SUBSCRIPTION_CONFIRMATION | UNSUBSCRIBE_CONFIRMATION => CONFIRMATION_FIELDS,
            _ => return Err(VerifyError::MalformedSignature("unknown SNS message type")),
        };
        let mut text = String::new();
        for name in fields {
            let value = match (*name, self.get(name)) {
                ("Subject", None) => continue,
                (_, Some(v)) => v,
                (_, None) => self.require(name)?,
            };
            text.push_str(name);
            text.push('\n');
            text.push_str(value);
            text.push('\n');
        }
        Ok(text)
    }

    fn verify(&self, key: &rsa::PublicKey) -> Result<(), VerifyError> {
        let text = self.canonical()?;
        let raw = Encoding::Base64
            .decode(self.get("Signature").ok_or(VerifyError::MissingSignature)?)
            .ok_or(VerifyError::MalformedSignature("signature is not valid encoding"))?;
        let sig = Signature::try_from(raw.as_slice())
            .map_err(|_| VerifyError::MalformedSignature("signature is not valid encoding"))?;
        let key = rsa::PublicKey::clone(key);
        let ok = match self.get("SignatureVersion") {
            Some("1") => VerifyingKey::<sha1::Sha1>::new(key).verify(text.as_bytes(), &sig),
            Some("2") => VerifyingKey::<sha2::Sha256>::new(key).verify(text.as_bytes(), &sig),
            _ => return Err(VerifyError::MalformedSignature("unknown SignatureVersion")),
        };
        ok.map_err(|_| VerifyError::InvalidSignature)
    }
}

/// `[sources.<name>.sns]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Raw {
    /// The topics this source accepts (`arn:aws:sns:…`). AWS signs every
    /// topic's messages, anyone's included, so a message from another
    /// topic is refused before its certificate is fetched.
    pub topic_arns: Vec<String>,
    /// Confirm subscriptions by fetching `SubscribeURL` once the
    /// confirmation's signature verifies (default true). Off: the
    /// confirmation is answered and the operator confirms by hand.
    #[serde(default = "yes")]
    pub confirm: bool,
    /// Tests only: loopback `host:port`s standing in for SNS hosts
    /// (certificate and confirmation URLs, plain http allowed). Any other
    /// entry is a config error, so production config cannot widen the
    /// SNS host rule.
    #[serde(default)]
    pub cert_hosts: Vec<String>,
}

fn yes() -> bool {
    true
}

impl SettingsTable for Raw {
    const SCHEME: Scheme = Scheme::Sns;
    const TABLE: &'static str = "sns";
    const TITLE: &'static str = "Amazon SNS";

    fn build(&self, key: &str, cx: &mut dyn Resolve) -> Option<SchemeSettings> {
        Settings::new(self.topic_arns.clone(), self.confirm, self.cert_hosts.clone())
            .map(|s| SchemeSettings::Sns(Box::new(s)))
            .map_err(|e| cx.problem(key, e))
            .ok()
    }

    fn missing(key: &str, cx: &mut dyn Resolve) {
        cx.problem(key, "set [sources.<name>.sns] topic_arns".into());
    }
}

/// A source's SNS settings.
pub struct Settings {
    topic_arns: Vec<String>,
    confirm: bool,
    test_hosts: Vec<String>,
    /// Certificate URL → its key until the certificate's not-after, or why
    /// it failed for [`FAILED_FOR`] seconds.
    keys: KeyCache<String, Arc<rsa::PublicKey>>,
    client: reqwest::Client,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("sns::Settings")
            .field("topic_arns", &self.topic_arns)
            .field("confirm", &self.confirm)
            .field("test_hosts", &self.test_hosts)
            .finish()
    }
}

impl Settings {
    pub fn new(topic_arns: Vec<String>, confirm: bool, test_hosts: Vec<String>) -> Result<Self, String> {
        if topic_arns.is_empty() {
            return Err("topic_arns is empty: list the topics this source accepts".into());
        }
        if let Some(t) = topic_arns.iter().find(|t| !t.starts_with("arn:")) {
            return Err(format!("topic_arns: `{t}` is not an ARN (arn:aws:sns:…)"));
        }
        for h in &test_hosts {
            let host = h.rsplit_once(':').map_or(h.as_str(), |(host, _)| host);
            if !key_cache::is_loopback_host(host) {
                return Err(format!(
                    "cert_hosts: `{h}` is not a loopback host; this key is for tests only (SNS hosts are always allowed)"
                ));
            }
        }
        Ok(Self {
            topic_arns,
            confirm,
            test_hosts: test_hosts.into_iter().map(|h| h.to_ascii_lowercase()).collect(),
            keys: KeyCache::new(MAX_CACHED),
            client: key_cache::client()?,
        })
    }

    fn check_topic(&self, msg: &Message) -> Result<(), VerifyError> {
        let topic = msg.require("TopicArn")?;
        if !self.topic_arns.iter().any(|t| t == topic) {
            return Err(VerifyError::MalformedSignature("topic is not one of the source's topic_arns"));
        }
        Ok(())
    }

    /// `url` if it is on an SNS host (or a listed test host): https (http
    /// for a test host), no credentials, no other port.
    fn check_url(&self, url: &str, what: &'static str) -> Result<reqwest::Url, VerifyError> {
        let off = VerifyError::MalformedSignature(what);
        if url.len() > MAX_URL {
            return Err(off);
        }
        let u = reqwest::Url::parse(url).map_err(|_| off)?;
        let host = u.host_str().unwrap_or_default().to_ascii_lowercase();
        let authority = match u.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.clone(),
        };
        let test = self.test_hosts.contains(&authority);
        let sns = u.scheme() == "https" && u.port().is_none() && is_sns_host(&host);
        let test_ok = test && (u.scheme() == "https" || u.scheme() == "http");
        if !(sns || test_ok) || !u.username().is_empty() || u.password().is_some() {
            return Err(off);
        }
        Ok(u)
    }

    /// The key of the certificate the message names: cached or fetched.
    async fn key_for(
        &self,
        msg: &Message,
        client: Option<std::net::IpAddr>,
        now: i64,
    ) -> Result<Arc<rsa::PublicKey>, VerifyError> {
        let what = "certificate URL is not an SNS certificate";
        let mut url = self.check_url(msg.require("SigningCertURL")?, what)?;
        if !url.path().ends_with(".pem") {
            return Err(VerifyError::MalformedSignature(what));
        }
        url.set_query(None);
        url.set_fragment(None);
        let canonical = url.as_str().to_owned();
        self.keys
            .get_or_fetch(canonical, now, client, async {
                Ok(match self.certificate_key(url, now).await {
                    Ok((key, not_after)) => Fetched {
                        found: Ok(key),
                        until: not_after.saturating_add(1),
                    },
                    Err(e) => Fetched {
                        found: Err(e),
                        until: now + FAILED_FOR,
                    },
                })
            })
            .await
    }

    async fn certificate_key(
        &self,
        url: reqwest::Url,
        now: i64,
    ) -> Result<(Arc<rsa::PublicKey>, i64), VerifyError> {
        let res = self
            .client
            .get(url)
            .send()
            .await
            .map_err(|_| VerifyError::CertificateUnavailable)?;
        if !res.status().is_success() {
            return Err(VerifyError::CertificateUnavailable);
        }
        let pem = key_cache::read_capped(res, MAX_CERT_BYTES).await?;
        let (key, not_before, not_after) = parse_cert(&pem)
            .map_err(|_| VerifyError::MalformedSignature("certificate is not usable"))?;
        if now < not_before || now > not_after {
            return Err(VerifyError::MalformedSignature("certificate is expired"));
        }
        Ok((Arc::new(key), not_after))
    }

    /// GETs the confirmation's `SubscribeURL` (SNS hosts only, and only an
    /// `Action=ConfirmSubscription` URL). A failure is 503 (counted as
    /// `certificate_unavailable`), so SNS sends the confirmation again.
    async fn confirm(&self, msg: &Message) -> Result<(), VerifyError> {
        let what = "SubscribeURL is not an SNS confirmation URL";
        let url = self.check_url(msg.require("SubscribeURL")?, what)?;
        let confirms = url
            .query_pairs()
            .any(|(k, v)| k == "Action" && v == "ConfirmSubscription");
        if !confirms {
            return Err(VerifyError::MalformedSignature(what));
        }
        let res = self
            .client
            .get(url)
            .send()
            .await
            .map_err(|_| VerifyError::CertificateUnavailable)?;
        if !res.status().is_success() {
            return Err(VerifyError::CertificateUnavailable);
        }
        Ok(())
    }
}

/// `sns.<region>.amazonaws.com` or `sns.<region>.amazonaws.com.cn`.
pub fn is_sns_host(host: &str) -> bool {
    let region = host
        .strip_prefix("sns.")
        .and_then(|r| {
            r.strip_suffix(".amazonaws.com")
                .or_else(|| r.strip_suffix(".amazonaws.com.cn"))
        })
        .unwrap_or_default();
    region.len() >= 3
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The RSA key and validity (unix seconds) of the first certificate in a
/// PEM chain.
fn parse_cert(pem: &[u8]) -> Result<(rsa::PublicKey, i64, i64), String> {
    let chain = Certificate::load_pem_chain(pem).map_err(|e| e.to_string())?;
    let cert = chain.first().ok_or("no certificate in PEM")?;
    let tbs = cert.tbs_certificate();
    let spki = tbs
        .subject_public_key_info()
        .to_der()
        .map_err(|e| e.to_string())?;
    let key = rsa::PublicKey::from_public_key_der(&spki).map_err(|e| e.to_string())?;
    let secs = |t: x509_cert::time::Time| t.to_unix_duration().as_secs() as i64;
    Ok((
        key,
        secs(tbs.validity().not_before),
        secs(tbs.validity().not_after),
    ))
}

/// `body` (an SNS message without its signature) signed with a test key:
/// `SignatureVersion` (2 unless the body says 1), `SigningCertURL` (the
/// body's, else `cert_url`) and `Signature` added.
pub fn sign(body: &[u8], pem: &str, cert_url: Option<&str>) -> Result<Vec<u8>, String> {
    use rsa::signature::{SignatureEncoding, Signer as _};
    let mut msg = Message::parse(body).map_err(|e| format!("body: {e}"))?;
    let version = msg.get("SignatureVersion").unwrap_or("2").to_owned();
    msg.fields
        .insert("SignatureVersion".into(), version.clone().into());
    if msg.get("SigningCertURL").is_none() {
        let url = cert_url.ok_or("the body has no SigningCertURL: pass --cert-url")?;
        msg.fields.insert("SigningCertURL".into(), url.into());
    }
    let text = msg.canonical().map_err(|e| e.to_string())?;
    let key = super::pkcs1::private_key(pem)?;
    let sig = match version.as_str() {
        "1" => rsa::pkcs1v15::SigningKey::<sha1::Sha1>::new(key)
            .sign(text.as_bytes())
            .to_vec(),
        "2" => rsa::pkcs1v15::SigningKey::<sha2::Sha256>::new(key)
            .sign(text.as_bytes())
            .to_vec(),
        v => return Err(format!("SignatureVersion `{v}` is not 1 or 2")),
    };
    msg.fields
        .insert("Signature".into(), Encoding::Base64.encode(&sig).into());
    serde_json::to_vec(&msg.fields).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings::new(vec!["arn:aws:sns:us-east-1:123456789012:t".into()], true, vec![]).unwrap()
    }

    #[test]
    fn only_sns_certificate_and_confirmation_urls_are_accepted() {
        let s = settings();
        for ok in [
            "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem",
            "https://sns.cn-north-1.amazonaws.com.cn/SimpleNotificationService-abc.pem",
            "https://SNS.EU-WEST-1.AMAZONAWS.COM/x.pem",
        ] {
            assert!(s.check_url(ok, "off").is_ok(), "{ok}");
        }
        for bad in [
            "http://sns.us-east-1.amazonaws.com/x.pem",
            "https://sns.us-east-1.amazonaws.com.evil.example/x.pem",
            "https://evil.example/sns.us-east-1.amazonaws.com/x.pem",
            "https://sns.us-east-1.amazonaws.com@evil.example/x.pem",
            "https://user@sns.us-east-1.amazonaws.com/x.pem",
            "https://sns.us-east-1.amazonaws.com:8443/x.pem",
            "https://sns.amazonaws.com/x.pem",
            "https://s3.us-east-1.amazonaws.com/x.pem",
            "https://sns.evil_host.amazonaws.com/x.pem",
            "http://127.0.0.1:9/x.pem",
            "not a url",
        ] {
            assert!(s.check_url(bad, "off").is_err(), "{bad}");
        }
    }

    #[test]
    fn test_hosts_must_be_loopback() {
        let topics = || vec!["arn:aws:sns:us-east-1:1:t".to_owned()];
        assert!(Settings::new(topics(), true, vec!["127.0.0.1:9".into()]).is_ok());
        assert!(Settings::new(topics(), true, vec!["localhost:9".into()]).is_ok());
        for bad in ["evil.example", "evil.example:443", "10.0.0.1:80"] {
            let e = Settings::new(topics(), true, vec![bad.into()]).unwrap_err();
            assert!(e.contains("tests only"), "{bad}: {e}");
        }
        assert!(Settings::new(vec![], true, vec![]).is_err());
        assert!(Settings::new(vec!["my-topic".into()], true, vec![]).is_err());
        let local = Settings::new(topics(), true, vec!["127.0.0.1:9".into()]).unwrap();
        assert!(local.check_url("http://127.0.0.1:9/x.pem", "off").is_ok());
        assert!(local.check_url("http://127.0.0.1:10/x.pem", "off").is_err());
    }
}
