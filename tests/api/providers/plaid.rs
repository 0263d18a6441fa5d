//! Plaid over HTTP: pinned keys, and keys fetched once per `kid` from a
//! loopback stand-in for Plaid's API. No traffic leaves the machine. The
//! tokens are built here with `p256` from Plaid's docs, not by hookgate.

use super::{Headers, h, send};
use crate::helpers::*;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use p256::ecdsa::signature::Signer;
use p256::pkcs8::DecodePrivateKey;
use sha2::Digest;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const KEY: &str = include_str!("../../fixtures/plaid/test-key.pem");
const KID: &str = "6c5516e1-92dc-479e-a8ff-5a51992e0001";

fn signing_key() -> p256::ecdsa::SigningKey {
    p256::ecdsa::SigningKey::from(p256::SecretKey::from_pkcs8_pem(KEY).unwrap())
}

/// The test key as Plaid's `/webhook_verification_key/get` returns it.
fn jwk(kid: &str) -> serde_json::Value {
    let point = signing_key().verifying_key().to_sec1_point(false);
    serde_json::json!({
        "alg": "ES256", "created_at": 1560466143, "crv": "P-256", "expired_at": null,
        "kid": kid, "kty": "EC", "use": "sig",
        "x": B64URL.encode(point.x().unwrap()), "y": B64URL.encode(point.y().unwrap()),
    })
}

/// `Plaid-Verification`: ES256 JWS over `{alg, kid, typ}` and `{iat, request_body_sha256}`.
fn plaid_headers(alg: &str, kid: &str, iat: i64, body: &[u8]) -> Headers {
    let header = serde_json::json!({"alg": alg, "kid": kid, "typ": "JWT"});
    let claims = serde_json::json!({
        "iat": iat,
        "request_body_sha256": hex::encode(sha2::Sha256::digest(body)),
    });
    let input = format!(
        "{}.{}",
        B64URL.encode(header.to_string()),
        B64URL.encode(claims.to_string())
    );
    let sig: p256::ecdsa::Signature = signing_key().sign(input.as_bytes());
    let token = format!("{input}.{}", B64URL.encode(sig.to_bytes()));
    h(&[("Plaid-Verification", &token)])
}

fn body(item: &str) -> Vec<u8> {
    format!(r#"{{"webhook_type":"TRANSACTIONS","webhook_code":"SYNC_UPDATES_AVAILABLE","item_id":"{item}","environment":"sandbox"}}"#).into_bytes()
}

async fn app_with(extra: String) -> TestApp {
    let mut opts = Opts::new(Backend::Embedded);
    opts.extra = extra;
    spawn_app(opts).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaid_with_pinned_keys() {
    let pinned = jwk(KID).to_string();
    let app = app_with(format!(
        "[sources.plaid]\nprovider = \"plaid\"\n[sources.plaid.plaid]\nkeys = ['{pinned}']\n"
    ))
    .await;
    let b = body("item-1");
    let (s, _, d) = send(&app, "plaid", &plaid_headers("ES256", KID, now(), &b), &b).await;
    assert_eq!((s, d.as_str()), (200, "new"));
    // Plaid's retry: a fresh token over the same body is the same event.
    let retry = plaid_headers("ES256", KID, now(), &b);
    assert_eq!(send(&app, "plaid", &retry, &b).await.2, "duplicate");
    let id = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&b)));
    assert_eq!(app.rows("plaid", &id).await, 1);

    let other = body("item-2");
    assert_eq!(send(&app, "plaid", &retry, &other).await.0, 401, "tampered");
    let stale = plaid_headers("ES256", KID, now() - 600, &b);
    let (s, text, _) = send(&app, "plaid", &stale, &b).await;
    assert_eq!((s, text.trim()), (401, "timestamp outside tolerance"));
    let hs = plaid_headers("HS256", KID, now(), &b);
    let (s, text, _) = send(&app, "plaid", &hs, &b).await;
    assert_eq!(s, 401);
    assert!(text.contains("not ES256"), "{text}");
    let unknown = plaid_headers("ES256", "other-kid", now(), &b);
    assert_eq!(send(&app, "plaid", &unknown, &b).await.0, 401);
    let (s, text, _) = send(&app, "plaid", &vec![], &b).await;
    assert_eq!((s, text.trim()), (401, "missing signature header"));
}

/// A loopback stand-in for Plaid's API: knows `KID`, counts requests and
/// keeps the last request body.
async fn key_server() -> (String, Arc<AtomicUsize>, Arc<Mutex<String>>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(String::new()));
    let (counter, last) = (hits.clone(), seen.clone());
    let app = axum::Router::new().route(
        "/webhook_verification_key/get",
        axum::routing::post(move |req: String| {
            counter.fetch_add(1, Ordering::SeqCst);
            *last.lock().unwrap() = req.clone();
            async move {
                let v: serde_json::Value = serde_json::from_str(&req).unwrap();
                if v["key_id"] == KID {
                    let res = serde_json::json!({"key": jwk(KID), "request_id": "r1"});
                    (axum::http::StatusCode::OK, res.to_string())
                } else {
                    let err = r#"{"error_type":"INVALID_INPUT","error_code":"INVALID_WEBHOOK_VERIFICATION_KEY_ID"}"#;
                    (axum::http::StatusCode::BAD_REQUEST, err.to_owned())
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), hits, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaid_fetches_a_key_once_per_kid_from_a_loopback_api() {
    let (base, hits, seen) = key_server().await;
    let down = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let app = app_with(format!(
        r#"
[sources.pl]
provider = "plaid"
[sources.pl.plaid]
client_id = "client-123"
secret = "plaid-secret-xyz"
environment = "sandbox"
api_base = "{base}"

[sources.pl-down]
provider = "plaid"
[sources.pl-down.plaid]
client_id = "client-123"
secret = "plaid-secret-xyz"
api_base = "{down}"
"#
    ))
    .await;
    for i in 0..3 {
        let b = body(&format!("item-{i}"));
        let hdr = plaid_headers("ES256", KID, now(), &b);
        assert_eq!(send(&app, "pl", &hdr, &b).await.0, 200, "#{i}");
    }
    assert_eq!(hits.load(Ordering::SeqCst), 1, "fetched once, then cached");
    let request: serde_json::Value = serde_json::from_str(&seen.lock().unwrap()).unwrap();
    assert_eq!(
        request,
        serde_json::json!({"client_id": "client-123", "secret": "plaid-secret-xyz", "key_id": KID})
    );

    // A kid Plaid does not know: 401, asked once, then remembered.
    let b = body("item-x");
    let hdr = plaid_headers("ES256", "unknown-kid", now(), &b);
    for _ in 0..2 {
        assert_eq!(send(&app, "pl", &hdr, &b).await.0, 401);
    }
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    // A stale token never causes a fetch.
    let stale = plaid_headers("ES256", "yet-another-kid", now() - 3600, &b);
    assert_eq!(send(&app, "pl", &stale, &b).await.0, 401);
    assert_eq!(hits.load(Ordering::SeqCst), 2);

    // Plaid's API unreachable: 503 so that Plaid retries later.
    let hdr = plaid_headers("ES256", KID, now(), &b);
    let (s, text, _) = send(&app, "pl-down", &hdr, &b).await;
    assert_eq!((s, text.trim()), (503, "signing certificate unavailable"));
    let stats = app.stats().await;
    assert_eq!(
        stats["sources"]["pl-down"]["rejected_by_reason"]["certificate_unavailable"],
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaid_rate_limits_are_temporarily_unavailable_never_an_unknown_key() {
    let status = Arc::new(std::sync::atomic::AtomicU16::new(429));
    let hits = Arc::new(AtomicUsize::new(0));
    let (s2, h2) = (status.clone(), hits.clone());
    let api = axum::Router::new().route(
        "/webhook_verification_key/get",
        axum::routing::post(move || {
            h2.fetch_add(1, Ordering::SeqCst);
            let code = s2.load(Ordering::SeqCst);
            async move {
                let code = axum::http::StatusCode::from_u16(code).unwrap();
                let body = serde_json::json!({"key": jwk(KID), "request_id": "r1"});
                (code, body.to_string())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, api).await });
    let app = app_with(format!(
        r#"
[sources.pl]
provider = "plaid"
[sources.pl.plaid]
client_id = "client-123"
secret = "plaid-secret-xyz"
api_base = "{base}"
"#
    ))
    .await;
    let b = body("item-429");
    for code in [429, 503] {
        status.store(code, Ordering::SeqCst);
        let hdr = plaid_headers("ES256", KID, now(), &b);
        let res = app
            .client
            .post(app.url("/webhooks/pl"))
            .headers(
                hdr.iter()
                    .map(|(k, v)| (k.parse().unwrap(), v.parse().unwrap()))
                    .collect(),
            )
            .body(b.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 503, "Plaid answered {code}");
        assert!(res.headers().contains_key("retry-after"));
    }
    // Plaid is back: the same kid is fetched and accepted (it was not
    // remembered as unknown).
    status.store(200, Ordering::SeqCst);
    let hdr = plaid_headers("ES256", KID, now(), &b);
    assert_eq!(send(&app, "pl", &hdr, &b).await.0, 200);
    assert_eq!(hits.load(Ordering::SeqCst), 3);
}
