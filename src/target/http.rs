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
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
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
            plain: plain_client(),
            signing_key: spec.signing_key.clone(),
            parsed: OnceLock::new(),
            parsed_uri: OnceLock::new(),
        }
    }

    async fn send(sink: &Http, to: &Endpoint<'_>, message: &Message<'_>) -> Sent {
        send(sink, to, message).await
    }
}

/// A plain `http://` target's client: hyper-util's, without reqwest's
/// layers (see [`Http::plain`]).
type Plain = hyper_util::client::legacy::Client<HttpConnector, Full<Bytes>>;

/// The environment variables that make reqwest send `http://` requests
/// through a proxy (`NO_PROXY` only narrows them).
const PROXY_VARS: [&str; 4] = ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"];

/// The process's HTTP client (one connection pool for every target), the
/// target's own client for a plain `http://` URL, and its signing key.
pub struct Http {
    client: reqwest::Client,
    /// Plain `http://` attempts go on hyper-util's client directly:
    /// reqwest's layers around the same client (a redirect layer that
    /// formats and re-parses every request's URL even with redirects off,
    /// proxy matching, retries) cost more CPU than the request itself
    /// (docs/design.md, "Delivery"). `None` while the environment names an
    /// HTTP proxy, which only reqwest honours; `https://` always takes
    /// reqwest (TLS roots, HTTP/2).
    plain: Option<Plain>,
    signing_key: Option<SigningKey>,
    /// The endpoint's URL, parsed on the first attempt: a sink sends to its
    /// target's one URL, and parsing it (IDNA mapping included) is work an
    /// attempt need not repeat.
    parsed: OnceLock<(String, reqwest::Url)>,
    /// The same for the plain client's request.
    parsed_uri: OnceLock<(String, http::Uri)>,
}

impl Http {
    /// A sink that never signs (the slack kind's).
    pub fn unsigned(client: &reqwest::Client) -> Self {
        Self {
            client: client.clone(),
            plain: None,
            signing_key: None,
            parsed: OnceLock::new(),
            parsed_uri: OnceLock::new(),
        }
    }

    /// `raw` parsed: the cached parse when it is the URL parsed before;
    /// `None` when `raw` is no URL (the request builder then reports it).
    fn url(&self, raw: &str) -> Option<reqwest::Url> {
        kept(&self.parsed, raw, |r| reqwest::Url::parse(r).ok())
    }

    /// [`Http::url`] as the plain client takes it.
    fn uri(&self, raw: &str) -> Option<http::Uri> {
        kept(&self.parsed_uri, raw, |r| r.parse().ok())
    }
}

/// `raw` parsed: `cell`'s parse when it holds `raw`, else `parse(raw)`,
/// kept in `cell` if it is the first.
fn kept<T: Clone>(
    cell: &OnceLock<(String, T)>,
    raw: &str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Option<T> {
    if let Some((s, parsed)) = cell.get()
        && s == raw
    {
        return Some(parsed.clone());
    }
    let parsed = parse(raw)?;
    let _ = cell.set((raw.to_owned(), parsed.clone()));
    Some(parsed)
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

/// A plain `http://` target's client, as reqwest's is set up in
/// `deliver::start` (idle connections kept 90 s, `TCP_NODELAY`); `None`
/// when a proxy variable is set.
fn plain_client() -> Option<Plain> {
    plain_client_with(|v| std::env::var_os(v))
}

/// [`plain_client`] with the environment read through `env`.
fn plain_client_with(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<Plain> {
    if PROXY_VARS
        .iter()
        .any(|v| env(v).is_some_and(|x| !x.is_empty()))
    {
        return None;
    }
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Some(
        hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(std::time::Duration::from_secs(90))
            .build(connector),
    )
}

/// The headers of one attempt: the provider's the target may see, then
/// hookgate's, the trace context and the gateway's signature. An error is a
/// value no header can carry (the request cannot be built).
fn headers(http: &Http, m: &Message<'_>) -> Result<HeaderMap, String> {
    let mut h = HeaderMap::with_capacity(m.provider_headers.len() + 8);
    for (name, value) in &m.provider_headers {
        if http.signing_key.is_some() && STANDARD_WEBHOOK_HEADERS.contains(&name.as_str()) {
            continue;
        }
        if m.replaces(name.as_str()) {
            continue;
        }
        h.append(*name, (*value).clone());
    }
    let value = |v: &str| {
        HeaderValue::from_str(v).map_err(|_| "a header value cannot be sent".to_owned())
    };
    for (name, v) in m.hookgate_headers() {
        h.append(HeaderName::from_static(name), value(v)?);
    }
    for (name, v) in m.trace {
        h.append(HeaderName::from_static(name), value(v)?);
    }
    if let Some(key) = &http.signing_key {
        let id = message_id(m.source, m.event_id);
        let sig = standard_signature(key.bytes(), &id, m.now_secs, m.body);
        h.append("webhook-id", value(&id)?);
        h.append("webhook-timestamp", value(&m.now_secs.to_string())?);
        h.append("webhook-signature", value(&sig)?);
    }
    Ok(h)
}

/// Builds reqwest's POST for one attempt.
fn build(http: &Http, target: &Endpoint<'_>, m: &Message<'_>, h: HeaderMap) -> reqwest::RequestBuilder {
    let req = match http.url(target.url) {
        Some(url) => http.client.post(url),
        None => http.client.post(target.url),
    };
    req.timeout(target.timeout).headers(h).body(m.body.clone())
}

/// The error of an attempt the target did not answer in time.
pub const TIMEOUT: &str = "timeout";
/// The error of an attempt that could not connect.
pub const CONNECT_FAILED: &str = "connection failed";

/// One HTTP attempt: POST and classify the answer. 2xx is delivered;
/// anything else is retried (429/503 with their `Retry-After`), except a
/// request that cannot even be built, which no retry would fix.
pub async fn send(http: &Http, target: &Endpoint<'_>, m: &Message<'_>) -> Sent {
    let h = match headers(http, m) {
        Ok(h) => h,
        Err(e) => return Sent::permanent(format!("request failed: {e}")),
    };
    if let Some(plain) = &http.plain
        && target.url.starts_with("http://")
    {
        let Some(uri) = http.uri(target.url) else {
            return Sent::permanent("request failed: the target URL is invalid".into());
        };
        return send_plain(plain, uri, target, m, h).await;
    }
    match build(http, target, m, h).send().await {
        Ok(res) => answered(res.status(), res.headers()),
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

/// [`send`] for a plain `http://` URL on hyper-util's client, with what
/// reqwest adds by default (`user-agent`, `accept: */*`) and its
/// request timeout (until the answer's head).
async fn send_plain(
    plain: &Plain,
    uri: http::Uri,
    target: &Endpoint<'_>,
    m: &Message<'_>,
    mut h: HeaderMap,
) -> Sent {
    h.entry(http::header::USER_AGENT)
        .or_insert(HeaderValue::from_static(USER_AGENT));
    h.entry(http::header::ACCEPT)
        .or_insert(HeaderValue::from_static("*/*"));
    let mut req = http::Request::new(Full::new(m.body.clone()));
    *req.method_mut() = http::Method::POST;
    *req.uri_mut() = uri;
    *req.headers_mut() = h;
    match tokio::time::timeout(target.timeout, plain.request(req)).await {
        Ok(Ok(res)) => answered(res.status(), res.headers()),
        Ok(Err(e)) if e.is_connect() => Sent::retry(CONNECT_FAILED.to_owned()),
        Ok(Err(e)) => Sent::retry(chain_text(&e, target.url)),
        Err(_) => Sent::retry(TIMEOUT.to_owned()),
    }
}

/// The `user-agent` of every delivery.
pub const USER_AGENT: &str = concat!("hookgate/", env!("CARGO_PKG_VERSION"));

/// The target's answer: 2xx delivered, anything else retried (429 and 503
/// after their `Retry-After`, when given).
fn answered(s: http::StatusCode, headers: &HeaderMap) -> Sent {
    let status = Some(s.as_u16() as i32);
    if s.is_success() {
        return Sent::Delivered { status };
    }
    let retry_after = if s.as_u16() == 429 || s.as_u16() == 503 {
        headers
            .get(http::header::RETRY_AFTER)
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

/// A hyper-util error with its sources, as `last_error` stores it, with
/// the target URL taken out should any part name it.
fn chain_text(e: &(dyn std::error::Error + 'static), url: &str) -> String {
    let text = with_sources(e.to_string(), e);
    format!("request failed: {}", text.replace(url, "[target url]"))
}

/// `text` followed by `e`'s sources, each after `": "`.
fn with_sources(mut text: String, e: &(dyn std::error::Error + 'static)) -> String {
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// A failed attempt as `last_error` stores it: never the target URL, which
/// may carry a token in its query (reqwest's `Display` includes it).
pub fn error_text(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text.replace(&format!(" for url ({url})"), "");
    }
    let mut text = with_sources(text, e);
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
        // The plain client's parse is kept the same way.
        assert_eq!(http.uri(first).unwrap(), first);
        assert_eq!(http.uri(other).unwrap(), other);
        assert_eq!(http.parsed_uri.get().unwrap().0, first);
        assert_eq!(http.uri(first).unwrap(), first);
        // No URL: the request builder reports it, as it did before.
        assert!(http.url("not a url").is_none());
        assert!(http.uri("not a url").is_none());
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
        let h = headers(&http, &m).unwrap();
        assert!(build(&http, &endpoint, &m, h).build().unwrap_err().is_builder());
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
    fn a_proxy_in_the_environment_keeps_plain_http_on_reqwest() {
        assert!(plain_client_with(|_| None).is_some());
        assert!(plain_client_with(|v| (v == "NO_PROXY").then(|| "x".into())).is_some());
        assert!(plain_client_with(|v| (v == "HTTP_PROXY").then(|| "".into())).is_some());
        for var in PROXY_VARS {
            let proxied = plain_client_with(|v| (v == var).then(|| "http://127.0.0.1:3128".into()));
            assert!(proxied.is_none(), "{var}");
        }
    }

    /// A loopback server that reads one request and answers it with
    /// `answer` (or closes the connection when it is empty); the request's
    /// bytes come back on the channel.
    async fn one_answer(answer: &'static str) -> (String, tokio::sync::oneshot::Receiver<Vec<u8>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook?token=s3cr3t-query-token", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            // The head, then as many body bytes as its content-length says.
            loop {
                let n = conn.read(&mut buf).await.unwrap();
                got.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&got).to_string();
                if let Some(end) = text.find("\r\n\r\n") {
                    let len = text[..end]
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .map_or(0, |v| v.trim().parse::<usize>().unwrap());
                    if got.len() >= end + 4 + len || n == 0 {
                        break;
                    }
                }
            }
            if !answer.is_empty() {
                conn.write_all(answer.as_bytes()).await.unwrap();
            }
            let _ = tx.send(got);
        });
        (url, rx)
    }

    static BODY: Bytes = Bytes::from_static(b"{\"id\":\"evt_1\"}");
    static SIGNATURE: (HeaderName, HeaderValue) = (
        HeaderName::from_static("stripe-signature"),
        HeaderValue::from_static("t=1,v1=ab"),
    );

    /// The second attempt of a Stripe event with one provider header.
    fn message() -> Message<'static> {
        Message {
            source: "stripe",
            event_id: "evt_1",
            event_type: None,
            body: &BODY,
            provider_headers: vec![(&SIGNATURE.0, &SIGNATURE.1)],
            attempt: "2".into(),
            now_secs: 0,
            trace: &[],
        }
    }

    /// One attempt of `m` to `url` on a plain client built without reading
    /// the environment (a proxy set where the tests run must not skip them).
    async fn post_plain(url: &str, secs: f64, m: &Message<'_>) -> Sent {
        let plain = plain_client_with(|_| None).unwrap();
        let h = headers(&Http::unsigned(&reqwest::Client::new()), m).unwrap();
        let to = Endpoint { name: "t", url, timeout: std::time::Duration::from_secs_f64(secs) };
        send_plain(&plain, url.parse().unwrap(), &to, m, h).await
    }

    #[tokio::test]
    async fn a_plain_http_attempt_sends_what_reqwest_sent_and_reads_the_answer() {
        let m = message();
        let (url, got) = one_answer("HTTP/1.1 503 Service Unavailable\r\nretry-after: 7\r\ncontent-length: 0\r\n\r\n").await;
        let sent = post_plain(&url, 5.0, &m).await;
        let Sent::Retry { status, error, retry_after } = sent else { panic!("{sent:?}") };
        assert_eq!((status, error.as_str()), (Some(503), "HTTP 503"));
        let wait = retry_after.expect("Retry-After read");
        assert!(wait > std::time::Duration::from_secs(6) && wait <= std::time::Duration::from_secs(7), "{wait:?}");
        let got = String::from_utf8(got.await.unwrap()).unwrap();
        assert!(got.starts_with("POST /hook?token=s3cr3t-query-token HTTP/1.1\r\n"), "{got}");
        for line in [
            "stripe-signature: t=1,v1=ab",
            "hookgate-event-id: evt_1",
            "hookgate-source: stripe",
            "hookgate-attempt: 2",
            &format!("user-agent: {USER_AGENT}"),
            "accept: */*",
            "content-length: 14",
        ] {
            assert!(got.contains(&format!("{line}\r\n")), "{line} in {got}");
        }
        assert!(got.ends_with("\r\n\r\n{\"id\":\"evt_1\"}"), "{got}");

        let (url, _) = one_answer("HTTP/1.1 204 No Content\r\n\r\n").await;
        let sent = post_plain(&url, 5.0, &m).await;
        assert_eq!(sent, Sent::Delivered { status: Some(204) });
    }

    #[tokio::test]
    async fn a_plain_http_failure_never_names_the_target_url() {
        let m = message();
        // Closed without an answer.
        let (url, _) = one_answer("").await;
        let Sent::Retry { status: None, error, .. } = post_plain(&url, 5.0, &m).await else {
            panic!("closed connection not retried")
        };
        assert!(error.starts_with("request failed: "), "{error}");
        assert!(!error.contains("s3cr3t") && !error.contains("127.0.0.1"), "{error}");
        // Refused: port 9 (discard) on loopback.
        let sent = post_plain("http://127.0.0.1:9/hook?token=s3cr3t", 5.0, &m).await;
        assert_eq!(sent, Sent::retry(CONNECT_FAILED.to_owned()));
        // No answer in time.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let sent = post_plain(&url, 0.2, &m).await;
        assert_eq!(sent, Sent::retry(TIMEOUT.to_owned()));
        drop(listener);
    }

    #[test]
    fn message_ids_are_stable_and_dot_free() {
        let a = message_id("stripe", "evt.1");
        assert_eq!(a, message_id("stripe", "evt.1"));
        assert_ne!(a, message_id("github", "evt.1"));
        assert!(!a.contains('.'));
    }
}
