//! Plaid through pinned keys: no network at all. The test P-256 keys are in
//! `tests/fixtures/plaid/` (made with openssl; they are not Plaid's).

use super::payments::NOW;
use super::*;
use crate::verify::schemes::SchemeSettings;
use crate::verify::schemes::plaid::{self, keys as plaid_keys};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use p256::pkcs8::DecodePrivateKey;

const KEY: &str = include_str!("../../../tests/fixtures/plaid/test-key.pem");
const OTHER_KEY: &str = include_str!("../../../tests/fixtures/plaid/other-key.pem");
const KID: &str = "bfbd5111-8e33-4643-8ced-b2e642a72f3c";
const BODY: &[u8] = br#"{"webhook_type":"TRANSACTIONS","webhook_code":"SYNC_UPDATES_AVAILABLE","item_id":"MARK42","environment":"sandbox"}"#;

fn public_jwk(pem: &str, kid: &str) -> String {
    let key = p256::SecretKey::from_pkcs8_pem(pem).unwrap();
    plaid::public_jwk(kid, &p256::ecdsa::VerifyingKey::from(key.public_key()))
}

fn plaid_source(tolerance: Option<Duration>) -> Arc<Source> {
    let pinned = [public_jwk(KEY, KID)];
    let settings =
        plaid_keys::Settings::new(None, plaid_keys::Environment::Sandbox, &pinned, None).unwrap();
    source_with("plaid", &[], |s| {
        s.settings = Some(SchemeSettings::Plaid(Box::new(settings)));
        if let Some(t) = tolerance {
            s.tolerance = t;
        }
    })
}

fn token(pem: &str, kid: &str, iat: i64, body: &[u8]) -> String {
    let req = SignRequest {
        body,
        timestamp: iat,
        ..Default::default()
    };
    let p = sign::PlaidSign {
        private_key_pem: pem,
        kid,
    };
    plaid::sign_token(&p, &req).unwrap()
}

async fn plaid_check(
    src: &Arc<Source>,
    value: Option<&str>,
    body: &[u8],
    now: i64,
) -> Result<Checked, VerifyError> {
    let h = match value {
        Some(v) => headers(&[("Plaid-Verification", v)]),
        None => HeaderMap::new(),
    };
    let incoming = Incoming {
        headers: h.clone(),
        body: Bytes::from(body.to_vec()),
        query: None,
        client_ip: None,
    };
    crate::verify::check(src, incoming, now).await
}

/// A token with a hand-made header and claims, signed with the test key.
fn crafted(header: &str, claims: &str) -> String {
    use p256::ecdsa::signature::Signer;
    let input = format!("{}.{}", B64URL.encode(header), B64URL.encode(claims));
    let key = p256::ecdsa::SigningKey::from(p256::SecretKey::from_pkcs8_pem(KEY).unwrap());
    let sig: p256::ecdsa::Signature = key.sign(input.as_bytes());
    format!("{input}.{}", B64URL.encode(sig.to_bytes()))
}

#[tokio::test]
async fn plaid_valid_token_verifies_and_the_body_hash_is_the_event_id() {
    let src = plaid_source(None);
    let t = token(KEY, KID, NOW - 60, BODY);
    let Checked::Event(v) = plaid_check(&src, Some(&t), BODY, NOW).await.unwrap() else {
        panic!("expected an event")
    };
    use sha2::Digest;
    let want = format!("sha256:{}", hex::encode(sha2::Sha256::digest(BODY)));
    assert_eq!(v.event_id().as_str(), want);
}

#[tokio::test]
async fn plaid_rejects_tampered_body_wrong_key_and_unknown_kid() {
    let src = plaid_source(None);
    let t = token(KEY, KID, NOW, BODY);
    let tampered = String::from_utf8(BODY.to_vec())
        .unwrap()
        .replace("MARK42", "MARK43");
    let e = plaid_check(&src, Some(&t), tampered.as_bytes(), NOW).await;
    assert_eq!(e.unwrap_err(), VerifyError::InvalidSignature);
    let other = token(OTHER_KEY, KID, NOW, BODY);
    let e = plaid_check(&src, Some(&other), BODY, NOW).await;
    assert_eq!(e.unwrap_err(), VerifyError::InvalidSignature);
    let unknown = token(KEY, "some-other-kid", NOW, BODY);
    let e = plaid_check(&src, Some(&unknown), BODY, NOW).await;
    assert_eq!(
        e.unwrap_err(),
        VerifyError::MalformedSignature("unknown signing key id")
    );
}

#[tokio::test]
async fn plaid_iat_older_than_the_tolerance_is_refused() {
    let t = token(KEY, KID, NOW - 301, BODY);
    let e = plaid_check(&plaid_source(None), Some(&t), BODY, NOW).await;
    assert_eq!(e.unwrap_err(), VerifyError::TimestampOutOfTolerance);
    let future = token(KEY, KID, NOW + 3600, BODY);
    let e = plaid_check(&plaid_source(None), Some(&future), BODY, NOW).await;
    assert_eq!(e.unwrap_err(), VerifyError::TimestampOutOfTolerance);
    let wide = plaid_source(Some(Duration::from_secs(600)));
    assert!(plaid_check(&wide, Some(&t), BODY, NOW).await.is_ok());
}

#[tokio::test]
async fn plaid_refuses_other_algorithms_before_looking_at_keys() {
    let src = plaid_source(None);
    let hash = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(BODY))
    };
    let claims = format!(r#"{{"iat":{NOW},"request_body_sha256":"{hash}"}}"#);
    // The ES256 control case passes with the same crafting.
    let ok = crafted(&format!(r#"{{"alg":"ES256","kid":"{KID}"}}"#), &claims);
    assert!(plaid_check(&src, Some(&ok), BODY, NOW).await.is_ok());
    for alg in ["none", "HS256", "ES384", "RS256", "es256"] {
        let t = crafted(&format!(r#"{{"alg":"{alg}","kid":"{KID}"}}"#), &claims);
        let e = plaid_check(&src, Some(&t), BODY, NOW).await.unwrap_err();
        assert_eq!(
            e,
            VerifyError::MalformedSignature("token algorithm is not ES256"),
            "{alg}"
        );
    }
    // alg "none" with an empty signature part.
    let none = format!(
        "{}.{}.",
        B64URL.encode(r#"{"alg":"none"}"#),
        B64URL.encode(&claims)
    );
    let e = plaid_check(&src, Some(&none), BODY, NOW).await.unwrap_err();
    assert!(matches!(e, VerifyError::MalformedSignature(_)), "{e:?}");
    let crit = crafted(
        &format!(r#"{{"alg":"ES256","kid":"{KID}","crit":["b64"]}}"#),
        &claims,
    );
    let e = plaid_check(&src, Some(&crit), BODY, NOW).await.unwrap_err();
    assert!(matches!(e, VerifyError::MalformedSignature(_)), "{e:?}");
}

#[tokio::test]
async fn plaid_malformed_tokens_and_a_missing_header_are_401() {
    let src = plaid_source(None);
    let good = token(KEY, KID, NOW, BODY);
    let (h, c, s) = {
        let mut p = good.split('.');
        (p.next().unwrap(), p.next().unwrap(), p.next().unwrap())
    };
    let short_sig = format!("{h}.{c}.{}", &s[..10]);
    let bad_claims = format!("{h}.{}.{s}", B64URL.encode("not json"));
    let no_hash = crafted(
        &format!(r#"{{"alg":"ES256","kid":"{KID}"}}"#),
        &format!(r#"{{"iat":{NOW}}}"#),
    );
    let long = "a".repeat(5000);
    for bad in [
        "garbage",
        "a.b",
        "a.b.c.d",
        &format!("{h}.{c}"),
        &format!("!!.{c}.{s}"),
        &short_sig,
        &bad_claims,
        &no_hash,
        &long,
    ] {
        let e = plaid_check(&src, Some(bad), BODY, NOW).await.unwrap_err();
        assert!(matches!(e, VerifyError::MalformedSignature(_)), "{e:?}");
        assert_eq!(e.status(), 401);
    }
    let no_iat = crafted(
        &format!(r#"{{"alg":"ES256","kid":"{KID}"}}"#),
        r#"{"request_body_sha256":"00"}"#,
    );
    let e = plaid_check(&src, Some(&no_iat), BODY, NOW)
        .await
        .unwrap_err();
    assert_eq!(e, VerifyError::MissingTimestamp);
    let e = plaid_check(&src, None, BODY, NOW).await.unwrap_err();
    assert_eq!(e, VerifyError::MissingSignature);
}

#[test]
fn plaid_jwks_must_be_p256_es256_keys() {
    let good = public_jwk(KEY, KID);
    let parse = |t: &str| {
        serde_json::from_str::<plaid::Jwk>(t)
            .map_err(|e| e.to_string())
            .and_then(plaid::Jwk::into_key)
    };
    let k = parse(&good).unwrap();
    assert_eq!((k.kid.as_str(), k.expired_at), (KID, None));
    for (from, to) in [
        ("\"P-256\"", "\"P-384\""),
        ("\"EC\"", "\"RSA\""),
        ("\"ES256\"", "\"HS256\""),
    ] {
        assert!(parse(&good.replacen(from, to, 1)).is_err(), "{to}");
    }
    // A point that is not on the curve.
    let v: serde_json::Value = serde_json::from_str(&good).unwrap();
    let x = v["x"].as_str().unwrap();
    let off = good.replacen(x, &B64URL.encode([1u8; 32]), 1);
    assert!(parse(&off).is_err());
    let expired = good.replacen("\"expired_at\":null", "\"expired_at\":1", 1);
    assert_eq!(parse(&expired).unwrap().expired_at, Some(1));
}

#[test]
fn plaid_sign_needs_a_private_key() {
    let src = plaid_source(None);
    let req = SignRequest {
        body: BODY,
        timestamp: NOW,
        ..Default::default()
    };
    let none = SigningKey::from_bytes(vec![]);
    let e = sign(&src.provider, &none, &req).unwrap_err();
    assert!(e.contains("--private-key"), "{e}");
    let p = sign::PlaidSign {
        private_key_pem: "not a key",
        kid: KID,
    };
    let req = SignRequest {
        plaid: Some(p),
        ..req
    };
    let e = sign(&src.provider, &none, &req).unwrap_err();
    assert!(e.contains("P-256"), "{e}");
}
