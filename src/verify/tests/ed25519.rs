//! The `ed25519` scheme: Discord webhook events and Telnyx. Vectors: RFC
//! 8032 §7.1 TEST 2 through Discord's layout (any Ed25519 implementation,
//! e.g. discord-interactions' `verifyKey`, checks it offline), and requests
//! made as each provider's docs describe with a key the test owns (the
//! Telnyx SDKs' `webhooks.unwrap` checks those offline).

use super::payments::{NOW, pairs};
use super::*;
use crate::verify::schemes::ed25519;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;

/// A seed the tests own; its public half is what a source configures.
const SEED_HEX: &str = "1f1e1d1c1b1a191817161514131211100f0e0d0c0b0a09080706050403020100";

fn public_hex() -> String {
    hex::encode(
        ed25519::private_key(SEED_HEX)
            .unwrap()
            .verifying_key()
            .as_bytes(),
    )
}

fn signed(provider: &str, body: &[u8], ts: i64) -> HeaderMap {
    let p = Registry::builtin().get(provider).unwrap();
    let req = SignRequest {
        body,
        timestamp: ts,
        private_key: Some(SEED_HEX),
        ..Default::default()
    };
    let none = SigningKey::from_bytes(vec![]);
    pairs(&sign(&p, &none, &req).unwrap().headers)
}

fn discord() -> Arc<Source> {
    source("discord", &[&public_hex()])
}

#[test]
fn rfc8032_test_2_verifies_through_discords_layout() {
    // Discord signs timestamp + body: "r" + "" is TEST 2's one-byte message.
    let src = source(
        "discord",
        &["3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c"],
    );
    let sig = "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da\
               085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00";
    let h = [("X-Signature-Ed25519", sig), ("X-Signature-Timestamp", "r")];
    // The signature verifies; only then is "r" refused as a timestamp.
    assert_eq!(
        check(&src, &h, "", NOW).unwrap_err(),
        VerifyError::MalformedTimestamp
    );
    // One bit off in the signature, or another message: refused.
    let bad = format!("{}01", &sig[..126]);
    let h2 = [
        ("X-Signature-Ed25519", bad.as_str()),
        ("X-Signature-Timestamp", "r"),
    ];
    assert_eq!(
        check(&src, &h2, "", NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
    let h3 = [("X-Signature-Ed25519", sig), ("X-Signature-Timestamp", "s")];
    assert_eq!(
        check(&src, &h3, "", NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
}

#[test]
fn discord_events_verify_and_dedupe_on_the_body() {
    let src = discord();
    let body = br#"{"version":1,"application_id":"1234560123453231555","type":1,"event":{"type":"APPLICATION_AUTHORIZED","timestamp":"2024-10-18T14:42:53.064834","data":{"integration_type":1,"scopes":["applications.commands"],"user":{"id":"1"}}}}"#;
    let h = signed("discord", body, NOW);
    let v = verify(&src, &h, Bytes::from_static(body), NOW).unwrap();
    assert!(
        v.event_id().as_str().starts_with("sha256:"),
        "{}",
        v.event_id().as_str()
    );
    let mut v = v;
    assert_eq!(v.take_reply().status, 204);
    assert_eq!(
        v.take_facts().event_type.as_deref(),
        Some("APPLICATION_AUTHORIZED")
    );
    // Tampered body, other key: refused.
    let tampered = body.replace_first("APPLICATION_AUTHORIZED", "ENTITLEMENT_CREATE");
    assert_eq!(
        verify(&src, &h, Bytes::from(tampered), NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
    let other = source("discord", &[&hex::encode([9u8; 32]).replace("09", "0a")]);
    assert!(verify(&other, &h, Bytes::from_static(body), NOW).is_err());
}

#[test]
fn discord_ping_is_answered_and_interactions_are_refused_after_the_signature() {
    let src = discord();
    let ping = br#"{"version":1,"application_id":"1234560123453231555","type":0}"#;
    let h = signed("discord", ping, NOW);
    let Checked::Answer(r) = run(&src, &h, Bytes::from_static(ping), None, NOW).unwrap() else {
        panic!("PING is answered")
    };
    assert_eq!((r.status, r.body.as_str()), (204, ""));

    let interaction = br#"{"type":1,"id":"786008729715212338","application_id":"1","token":"A_UNIQUE_TOKEN","version":1}"#;
    let h = signed("discord", interaction, NOW);
    let Checked::Answer(r) = run(&src, &h, Bytes::from_static(interaction), None, NOW).unwrap()
    else {
        panic!("an interaction is refused, not stored")
    };
    assert_eq!(r.status, 400);
    assert!(r.body.contains("3 seconds"), "{}", r.body);
    // A forged interaction gets the signature's 401, not the refusal.
    let forged = headers(&[
        ("X-Signature-Ed25519", &"00".repeat(64)),
        ("X-Signature-Timestamp", &NOW.to_string()),
    ]);
    assert_eq!(
        run(&src, &forged, Bytes::from_static(interaction), None, NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
}

#[test]
fn telnyx_signs_timestamp_pipe_body_in_base64_within_five_minutes() {
    let key = ed25519::private_key(SEED_HEX).unwrap();
    let public = B64.encode(key.verifying_key().as_bytes());
    let src = source("telnyx", &[&public]);
    let body = r#"{"data":{"event_type":"message.received","id":"b301ed3f-1490-491f-995f-6e64e69674d4","occurred_at":"2024-01-01T00:00:00.000+00:00","payload":{"id":"m1"},"record_type":"event"},"meta":{"attempt":1}}"#;
    // Made as Telnyx's page describes, by hand: "{ts}|{body}".
    let ts = NOW.to_string();
    let sig = B64.encode(ed25519::sign(&key, format!("{ts}|{body}").as_bytes()));
    let h = [
        ("telnyx-signature-ed25519", sig.as_str()),
        ("telnyx-timestamp", ts.as_str()),
    ];
    let v = check(&src, &h, body, NOW).unwrap();
    assert_eq!(
        v.event_id().as_str(),
        "b301ed3f-1490-491f-995f-6e64e69674d4"
    );
    // hookgate's signer makes the same headers.
    let ours = signed("telnyx", body.as_bytes(), NOW);
    assert_eq!(ours.get("telnyx-signature-ed25519").unwrap(), sig.as_str());
    assert_eq!(
        check(&src, &h, body, NOW + 301).unwrap_err(),
        VerifyError::TimestampOutOfTolerance
    );
    let pipe_less = B64.encode(ed25519::sign(&key, format!("{ts}{body}").as_bytes()));
    let h = [
        ("telnyx-signature-ed25519", pipe_less.as_str()),
        ("telnyx-timestamp", ts.as_str()),
    ];
    assert_eq!(
        check(&src, &h, body, NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
}

#[test]
fn a_public_key_that_is_not_one_is_a_config_error() {
    let p = Registry::builtin().get("discord").unwrap();
    for bad in ["abcd", &"00".repeat(33)] {
        assert!(p.signing_key(&Secret::new(bad)).is_err(), "{bad}");
    }
    assert!(p.signing_key(&Secret::new(public_hex())).is_ok());
}

trait ReplaceFirst {
    fn replace_first(&self, from: &str, to: &str) -> Vec<u8>;
}

impl ReplaceFirst for [u8] {
    fn replace_first(&self, from: &str, to: &str) -> Vec<u8> {
        String::from_utf8_lossy(self)
            .replacen(from, to, 1)
            .into_bytes()
    }
}

#[test]
fn discord_allows_its_ten_minutes_of_retries_and_no_more_than_fifteen() {
    let src = discord();
    let body = br#"{"version":1,"application_id":"1","type":1,"event":{"type":"ENTITLEMENT_CREATE","data":{}}}"#;
    let h = signed("discord", body, NOW);
    assert!(verify(&src, &h, Bytes::from_static(body), NOW + 600).is_ok());
    assert_eq!(
        verify(&src, &h, Bytes::from_static(body), NOW + 901).unwrap_err(),
        VerifyError::TimestampOutOfTolerance
    );
}
