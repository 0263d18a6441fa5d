//! Independent signers written from the providers' docs (not from
//! hookgate's engine), so a test fails if the engine drifts from the spec.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{KeyInit, Mac};

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

pub fn hmac256(key: &[u8], msg: &[u8]) -> Vec<u8> {
    let mut m = <HmacSha256 as KeyInit>::new_from_slice(key).unwrap();
    m.update(msg);
    m.finalize().into_bytes().to_vec()
}

fn h(k: &str, v: String) -> (String, String) {
    (k.to_owned(), v)
}

/// Stripe: `t=<ts>,v1=hex(HMAC(secret utf8, "{ts}.{body}"))`.
pub fn stripe(secret: &str, ts: i64, body: &[u8]) -> Vec<(String, String)> {
    let msg = [format!("{ts}.").as_bytes(), body].concat();
    vec![h(
        "Stripe-Signature",
        format!(
            "t={ts},v1={}",
            hex::encode(hmac256(secret.as_bytes(), &msg))
        ),
    )]
}

/// GitHub: `sha256=hex(HMAC(secret, body))` + delivery id.
pub fn github(secret: &str, delivery: &str, body: &[u8]) -> Vec<(String, String)> {
    vec![
        h(
            "X-Hub-Signature-256",
            format!("sha256={}", hex::encode(hmac256(secret.as_bytes(), body))),
        ),
        h("X-GitHub-Delivery", delivery.to_owned()),
        h("X-GitHub-Event", "push".to_owned()),
    ]
}

/// Standard Webhooks: `v1,base64(HMAC(key, "{id}.{ts}.{body}"))`.
pub fn standard(key: &[u8], id: &str, ts: i64, body: &[u8]) -> Vec<(String, String)> {
    let msg = [format!("{id}.{ts}.").as_bytes(), body].concat();
    vec![
        h("webhook-id", id.to_owned()),
        h("webhook-timestamp", ts.to_string()),
        h(
            "webhook-signature",
            format!("v1,{}", STANDARD.encode(hmac256(key, &msg))),
        ),
    ]
}

/// Shopify: `base64(HMAC(secret, body))` + event id.
pub fn shopify(secret: &str, event_id: &str, body: &[u8]) -> Vec<(String, String)> {
    vec![
        h(
            "X-Shopify-Hmac-Sha256",
            STANDARD.encode(hmac256(secret.as_bytes(), body)),
        ),
        h("X-Shopify-Event-Id", event_id.to_owned()),
        h("X-Shopify-Topic", "orders/create".to_owned()),
    ]
}
