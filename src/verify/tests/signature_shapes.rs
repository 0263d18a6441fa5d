//! The hmac data model's less common shapes, through the providers that
//! need them: several signature headers (Box's primary and secondary,
//! DocuSign's numbered ones), a signature inside the body (Mailgun), an RFC
//! 3339 window (Box) and one header carrying a set per secret (Persona).

use super::payments::NOW;
use super::*;

// box-python-sdk test/unit/object/test_webhook.py::test_validate_message:
// the SDK's body, timestamp and both signatures. Either key alone verifies
// (rotation: a wrong primary with the right secondary is valid, as in the
// SDK's third case); the event id is the body `id` when it has one.
const BOX_BODY: &str = r#"{"type":"webhook_event","webhook":{"id":"1234567890"},"trigger":"FILE.UPLOADED","source":{"id":"1234567890","type":"file","name":"Test.txt"}}"#;
const BOX_HEADERS: [(&str, &str); 3] = [
    ("box-delivery-timestamp", "2020-01-01T00:00:00-07:00"),
    (
        "box-signature-primary",
        "6TfeAW3A1PASkgboxxA5yqHNKOwFyMWuEXny/FPD5hI=",
    ),
    (
        "box-signature-secondary",
        "v+1CD1Jdo3muIcbpv5lxxgPglOqMfsNHPV899xWYydo=",
    ),
];
/// 2020-01-01T07:00:00Z, the SDK's delivery time.
const BOX_NOW: i64 = 1_577_862_000;

#[test]
fn box_sdk_vector_both_keys_and_rfc3339_window() {
    for keys in [
        &["SamplePrimaryKey", "SampleSecondaryKey"][..],
        &["SamplePrimaryKey"],
        &["WrongPrimaryKey", "SampleSecondaryKey"],
    ] {
        assert!(
            check(&source("box", keys), &BOX_HEADERS, BOX_BODY, BOX_NOW).is_ok(),
            "{keys:?}"
        );
    }
    let wrong = source("box", &["WrongPrimaryKey", "WrongSecondaryKey"]);
    assert_eq!(
        check(&wrong, &BOX_HEADERS, BOX_BODY, BOX_NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
    // Only the secondary header present: still tried.
    let only_secondary = [BOX_HEADERS[0], BOX_HEADERS[2]];
    let src = source("box", &["SampleSecondaryKey"]);
    assert!(check(&src, &only_secondary, BOX_BODY, BOX_NOW).is_ok());
    // Ten minutes, in both directions; the offset is honoured.
    assert!(check(&src, &BOX_HEADERS, BOX_BODY, BOX_NOW + 600).is_ok());
    for now in [BOX_NOW + 601, BOX_NOW - 601, BOX_NOW - 7 * 3600] {
        assert_eq!(
            check(&src, &BOX_HEADERS, BOX_BODY, now).unwrap_err(),
            VerifyError::TimestampOutOfTolerance,
            "{now}"
        );
    }
    // BOX-DELIVERY-ID changes on each retry; the body `id` does not.
    let body = r#"{"type":"webhook_event","id":"evt-77","trigger":"FILE.UPLOADED"}"#;
    let key = b"SampleSecondaryKey";
    let ts = "2020-01-01T07:00:00Z";
    let mac = crypto::Algorithm::HmacSha256.mac(key, &[body.as_bytes(), ts.as_bytes()]);
    let sig = crypto::Encoding::Base64.encode(&mac);
    for delivery in ["d-1", "d-2"] {
        let h = [
            ("box-delivery-id", delivery),
            ("box-delivery-timestamp", ts),
            ("box-signature-secondary", sig.as_str()),
        ];
        assert_eq!(
            check(&src, &h, body, BOX_NOW).unwrap().event_id().as_str(),
            "evt-77"
        );
    }
}

// DocuSign sends one X-DocuSign-Signature-N per active Connect key: the
// source may hold only the newer key, whose signature is the second header.
#[test]
fn docusign_tries_every_numbered_signature_header() {
    let body = r#"{"event":"envelope-completed","configurationId":7,"generatedDateTime":"2024-01-01T00:00:00Z","data":{"envelopeId":"E9"}}"#;
    let sig = |key: &[u8]| {
        crypto::Encoding::Base64.encode(&crypto::Algorithm::HmacSha256.mac(key, &[body.as_bytes()]))
    };
    let (old, new) = (sig(b"old-key"), sig(b"new-key"));
    let h = [
        ("x-docusign-signature-1", old.as_str()),
        ("x-docusign-signature-2", new.as_str()),
        ("x-authorization-digest", "HMACSHA256"),
    ];
    for keys in [&["new-key"][..], &["old-key"], &["other", "new-key"]] {
        let v = check(&source("docusign", keys), &h, body, NOW).unwrap();
        assert_eq!(
            v.event_id().as_str(),
            "envelope-completed:7:E9:2024-01-01T00:00:00Z"
        );
    }
    assert_eq!(
        check(&source("docusign", &["other"]), &h, body, NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
    // Headers outside the prefix are not signatures; none present is missing.
    let e = check(
        &source("docusign", &["new-key"]),
        &[("x-docusign-sig", new.as_str())],
        body,
        NOW,
    );
    assert_eq!(e.unwrap_err(), VerifyError::MissingSignature);
    // More numbered headers than any rotation needs is refused.
    let many: Vec<(String, String)> = (1..=17)
        .map(|i| (format!("x-docusign-signature-{i}"), new.clone()))
        .collect();
    let e = run(
        &source("docusign", &["new-key"]),
        &super::payments_headers(&many),
        Bytes::from(body),
        None,
        NOW,
    );
    assert_eq!(
        e.unwrap_err(),
        VerifyError::MalformedSignature("too many signatures")
    );
}

/// A Mailgun body signed with `key` (the signature sits in the body).
fn mailgun_body(key: &[u8], token: &str, event: &str) -> String {
    let ts = "1700000000";
    let mac = crypto::Algorithm::HmacSha256.mac(key, &[ts.as_bytes(), token.as_bytes()]);
    format!(
        r#"{{"signature":{{"timestamp":"{ts}","token":"{token}","signature":"{}"}},"event-data":{{"id":"mg-1","event":"{event}"}}}}"#,
        hex::encode(mac)
    )
}

// Mailgun's documented construction (no fixed vector is published): hex
// HMAC-SHA256 of timestamp + token, carried in the JSON body.
#[test]
fn mailgun_signature_in_the_body_covers_timestamp_and_token_only() {
    let src = source("mailgun", &["key-signing"]);
    let body = mailgun_body(b"key-signing", "tok-50-chars", "delivered");
    let v = check(&src, &[], &body, NOW + 86_400).unwrap();
    assert_eq!(v.event_id().as_str(), "mg-1");
    let other = source("mailgun", &["key-other"]);
    assert_eq!(
        check(&other, &[], &body, NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
    // A changed token breaks it; changed event data does not: Mailgun does
    // not sign the event (documented in the provider file).
    let forged = body.replace("tok-50-chars", "tok-50-charz");
    assert_eq!(
        check(&src, &[], &forged, NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
    assert!(check(&src, &[], &body.replace("delivered", "failed"), NOW).is_ok());
    // No signature object: missing, not a crash.
    let e = check(&src, &[], r#"{"event-data":{"id":"x"}}"#, NOW).unwrap_err();
    assert_eq!(e, VerifyError::MissingSignature);
    // `hookgate sign` places the signature in the body's `signature`
    // object, next to the timestamp and token it covers.
    let unsigned = r#"{"signature":{"timestamp":"1700000000","token":"tok-50-chars"},"event-data":{"id":"mg-1","event":"delivered"}}"#;
    let req = SignRequest {
        body: unsigned.as_bytes(),
        ..Default::default()
    };
    let signed = sign(&src.provider, &src.keys[0], &req).unwrap();
    let json = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).unwrap();
    assert_eq!(json(&signed.body.unwrap()), json(body.as_bytes()));
    // A body without the signature object has nothing to sign.
    let req = SignRequest {
        body: br#"{"event-data":{"id":"mg-1"}}"#,
        ..Default::default()
    };
    assert!(sign(&src.provider, &src.keys[0], &req).is_err());
}

// Persona sends two space-separated `t=…,v1=…` sets while a secret rotates.
#[test]
fn persona_rotation_header_with_two_sets() {
    let body = r#"{"data":{"id":"evt_9","attributes":{"name":"inquiry.approved"}}}"#;
    let sig = |key: &[u8]| {
        hex::encode(crypto::Algorithm::HmacSha256.mac(key, &[b"1700000000.", body.as_bytes()]))
    };
    let header = format!(
        "t=1700000000,v1={} t=1700000000,v1={}",
        sig(b"old"),
        sig(b"new")
    );
    for key in ["old", "new"] {
        let v = check(
            &source("persona", &[key]),
            &[("persona-signature", &header)],
            body,
            NOW,
        );
        assert_eq!(v.unwrap().event_id().as_str(), "evt_9", "{key}");
    }
}
