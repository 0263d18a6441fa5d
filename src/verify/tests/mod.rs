//! Unit tests: public test vectors (source cited on each) and header parsing.
//! `payments.rs`, `saas.rs` and `bad_input.rs` cover the long tail.

mod bad_input;
mod canonical;
mod catalogue_devtools;
mod catalogue_messaging;
mod catalogue_payments;
mod catalogue_saas;
mod ecdsa;
mod ed25519;
mod handshakes;
mod hardening;
mod payments;
mod paypal;
mod pkcs1;
mod plaid;
mod provider_files;
mod repeated;
mod saas;
mod signature_shapes;
mod sns;
mod stripe_v2;
mod subset;

use super::registry::Registry;
use super::sign::{SignRequest, sign};
use super::*;
use crate::primitives::crypto::{self, SigningKey};
use crate::primitives::secret::Secret;
use http::{HeaderName, HeaderValue};
use std::time::Duration;

/// A source for `provider` with `secrets`, like config validation builds it.
fn source(provider: &str, secrets: &[&str]) -> Arc<Source> {
    source_with(provider, secrets, |_| {})
}

pub(crate) fn source_with(
    provider: &str,
    secrets: &[&str],
    edit: impl FnOnce(&mut Source),
) -> Arc<Source> {
    let p = Registry::builtin().get(provider).unwrap();
    let keys = secrets
        .iter()
        .map(|s| p.signing_key(&Secret::new(*s)).unwrap())
        .collect();
    let mut s = Source {
        name: "test".into(),
        tolerance: p.default_tolerance(),
        provider: p,
        keys,
        dedup_window: Duration::from_secs(60),
        dedup_by_body: false,
        silent_after: None,
        targets: vec![],
        routes: Arc::new(crate::verify::router::NoRoutes),
        public_url: None,
        allow_ips: vec![],
        settings: None,
        verify_token: None,
        split: None,
        withheld: vec![],
    };
    s.withheld = crate::verify::forwarded_headers::withheld(&s.provider, Default::default());
    edit(&mut s);
    Arc::new(s)
}

/// Verifies like the old single-event entry point: an event or an error.
fn verify(
    src: &Arc<Source>,
    headers: &HeaderMap,
    body: Bytes,
    now: i64,
) -> Result<Verified, VerifyError> {
    match run(src, headers, body, None, now)? {
        Checked::Event(v) => Ok(v),
        Checked::Answer(r) => panic!("unexpected control answer {r:?}"),
        Checked::Split { .. } => panic!("unexpected split"),
    }
}

fn run(
    src: &Arc<Source>,
    headers: &HeaderMap,
    body: Bytes,
    query: Option<&str>,
    now: i64,
) -> Result<Checked, VerifyError> {
    let incoming = Incoming {
        headers: headers.clone(),
        body,
        query,
        client_ip: None,
    };
    check_with(src, incoming, now, None)
}

fn payments_headers(h: &[(String, String)]) -> HeaderMap {
    let v: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    headers(&v)
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

fn check(
    src: &Arc<Source>,
    h: &[(&str, &str)],
    body: &str,
    now: i64,
) -> Result<Verified, VerifyError> {
    verify(src, &headers(h), Bytes::from(body.to_owned()), now)
}

/// Verifies one recorded request and returns its event id.
fn vector(provider: &str, secrets: &[&str], h: &[(&str, &str)], body: &str, now: i64) -> String {
    let src = source(provider, secrets);
    let v = check(&src, h, body, now).unwrap_or_else(|e| panic!("{provider}: {e:?}"));
    // A wrong secret must not verify the same request.
    // Valid as text and as base64 (base64 of "not-the-secret").
    let wrong = source(provider, &["bm90LXRoZS1zZWNyZXQ="]);
    assert_eq!(
        check(&wrong, h, body, now).unwrap_err(),
        VerifyError::InvalidSignature,
        "{provider}: wrong secret"
    );
    v.event_id().as_str().to_owned()
}

// Stripe vector from stripe-python (github.com/stripe/stripe-python)
// tests/test_webhook.py constants (DUMMY_WEBHOOK_PAYLOAD, secret
// whsec_test_secret, t=12345); the test `test_timestamp_off_but_no_tolerance`
// verifies exactly this header.
const STRIPE_SDK_BODY: &str = "{\n  \"id\": \"evt_test_webhook\",\n  \"object\": \"event\",\n  \"data\": { \"object\": { \"id\": \"rdr_123\", \"object\": \"terminal.reader\" } }\n}";
const STRIPE_SDK_SIG: &str =
    "t=12345,v1=07b1ede164afb7b5de91267ffa656f568c65d6e0783ce0ac55ee094643578eda";

#[test]
fn stripe_sdk_vector_verifies_and_yields_event_id() {
    assert_eq!(STRIPE_SDK_BODY.len(), 125);
    let src = source("stripe", &["whsec_test_secret"]);
    let v = check(
        &src,
        &[("stripe-signature", STRIPE_SDK_SIG)],
        STRIPE_SDK_BODY,
        12345,
    )
    .unwrap();
    assert_eq!(v.event_id().as_str(), "evt_test_webhook");
}

/// The facts a stored event needs are read from what verification kept:
/// the forwarded headers (hop-by-hop ones dropped), the type (from the
/// walk of the body verification did for the id) and the routes.
#[test]
fn facts_are_read_from_the_kept_request_when_taken() {
    // The routes are the targets' (`target::route`); verification only asks.
    use crate::target::route;
    let src = source_with("stripe", &["whsec_test_secret"], |s| {
        let route = |target: &str, events: Option<Vec<String>>, filter: Vec<(String, String)>| {
            route::Route {
                target: target.into(),
                rule: route::Rule::parse(events, filter).unwrap(),
                order_by: None,
            }
        };
        s.routes = Arc::new(route::Routes(vec![
            route(
                "readers",
                None,
                vec![("json:/data/object/object".into(), "terminal.reader".into())],
            ),
            route("billing", Some(vec!["invoice.*".into()]), vec![]),
            route(
                "charges",
                None,
                vec![("json:/data/object/object".into(), "charge".into())],
            ),
        ]));
    });
    let body = STRIPE_SDK_BODY.replace("\"object\": \"event\"", "\"type\": \"invoice.paid\"");
    let t = 1_700_000_000;
    let req = SignRequest {
        body: body.as_bytes(),
        timestamp: t,
        ..Default::default()
    };
    let sig = sign(&src.provider, &src.keys[0], &req).unwrap().headers;
    let mut h: Vec<(&str, &str)> = sig.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    h.extend([("connection", "keep-alive"), ("x-request-id", "r1")]);
    let mut v = check(&src, &h, &body, t).unwrap();
    let facts = v.take_facts();
    assert_eq!(facts.event_type.as_deref(), Some("invoice.paid"));
    // Stripe's provider default: `data.object.id`.
    assert_eq!(facts.object_id.as_deref(), Some("rdr_123"));
    assert_eq!(facts.routed.targets, ["readers", "billing"]);
    let names: Vec<&str> = facts.headers.pairs().map(|(k, _)| k).collect();
    assert!(names.contains(&"stripe-signature"), "{names:?}");
    assert!(names.contains(&"x-request-id"), "{names:?}");
    assert!(!names.contains(&"connection"), "{names:?}");
}

#[test]
fn stripe_accepts_any_v1_and_ignores_v0_and_unknown_schemes() {
    let src = source("stripe", &["whsec_test_secret"]);
    let sig = format!(
        "t=12345,v0=deadbeef,v1={},v1=07b1ede164afb7b5de91267ffa656f568c65d6e0783ce0ac55ee094643578eda,v9=zz",
        "0".repeat(64)
    );
    assert!(check(&src, &[("stripe-signature", &sig)], STRIPE_SDK_BODY, 12345).is_ok());
}

#[test]
fn stripe_rejects_stale_and_future_timestamps() {
    let src = source("stripe", &["whsec_test_secret"]);
    let h = [("stripe-signature", STRIPE_SDK_SIG)];
    assert_eq!(
        check(&src, &h, STRIPE_SDK_BODY, 12345 + 301).unwrap_err(),
        VerifyError::TimestampOutOfTolerance
    );
    assert_eq!(
        check(&src, &h, STRIPE_SDK_BODY, 12345 - 301).unwrap_err(),
        VerifyError::TimestampOutOfTolerance
    );
    assert!(check(&src, &h, STRIPE_SDK_BODY, 12345 + 300).is_ok());
}

#[test]
fn stripe_header_parsing_errors_are_malformed() {
    let src = source("stripe", &["whsec_test_secret"]);
    for bad in ["garbage", "t=1", "t=1,v1=nothex", "t=1,v1=abcd"] {
        let e = check(&src, &[("stripe-signature", bad)], STRIPE_SDK_BODY, 1).unwrap_err();
        assert!(
            matches!(e, VerifyError::MalformedSignature(_)),
            "{bad}: {e:?}"
        );
    }
    let e = check(&src, &[], STRIPE_SDK_BODY, 1).unwrap_err();
    assert_eq!(e, VerifyError::MissingSignature);
}

// GitHub V1: docs.github.com "Validating webhook deliveries" example.
#[test]
fn github_docs_vector() {
    let src = source("github", &["It's a Secret to Everybody"]);
    let h = [
        (
            "x-hub-signature-256",
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
        ),
        ("x-github-delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
    ];
    let v = check(&src, &h, "Hello, World!", 0).unwrap();
    assert_eq!(
        v.event_id().as_str(),
        "72d3162e-cc78-11e3-81ab-4c9367dc0958"
    );
}

// GitHub V2: octokit/webhooks-methods.js test/sign.test.ts.
#[test]
fn github_octokit_vector_and_rotation() {
    let src = source("github", &["old-secret", "mysecret"]);
    let h = [
        (
            "x-hub-signature-256",
            "sha256=4864d2759938a15468b5df9ade20bf161da9b4f737ea61794142f3484236bda3",
        ),
        ("x-github-delivery", "d1"),
    ];
    assert!(check(&src, &h, r#"{"foo":"bar"}"#, 0).is_ok());
    let only_old = source("github", &["old-secret"]);
    assert_eq!(
        check(&only_old, &h, r#"{"foo":"bar"}"#, 0).unwrap_err(),
        VerifyError::InvalidSignature
    );
    let no_prefix = [("x-hub-signature-256", "4864"), ("x-github-delivery", "d1")];
    assert!(matches!(
        check(&src, &no_prefix, "{}", 0).unwrap_err(),
        VerifyError::MalformedSignature(_)
    ));
}

// Standard Webhooks V3: standard-webhooks libraries/python/tests/test_webhooks.py::test_sign_function.
#[test]
fn standard_webhooks_spec_vector_with_both_header_families() {
    let src = source(
        "standard-webhooks",
        &["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
    );
    let body = r#"{"test": 2432232314}"#;
    let sig = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
    for family in ["webhook", "svix"] {
        let h = [
            (format!("{family}-id"), "msg_p5jXN8AQM9LWM0D4loKWxJek"),
            (format!("{family}-timestamp"), "1614265330"),
            (format!("{family}-signature"), sig),
        ];
        let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        let v = check(&src, &h, body, 1614265330).unwrap();
        assert_eq!(v.event_id().as_str(), "msg_p5jXN8AQM9LWM0D4loKWxJek");
    }
    // Several signatures in one header (rotation), unknown versions ignored.
    let multi = format!("v1a,AAAA v1,{} {sig}", "A".repeat(44));
    let h = [
        ("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
        ("webhook-timestamp", "1614265330"),
        ("webhook-signature", multi.as_str()),
    ];
    assert!(check(&src, &h, body, 1614265330).is_ok());
}

#[test]
fn shopify_signature_built_in_test_and_event_id_fallback() {
    let src = source("shopify", &["shpss_secret"]);
    let mac = src
        .provider
        .signature
        .algorithm
        .mac(b"shpss_secret", &[b"{}"]);
    let b64 = src.provider.signature.encoding.encode(&mac);
    let h = [
        ("x-shopify-hmac-sha256", b64.as_str()),
        ("x-shopify-webhook-id", "wh-1"),
    ];
    assert_eq!(
        check(&src, &h, "{}", 0).unwrap().event_id().as_str(),
        "wh-1"
    );
    let h2 = [
        ("x-shopify-hmac-sha256", b64.as_str()),
        ("x-shopify-webhook-id", "wh-1"),
        ("x-shopify-event-id", "ev-9"),
    ];
    assert_eq!(
        check(&src, &h2, "{}", 0).unwrap().event_id().as_str(),
        "ev-9"
    );
    assert_eq!(
        check(&src, &h[..1], "{}", 0).unwrap_err(),
        VerifyError::MissingEventId
    );
}

#[test]
fn sign_round_trips_for_every_builtin_provider() {
    for name in ["github", "shopify", "standard-webhooks", "stripe"] {
        let src = source(name, &["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]);
        let body = br#"{"id":"evt_1"}"#;
        let req = SignRequest {
            body,
            timestamp: 1_700_000_000,
            event_id: Some("evt_1".into()),
            ..Default::default()
        };
        let h = sign(&src.provider, &src.keys[0], &req).unwrap().headers;
        let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let v = check(&src, &h, r#"{"id":"evt_1"}"#, 1_700_000_000)
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(v.event_id().as_str(), "evt_1", "{name}");
        let tampered = check(&src, &h, r#"{"id":"evt_2"}"#, 1_700_000_000);
        assert_eq!(
            tampered.unwrap_err(),
            VerifyError::InvalidSignature,
            "{name}"
        );
    }
}

#[test]
fn event_ids_are_bounded_and_printable() {
    assert!(EventId::parse(&"a".repeat(256)).is_ok());
    assert!(matches!(
        EventId::parse(&"a".repeat(257)),
        Err(VerifyError::InvalidEventId(_))
    ));
    assert!(matches!(
        EventId::parse("evt\n1"),
        Err(VerifyError::InvalidEventId(_))
    ));
    assert_eq!(EventId::parse(""), Err(VerifyError::MissingEventId));
}

#[test]
fn json_event_id_errors_are_clear() {
    let src = source("stripe", &["k"]);
    let key = SigningKey::from_bytes(b"k".to_vec());
    for (body, want) in [
        ("[1,2]", "JSON body is not an object"),
        ("not json", "body is not valid JSON"),
        ("{\"x\":1}", "missing event id"),
    ] {
        let req = SignRequest {
            body: body.as_bytes(),
            timestamp: 10,
            ..Default::default()
        };
        let h = sign(&src.provider, &key, &req).unwrap().headers;
        let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let e = check(&src, &h, body, 10).unwrap_err();
        assert_eq!(e.to_string(), want);
        assert_eq!(e.status(), 400);
    }
}

/// `object_id`: a source replaces its provider's locator, signature
/// locators are refused, and a long value is stored as its hash.
#[test]
fn a_source_overrides_the_object_id_and_long_ids_are_hashed() {
    use crate::verify::provider::SourceOverrides;
    let stripe = Registry::builtin().get("stripe").unwrap();
    let custom = stripe
        .customized(&SourceOverrides {
            object_id: Some("json:/data/object/customer"),
            ..Default::default()
        })
        .unwrap();
    let body = br#"{"id":"evt_1","data":{"object":{"id":"pi_1","customer":"cus_9"}}}"#;
    let h = http::HeaderMap::new();
    let f = Fields::new(&h, body);
    assert_eq!(
        crate::verify::facts::object_id(&stripe, &f).as_deref(),
        Some("pi_1")
    );
    assert_eq!(
        crate::verify::facts::object_id(&custom, &f).as_deref(),
        Some("cus_9")
    );
    let err = stripe
        .customized(&SourceOverrides {
            object_id: Some("signature:t"),
            ..Default::default()
        })
        .unwrap_err();
    assert!(err.starts_with("object_id:"), "{err}");
    let long = "x".repeat(crate::verify::facts::MAX_OBJECT_ID + 1);
    let stored = crate::verify::facts::stored_object_id(&long).unwrap();
    assert!(
        stored.starts_with("sha256:") && stored.len() == 71,
        "{stored}"
    );
    assert_eq!(crate::verify::facts::stored_object_id(""), None);
}
