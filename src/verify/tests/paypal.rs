//! PayPal through the pinned-certificate path: no network at all. The test
//! key and self-signed certificate are in `tests/fixtures/paypal/`.

use super::payments::{NOW, pairs};
use super::*;
use crate::verify::schemes::{SchemeSettings, paypal};

const PAYPAL_KEY: &str = include_str!("../../../tests/fixtures/paypal/test-key.pem");
const PAYPAL_CERT: &str = include_str!("../../../tests/fixtures/paypal/test-cert.pem");
const PAYPAL_OTHER_KEY: &str = include_str!("../../../tests/fixtures/paypal/other-key.pem");
const CERT_URL: &str = "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-test";

fn paypal_source() -> Arc<Source> {
    let settings = paypal::Settings::new("WH-ID-1".into(), Some(PAYPAL_CERT), None).unwrap();
    source_with("paypal", &[], |s| {
        s.settings = Some(SchemeSettings::Paypal(Box::new(settings)))
    })
}

fn paypal_signed(key_pem: &str, webhook_id: &str, ts: i64, body: &[u8]) -> HeaderMap {
    let src = paypal_source();
    let req = SignRequest {
        body,
        timestamp: ts,
        paypal: Some(sign::PaypalSign {
            private_key_pem: key_pem,
            webhook_id,
            cert_url: CERT_URL,
        }),
        ..Default::default()
    };
    let none = SigningKey::from_bytes(vec![]);
    pairs(&sign(&src.provider, &none, &req).unwrap().headers)
}

/// PayPal through the pinned-certificate path (no network at all).
async fn paypal_check(h: &HeaderMap, body: &[u8], now: i64) -> Result<Checked, VerifyError> {
    let incoming = Incoming {
        headers: h.clone(),
        body: Bytes::from(body.to_vec()),
        query: None,
        client_ip: None,
    };
    crate::verify::check(&paypal_source(), incoming, now).await
}

#[tokio::test]
async fn paypal_pinned_certificate_cases() {
    let body = br#"{"id":"WH-1A2B","event_type":"PAYMENT.CAPTURE.COMPLETED","x":"MARK42"}"#;
    let h = paypal_signed(PAYPAL_KEY, "WH-ID-1", NOW, body);
    let Checked::Event(v) = paypal_check(&h, body, NOW).await.unwrap() else {
        panic!()
    };
    assert_eq!(v.event_id().as_str(), "WH-1A2B");

    let tampered = String::from_utf8(body.to_vec())
        .unwrap()
        .replace("MARK42", "MARK43");
    let e = paypal_check(&h, tampered.as_bytes(), NOW)
        .await
        .unwrap_err();
    assert_eq!(e, VerifyError::InvalidSignature);
    // Another webhook's id, another key: both invalid.
    let other_hook = paypal_signed(PAYPAL_KEY, "WH-ID-2", NOW, body);
    assert_eq!(
        paypal_check(&other_hook, body, NOW).await.unwrap_err(),
        VerifyError::InvalidSignature
    );
    let other_key = paypal_signed(PAYPAL_OTHER_KEY, "WH-ID-1", NOW, body);
    assert_eq!(
        paypal_check(&other_key, body, NOW).await.unwrap_err(),
        VerifyError::InvalidSignature
    );
    // Stale transmission time.
    let stale = paypal_signed(PAYPAL_KEY, "WH-ID-1", NOW - 3600, body);
    assert_eq!(
        paypal_check(&stale, body, NOW).await.unwrap_err(),
        VerifyError::TimestampOutOfTolerance
    );
}

#[tokio::test]
async fn paypal_rejects_foreign_cert_urls_and_bad_headers_before_any_fetch() {
    let body = br#"{"id":"WH-1"}"#;
    let good = paypal_signed(PAYPAL_KEY, "WH-ID-1", NOW, body);
    for url in [
        "https://evil.example/v1/notifications/certs/CERT-1",
        "http://api.paypal.com/v1/notifications/certs/CERT-1",
        "https://api.paypal.com.evil.example/v1/notifications/certs/CERT-1",
    ] {
        let mut h = good.clone();
        h.insert(paypal::CERT_URL, HeaderValue::from_str(url).unwrap());
        let e = paypal_check(&h, body, NOW).await.unwrap_err();
        assert!(
            matches!(e, VerifyError::MalformedSignature(_)),
            "{url}: {e:?}"
        );
        assert_eq!(e.status(), 401);
    }
    let mut h = good.clone();
    h.remove(paypal::CERT_URL);
    assert_eq!(
        paypal_check(&h, body, NOW).await.unwrap_err(),
        VerifyError::MissingSignature
    );
    for (name, value) in [
        (paypal::TRANSMISSION_SIG, "!!!not base64"),
        (paypal::TRANSMISSION_SIG, "AAAA"),
        (paypal::AUTH_ALGO, "SHA1withRSA"),
        (paypal::TRANSMISSION_TIME, "yesterday"),
    ] {
        let mut h = good.clone();
        h.insert(name, HeaderValue::from_static(value));
        let e = paypal_check(&h, body, NOW).await.unwrap_err();
        assert_eq!(e.status(), 401, "{name}={value}: {e:?}");
    }
}
