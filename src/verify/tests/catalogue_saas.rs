//! Productivity, CRM and support, e-mail and identity providers of the
//! catalogue: a round trip through `hookgate sign`'s signer for each, the
//! vectors their docs or official SDKs publish (source cited on each), and
//! the hmac generalisations they need (several signature headers, a
//! signature in the body, RFC 3339 timestamps, unchecked signed times).

use super::payments::{Case, NOW, round_trip};
use super::*;

// One table of cases, one per provider: splitting it would only scatter it.
#[test]
fn productivity_crm_email_and_identity_round_trip() {
    let cases = [
        Case::new(
            "docusign",
            r#"{"event":"envelope-sent","configurationId":10,"generatedDateTime":"2024-01-01T00:00:00.0000000Z","data":{"envelopeId":"E1","x":"MARK42"}}"#,
            "envelope-sent:10:E1:2024-01-01T00:00:00.0000000Z",
        ),
        Case::new(
            "zendesk",
            r#"{"id":"zd-1","type":"zen:event-type:ticket.created","x":"MARK42"}"#,
            "zd-1",
        ),
        Case::new(
            "typeform",
            r#"{"event_id":"tf-1","event_type":"form_response","x":"MARK42"}"#,
            "tf-1",
        ),
        Case {
            timestamped: true,
            ..Case::new(
                "calendly",
                r#"{"event":"invitee.created","created_at":"2024-01-01T00:00:00Z","payload":{"uri":"https://api.calendly.com/x/1","n":"MARK42"}}"#,
                "invitee.created:2024-01-01T00:00:00Z:https://api.calendly.com/x/1",
            )
        },
        Case {
            timestamped: true,
            ..Case::new(
                "box",
                r#"{"id":"box-1","trigger":"FILE.UPLOADED","x":"MARK42"}"#,
                "box-1",
            )
        },
        Case {
            timestamped: true,
            ..Case::new(
                "workos",
                r#"{"id":"event_1","event":"user.created","x":"MARK42"}"#,
                "event_1",
            )
        },
        Case::new(
            "clickup",
            r#"{"webhook_id":"w1","event":"taskCreated","history_items":[{"id":"h1"}],"x":"MARK42"}"#,
            "w1:taskCreated:h1",
        ),
        Case {
            url: Some("https://hooks.example.com/webhooks/trello"),
            ..Case::new(
                "trello",
                r#"{"action":{"id":"act-1","type":"updateCard","x":"MARK42"}}"#,
                "act-1",
            )
        },
        Case::new(
            "cal-com",
            r#"{"triggerEvent":"BOOKING_CREATED","createdAt":"2024-01-01T00:00:00Z","payload":{"uid":"u1","x":"MARK42"}}"#,
            "BOOKING_CREATED:2024-01-01T00:00:00Z:u1",
        ),
        Case {
            // `macSecretBase64`: the key is the decoded bytes.
            secret: "c2VjcmV0LWtleS1ieXRlcw==",
            wrong: "d3Jvbmcta2V5LWJ5dGVz",
            ..Case::new(
                "airtable",
                r#"{"base":{"id":"app1"},"webhook":{"id":"ach1"},"timestamp":"2024-01-01T00:00:00.000Z","x":"MARK42"}"#,
                "ach1:2024-01-01T00:00:00.000Z",
            )
        },
        Case {
            secret: "hook:s3cret",
            wrong: "hook:wrong",
            body_signed: false,
            ..Case::new(
                "pipedrive",
                r#"{"meta":{"action":"create","entity":"deal","id":"m-1","timestamp":"2024-01-01T00:00:00Z"},"data":{"x":"MARK42"}}"#,
                "deal:create:m-1:2024-01-01T00:00:00Z",
            )
        },
        Case {
            timestamped: true,
            ..Case::new(
                "customerio",
                r#"{"event_id":"cio-1","object_type":"email","metric":"delivered","x":"MARK42"}"#,
                "cio-1",
            )
        },
        Case::new("helpscout", r#"{"id":1,"subject":"MARK42"}"#, "sha256:"),
        Case {
            timestamped: true,
            ..Case::new(
                "front",
                r#"{"id":"evt_f1","type":"inbound_received","x":"MARK42"}"#,
                "evt_f1",
            )
        },
        Case {
            secret: "hook:s3cret",
            wrong: "hook:wrong",
            body_signed: false,
            ..Case::new(
                "postmark",
                r#"{"RecordType":"Delivery","MessageID":"m1","DeliveredAt":"2024-01-01T00:00:00Z","Details":"MARK42"}"#,
                "Delivery:m1:2024-01-01T00:00:00Z",
            )
        },
        Case {
            url: Some("https://hooks.example.com/webhooks/mandrill"),
            ..Case::new(
                "mandrill",
                "mandrill_events=%5B%7B%22event%22%3A%22MARK42%22%7D%5D",
                "sha256:",
            )
        },
        Case {
            secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            wrong: "whsec_dGhpcy1pcy1hLXdyb25nLWtleQ==",
            timestamped: true,
            ..Case::new("resend", r#"{"type":"email.sent","x":"MARK42"}"#, "")
        },
        Case {
            secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            wrong: "whsec_dGhpcy1pcy1hLXdyb25nLWtleQ==",
            timestamped: true,
            ..Case::new("clerk", r#"{"type":"user.created","x":"MARK42"}"#, "")
        },
        Case {
            secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            wrong: "whsec_dGhpcy1pcy1hLXdyb25nLWtleQ==",
            timestamped: true,
            ..Case::new(
                "loops",
                r#"{"eventName":"contact.created","x":"MARK42"}"#,
                "",
            )
        },
        Case::new(
            "persona",
            r#"{"data":{"id":"evt_p1","attributes":{"name":"inquiry.completed","x":"MARK42"}}}"#,
            "evt_p1",
        ),
        Case::new(
            "checkr",
            r#"{"id":"ck-1","type":"report.completed","x":"MARK42"}"#,
            "ck-1",
        ),
        Case::new(
            "onfido",
            r#"{"payload":{"action":"check.completed","object":{"id":"chk-1","x":"MARK42"}}}"#,
            "check.completed:chk-1",
        ),
    ];
    for c in &cases {
        round_trip(c);
    }
}

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
    // `hookgate sign` says why it cannot place this signature.
    let req = SignRequest {
        body: body.as_bytes(),
        ..Default::default()
    };
    assert!(
        sign(&src.provider, &src.keys[0], &req)
            .unwrap_err()
            .contains("inside the body")
    );
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

// Front answers its X-Front-Challenge (signed) without storing an event.
#[test]
fn front_challenge_is_answered_after_the_signature() {
    let src = source("front", &["front-key"]);
    let body = r#"{"type":"sync","authorization":{"id":"cmp_1"}}"#;
    let ts = (NOW * 1000).to_string();
    let mac =
        crypto::Algorithm::HmacSha256.mac(b"front-key", &[ts.as_bytes(), b":", body.as_bytes()]);
    let sig = crypto::Encoding::Base64.encode(&mac);
    let h = headers(&[
        ("x-front-signature", &sig),
        ("x-front-request-timestamp", &ts),
        ("x-front-challenge", "ch4ll3nge"),
    ]);
    let Checked::Answer(r) = run(&src, &h, Bytes::from(body), None, NOW).unwrap() else {
        panic!("challenge not answered")
    };
    assert_eq!(r.body, r#"{"challenge":"ch4ll3nge"}"#);
    let forged = headers(&[
        ("x-front-signature", "AAAA"),
        ("x-front-request-timestamp", &ts),
        ("x-front-challenge", "ch4ll3nge"),
    ]);
    assert!(run(&src, &forged, Bytes::from(body), None, NOW).is_err());
}

// WorkOS: workos-ruby spec/lib/workos/webhooks_spec.rb (validate_signature_hash),
// `t` in milliseconds. The old payload has no `id`: the body hash.
const WORKOS_BODY: &str = r#"{"data":{"id":"directory_user_01FAEAJCR3ZBZ30D8BD1924TVG","state":"active","emails":[{"type":"work","value":"blair@foo-corp.com","primary":true}],"idp_id":"00u1e8mutl6wlH3lL4x7","object":"directory_user","username":"blair@foo-corp.com","last_name":"Lunceford","first_name":"Blair","directory_id":"directory_01F9M7F68PZP8QXP8G7X5QRHS7","raw_attributes":{"name":{"givenName":"Blair","familyName":"Lunceford","middleName":"Elizabeth","honorificPrefix":"Ms."},"title":"Developer Success Engineer","active":true,"emails":[{"type":"work","value":"blair@foo-corp.com","primary":true}],"groups":[],"locale":"en-US","schemas":["urn:ietf:params:scim:schemas:core:2.0:User","urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"],"userName":"blair@foo-corp.com","addresses":[{"region":"CO","primary":true,"locality":"Steamboat Springs","postalCode":"80487"}],"externalId":"00u1e8mutl6wlH3lL4x7","displayName":"Blair Lunceford","urn:ietf:params:scim:schemas:extension:enterprise:2.0:User":{"manager":{"value":"2","displayName":"Kathleen Chung"},"division":"Engineering","department":"Customer Success"}}},"event":"dsync.user.created"}"#;

#[test]
fn workos_sdk_vector_in_milliseconds() {
    let src = source("workos", &["FrQWzvMo0eqse22Ceyia2uuww"]);
    let h = [(
        "workos-signature",
        "t=1626125972272, v1=80f7ab7efadc306eb5797c588cee9410da9be4416782b497bf1e1bf4175fb928",
    )];
    let v = check(&src, &h, WORKOS_BODY, 1626125972).unwrap();
    assert!(v.event_id().as_str().starts_with("sha256:"));
    // The SDK's default three minutes.
    assert_eq!(
        check(&src, &h, WORKOS_BODY, 1626125972 + 181).unwrap_err(),
        VerifyError::TimestampOutOfTolerance
    );
    let wrong = source("workos", &["invalid"]);
    assert_eq!(
        check(&wrong, &h, WORKOS_BODY, 1626125972).unwrap_err(),
        VerifyError::InvalidSignature
    );
}

// Zendesk: the timestamp (ISO 8601) comes first, as on the current docs
// page; it is signed but no window is checked.
#[test]
fn zendesk_signs_timestamp_then_body() {
    let src = source("zendesk", &["dGhpc19zZWNyZXRfaXNfZm9yX3Rlc3Rpbmdfb25seQ=="]);
    let body = r#"{"id":"01H","type":"zen:event-type:ticket.created"}"#;
    let ts = "2021-07-25T10:00:00Z";
    let key = b"dGhpc19zZWNyZXRfaXNfZm9yX3Rlc3Rpbmdfb25seQ==";
    let first = crypto::Algorithm::HmacSha256.mac(key, &[ts.as_bytes(), body.as_bytes()]);
    let last = crypto::Algorithm::HmacSha256.mac(key, &[body.as_bytes(), ts.as_bytes()]);
    let go = |mac: &[u8]| {
        let sig = crypto::Encoding::Base64.encode(mac);
        let h = [
            ("x-zendesk-webhook-signature", sig.as_str()),
            ("x-zendesk-webhook-signature-timestamp", ts),
        ];
        check(&src, &h, body, NOW)
    };
    assert_eq!(go(&first).unwrap().event_id().as_str(), "01H");
    assert_eq!(go(&last).unwrap_err(), VerifyError::InvalidSignature);
}
