//! The `sns` scheme with the certificate's key at hand (the fetch itself is
//! tested over HTTP in tests/api/providers/sns.rs). AWS publishes no
//! vector: messages are made as its page describes, signed with a key the
//! test owns, and the canonical string is written out by hand once; AWS's
//! validators (aws-sdk-js `sns-message-validator`, Ruby
//! `Aws::SNS::MessageVerifier`) check such a message offline given the
//! certificate.

use super::payments::NOW;
use super::*;
use crate::verify::schemes::{FetchedKey, SchemeSettings, pkcs1, sns};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use rsa::signature::{SignatureEncoding, Signer as _};

const KEY: &str = include_str!("../../../tests/fixtures/schemes/rsa-key.pem");
const PUB: &str = include_str!("../../../tests/fixtures/schemes/rsa-pub.pem");
const TOPIC: &str = "arn:aws:sns:us-west-2:123456789012:MyTopic";
const CERT_URL: &str = "https://sns.us-west-2.amazonaws.com/SimpleNotificationService-abc.pem";

fn sns_source() -> Arc<Source> {
    let settings = sns::Settings::new(vec![TOPIC.into()], false, vec![]).unwrap();
    source_with("amazon-sns", &[], |s| {
        s.settings = Some(SchemeSettings::Sns(Box::new(settings)))
    })
}

fn key() -> FetchedKey {
    FetchedKey::Sns(Arc::new(pkcs1::public_key(PUB.as_bytes()).unwrap()))
}

fn run_sns(body: &[u8]) -> Result<Checked, VerifyError> {
    let incoming = Incoming {
        headers: HeaderMap::new(),
        body: Bytes::from(body.to_vec()),
        query: None,
        client_ip: None,
    };
    check_with(&sns_source(), incoming, NOW, Some(&key()))
}

fn notification(extra: &str) -> String {
    format!(
        r#"{{"Type":"Notification","MessageId":"22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324","TopicArn":"{TOPIC}",{extra}"Message":"My First Message","Timestamp":"2012-05-02T00:54:06.655Z","UnsubscribeURL":"https://sns.us-west-2.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=x"}}"#
    )
}

#[test]
fn the_canonical_string_is_signed_with_sha256_for_version_2() {
    let body = notification(r#""Subject":"My First Message","#);
    // The canonical string, as AWS's page lists the fields.
    let text = format!(
        "Message\nMy First Message\nMessageId\n22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324\nSubject\nMy First Message\nTimestamp\n2012-05-02T00:54:06.655Z\nTopicArn\n{TOPIC}\nType\nNotification\n"
    );
    let private = pkcs1::private_key(KEY).unwrap();
    let sig = rsa::pkcs1v15::SigningKey::<sha2::Sha256>::new(private).sign(text.as_bytes());
    let mut json: serde_json::Value = serde_json::from_str(&body).unwrap();
    json["SignatureVersion"] = "2".into();
    json["Signature"] = B64.encode(sig.to_bytes()).into();
    json["SigningCertURL"] = CERT_URL.into();
    let signed = serde_json::to_vec(&json).unwrap();
    let Checked::Event(mut v) = run_sns(&signed).unwrap() else {
        panic!()
    };
    assert_eq!(
        v.event_id().as_str(),
        "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324"
    );
    assert_eq!(v.take_facts().event_type.as_deref(), Some(TOPIC));
    // hookgate's signer writes the same signature.
    let ours: serde_json::Value =
        serde_json::from_slice(&sns::sign(body.as_bytes(), KEY, Some(CERT_URL)).unwrap()).unwrap();
    assert_eq!(ours["Signature"], json["Signature"]);
}

#[test]
fn version_1_is_sha1_and_unknown_versions_are_refused() {
    let body = notification("");
    let mut json: serde_json::Value = serde_json::from_str(&body).unwrap();
    json["SignatureVersion"] = "1".into();
    let v1 = sns::sign(&serde_json::to_vec(&json).unwrap(), KEY, Some(CERT_URL)).unwrap();
    assert!(matches!(run_sns(&v1), Ok(Checked::Event(_))));
    // The same signature claimed as version 2: refused.
    let mut as_v2: serde_json::Value = serde_json::from_slice(&v1).unwrap();
    as_v2["SignatureVersion"] = "2".into();
    assert_eq!(
        run_sns(&serde_json::to_vec(&as_v2).unwrap()).unwrap_err(),
        VerifyError::InvalidSignature
    );
    as_v2["SignatureVersion"] = "3".into();
    assert_eq!(
        run_sns(&serde_json::to_vec(&as_v2).unwrap()).unwrap_err(),
        VerifyError::MalformedSignature("unknown SignatureVersion")
    );
}

#[test]
fn signed_fields_cannot_change_and_unsigned_ones_can() {
    let signed: serde_json::Value = serde_json::from_slice(
        &sns::sign(notification("").as_bytes(), KEY, Some(CERT_URL)).unwrap(),
    )
    .unwrap();
    for (field, value) in [
        ("Message", "Other"),
        ("MessageId", "other-id"),
        ("Timestamp", "2013-01-01T00:00:00.000Z"),
        ("Subject", "added"),
    ] {
        let mut j = signed.clone();
        j[field] = value.into();
        assert_eq!(
            run_sns(&serde_json::to_vec(&j).unwrap()).unwrap_err(),
            VerifyError::InvalidSignature,
            "{field}"
        );
    }
    let mut j = signed.clone();
    j["UnsubscribeURL"] = "https://sns.us-west-2.amazonaws.com/?Action=Unsubscribe&x=2".into();
    assert!(run_sns(&serde_json::to_vec(&j).unwrap()).is_ok());
    // A topic the source does not list: refused even with a good signature.
    let mut j = signed;
    j["TopicArn"] = "arn:aws:sns:us-west-2:999999999999:Theirs".into();
    let resigned = sns::sign(&serde_json::to_vec(&j).unwrap(), KEY, None).unwrap();
    assert_eq!(
        run_sns(&resigned).unwrap_err(),
        VerifyError::MalformedSignature("topic is not one of the source's topic_arns")
    );
}

#[test]
fn confirmations_are_answered_never_events() {
    for kind in ["SubscriptionConfirmation", "UnsubscribeConfirmation"] {
        let body = format!(
            r#"{{"Type":"{kind}","MessageId":"165545c9-2a5c-472c-8df2-7ff2be2b3b1b","Token":"2336412f37","TopicArn":"{TOPIC}","Message":"You have chosen to subscribe to the topic {TOPIC}.","SubscribeURL":"https://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn={TOPIC}&Token=2336412f37","Timestamp":"2012-04-26T20:45:04.751Z"}}"#
        );
        let signed = sns::sign(body.as_bytes(), KEY, Some(CERT_URL)).unwrap();
        let Checked::Answer(r) = run_sns(&signed).unwrap() else {
            panic!("{kind} is answered")
        };
        assert_eq!(r.status, 200, "{kind}");
        // Forged (the token changed): the signature's 401, no answer.
        let forged = String::from_utf8(signed)
            .unwrap()
            .replace("2336412f37\"", "0000000000\"");
        assert_eq!(
            run_sns(forged.as_bytes()).unwrap_err(),
            VerifyError::InvalidSignature
        );
    }
}

#[test]
fn not_an_sns_message_is_refused() {
    for body in ["", "[]", r#"{"Type":1}"#, r#"{"Message":"x"}"#] {
        assert!(run_sns(body.as_bytes()).is_err(), "{body}");
    }
}
