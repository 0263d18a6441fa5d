//! The `pkcs1` scheme: Wise. Vector: the sandbox public key, body and
//! signature of transferwise/digital-signatures-examples
//! (`verify-webhook-signature/verify-signature.js`, which checks it
//! offline with Node's crypto); then requests signed with a key the test
//! owns.

use super::payments::{NOW, pairs};
use super::*;

const WISE_SANDBOX_KEY: &str = "\
MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAwpb91cEYuyJNQepZAVfP
ZIlPZfNUefH+n6w9SW3fykqKu938cR7WadQv87oF2VuT+fDt7kqeRziTmPSUhqPU
ys/V2Q1rlfJuXbE+Gga37t7zwd0egQ+KyOEHQOpcTwKmtZ81ieGHynAQzsn1We3j
wt760MsCPJ7GMT141ByQM+yW1Bx+4SG3IGjXWyqOWrcXsxAvIXkpUD/jK/L958Cg
nZEgz0BSEh0QxYLITnW1lLokSx/dTianWPFEhMC9BgijempgNXHNfcVirg1lPSyg
z7KqoKUN0oHqWLr2U1A+7kqrl6O2nx3CKs1bj1hToT1+p4kcMoHXA7kA+VBLUpEs
VwIDAQAB";
const WISE_BODY: &str = r#"{"data":{"resource":{"id":49983981,"profile_id":16055450,"account_id":14124090,"type":"transfer"},"current_state":"incoming_payment_waiting","previous_state":null,"occurred_at":"2021-08-23T10:12:50Z"},"subscription_id":"90aa8e14-4ef1-4a56-861c-f3c9cde097ea","event_type":"transfers#state-change","schema_version":"2.0.0","sent_at":"2021-08-23T10:12:50Z"}"#;
const WISE_SIG: &str = "wKcKCYXAzxNgiu7xmoDm943NUni7Rz33QN8JkEA9dWSGebgndonabgSj18Y4C08OrwVmueGsED2s00M7DtJVcYKOS1i3G4TMVx+mgM3aL9djMBkQtiYNBFUd6wrPI7ZUNHv/TrlKSjTMc+6JFvUvJ7owY3z85e3I4jLRLJowMFvO8kvCJ60+1pY9wDwZvtZ//WS93LrwGjk9Dvwzpmu0w+P4J75tETT5qC3Uv0y5G2yO8SEoO3yNP/tg/BOli02niHb53vEOUWUb9bly6thnfMoXoiV/osoGxgF20R58RlvkAmezyyl1Sv542TfS2DpiwVnmjjjkCyXeSUcKookYLQ==";

const TEST_KEY: &str = include_str!("../../../tests/fixtures/schemes/rsa-key.pem");
const TEST_PUB: &str = include_str!("../../../tests/fixtures/schemes/rsa-pub.pem");

#[test]
fn wise_sandbox_vector_verifies() {
    let src = source("wise", &[WISE_SANDBOX_KEY]);
    let mut v = check(&src, &[("X-Signature-SHA256", WISE_SIG)], WISE_BODY, NOW).unwrap();
    assert!(v.event_id().as_str().starts_with("sha256:"));
    assert_eq!(
        v.take_facts().event_type.as_deref(),
        Some("transfers#state-change")
    );
    let tampered = WISE_BODY.replace("incoming_payment_waiting", "outgoing_payment_sent");
    assert_eq!(
        check(&src, &[("X-Signature-SHA256", WISE_SIG)], &tampered, NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
    // The same key as PEM, next to another (rotation: sandbox and live).
    let pem = format!("-----BEGIN PUBLIC KEY-----\n{WISE_SANDBOX_KEY}\n-----END PUBLIC KEY-----\n");
    let src = source("wise", &[TEST_PUB, &pem]);
    let v = check(&src, &[("X-Signature-SHA256", WISE_SIG)], WISE_BODY, NOW).unwrap();
    assert_eq!(v.key_index(), Some(1));
}

#[test]
fn wise_signer_round_trips_with_a_key_the_test_owns() {
    let p = Registry::builtin().get("wise").unwrap();
    let body = br#"{"data":{"resource":{"id":1}},"event_type":"balances#credit"}"#;
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
    assert!(
        verify(
            &source("wise", &[TEST_PUB]),
            &h,
            Bytes::from_static(body),
            NOW
        )
        .is_ok()
    );
    assert_eq!(
        verify(
            &source("wise", &[WISE_SANDBOX_KEY]),
            &h,
            Bytes::from_static(body),
            NOW
        )
        .unwrap_err(),
        VerifyError::InvalidSignature
    );
}

#[test]
fn short_or_malformed_rsa_keys_are_config_errors() {
    let p = Registry::builtin().get("wise").unwrap();
    // A 1024-bit key (SPKI, made with openssl): too short to trust.
    let short = "MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQDDIVFpL2YpyR4Xj2bkvvAhQh9ojsPu2qHpYhpN7PlfT9jeBHyTOCf2WfomVYbwHvQRCJVDqTgHoA/N435+41IPLcf/wWeqoDYfrdamKT7O6HYHCS1waXlVNEMeGN+QV/oY5m9lvup9XbC/5Z8qzxW4Vl6IJ8NMGJOnKNCxwqtM8QIDAQAB";
    let e = p.signing_key(&Secret::new(short)).unwrap_err();
    assert!(e.contains("1024 bits is too short"), "{e}");
    assert!(p.signing_key(&Secret::new("not a key")).is_err());
    assert!(p.signing_key(&Secret::new(WISE_SANDBOX_KEY)).is_ok());
}
