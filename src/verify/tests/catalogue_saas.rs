//! Productivity, CRM and support, e-mail and identity providers of the
//! catalogue: a round trip through `hookgate sign`'s signer for each, the
//! vectors their docs or official SDKs publish (source cited on each).

use super::payments::{Case, NOW, round_trips};
use super::*;

// One table of cases, one per provider: splitting it would only scatter it.
#[test]
fn productivity_crm_email_and_identity_round_trip() {
    round_trips(&[
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
    ]);
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
