//! The `ecdsa` scheme: SendGrid's signed Event Webhook. Vector: the public
//! key, payload, timestamp and signature of sendgrid-python's
//! `test/unit/test_eventwebhook.py` (its `EventWebhook.verify_signature`
//! checks them offline); then requests signed with a key the test owns.

use super::payments::{NOW, pairs};
use super::*;

const SDK_KEY: &str = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g==";
const SDK_SIG: &str = "MEUCIGHQVtGj+Y3LkG9fLcxf3qfI10QysgDWmMOVmxG0u6ZUAiEAyBiXDWzM+uOe5W0JuG+luQAbPIqHh89M15TluLtEZtM=";
const SDK_TS: &str = "1600112502";
/// `json.dumps(events, sort_keys=True, separators=(',', ':')) + '\r\n'`.
const SDK_PAYLOAD: &str = "[{\"email\":\"hello@world.com\",\"event\":\"dropped\",\"reason\":\"Bounced Address\",\"sg_event_id\":\"ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA\",\"sg_message_id\":\"LRzXl_NHStOGhQ4kofSm_A.filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0\",\"smtp-id\":\"<LRzXl_NHStOGhQ4kofSm_A@ismtpd0039p1iad1.sendgrid.net>\",\"timestamp\":1600112492}]\r\n";

const TEST_KEY: &str = include_str!("../../../tests/fixtures/schemes/p256-key.pem");
const TEST_PUB: &str = include_str!("../../../tests/fixtures/schemes/p256-pub.pem");

fn sdk_headers(sig: &str, ts: &str) -> [(&'static str, String); 2] {
    [
        ("X-Twilio-Email-Event-Webhook-Signature", sig.to_owned()),
        ("X-Twilio-Email-Event-Webhook-Timestamp", ts.to_owned()),
    ]
}

fn as_refs<'a>(h: &'a [(&'static str, String); 2]) -> [(&'static str, &'a str); 2] {
    [(h[0].0, h[0].1.as_str()), (h[1].0, h[1].1.as_str())]
}

#[test]
fn sendgrid_sdk_vector_verifies_and_names_the_batch_by_its_event_ids() {
    let src = source("sendgrid", &[SDK_KEY]);
    let h = sdk_headers(SDK_SIG, SDK_TS);
    // The SDK's timestamp is from 2020: SendGrid's age is not checked.
    let mut v = check(&src, &as_refs(&h), SDK_PAYLOAD, NOW).unwrap();
    assert_eq!(
        v.event_id().as_str(),
        "ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA"
    );
    assert_eq!(v.take_facts().event_type.as_deref(), Some("dropped"));
}

#[test]
fn sendgrid_sdk_negative_vectors_are_refused() {
    let src = source("sendgrid", &[SDK_KEY]);
    // test_verify_bad_payload / bad_signature / bad_timestamp / bad_key.
    let h = sdk_headers(SDK_SIG, SDK_TS);
    assert_eq!(
        check(&src, &as_refs(&h), "[{\"sg_event_id\":\"x\"}]", NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
    let bad = "MEUCIQCtIHJeH93Y+qpYeWrySphQgpNGNr/U+UyUlBkU6n7RAwIgJTz2C+8a8xonZGi6BpSzoQsbVRamr2nlxFDWYNH3j/0=";
    let h = sdk_headers(bad, SDK_TS);
    assert_eq!(
        check(&src, &as_refs(&h), SDK_PAYLOAD, NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
    let h = sdk_headers(SDK_SIG, "timestamp");
    assert_eq!(
        check(&src, &as_refs(&h), SDK_PAYLOAD, NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
    let other = source(
        "sendgrid",
        &[
            "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEqTxd43gyp8IOEto2LdIfjRQrIbsd4SXZkLW6jDutdhXSJCWHw8REntlo7aNDthvj+y7GjUuFDb/R1NGe1OPzpA==",
        ],
    );
    let h = sdk_headers(SDK_SIG, SDK_TS);
    assert_eq!(
        check(&other, &as_refs(&h), SDK_PAYLOAD, NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
    // Not DER at all.
    let h = sdk_headers("bm90IGEgc2lnbmF0dXJl", SDK_TS);
    assert!(check(&src, &as_refs(&h), SDK_PAYLOAD, NOW).is_err());
}

#[test]
fn sendgrid_signer_round_trips_with_a_key_the_test_owns_in_pem_or_base64() {
    let p = Registry::builtin().get("sendgrid").unwrap();
    let body = br#"[{"email":"a@example.com","event":"delivered","sg_event_id":"e1"},{"event":"open","sg_event_id":"e2"}]"#;
    let req = SignRequest {
        body,
        timestamp: NOW,
        private_key: Some(TEST_KEY),
        ..Default::default()
    };
    let h = pairs(
        &sign(&p, &SigningKey::from_bytes(vec![]), &req)
            .unwrap()
            .headers,
    );
    let bare: String = TEST_PUB
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    for key in [TEST_PUB, bare.as_str()] {
        let src = source("sendgrid", &[key]);
        let v = verify(&src, &h, Bytes::from_static(body), NOW).unwrap();
        assert_eq!(v.event_id().as_str(), "e1,e2");
    }
    assert!(p.signing_key(&Secret::new("not a key")).is_err());
}
