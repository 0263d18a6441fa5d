//! PayPal over HTTP: a pinned certificate, and a certificate fetched once
//! from an allowed loopback host. No traffic leaves the machine.

use super::{Headers, app, h, send};
use crate::helpers::*;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const PAYPAL_KEY: &str = include_str!("../../fixtures/paypal/test-key.pem");
const PAYPAL_CERT: &str = include_str!("../../fixtures/paypal/test-cert.pem");
const PAYPAL_OTHER_CERT: &str = include_str!("../../fixtures/paypal/other-cert.pem");

/// PayPal's signature, computed here with the test key.
pub(crate) fn paypal_headers(webhook_id: &str, cert_url: &str, ts: i64, body: &[u8]) -> Headers {
    use rsa::pkcs8::DecodePrivateKey;
    use rsa::signature::{SignatureEncoding, Signer};
    let key = rsa::PrivateKey::from_pkcs8_pem(PAYPAL_KEY).unwrap();
    let id = hookgate::primitives::token::random_uuid();
    let time = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(ts as u64),
    )
    .to_string();
    let msg = format!("{id}|{time}|{webhook_id}|{}", crc32fast::hash(body));
    let sig = rsa::pkcs1v15::SigningKey::<sha2::Sha256>::new(key).sign(msg.as_bytes());
    h(&[
        ("PAYPAL-TRANSMISSION-ID", &id),
        ("PAYPAL-TRANSMISSION-TIME", &time),
        ("PAYPAL-TRANSMISSION-SIG", &B64.encode(sig.to_bytes())),
        ("PAYPAL-CERT-URL", cert_url),
        ("PAYPAL-AUTH-ALGO", "SHA256withRSA"),
    ])
}

const SANDBOX_CERT: &str =
    "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-1d93a270";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paypal_with_a_pinned_certificate() {
    let app = app().await;
    let body = br#"{"id":"WH-HTTP-EVT-1","event_type":"PAYMENT.CAPTURE.COMPLETED"}"#;
    let good = paypal_headers("WH-HTTP", SANDBOX_CERT, now(), body);
    let (s, _, d) = send(&app, "paypal", &good, body).await;
    assert_eq!((s, d.as_str()), (200, "new"));
    assert_eq!(send(&app, "paypal", &good, body).await.2, "duplicate");
    assert_eq!(app.rows("paypal", "WH-HTTP-EVT-1").await, 1);

    let tampered = br#"{"id":"WH-HTTP-EVT-1","event_type":"PAYMENT.CAPTURE.REFUNDED"}"#;
    assert_eq!(send(&app, "paypal", &good, tampered).await.0, 401);
    let other_hook = paypal_headers("WH-OTHER", SANDBOX_CERT, now(), body);
    assert_eq!(send(&app, "paypal", &other_hook, body).await.0, 401);
    let stale = paypal_headers("WH-HTTP", SANDBOX_CERT, now() - 3600, body);
    assert_eq!(
        send(&app, "paypal", &stale, body).await.1.trim(),
        "timestamp outside tolerance"
    );
    // A certificate URL off PayPal's hosts: refused before any fetch.
    let off = paypal_headers(
        "WH-HTTP",
        "https://evil.example/v1/notifications/certs/X",
        now(),
        body,
    );
    let (s, text, _) = send(&app, "paypal", &off, body).await;
    assert_eq!(s, 401);
    assert!(text.contains("not on PayPal's hosts"), "{text}");
}

/// A loopback "certificate host" serving `pem` and counting requests.
async fn cert_server(pem: &'static str) -> (String, Arc<AtomicUsize>) {
    cert_server_answering(axum::http::StatusCode::OK, pem).await
}

/// A loopback certificate host that answers `status` and `pem` to every
/// request, counting them.
async fn cert_server_answering(
    status: axum::http::StatusCode,
    pem: &'static str,
) -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let app = axum::Router::new().route(
        "/v1/notifications/certs/{id}",
        axum::routing::get(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            async move { (status, pem) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr.to_string(), hits)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paypal_fetches_a_certificate_once_from_an_allowed_loopback_host() {
    let (good_host, good_hits) = cert_server(PAYPAL_CERT).await;
    let (bad_host, _) = cert_server(PAYPAL_OTHER_CERT).await;
    let down_host = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().to_string()
    };
    let mut opts = Opts::new(Backend::Embedded);
    opts.extra = format!(
        r#"
[sources.pp]
provider = "paypal"
[sources.pp.paypal]
webhook_id = "WH-LOOP"
cert_hosts = ["{good_host}", "{bad_host}", "{down_host}"]
"#
    );
    let app = spawn_app(opts).await;
    let url = format!("http://{good_host}/v1/notifications/certs/CERT-1");
    for i in 0..3 {
        let body = format!(r#"{{"id":"WH-LOOP-{i}"}}"#);
        let hdr = paypal_headers("WH-LOOP", &url, now(), body.as_bytes());
        assert_eq!(send(&app, "pp", &hdr, body.as_bytes()).await.0, 200, "#{i}");
    }
    assert_eq!(
        good_hits.load(Ordering::SeqCst),
        1,
        "fetched once, then cached"
    );

    // A listed host serving a certificate that is not PayPal's.
    let body = br#"{"id":"WH-LOOP-X"}"#;
    let bad = format!("http://{bad_host}/v1/notifications/certs/CERT-2");
    let (s, text, _) = send(
        &app,
        "pp",
        &paypal_headers("WH-LOOP", &bad, now(), body),
        body,
    )
    .await;
    assert_eq!(s, 401, "{text}");
    // A listed host that is down: 503 so that PayPal retries later.
    let down = format!("http://{down_host}/v1/notifications/certs/CERT-3");
    let (s, text, _) = send(
        &app,
        "pp",
        &paypal_headers("WH-LOOP", &down, now(), body),
        body,
    )
    .await;
    assert_eq!((s, text.trim()), (503, "signing certificate unavailable"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paypal_cert_url_variants_failures_and_floods_cost_a_bounded_number_of_fetches() {
    let (good_host, good_hits) = cert_server(PAYPAL_CERT).await;
    let (fail_host, fail_hits) =
        cert_server_answering(axum::http::StatusCode::INTERNAL_SERVER_ERROR, "").await;
    let mut opts = Opts::new(Backend::Embedded);
    opts.extra = format!(
        r#"
[sources.pp]
provider = "paypal"
[sources.pp.paypal]
webhook_id = "WH-LOOP"
cert_hosts = ["{good_host}", "{fail_host}"]
"#
    );
    let app = spawn_app(opts).await;
    // Query variants are one certificate: fetched once, and they cannot
    // push the genuine certificate out of the cache.
    for i in 0..5 {
        let url = format!("http://{good_host}/v1/notifications/certs/CERT-1?v={i}");
        let body = format!(r#"{{"id":"WH-VAR-{i}"}}"#);
        let hdr = paypal_headers("WH-LOOP", &url, now(), body.as_bytes());
        assert_eq!(send(&app, "pp", &hdr, body.as_bytes()).await.0, 200, "#{i}");
    }
    assert_eq!(good_hits.load(Ordering::SeqCst), 1);
    // A failing URL is remembered: asked once for several posts.
    let body = br#"{"id":"WH-FAIL"}"#;
    let url = format!("http://{fail_host}/v1/notifications/certs/CERT-F");
    for _ in 0..3 {
        let hdr = paypal_headers("WH-LOOP", &url, now(), body);
        let (s, _, _) = send(&app, "pp", &hdr, body).await;
        assert_eq!(s, 503);
    }
    assert_eq!(fail_hits.load(Ordering::SeqCst), 1);
    // A flood of distinct certificate paths: the per-source budget caps
    // the fetches; the rest are 503 (PayPal would retry).
    for i in 0..20 {
        let url = format!("http://{fail_host}/v1/notifications/certs/FLOOD-{i}");
        let hdr = paypal_headers("WH-LOOP", &url, now(), body);
        assert_eq!(send(&app, "pp", &hdr, body).await.0, 503);
    }
    let fetched = good_hits.load(Ordering::SeqCst) + fail_hits.load(Ordering::SeqCst);
    assert!(
        fetched <= hookgate::verify::fetch_budget::FETCHES_PER_WINDOW as usize + 1,
        "{fetched} fetches"
    );
}
