//! The forwarded request: the original body bytes and provider headers,
//! `Hookgate-*` headers, and optionally a Standard Webhooks signature by the
//! gateway itself so targets can verify hookgate with any such library.

use super::backoff;
use super::sink::Sent;
use crate::config::Target;
use crate::store::DueDelivery;
use base64::Engine;
use sha2::{Digest, Sha256};
use std::time::SystemTime;

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

/// Builds the POST for one attempt (1-based) at unix time `now_secs`.
pub fn build(
    client: &reqwest::Client,
    target: &Target,
    d: &DueDelivery,
    attempt: i32,
    now_secs: i64,
) -> reqwest::RequestBuilder {
    let mut req = client.post(&target.url).timeout(target.timeout);
    for (name, value) in d.headers.iter() {
        if target.signing_key.is_some() && STANDARD_WEBHOOK_HEADERS.contains(&name.as_str()) {
            continue;
        }
        // Credentials or proxy headers stored for another target of the source.
        if target.withholds(&d.source, name.as_str()) {
            continue;
        }
        req = req.header(name, value);
    }
    req = req
        .header("hookgate-event-id", d.event_id.as_str())
        .header("hookgate-source", d.source.as_str())
        .header("hookgate-attempt", attempt.to_string());
    if let Some(key) = &target.signing_key {
        let id = message_id(&d.source, &d.event_id);
        let sig = standard_signature(key.bytes(), &id, now_secs, &d.body);
        req = req
            .header("webhook-id", id)
            .header("webhook-timestamp", now_secs.to_string())
            .header("webhook-signature", sig);
    }
    req.body(d.body.clone())
}

/// One HTTP attempt: POST and classify the answer. 2xx is delivered;
/// anything else is retried (429/503 with their `Retry-After`), except a
/// request that cannot even be built, which no retry would fix.
pub async fn send(
    client: &reqwest::Client,
    target: &Target,
    d: &DueDelivery,
    attempt: i32,
    now_secs: i64,
) -> Sent {
    match build(client, target, d, attempt, now_secs).send().await {
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
        Err(e) if e.is_builder() => Sent::Permanent {
            status: None,
            error: error_text(&e),
        },
        Err(e) => {
            let error = if e.is_timeout() {
                "timeout".to_owned()
            } else if e.is_connect() {
                "connection failed".to_owned()
            } else {
                error_text(&e)
            };
            Sent::Retry {
                status: None,
                error,
                retry_after: None,
            }
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
