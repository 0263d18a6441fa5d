//! Issue #14: timestamp and event-id rules that follow the providers' SDKs.

use super::payments::NOW;
use super::*;

/// A Braintree form post whose signature covers `signed` and whose
/// `bt_payload` is `sent`.
fn braintree_post(src: &Source, signed: &str, sent: &str) -> Bytes {
    let mac = src
        .provider
        .signature
        .algorithm
        .mac(src.keys[0].bytes(), &[signed.as_bytes()]);
    let body = form_urlencoded::Serializer::new(String::new())
        .append_pair("bt_signature", &format!("pub|{}", hex::encode(mac)))
        .append_pair("bt_payload", sent)
        .finish();
    Bytes::from(body)
}

const PAYLOAD: &str = "PG5vdGlmaWNhdGlvbi8+";

#[test]
fn braintree_accepts_a_signature_over_the_payload_plus_a_newline_as_the_sdks_do() {
    let src = source("braintree", &["private-key"]);
    let with_lf = format!("{PAYLOAD}\n");
    let v = verify(
        &src,
        &HeaderMap::new(),
        braintree_post(&src, &with_lf, PAYLOAD),
        NOW,
    )
    .unwrap();
    let plain = verify(
        &src,
        &HeaderMap::new(),
        braintree_post(&src, PAYLOAD, PAYLOAD),
        NOW,
    )
    .unwrap();
    assert_eq!(v.event_id(), plain.event_id());
    // Sent with the newline it signs: still the same event.
    let sent_lf = verify(
        &src,
        &HeaderMap::new(),
        braintree_post(&src, &with_lf, &with_lf),
        NOW,
    )
    .unwrap();
    assert_eq!(sent_lf.event_id(), plain.event_id());
}

#[test]
fn braintree_refuses_a_captured_post_replayed_with_one_extra_newline() {
    let src = source("braintree", &["private-key"]);
    let replay = braintree_post(&src, PAYLOAD, &format!("{PAYLOAD}\n"));
    assert_eq!(
        verify(&src, &HeaderMap::new(), replay, NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
    let signed_lf = format!("{PAYLOAD}\n");
    let replay = braintree_post(&src, &signed_lf, &format!("{PAYLOAD}\n\n"));
    assert_eq!(
        verify(&src, &HeaderMap::new(), replay, NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
}

fn mercadopago_sig(manifest: &str) -> String {
    let mac = crypto::Algorithm::HmacSha256.mac(b"mp-secret", &[manifest.as_bytes()]);
    format!("ts=1700000000,v1={}", hex::encode(mac))
}

// Mercado Pago's manifest leaves `id:…;` out when the query has no
// `data.id`; the body's `data.id` is never used.
#[test]
fn mercadopago_leaves_the_id_out_of_the_manifest_when_the_query_has_none() {
    let src = source("mercadopago", &["mp-secret"]);
    let body = Bytes::from_static(br#"{"id":7,"data":{"id":"abc123"}}"#);
    let without_id = mercadopago_sig("request-id:req-1;ts:1700000000;");
    let h = headers(&[("x-signature", &without_id), ("x-request-id", "req-1")]);
    let ok = run(&src, &h, body.clone(), Some("type=payment"), NOW);
    assert!(matches!(ok, Ok(Checked::Event(_))), "{ok:?}");
    // The old fallback (the body's data.id) is not what is signed.
    let with_body_id = mercadopago_sig("id:abc123;request-id:req-1;ts:1700000000;");
    let h = headers(&[("x-signature", &with_body_id), ("x-request-id", "req-1")]);
    let e = run(&src, &h, body.clone(), Some("type=payment"), NOW).unwrap_err();
    assert_eq!(e, VerifyError::InvalidSignature);
    // Without x-request-id, its part goes too.
    let only_ts = mercadopago_sig("id:abc123;ts:1700000000;");
    let h = headers(&[("x-signature", &only_ts)]);
    let ok = run(&src, &h, body, Some("data.id=abc123"), NOW);
    assert!(matches!(ok, Ok(Checked::Event(_))), "{ok:?}");
}

#[test]
fn mercadopago_accepts_an_alphanumeric_id_lowercased_or_as_received() {
    let src = source("mercadopago", &["mp-secret"]);
    let body = Bytes::from_static(br#"{"id":7}"#);
    for manifest in [
        "id:abc123;request-id:req-1;ts:1700000000;",
        "id:ABC123;request-id:req-1;ts:1700000000;",
    ] {
        let sig = mercadopago_sig(manifest);
        let h = headers(&[("x-signature", &sig), ("x-request-id", "req-1")]);
        let ok = run(&src, &h, body.clone(), Some("data.id=ABC123"), NOW);
        assert!(matches!(ok, Ok(Checked::Event(_))), "{manifest}: {ok:?}");
    }
}

#[test]
fn every_timestamped_provider_refuses_timestamps_beyond_tolerance_in_the_future() {
    let reg = Registry::builtin();
    for name in reg.names() {
        let p = reg.get(name).unwrap();
        if let Some(t) = &p.timestamp {
            assert!(t.reject_future, "{name} accepts future timestamps");
        }
    }
}
