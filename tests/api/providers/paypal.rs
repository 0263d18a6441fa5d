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

/// Issue #32: forged requests naming made-up certificates spend only their
/// own (per-address) failure budget; a genuine new certificate, named by a
/// request from another address, is still fetched and its webhook taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_forged_certificate_names_do_not_keep_a_genuine_new_certificate_out() {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    // PayPal's certificate host as the test owns it: the genuine
    // certificate at one name, 404 for every other.
    let certs = axum::Router::new().route(
        "/v1/notifications/certs/{id}",
        axum::routing::get(
            move |axum::extract::Path(id): axum::extract::Path<String>| {
                counter.fetch_add(1, Ordering::SeqCst);
                async move {
                    if id == "CERT-GENUINE" {
                        (axum::http::StatusCode::OK, PAYPAL_CERT)
                    } else {
                        (axum::http::StatusCode::NOT_FOUND, "")
                    }
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, certs).await });
    let mut opts = Opts::new(Backend::Embedded);
    opts.extra = format!(
        "[sources.pp]\nprovider = \"paypal\"\n[sources.pp.paypal]\n\
         webhook_id = \"WH-LOOP\"\ncert_hosts = [\"{host}\"]\n"
    );
    let app = spawn_app(opts).await;

    // 1,000 forged names from 127.0.0.1, within one budget window.
    let forger = reqwest::Client::builder()
        .local_address("127.0.0.1".parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap();
    let mut statuses = std::collections::BTreeMap::new();
    for batch in 0..20 {
        let mut set = tokio::task::JoinSet::new();
        for i in 0..50 {
            let url = format!("http://{host}/v1/notifications/certs/FORGED-{batch}-{i}");
            let body = format!(r#"{{"id":"WH-FORGED-{batch}-{i}"}}"#);
            let hdr = paypal_headers("WH-LOOP", &url, now(), body.as_bytes());
            let mut req = forger.post(app.url("/webhooks/pp"));
            for (k, v) in hdr {
                req = req.header(k, v);
            }
            set.spawn(req.body(body).send());
        }
        while let Some(r) = set.join_next().await {
            let s = r.unwrap().unwrap().status().as_u16();
            *statuses.entry(s).or_insert(0) += 1;
        }
    }
    assert!(
        statuses.keys().all(|s| *s == 401 || *s == 503),
        "{statuses:?}"
    );
    let forged_fetches = hits.load(Ordering::SeqCst);
    assert!(
        forged_fetches <= hookgate::verify::fetch_budget::FAILURES_PER_CLIENT as usize,
        "{forged_fetches} fetches for forged names"
    );

    // The genuine new certificate, named by PayPal from another address.
    let genuine = reqwest::Client::builder()
        .local_address("127.0.0.2".parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap();
    let url = format!("http://{host}/v1/notifications/certs/CERT-GENUINE");
    let body = br#"{"id":"WH-GENUINE-1"}"#;
    let mut req = genuine.post(app.url("/webhooks/pp"));
    for (k, v) in paypal_headers("WH-LOOP", &url, now(), body) {
        req = req.header(k, v);
    }
    let res = req.body(body.to_vec()).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["hookgate-dedup"], "new");
    assert_eq!(hits.load(Ordering::SeqCst), forged_fetches + 1);
}

/// Issue #32: the last good certificate is kept in the ledger, so a
/// restarted gateway verifies with it without fetching (here the
/// certificate host is down by then).
async fn a_fetched_certificate_survives_a_restart(backend: Backend) {
    let hits = Arc::new(AtomicUsize::new(0));
    let up = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (counter, serving) = (hits.clone(), up.clone());
    let certs = axum::Router::new().route(
        "/v1/notifications/certs/{id}",
        axum::routing::get(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            let ok = serving.load(Ordering::SeqCst);
            async move {
                if ok {
                    (axum::http::StatusCode::OK, PAYPAL_CERT)
                } else {
                    (axum::http::StatusCode::SERVICE_UNAVAILABLE, "")
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, certs).await });
    let mut opts = Opts::new(backend);
    opts.extra = format!(
        "[sources.pp]\nprovider = \"paypal\"\n[sources.pp.paypal]\n\
         webhook_id = \"WH-LOOP\"\ncert_hosts = [\"{host}\"]\n"
    );
    let url = format!("http://{host}/v1/notifications/certs/CERT-KEPT");
    let first = spawn_app(opts.clone()).await;
    let body = br#"{"id":"WH-KEPT-1"}"#;
    let hdr = paypal_headers("WH-LOOP", &url, now(), body);
    assert_eq!(send(&first, "pp", &hdr, body).await.0, 200);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    // The key is written by a background task; give it a moment.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let prefix = first.prefix.clone();
    let db = first.stop().await;

    up.store(false, Ordering::SeqCst);
    let again = spawn_on(opts, db, prefix).await;
    let body = br#"{"id":"WH-KEPT-2"}"#;
    let hdr = paypal_headers("WH-LOOP", &url, now(), body);
    let (s, text, d) = send(&again, "pp", &hdr, body).await;
    assert_eq!((s, d.as_str()), (200, "new"), "{text}");
    assert_eq!(hits.load(Ordering::SeqCst), 1, "not fetched again");
}

crate::both_backends!(a_fetched_certificate_survives_a_restart);
