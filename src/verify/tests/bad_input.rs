//! Hostile and broken input: every case is a clear 4xx with a reason,
//! never a panic.

use super::payments::NOW;
use super::*;

fn status_of(r: Result<Checked, VerifyError>) -> u16 {
    match r {
        Ok(_) => 200,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            e.status()
        }
    }
}

#[test]
fn malformed_and_truncated_signatures_are_4xx() {
    let body = Bytes::from_static(br#"{"id":"evt_1","event_id":"e","events":[{"id":"x"}]}"#);
    let long = "a".repeat(10_000);
    let cases: &[(&str, &[&str], &str, &str)] = &[
        ("stripe", &["whsec_x"], "stripe-signature", "t=1,v1=abc"),
        ("stripe", &["whsec_x"], "stripe-signature", &long),
        ("paddle", &["k"], "paddle-signature", "ts=1;h1=zz"),
        (
            "square",
            &["k"],
            "x-square-hmacsha256-signature",
            "GF4YkrJgGBDZ9NIYbNXBn",
        ),
        ("razorpay", &["k"], "x-razorpay-signature", "d60e67fd88"),
        ("checkout", &["k"], "cko-signature", "not hex at all"),
        ("gocardless", &["k"], "webhook-signature", ""),
        ("mollie", &["k"], "x-mollie-signature", "sha1=abcd"),
        ("slack", &["k"], "x-slack-signature", "v1=abcd"),
        ("zoom", &["k"], "x-zm-signature", "v0="),
        ("mercadopago", &["k"], "x-signature", "garbage"),
        ("xendit", &["k"], "x-callback-token", ""),
        ("basic", &["u:p"], "authorization", "Basic %%%"),
        ("intercom", &["k"], "x-hub-signature", "sha1=0"),
    ];
    for (provider, secrets, header, value) in cases {
        let src = source_with(provider, secrets, |s| {
            s.public_url = Some("https://h.example/x".into())
        });
        let h = headers(&[
            (header, value),
            ("x-slack-request-timestamp", "1"),
            ("x-zm-request-timestamp", "1"),
        ]);
        let s = status_of(run(&src, &h, body.clone(), None, NOW));
        assert!((400..500).contains(&s), "{provider} {value:.20}: {s}");
    }
}

#[test]
fn body_schemes_reject_broken_bodies_with_a_reason() {
    let hex_key = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
    let cases: &[(&str, &str, &[u8])] = &[
        ("adyen", hex_key, b"not json"),
        ("adyen", hex_key, b"[1,2]"),
        ("adyen", hex_key, br#"{"notificationItems":[]}"#),
        ("adyen", hex_key, br#"{"notificationItems":[{"NotificationRequestItem":{}}]}"#),
        ("adyen", hex_key, br#"{"notificationItems":[{"NotificationRequestItem":{"additionalData":{"hmacSignature":"abc"}}}]}"#),
        ("adyen", hex_key, b"\xff\xfe\x00"),
        ("tbank", "pw", b"\xff\xfe"),
        ("tbank", "pw", br#"{"Token":"zz"}"#),
        ("tbank", "pw", b"[]"),
        ("robokassa", "pw", b"OutSum=1&InvId=2&SignatureValue=XYZ"),
        ("robokassa", "pw", b"InvId=2&SignatureValue=00112233445566778899aabbccddeeff"),
        ("robokassa", "pw", b"\xff=\xfe"),
        ("braintree", "pk", b"bt_signature=a|b&bt_payload=%%%"),
        ("braintree", "pk", b"bt_payload=abc"),
        ("braintree", "pk", b"bt_signature=pub|00&bt_payload=<xml>"),
    ];
    for (provider, secret, body) in cases {
        let src = source(provider, &[secret]);
        let s = status_of(run(
            &src,
            &HeaderMap::new(),
            Bytes::from_static(body),
            None,
            NOW,
        ));
        assert!(
            (400..500).contains(&s),
            "{provider} {:?}: {s}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn non_object_json_and_non_utf8_bodies_after_a_valid_signature_are_400() {
    let src = source("checkout", &["k"]);
    for body in [
        &b"[1,2,3]"[..],
        b"\"just a string\"",
        b"\xff\xfe\xfd",
        b"42",
    ] {
        let mac = hex::encode(crypto::Algorithm::HmacSha256.mac(b"k", &[body]));
        let h = headers(&[("cko-signature", &mac)]);
        let e = run(&src, &h, Bytes::from_static(body), None, NOW).unwrap_err();
        assert_eq!(e.status(), 400, "{body:?}: {e}");
        assert!(matches!(e, VerifyError::BadBody(_)), "{e:?}");
    }
}

#[test]
fn absurdly_long_event_ids_are_400_and_composites_are_hashed() {
    let long = "e".repeat(5_000);
    let src = source("checkout", &["k"]);
    let body = format!(r#"{{"id":"{long}"}}"#);
    let mac = hex::encode(crypto::Algorithm::HmacSha256.mac(b"k", &[body.as_bytes()]));
    let e = check(&src, &[("cko-signature", &mac)], &body, NOW).unwrap_err();
    assert_eq!(
        e,
        VerifyError::InvalidEventId("event id longer than 256 bytes")
    );

    let src = source("razorpay", &["k"]);
    let body = "{}";
    let mac = hex::encode(crypto::Algorithm::HmacSha256.mac(b"k", &[body.as_bytes()]));
    let e = check(
        &src,
        &[
            ("x-razorpay-signature", &mac),
            ("x-razorpay-event-id", &long),
        ],
        body,
        NOW,
    );
    assert_eq!(e.unwrap_err().status(), 400);

    // A GoCardless batch of 250 events: the composite is hashed to 71 bytes.
    let events: Vec<String> = (0..250)
        .map(|i| format!(r#"{{"id":"EV{i:012}"}}"#))
        .collect();
    let body = format!(r#"{{"events":[{}]}}"#, events.join(","));
    let src = source("gocardless", &["k"]);
    let mac = hex::encode(crypto::Algorithm::HmacSha256.mac(b"k", &[body.as_bytes()]));
    let v = check(&src, &[("webhook-signature", &mac)], &body, NOW).unwrap();
    assert!(v.event_id().as_str().starts_with("sha256:"));
    assert_eq!(v.event_id().as_str().len(), 71);
}
