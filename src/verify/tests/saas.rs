//! SaaS and generic providers: vectors (source cited), challenges, pings.

use super::payments::{Case, NOW, round_trips};
use super::*;

#[test]
fn saas_and_generic_providers_round_trip() {
    round_trips(&[
        Case {
            timestamped: true,
            ..Case::new(
                "slack",
                r#"{"type":"event_callback","event_id":"Ev1","x":"MARK42"}"#,
                "Ev1",
            )
        },
        Case {
            url: Some("https://hooks.example.com/webhooks/twilio"),
            reply: "<Response/>",
            ..Case::new(
                "twilio",
                "MessageSid=SM1&MessageStatus=delivered&Body=MARK42",
                "evt_hdr_1",
            )
        },
        Case {
            url: Some("https://hooks.example.com/webhooks/twilio?x=1"),
            query: Some("x=1"),
            reply: "<Response/>",
            ..Case::new("twilio", r#"{"property":"MARK42"}"#, "evt_hdr_1")
        },
        Case::new(
            "woocommerce",
            r#"{"id":31,"date_modified_gmt":"2024-01-01T10:00:00","note":"MARK42"}"#,
            "sha256:",
        ),
        Case::new("intercom", r#"{"id":"notif_1","x":"MARK42"}"#, "notif_1"),
        Case {
            timestamped: true,
            ..Case::new(
                "zoom",
                r#"{"event":"meeting.started","event_ts":1700000000123,"payload":{"object":{"uuid":"u1","topic":"MARK42"}}}"#,
                "meeting.started:1700000000123:u1",
            )
        },
        Case {
            body_signed: false,
            ..Case::new("xendit", r#"{"id":"x1","note":"MARK42"}"#, "")
        },
    ]);
}

// WooCommerce: the delivery id header is not part of the signed data, the
// composite needs X-WC-Webhook-ID; the round trip above lacks it, so check
// the composite with it.
#[test]
fn woocommerce_composite_id_and_unsigned_ping() {
    let src = source("woocommerce", &["wc-secret"]);
    let body = r#"{"id":31,"date_modified_gmt":"2024-01-01T10:00:00"}"#;
    let mac = src
        .provider
        .signature
        .algorithm
        .mac(b"wc-secret", &[body.as_bytes()]);
    let sig = src.provider.signature.encoding.encode(&mac);
    let h = [
        ("x-wc-webhook-signature", sig.as_str()),
        ("x-wc-webhook-id", "9"),
    ];
    let v = check(&src, &h, body, NOW).unwrap();
    assert_eq!(v.event_id().as_str(), "9:31:2024-01-01T10:00:00");

    let ping = run(
        &src,
        &HeaderMap::new(),
        Bytes::from_static(b"webhook_id=9"),
        None,
        NOW,
    );
    assert!(matches!(ping, Ok(Checked::Answer(r)) if r.status == 200));
    // An unsigned request that is not a ping is still rejected.
    let e = run(&src, &HeaderMap::new(), Bytes::from(body), None, NOW).unwrap_err();
    assert_eq!(e, VerifyError::MissingSignature);
}

// V4: docs.slack.dev "Verifying requests from Slack" / python-slack-sdk
// tests/slack_sdk/signature/test_signature_verifier.py.
const SLACK_DOCS_BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";

#[test]
fn slack_v4_vector_and_url_verification() {
    let src = source("slack", &["8f742231b10e8888abcd99yyyzzz85a5"]);
    let h = [
        ("x-slack-request-timestamp", "1531420618"),
        (
            "x-slack-signature",
            "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503",
        ),
    ];
    let v = check(&src, &h, SLACK_DOCS_BODY, 1531420618).unwrap();
    assert_eq!(
        v.event_id().as_str(),
        "398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
    );
    assert_eq!(
        check(&src, &h, SLACK_DOCS_BODY, 1531420618 + 301).unwrap_err(),
        VerifyError::TimestampOutOfTolerance
    );

    let body = r#"{"token":"t","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
    let req = SignRequest {
        body: body.as_bytes(),
        timestamp: NOW,
        ..Default::default()
    };
    let signed = sign(&src.provider, &src.keys[0], &req).unwrap();
    let h = super::payments_headers(&signed.headers);
    match run(&src, &h, Bytes::from(body), None, NOW).unwrap() {
        Checked::Answer(r) => {
            assert_eq!(
                r.body,
                "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
            );
            assert_eq!(r.content_type.as_deref(), Some("text/plain"));
        }
        other => panic!("{other:?}"),
    }
    // The challenge is only echoed after the signature check.
    let forged = headers(&[
        ("x-slack-request-timestamp", "1700000000"),
        ("x-slack-signature", "v0=00"),
    ]);
    assert!(run(&src, &forged, Bytes::from(body), None, NOW).is_err());
}

fn twilio_source(url: &str) -> Arc<Source> {
    source_with("twilio", &["12345"], |s| s.public_url = Some(url.into()))
}

// V5 (twilio.com webhooks-security) and V6/V6b (twilio-python
// tests/unit/test_request_validator.py) through the full verifier.
#[test]
fn twilio_vectors_through_the_verifier() {
    let v5 = "CallSid=CA1234567890ABCDE&Caller=%2B12349013030&Digits=1234&From=%2B12349013030&To=%2B18005551212";
    let v6 = "CallSid=CA1234567890ABCDE&Caller=%2B14158675309&Digits=1234&From=%2B14158675309&To=%2B18005551212";
    let src = twilio_source("https://mycompany.com/myapp.php?foo=1&bar=2");
    let q = Some("foo=1&bar=2");
    for (body, sig) in [
        (v5, "0/KCTR6DLpKmkAf8muzZqo1nDgQ="),
        (v6, "RSOYDt4T1cUTdK1PDd93/VVr8B8="),
    ] {
        let h = headers(&[
            ("x-twilio-signature", sig),
            ("i-twilio-idempotency-token", "idem-1"),
        ]);
        let r = run(&src, &h, Bytes::from(body), q, NOW);
        assert!(matches!(r, Ok(Checked::Event(_))), "{sig}: {r:?}");
    }
    // V6b: Twilio signed with :443 while the public URL has no port.
    let h = headers(&[
        ("x-twilio-signature", "kvajT1Ptam85bY51eRf/AJRuM3w="),
        ("i-twilio-idempotency-token", "i"),
    ]);
    assert!(run(&src, &h, Bytes::from(v6), q, NOW).is_ok());
    // The Host header is never used: another public URL fails.
    let other = twilio_source("https://evil.example/myapp.php");
    assert_eq!(
        run(&other, &h, Bytes::from(v6), q, NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
    // Without the idempotency header: MessageSid/CallSid + status, else body hash.
    let h = headers(&[("x-twilio-signature", "RSOYDt4T1cUTdK1PDd93/VVr8B8=")]);
    let Checked::Event(v) = run(&src, &h, Bytes::from(v6), q, NOW).unwrap() else {
        panic!()
    };
    assert!(v.event_id().as_str().starts_with("sha256:"));
}

// V6f: twilio-python, JSON body signed via bodySHA256 in the URL.
#[test]
fn twilio_v6f_body_hash_vector() {
    let body = r#"{"property": "value", "boolean": true}"#;
    let src = twilio_source("https://mycompany.com/myapp.php");
    let q =
        "foo=1&bar=2&bodySHA256=0a1ff7634d9ab3b95db5c9a2dfe9416e41502b283a80c7cf19632632f96e6620";
    let h = headers(&[
        ("x-twilio-signature", "a9nBmqA0ju/hNViExpshrM61xv4="),
        ("i-twilio-idempotency-token", "i"),
    ]);
    assert!(run(&src, &h, Bytes::from(body), Some(q), NOW).is_ok());
    let e = run(
        &src,
        &h,
        Bytes::from(body.replace("value", "other")),
        Some(q),
        NOW,
    );
    assert_eq!(e.unwrap_err(), VerifyError::InvalidSignature);
}

#[test]
fn zoom_url_validation_answers_with_the_hmac_of_the_token() {
    let src = source("zoom", &["zoom-secret-token"]);
    let body = r#"{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,"event":"endpoint.url_validation"}"#;
    let req = SignRequest {
        body: body.as_bytes(),
        timestamp: NOW,
        ..Default::default()
    };
    let signed = sign(&src.provider, &src.keys[0], &req).unwrap();
    let h = super::payments_headers(&signed.headers);
    let Checked::Answer(r) = run(&src, &h, Bytes::from(body), None, NOW).unwrap() else {
        panic!("not answered")
    };
    let want = hex::encode(
        crypto::Algorithm::HmacSha256.mac(b"zoom-secret-token", &[b"qgg8vlvZRS6UYooatFL8Aw"]),
    );
    let json: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(json["plainToken"], "qgg8vlvZRS6UYooatFL8Aw");
    assert_eq!(json["encryptedToken"], want.as_str());
}

#[test]
fn linear_checks_the_body_timestamp_in_milliseconds() {
    let src = source("linear", &["lin-secret"]);
    let sign_body = |ts_ms: i64| {
        let body = format!(r#"{{"action":"create","webhookId":"w1","webhookTimestamp":{ts_ms}}}"#);
        let mac = crypto::Algorithm::HmacSha256.mac(b"lin-secret", &[body.as_bytes()]);
        (body, hex::encode(mac))
    };
    let (body, sig) = sign_body(NOW * 1000 + 500);
    let h = [
        ("linear-signature", sig.as_str()),
        ("linear-delivery", "d-1"),
    ];
    assert_eq!(
        check(&src, &h, &body, NOW).unwrap().event_id().as_str(),
        "d-1"
    );
    let (body, sig) = sign_body((NOW - 120) * 1000);
    let h = [("linear-signature", sig.as_str())];
    assert_eq!(
        check(&src, &h, &body, NOW).unwrap_err(),
        VerifyError::TimestampOutOfTolerance
    );
}

fn generic(provider: &str, secrets: &[&str], sig: spec::SignatureOverrides) -> Arc<Source> {
    let base = Registry::builtin().get(provider).unwrap();
    let p = Arc::new(
        base.customized(&crate::verify::provider::SourceOverrides {
            signature: Some(&sig),
            ..Default::default()
        })
        .unwrap(),
    );
    assert!(p.incomplete.is_none());
    let keys = secrets
        .iter()
        .map(|s| p.signing_key(&Secret::new(*s)).unwrap())
        .collect();
    source_with(provider, &[], |s| {
        s.provider = p;
        s.keys = keys;
    })
}

#[test]
fn generic_hmac_takes_everything_from_the_source() {
    let o = spec::SignatureOverrides {
        header: Some(spec::OneOrMany::One("X-Acme-Sig".into())),
        algorithm: Some(crypto::Algorithm::HmacSha512),
        encoding: Some(crypto::Encoding::Base64),
        prefix: Some("sha512=".into()),
        signed_content: Some("{header:X-Acme-Ts}.{body}".into()),
        ..Default::default()
    };
    let src = generic("hmac", &["acme-key"], o);
    let body = r#"{"id":"a-1"}"#;
    let mac = crypto::Algorithm::HmacSha512.mac(b"acme-key", &[b"99.", body.as_bytes()]);
    let sig = format!("sha512={}", crypto::Encoding::Base64.encode(&mac));
    let h = [("x-acme-sig", sig.as_str()), ("x-acme-ts", "99")];
    assert_eq!(
        check(&src, &h, body, NOW).unwrap().event_id().as_str(),
        "a-1"
    );
    let h = [("x-acme-sig", sig.as_str()), ("x-acme-ts", "98")];
    assert_eq!(
        check(&src, &h, body, NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
    // Without the source's settings the generic provider is incomplete.
    assert!(
        Registry::builtin()
            .get("hmac")
            .unwrap()
            .incomplete
            .is_some()
    );
}

#[test]
fn bearer_and_basic_tokens() {
    let src = source("bearer", &["tok-old", "tok-new"]);
    let ok = [("authorization", "Bearer tok-new")];
    assert!(check(&src, &ok, r#"{"id":"b1"}"#, NOW).is_ok());
    for (bad, want) in [
        ("Bearer nope", VerifyError::InvalidSignature),
        (
            "Basic dG9rLW5ldw==",
            VerifyError::MalformedSignature("missing prefix"),
        ),
    ] {
        let e = check(&src, &[("authorization", bad)], r#"{"id":"b1"}"#, NOW).unwrap_err();
        assert_eq!(e, want, "{bad}");
    }
    // A token in the query string instead of a header.
    let by_query = generic(
        "bearer",
        &["q-token"],
        spec::SignatureOverrides {
            header: Some(spec::OneOrMany::Many(vec![])),
            query: Some("token".into()),
            ..Default::default()
        },
    );
    let r = run(
        &by_query,
        &HeaderMap::new(),
        Bytes::from_static(b"{}"),
        Some("token=q-token"),
        NOW,
    );
    assert!(r.is_ok(), "{r:?}");
    let r = run(
        &by_query,
        &HeaderMap::new(),
        Bytes::from_static(b"{}"),
        Some("token=other"),
        NOW,
    );
    assert_eq!(r.unwrap_err(), VerifyError::InvalidSignature);

    let basic = source("basic", &["hook:pa55"]);
    let good = format!("Basic {}", crypto::Encoding::Base64.encode(b"hook:pa55"));
    assert!(check(&basic, &[("authorization", &good)], "{}", NOW).is_ok());
    let bad = format!("Basic {}", crypto::Encoding::Base64.encode(b"hook:nope"));
    assert_eq!(
        check(&basic, &[("authorization", &bad)], "{}", NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
}

#[test]
fn unsigned_yookassa_relies_on_allow_ips() {
    let allow = vec![client_ip::parse_net("185.71.76.0/27").unwrap()];
    let src = source_with("yookassa", &[], |s| s.allow_ips = allow);
    let body = r#"{"type":"notification","event":"payment.succeeded","object":{"id":"2c1"}}"#;
    let go = |ip: Option<&str>| {
        let incoming = Incoming {
            headers: HeaderMap::new(),
            body: Bytes::from(body),
            query: None,
            client_ip: ip.map(|i| i.parse().unwrap()),
        };
        check_with(&src, incoming, NOW, None)
    };
    let Ok(Checked::Event(v)) = go(Some("185.71.76.10")) else {
        panic!()
    };
    assert_eq!(v.event_id().as_str(), "payment.succeeded:2c1");
    assert_eq!(go(Some("8.8.8.8")).unwrap_err(), VerifyError::IpNotAllowed);
    assert_eq!(go(None).unwrap_err().status(), 403);
}
