//! Stripe thin events (API v2 event destinations) are signed exactly as
//! snapshot events (https://docs.stripe.com/event-destinations#thin-events,
//! https://docs.stripe.com/webhooks#verify-manually): `Stripe-Signature:
//! t=…,v1=hex HMAC-SHA256(whsec_ secret as written, "{t}.{body}")`. The
//! envelope below is the docs' thin event; stripe-node's
//! `webhooks.generateTestHeaderString` makes the same header offline.

use super::payments::NOW;
use super::*;

#[test]
fn stripe_v2_thin_event_verifies_with_id_and_type_from_the_signed_body() {
    let secret = "whsec_test_secret";
    let body = r#"{"id":"evt_test_65R9Ijk8dKVxm3oCVUc16R9Ijk8dSQJ9OPuRqSBaWVr3Wu","object":"v2.core.event","type":"v1.billing.meter.error_report_triggered","livemode":false,"created":"2024-09-17T06:20:52.246Z","related_object":{"id":"mtr_test_61R9IeFXVL2U8zj0j41IeFXVLXhGBQ8S","type":"billing.meter","url":"/v1/billing/meters/mtr_test_61R9IeFXVL2U8zj0j41IeFXVLXhGBQ8S"}}"#;
    let mac = hex::encode(
        crypto::Algorithm::HmacSha256.mac(secret.as_bytes(), &[format!("{NOW}.{body}").as_bytes()]),
    );
    let header = format!("t={NOW},v1={mac}");
    let src = source("stripe-v2", &[secret]);
    let mut v = check(&src, &[("Stripe-Signature", &header)], body, NOW).unwrap();
    assert_eq!(
        v.event_id().as_str(),
        "evt_test_65R9Ijk8dKVxm3oCVUc16R9Ijk8dSQJ9OPuRqSBaWVr3Wu"
    );
    assert_eq!(
        v.take_facts().event_type.as_deref(),
        Some("v1.billing.meter.error_report_triggered")
    );
    assert_eq!(
        check(&src, &[("Stripe-Signature", &header)], body, NOW + 301).unwrap_err(),
        VerifyError::TimestampOutOfTolerance
    );
    // The secret is used as written, `whsec_` included (not base64).
    let stripped = source("stripe-v2", &["test_secret"]);
    assert_eq!(
        check(&stripped, &[("Stripe-Signature", &header)], body, NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
}
