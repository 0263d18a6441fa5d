//! The public-key and canonical-request scheme families over HTTP, one
//! provider each: Discord (Ed25519), SendGrid (ECDSA P-256), Wise (RSA),
//! Contentful and HubSpot v3 (canonical requests). Each: a signed request
//! is new, its retry a duplicate, a forged one 401. Signatures are made
//! here as the providers' docs describe, with keys the test owns.

use super::{Headers, h, send};
use crate::helpers::*;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;

const P256_KEY: &str = include_str!("../../fixtures/schemes/p256-key.pem");
const P256_PUB: &str = include_str!("../../fixtures/schemes/p256-pub.pem");
const RSA_KEY: &str = include_str!("../../fixtures/schemes/rsa-key.pem");
const RSA_PUB: &str = include_str!("../../fixtures/schemes/rsa-pub.pem");
const ED_SEED: [u8; 32] = [7; 32];
const CF_SECRET: &str = "cf0123456789cf0123456789cf0123456789cf0123456789cf0123456789abcd";
const HS_SECRET: &str = "hs-client-secret";

fn toml_str(s: &str) -> String {
    s.replace('\n', "\\n")
}

async fn app() -> TestApp {
    let ed = ed25519_dalek::SigningKey::from_bytes(&ED_SEED);
    let mut opts = Opts::new(Backend::Embedded);
    opts.extra = format!(
        r#"
[sources.discord]
provider = "discord"
secrets = ["{discord}"]

[sources.sendgrid]
provider = "sendgrid"
secrets = ["{p256}"]

[sources.wise]
provider = "wise"
secrets = ["{rsa}"]

[sources.contentful]
provider = "contentful"
secrets = ["{CF_SECRET}"]
public_url = "https://hooks.example.com/webhooks/contentful"

[sources.hubspot]
provider = "hubspot"
secrets = ["{HS_SECRET}"]
public_url = "https://hooks.example.com/webhooks/hubspot"
"#,
        discord = hex::encode(ed.verifying_key().as_bytes()),
        p256 = toml_str(P256_PUB),
        rsa = toml_str(RSA_PUB),
    );
    spawn_app(opts).await
}

/// Sends `body` signed by `headers` three times: new, duplicate, and once
/// more with `forged` headers (401); one stored row under `id` if given.
async fn new_duplicate_forged(
    app: &TestApp,
    src: &str,
    hdr: &Headers,
    forged: &Headers,
    body: &[u8],
) {
    let (s, text, d) = send(app, src, hdr, body).await;
    assert!((200..300).contains(&s), "{src}: {s} {text}");
    assert_eq!(d, "new", "{src}");
    let (s, _, d) = send(app, src, hdr, body).await;
    assert!((200..300).contains(&s), "{src} retry: {s}");
    assert_eq!(d, "duplicate", "{src}");
    let (s, text, _) = send(app, src, forged, body).await;
    assert_eq!(s, 401, "{src} forged: {text}");
    assert_eq!(app.stats().await["sources"][src]["unique"], 1, "{src}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_key_schemes_new_duplicate_and_forged() {
    use ed25519_dalek::Signer as _;
    let app = app().await;
    let ts = now().to_string();

    // Discord: hex Ed25519 over timestamp + body; 204.
    let body = br#"{"version":1,"application_id":"1","type":1,"event":{"type":"ENTITLEMENT_CREATE","timestamp":"2024-10-18T14:42:53.064834","data":{"id":"e1"}}}"#;
    let ed = ed25519_dalek::SigningKey::from_bytes(&ED_SEED);
    let sig = hex::encode(ed.sign(&[ts.as_bytes(), body].concat()).to_bytes());
    let hdr = h(&[
        ("X-Signature-Ed25519", &sig),
        ("X-Signature-Timestamp", &ts),
    ]);
    let other = ed25519_dalek::SigningKey::from_bytes(&[8; 32]);
    let bad = hex::encode(other.sign(&[ts.as_bytes(), body].concat()).to_bytes());
    let forged = h(&[
        ("X-Signature-Ed25519", &bad),
        ("X-Signature-Timestamp", &ts),
    ]);
    new_duplicate_forged(&app, "discord", &hdr, &forged, body).await;
    assert_eq!(send(&app, "discord", &hdr, body).await.0, 204);

    // SendGrid: base64 DER ECDSA over timestamp + body.
    let body = br#"[{"email":"a@example.com","event":"delivered","sg_event_id":"sg-1"},{"email":"b@example.com","event":"open","sg_event_id":"sg-2"}]"#;
    let key = p256_key(P256_KEY);
    let sig: p256::ecdsa::Signature =
        p256::ecdsa::signature::Signer::sign(&key, &[ts.as_bytes(), body].concat());
    let sig = B64.encode(sig.to_der().as_bytes());
    let hdr = h(&[
        ("X-Twilio-Email-Event-Webhook-Signature", &sig),
        ("X-Twilio-Email-Event-Webhook-Timestamp", &ts),
    ]);
    let later = (now() + 1).to_string();
    let forged = h(&[
        ("X-Twilio-Email-Event-Webhook-Signature", &sig),
        ("X-Twilio-Email-Event-Webhook-Timestamp", &later),
    ]);
    new_duplicate_forged(&app, "sendgrid", &hdr, &forged, body).await;
    assert_eq!(app.rows("sendgrid", "sg-1,sg-2").await, 1);

    // Wise: base64 RSA-SHA256 over the body.
    let body = br#"{"data":{"resource":{"id":49983981,"type":"transfer"},"current_state":"outgoing_payment_sent"},"event_type":"transfers#state-change","schema_version":"2.0.0","sent_at":"2021-08-23T10:12:50Z"}"#;
    let sig = rsa_sign(RSA_KEY, body);
    let hdr = h(&[("X-Signature-SHA256", &sig)]);
    let forged = h(&[("X-Signature-SHA256", &rsa_sign(RSA_KEY, b"{}"))]);
    new_duplicate_forged(&app, "wise", &hdr, &forged, body).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canonical_request_schemes_new_duplicate_and_forged() {
    let app = app().await;
    let ms = (now() * 1000).to_string();

    // Contentful: the canonical request over the headers it lists.
    let body = br#"{"sys":{"type":"Entry","id":"e1","version":4}}"#;
    let crn = "crn:contentful:::content:spaces/s1/entries/e1";
    let text = format!(
        "POST\n/webhooks/contentful\nx-contentful-crn:{crn};x-contentful-signed-headers:x-contentful-crn,x-contentful-signed-headers,x-contentful-timestamp;x-contentful-timestamp:{ms}\n{}",
        std::str::from_utf8(body).unwrap()
    );
    let sig = hex::encode(signers::hmac256(CF_SECRET.as_bytes(), text.as_bytes()));
    let listed = "x-contentful-crn,x-contentful-signed-headers,x-contentful-timestamp";
    let hdr = h(&[
        ("x-contentful-signature", &sig),
        ("x-contentful-signed-headers", listed),
        ("x-contentful-timestamp", &ms),
        ("x-contentful-crn", crn),
        ("x-contentful-topic", "ContentManagement.Entry.publish"),
        ("x-contentful-idempotency-key", "cf-idem-1"),
    ]);
    let mut forged = hdr.clone();
    forged[3].1 = "crn:contentful:::content:spaces/s2/entries/e1".into();
    new_duplicate_forged(&app, "contentful", &hdr, &forged, body).await;
    assert_eq!(app.rows("contentful", "cf-idem-1").await, 1);

    // HubSpot v3: POST + URL + body + timestamp, base64.
    let body = br#"[{"eventId":3001,"subscriptionId":1,"portalId":2,"occurredAt":1564113600000,"subscriptionType":"contact.creation","attemptNumber":0,"objectId":123}]"#;
    let text = format!(
        "POSThttps://hooks.example.com/webhooks/hubspot{}{ms}",
        std::str::from_utf8(body).unwrap()
    );
    let sig = B64.encode(signers::hmac256(HS_SECRET.as_bytes(), text.as_bytes()));
    let hdr = h(&[
        ("X-HubSpot-Signature-v3", &sig),
        ("X-HubSpot-Request-Timestamp", &ms),
    ]);
    let wrong = B64.encode(signers::hmac256(b"other-secret", text.as_bytes()));
    let forged = h(&[
        ("X-HubSpot-Signature-v3", &wrong),
        ("X-HubSpot-Request-Timestamp", &ms),
    ]);
    new_duplicate_forged(&app, "hubspot", &hdr, &forged, body).await;
    assert_eq!(app.rows("hubspot", "3001").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_interactions_are_refused_with_a_reason_and_pings_answered() {
    use ed25519_dalek::Signer as _;
    let app = app().await;
    let ts = now().to_string();
    let ed = ed25519_dalek::SigningKey::from_bytes(&ED_SEED);
    let signed = |body: &[u8]| {
        let sig = hex::encode(ed.sign(&[ts.as_bytes(), body].concat()).to_bytes());
        h(&[
            ("X-Signature-Ed25519", &sig),
            ("X-Signature-Timestamp", &ts),
        ])
    };
    let interaction = br#"{"type":2,"id":"1","application_id":"1","token":"tok","data":{"name":"blep"},"version":1}"#;
    let (s, text, d) = send(&app, "discord", &signed(interaction), interaction).await;
    assert_eq!((s, d.as_str()), (400, ""));
    assert!(text.contains("Interactions Endpoint URL"), "{text}");
    let ping = br#"{"version":1,"application_id":"1","type":0}"#;
    let (s, text, _) = send(&app, "discord", &signed(ping), ping).await;
    assert_eq!((s, text.as_str()), (204, ""));
    assert_eq!(app.stats().await["sources"]["discord"]["unique"], 0);
}

fn p256_key(pem: &str) -> p256::ecdsa::SigningKey {
    use p256::pkcs8::DecodePrivateKey;
    p256::ecdsa::SigningKey::from(p256::SecretKey::from_pkcs8_pem(pem).unwrap())
}

pub(super) fn rsa_sign(pem: &str, msg: &[u8]) -> String {
    use rsa::pkcs8::DecodePrivateKey;
    use rsa::signature::{SignatureEncoding, Signer};
    let key = rsa::PrivateKey::from_pkcs8_pem(pem).unwrap();
    let sig = rsa::pkcs1v15::SigningKey::<sha2::Sha256>::new(key).sign(msg);
    B64.encode(sig.to_bytes())
}
