//! Shared pieces of the bench binaries: Stripe-shaped bodies and signatures.

use hmac::{KeyInit, Mac};
use std::time::{SystemTime, UNIX_EPOCH};

pub type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// Seconds since the Unix epoch.
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Milliseconds since the Unix epoch.
pub fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `t=<ts>,v1=<hex HMAC-SHA256(secret, "<ts>.<body>")>`, as Stripe signs.
pub fn stripe_signature(secret: &[u8], ts: i64, body: &[u8]) -> String {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(ts.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("t={ts},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// Checks a `Stripe-Signature` header against `body`: any `v1` may match and
/// the timestamp must be within `tolerance` seconds of `now`.
pub fn stripe_verify(secret: &[u8], header: &str, body: &[u8], now: i64, tolerance: i64) -> bool {
    let mut ts: Option<&str> = None;
    let mut sigs = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => ts = Some(v),
            Some(("v1", v)) => sigs.push(v),
            _ => {}
        }
    }
    let Some(ts) = ts else { return false };
    let Ok(t) = ts.parse::<i64>() else {
        return false;
    };
    if (now - t).abs() > tolerance {
        return false;
    }
    sigs.iter().any(|sig| {
        let Ok(tag) = hex::decode(sig) else {
            return false;
        };
        let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes any key length");
        mac.update(ts.as_bytes());
        mac.update(b".");
        mac.update(body);
        mac.verify_slice(&tag).is_ok()
    })
}

const TYPES: [&str; 4] = [
    "payment_intent.succeeded",
    "charge.succeeded",
    "invoice.paid",
    "customer.subscription.updated",
];

/// A Stripe-shaped event for `id`, padded to about `size` bytes. The body
/// depends only on `id`, `n`, `created` and `size`, so a provider retry can
/// rebuild exactly the same bytes.
pub fn stripe_event(id: &str, n: u64, created: i64, size: usize) -> Vec<u8> {
    let kind = TYPES[(n % TYPES.len() as u64) as usize];
    let head = format!(
        concat!(
            r#"{{"id":"{id}","object":"event","api_version":"2024-06-20","created":{created},"#,
            r#""type":"{kind}","livemode":false,"pending_webhooks":1,"#,
            r#""request":{{"id":"req_{n:014}","idempotency_key":null}},"#,
            r#""data":{{"object":{{"id":"pi_{n:020}","object":"payment_intent","amount":{amount},"#,
            r#""currency":"usd","status":"succeeded","customer":"cus_{cust:014}","metadata":{{"pad":""#
        ),
        id = id,
        created = created,
        kind = kind,
        n = n,
        amount = 100 + n % 99_900,
        cust = n % 10_007,
    );
    let tail = r#""}}}}"#;
    let pad = size.saturating_sub(head.len() + tail.len());
    let mut body = Vec::with_capacity(head.len() + pad + tail.len());
    body.extend_from_slice(head.as_bytes());
    body.extend(std::iter::repeat_n(b'x', pad));
    body.extend_from_slice(tail.as_bytes());
    body
}

/// Value at quantile `q` (0..=1) of sorted `v`, or 0 when empty.
pub fn quantile(sorted: &[u32], q: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_json_of_the_asked_size() {
        let b = stripe_event("evt_1", 7, 1_700_000_000, 1536);
        assert_eq!(b.len(), 1536);
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["id"], "evt_1");
        assert_eq!(v["object"], "event");
    }

    #[test]
    fn signatures_round_trip() {
        let body = b"{\"id\":\"evt_1\"}";
        let h = stripe_signature(b"whsec_x", 1_700_000_000, body);
        assert!(stripe_verify(b"whsec_x", &h, body, 1_700_000_100, 300));
        assert!(!stripe_verify(b"whsec_x", &h, body, 1_700_000_400, 300));
        assert!(!stripe_verify(b"whsec_y", &h, body, 1_700_000_100, 300));
    }
}
