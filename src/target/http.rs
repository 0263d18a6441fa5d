//! `kind = "http"` (the default): the event POSTed to `url` with the
//! original body bytes and provider headers, `Hookgate-*` headers, and
//! optionally a Standard Webhooks signature by the gateway itself so
//! targets can verify hookgate with any such library.
//!
//! Rule: the body goes out byte for byte as the provider sent it; a target
//! URL never reaches `last_error` or a log (it may carry a token).

use super::kind::{Check, Endpoint, KindDef, Message, RawKeys, Sent, set_keys};
use crate::primitives::backoff;
use crate::primitives::crypto::SigningKey;
use base64::Engine;
use serde::de::MapAccess;
use sha2::{Digest, Sha256};
use std::sync::OnceLock;
use std::time::SystemTime;

/// `kind = "http"`.
pub struct HttpKind;

/// The keys only an http target takes.
#[derive(Debug, Default)]
pub struct Raw {
    /// Optional secret (Standard Webhooks `whsec_<base64>` or raw) to sign forwards.
    pub signing_secret: Option<String>,
}

impl RawKeys for Raw {
    const KEYS: &'static [&'static str] = &["signing_secret"];

    fn take<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "signing_secret" => self.signing_secret = Some(map.next_value()?),
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn set(&self) -> Vec<&'static str> {
        set_keys([("signing_secret", self.signing_secret.is_some())])
    }
}

#[derive(Debug, Clone)]
pub struct Spec {
    /// Standard Webhooks key the gateway signs forwards with.
    pub signing_key: Option<SigningKey>,
}

impl KindDef for HttpKind {
    const NAME: &'static str = "http";
    type Raw = Raw;
    type Spec = Spec;
    type Sink = Http;

    fn check_url(url: &str) -> Result<(), String> {
        if url.starts_with("http://") || url.starts_with("https://") {
            Ok(())
        } else {
            Err("must be an http:// or https:// URL".into())
        }
    }

    fn validate(raw: Raw, check: &mut Check<'_>) -> Spec {
        let signing_key = raw.signing_secret.as_deref().and_then(|r| {
            let s = check.secret("signing_secret", r)?;
            Some(SigningKey::standard_webhooks(&s))
        });
        Spec { signing_key }
    }

    fn describe(_: &Spec) -> String {
        String::new()
    }

    fn signs(spec: &Spec) -> bool {
        spec.signing_key.is_some()
    }

    fn secrets(spec: &Spec) -> Vec<&[u8]> {
        spec.signing_key.iter().map(SigningKey::bytes).collect()
    }

    fn sink(spec: &Spec, http: &reqwest::Client) -> Http {
        Http {
            client: http.clone(),
            signing_key: spec.signing_key.clone(),
            parsed: OnceLock::new(),
        }
    }

    async fn send(sink: &Http, to: &Endpoint<'_>, message: &Message<'_>) -> Sent {
        send(sink, to, message).await
    }
}

/// The process's HTTP client (one connection pool for every target) and
/// the target's signing key.
pub struct Http {
    client: reqwest::Client,
    signing_key: Option<SigningKey>,
    /// The endpoint's URL, parsed on the first attempt: a sink sends to its
    /// target's one URL, and parsing it (IDNA mapping included) is work an
    /// attempt need not repeat.
    parsed: OnceLock<(String, reqwest::Url)>,
}

impl Http {
    /// A sink that never signs (the slack kind's).
    pub fn unsigned(client: &reqwest::Client) -> Self {
        Self {
            client: client.clone(),
            signing_key: None,
            parsed: OnceLock::new(),
        }
    }

    /// `raw` parsed: the cached parse when it is the URL parsed before;
    /// `None` when `raw` is no URL (the request builder then reports it).
    fn url(&self, raw: &str) -> Option<reqwest::Url> {
        if let Some((s, url)) = self.parsed.get()
            && s == raw
        {
            return Some(url.clone());
        }
        let url = reqwest::Url::parse(raw).ok()?;
        let _ = self.parsed.set((raw.to_owned(), url.clone()));
        Some(url)
    }
}

/// Headers the gateway's own signature replaces when a target signs.
const STANDARD_WEBHOOK_HEADERS: &[&str] = &["webhook-id", "webhook-timestamp", "webhook-signature"];

/// Stable Standard Webhooks message id for an event: the same on every
/// attempt and replay, without `.` (the spec's separator).
pub fn message_id(source: &str, event_id: &str) -> String {
    let mut h = Sha256::new();
    h.update(source.as_bytes());
    h.update([0]);
    h.update(event_id.as_bytes());
    format!("msg_{}", &hex::encode(h.finalize())[..32])
}

/// `v1,<base64 HMAC-SHA256(key, "{id}.{ts}.{body}")>`.
pub fn standard_signature(key: &[u8], id: &str, ts: i64, body: &[u8]) -> String {
    let ts = ts.to_string();
    let mac = crate::primitives::crypto::Algorithm::HmacSha256
        .mac(key, &[id.as_bytes(), b".", ts.as_bytes(), b".", body]);
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac)
    )
}

/// Builds the POST for one attempt.
fn build(http: &Http, target: &Endpoint<'_>, m: &Message<'_>) -> reqwest::RequestBuilder {
    let req = match http.url(target.url) {
        Some(url) => http.client.post(url),
        None => http.client.post(target.url),
    };
    let mut req = req.timeout(target.timeout);
    for (name, value) in &m.provider_headers {
        if http.signing_key.is_some() && STANDARD_WEBHOOK_HEADERS.contains(&name.as_str()) {
            continue;
        }
        if m.replaces(name.as_str()) {
            continue;
        }
        req = req.header(*name, *value);
    }
    for (name, value) in m.hookgate_headers() {
        req = req.header(name, value);
    }
    for (name, value) in m.trace {
        req = req.header(*name, value);
    }
    if let Some(key) = &http.signing_key {
        let id = message_id(m.source, m.event_id);
        let sig = standard_signature(key.bytes(), &id, m.now_secs, m.body);
        req = req
            .header("webhook-id", id)
            .header("webhook-timestamp", m.now_secs.to_string())
            .header("webhook-signature", sig);
    }
    req.body(m.body.clone())
}

/// The error of an attempt the target did not answer in time.
pub const TIMEOUT: &str = "timeout";
/// The error of an attempt that could not connect.
pub const CONNECT_FAILED: &str = "connection failed";

/// One HTTP attempt: POST and classify the answer. 2xx is delivered;
/// anything else is retried (429/503 with their `Retry-After`), except a
/// request that cannot even be built, which no retry would fix.
pub async fn send(http: &Http, target: &Endpoint<'_>, m: &Message<'_>) -> Sent {
    match build(http, target, m).send().await {
        Ok(res) => {
            let s = res.status();
            let status = Some(s.as_u16() as i32);
            if s.is_success() {
                return Sent::Delivered { status };
            }
            let retry_after = if s.as_u16() == 429 || s.as_u16() == 503 {
                res.headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| backoff::parse_retry_after(v, SystemTime::now()))
            } else {
                None
            };
            Sent::Retry {
                status,
                error: format!("HTTP {}", s.as_u16()),
                retry_after,
            }
        }
        Err(e) if e.is_builder() => Sent::permanent(error_text(&e)),
        Err(e) => {
            let error = if e.is_timeout() {
                TIMEOUT.to_owned()
            } else if e.is_connect() {
                CONNECT_FAILED.to_owned()
            } else {
                error_text(&e)
            };
            Sent::retry(error)
        }
    }
}

/// A failed attempt as `last_error` stores it: never the target URL, which
/// may carry a token in its query (reqwest's `Display` includes it).
pub fn error_text(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text.replace(&format!(" for url ({url})"), "");
        text = text.replace(url.as_str(), "[target url]");
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    if let Some(url) = e.url() {
        text = text.replace(url.as_str(), "[target url]");
    }
    format!("request failed: {text}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::STANDARD;

    #[test]
    fn a_sink_parses_each_url_it_is_given_and_keeps_the_first() {
        let http = Http::unsigned(&reqwest::Client::new());
        let first = "http://127.0.0.1:9/first";
        assert_eq!(http.url(first).unwrap().as_str(), first);
        assert_eq!(http.url(first).unwrap().as_str(), first);
        // Another URL is parsed, never answered from the kept one.
        let other = "http://127.0.0.1:9/other?x=1";
        assert_eq!(http.url(other).unwrap().as_str(), other);
        assert_eq!(http.parsed.get().unwrap().0, first);
        // No URL: the request builder reports it, as it did before.
        assert!(http.url("not a url").is_none());
        let endpoint = Endpoint {
            name: "t",
            url: "not a url",
            timeout: std::time::Duration::from_secs(1),
        };
        let body = bytes::Bytes::from_static(b"{}");
        let m = Message {
            source: "s",
            event_id: "e",
            event_type: None,
            body: &body,
            provider_headers: Vec::new(),
            attempt: "1".into(),
            now_secs: 0,
            trace: &[],
        };
        assert!(build(&http, &endpoint, &m).build().unwrap_err().is_builder());
    }

    // The signing vector of the Standard Webhooks reference libraries:
    // https://github.com/standard-webhooks/standard-webhooks,
    // libraries/python/tests/test_webhooks.py::test_sign_function.
    #[test]
    fn gateway_signature_matches_the_standard_webhooks_vector() {
        let key = STANDARD.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = standard_signature(
            &key,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[tokio::test]
    async fn last_error_never_holds_the_target_url_or_its_query_token() {
        let client = reqwest::Client::new();
        // Port 9 (discard) on loopback: refused or closed at once.
        let e = client
            .post("http://127.0.0.1:9/hook?token=s3cr3t-query-token")
            .send()
            .await
            .unwrap_err();
        let text = error_text(&e);
        assert!(!text.contains("s3cr3t"), "{text}");
        assert!(!text.contains("127.0.0.1:9"), "{text}");
        assert!(text.starts_with("request failed"), "{text}");
    }

    #[test]
    fn message_ids_are_stable_and_dot_free() {
        let a = message_id("stripe", "evt.1");
        assert_eq!(a, message_id("stripe", "evt.1"));
        assert_ne!(a, message_id("github", "evt.1"));
        assert!(!a.contains('.'));
    }
}
