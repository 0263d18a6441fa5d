//! Issue #32: a repeated form field or JSON key that hookgate reads is
//! refused (400), so hookgate and a consumer cannot read different values.

use super::payments::NOW;
use super::*;

/// `body` signed for `src` now; its headers.
fn signed(src: &Arc<Source>, body: &str, event_id: &str) -> HeaderMap {
    let req = SignRequest {
        body: body.as_bytes(),
        timestamp: NOW,
        event_id: Some(event_id.into()),
        ..Default::default()
    };
    let s = sign(&src.provider, &src.keys[0], &req).unwrap();
    super::payments::pairs(&s.headers)
}

#[test]
fn braintree_refuses_a_second_bt_payload_after_the_signed_one() {
    let src = source("braintree", &["private-key"]);
    let payload = "PG5vdGlmaWNhdGlvbi8+";
    let mac = src
        .provider
        .signature
        .algorithm
        .mac(src.keys[0].bytes(), &[payload.as_bytes()]);
    let form = |extra: &str| {
        let mut s = form_urlencoded::Serializer::new(String::new());
        s.append_pair("bt_signature", &format!("pub|{}", hex::encode(&mac)))
            .append_pair("bt_payload", payload);
        if !extra.is_empty() {
            s.append_pair("bt_payload", extra);
        }
        Bytes::from(s.finish())
    };
    assert!(verify(&src, &HeaderMap::new(), form(""), NOW).is_ok());
    let e = verify(&src, &HeaderMap::new(), form("PGZvcmdlZC8+"), NOW).unwrap_err();
    assert!(matches!(e, VerifyError::BadBody(_)), "{e:?}");
    assert_eq!(e.status(), 400);
}

#[test]
fn a_duplicate_json_key_on_a_path_hookgate_reads_is_refused() {
    let src = source("stripe", &["whsec_test"]);
    let ok = r#"{"id":"evt_1","object":"event","type":"invoice.paid"}"#;
    assert!(verify(&src, &signed(&src, ok, "x"), Bytes::from(ok), NOW).is_ok());
    for body in [
        r#"{"id":"evt_1","object":"event","type":"invoice.paid","id":"evt_2"}"#,
        r#"{"id":"evt_1","object":"event","type":"invoice.paid","type":"charge.refunded"}"#,
    ] {
        let e = verify(&src, &signed(&src, body, "x"), Bytes::from(body), NOW).unwrap_err();
        assert_eq!(e.status(), 400, "{body}: {e:?}");
    }
    // A repeated key nobody reads is left alone.
    let other = r#"{"id":"evt_1","object":"event","type":"x","note":1,"note":2}"#;
    assert!(verify(&src, &signed(&src, other, "x"), Bytes::from(other), NOW).is_ok());
}

#[test]
fn a_repeated_header_that_names_the_event_is_refused() {
    let src = source("github", &["gh-secret"]);
    let body = r#"{"action":"opened"}"#;
    let mut h = signed(&src, body, "delivery-1");
    assert!(verify(&src, &h, Bytes::from(body), NOW).is_ok());
    h.append("x-github-delivery", HeaderValue::from_static("delivery-2"));
    let e = verify(&src, &h, Bytes::from(body), NOW).unwrap_err();
    assert_eq!(e.status(), 400, "{e:?}");
}
