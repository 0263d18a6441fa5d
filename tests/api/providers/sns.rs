//! Amazon SNS over HTTP with a loopback server standing in for the SNS
//! host (certificate and `SubscribeURL`), allowed by the test-only
//! `cert_hosts` key. Messages are made as AWS's page describes and signed
//! here with the key of the test certificate.

use super::{Headers, send};
use crate::helpers::*;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use std::sync::{Arc, Mutex};

const KEY: &str = include_str!("../../fixtures/schemes/rsa-key.pem");
const CERT: &str = include_str!("../../fixtures/schemes/sns-cert.pem");
const TOPIC: &str = "arn:aws:sns:us-east-1:123456789012:orders";

/// A loopback SNS host: serves the certificate and records every path
/// (with query) it is asked for.
async fn sns_host() -> (String, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let log = log.clone();
        async move {
            log.lock().unwrap().push(uri.to_string());
            if uri.path().ends_with(".pem") {
                (axum::http::StatusCode::OK, CERT)
            } else {
                (axum::http::StatusCode::OK, "<ConfirmSubscriptionResponse/>")
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr.to_string(), seen)
}

/// The canonical string of AWS's page, signed (SignatureVersion 2).
fn signed(mut msg: serde_json::Value) -> Vec<u8> {
    use rsa::pkcs8::DecodePrivateKey;
    use rsa::signature::{SignatureEncoding, Signer};
    let fields: &[&str] = if msg["Type"] == "Notification" {
        &[
            "Message",
            "MessageId",
            "Subject",
            "Timestamp",
            "TopicArn",
            "Type",
        ]
    } else {
        &[
            "Message",
            "MessageId",
            "SubscribeURL",
            "Timestamp",
            "Token",
            "TopicArn",
            "Type",
        ]
    };
    let mut text = String::new();
    for f in fields {
        if let Some(v) = msg[f].as_str() {
            text.push_str(&format!("{f}\n{v}\n"));
        }
    }
    let key = rsa::PrivateKey::from_pkcs8_pem(KEY).unwrap();
    let sig = rsa::pkcs1v15::SigningKey::<sha2::Sha256>::new(key).sign(text.as_bytes());
    msg["SignatureVersion"] = "2".into();
    msg["Signature"] = B64.encode(sig.to_bytes()).into();
    serde_json::to_vec(&msg).unwrap()
}

fn sns_headers(kind: &str, id: &str) -> Headers {
    super::h(&[
        ("x-amz-sns-message-type", kind),
        ("x-amz-sns-message-id", id),
        ("x-amz-sns-topic-arn", TOPIC),
        ("content-type", "text/plain; charset=UTF-8"),
    ])
}

async fn app(host: &str) -> TestApp {
    let mut opts = Opts::new(Backend::Embedded);
    opts.extra = format!(
        r#"
[sources.sns]
provider = "amazon-sns"
[sources.sns.sns]
topic_arns = ["{TOPIC}"]
cert_hosts = ["{host}"]
"#
    );
    spawn_app(opts).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sns_confirms_a_verified_subscription_and_stores_nothing() {
    let (host, seen) = sns_host().await;
    let app = app(&host).await;
    let cert_url = format!("http://{host}/SimpleNotificationService-test.pem");
    let subscribe = format!(
        "http://{host}/?Action=ConfirmSubscription&TopicArn={TOPIC}&Token=2336412f37fb687f"
    );
    let confirmation = serde_json::json!({
        "Type": "SubscriptionConfirmation",
        "MessageId": "165545c9-2a5c-472c-8df2-7ff2be2b3b1b",
        "Token": "2336412f37fb687f",
        "TopicArn": TOPIC,
        "Message": format!("You have chosen to subscribe to the topic {TOPIC}."),
        "SubscribeURL": subscribe,
        "Timestamp": "2012-04-26T20:45:04.751Z",
        "SigningCertURL": cert_url,
    });
    let hdr = sns_headers("SubscriptionConfirmation", "165545c9");

    // Forged first (its token changed after signing): 401, nothing fetched
    // from the confirmation URL.
    let mut forged: serde_json::Value =
        serde_json::from_slice(&signed(confirmation.clone())).unwrap();
    forged["Token"] = "attacker".into();
    forged["SubscribeURL"] =
        format!("http://{host}/?Action=ConfirmSubscription&Token=attacker").into();
    let (s, _, _) = send(&app, "sns", &hdr, &serde_json::to_vec(&forged).unwrap()).await;
    assert_eq!(s, 401);
    assert!(
        seen.lock()
            .unwrap()
            .iter()
            .all(|p| !p.contains("ConfirmSubscription")),
        "{:?}",
        seen.lock().unwrap()
    );

    let body = signed(confirmation);
    let (s, text, d) = send(&app, "sns", &hdr, &body).await;
    assert_eq!(
        (s, text.as_str(), d.as_str()),
        (200, "subscription confirmation verified", "")
    );
    let confirms: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|p| p.contains("Action=ConfirmSubscription"))
        .cloned()
        .collect();
    assert_eq!(confirms.len(), 1, "{confirms:?}");
    assert!(confirms[0].contains("Token=2336412f37fb687f"));

    // An unsubscribe confirmation is answered too, never stored.
    let unsub = serde_json::json!({
        "Type": "UnsubscribeConfirmation",
        "MessageId": "47138184-6831-46b8-8f7c-afc488602d7d",
        "Token": "2336412f37fb687f",
        "TopicArn": TOPIC,
        "Message": "You have chosen to deactivate subscription.",
        "SubscribeURL": format!("http://{host}/?Action=ConfirmSubscription&TopicArn={TOPIC}&Token=x"),
        "Timestamp": "2012-04-26T20:06:41.581Z",
        "SigningCertURL": format!("http://{host}/SimpleNotificationService-test.pem"),
    });
    let (s, text, _) = send(
        &app,
        "sns",
        &sns_headers("UnsubscribeConfirmation", "4713"),
        &signed(unsub),
    )
    .await;
    assert_eq!(
        (s, text.as_str()),
        (200, "unsubscribe confirmation verified")
    );
    assert_eq!(app.stats().await["sources"]["sns"]["unique"], 0);
    let pem_fetches = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|p| p.ends_with(".pem"))
        .count();
    assert_eq!(
        pem_fetches, 1,
        "the certificate is fetched once, then cached"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sns_notifications_new_duplicate_forged_and_foreign() {
    let (host, seen) = sns_host().await;
    let app = app(&host).await;
    let cert_url = format!("http://{host}/SimpleNotificationService-test.pem");
    let note = |id: &str, message: &str| {
        serde_json::json!({
            "Type": "Notification",
            "MessageId": id,
            "TopicArn": TOPIC,
            "Subject": "order",
            "Message": message,
            "Timestamp": "2024-05-02T00:54:06.655Z",
            "SigningCertURL": cert_url,
            "UnsubscribeURL": format!("http://{host}/?Action=Unsubscribe&SubscriptionArn={TOPIC}:1"),
        })
    };
    let hdr = sns_headers("Notification", "n-1");
    let body = signed(note(
        "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
        r#"{"order":1}"#,
    ));
    let (s, _, d) = send(&app, "sns", &hdr, &body).await;
    assert_eq!((s, d.as_str()), (200, "new"));
    let (s, _, d) = send(&app, "sns", &hdr, &body).await;
    assert_eq!((s, d.as_str()), (200, "duplicate"));
    assert_eq!(
        app.rows("sns", "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324")
            .await,
        1
    );

    let forged = String::from_utf8(body.clone())
        .unwrap()
        .replace(r#"{\"order\":1}"#, r#"{\"order\":2}"#);
    assert_ne!(forged.as_bytes(), body.as_slice());
    assert_eq!(send(&app, "sns", &hdr, forged.as_bytes()).await.0, 401);

    // A certificate off SNS's hosts, and a topic not listed: refused
    // before anything is fetched.
    let before = seen.lock().unwrap().len();
    let mut off = note("id-off", "x");
    off["SigningCertURL"] = "https://evil.example/SimpleNotificationService-x.pem".into();
    let (s, text, _) = send(&app, "sns", &hdr, &signed(off)).await;
    assert_eq!(s, 401, "{text}");
    let mut foreign = note("id-foreign", "x");
    foreign["TopicArn"] = "arn:aws:sns:us-east-1:999999999999:theirs".into();
    let (s, text, _) = send(&app, "sns", &hdr, &signed(foreign)).await;
    assert_eq!(s, 401);
    assert!(text.contains("topic_arns"), "{text}");
    assert_eq!(seen.lock().unwrap().len(), before);
    assert_eq!(
        seen.lock()
            .unwrap()
            .iter()
            .filter(|p| p.ends_with(".pem"))
            .count(),
        1
    );
    assert_eq!(app.stats().await["sources"]["sns"]["unique"], 1);
}
