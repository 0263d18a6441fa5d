//! Payment and long-tail providers over HTTP: public vectors, valid /
//! tampered / wrong secret / rotated / stale, provider-specific answers
//! (identical for duplicates), challenges, pings, allowlists, PayPal with a
//! pinned certificate and with a loopback certificate host, and bad input.
//! Signatures are computed here from the providers' docs, not by hookgate.

mod bad_input;
mod braintree;
mod catalogue;
mod handshakes;
pub(crate) mod paypal;
mod plaid;
mod schemes;
mod sns;

use crate::helpers::*;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{KeyInit, Mac};

pub(super) type Headers = Vec<(String, String)>;

pub(super) const ADYEN_HEX: &str =
    "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";

pub(super) fn h(pairs: &[(&str, &str)]) -> Headers {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

pub(super) fn hex256(key: &[u8], msg: &[u8]) -> String {
    hex::encode(signers::hmac256(key, msg))
}

fn sha1_b64(key: &[u8], msg: &[u8]) -> String {
    let mut m = <hmac::Hmac<sha1::Sha1> as KeyInit>::new_from_slice(key).unwrap();
    m.update(msg);
    B64.encode(m.finalize().into_bytes())
}

fn extra() -> String {
    format!(
        r#"
[sources.adyen]
provider = "adyen"
secrets = ["{ADYEN_HEX}"]

[sources.gocardless]
provider = "gocardless"
secrets = ["gc-secret"]

[sources.paddle]
provider = "paddle"
secrets = ["pdl_ntf_old", "pdl_ntf_new"]

[sources.square]
provider = "square"
secrets = ["sq-key"]
public_url = "https://hooks.example.com/webhooks/square"

[sources.razorpay]
provider = "razorpay"
secrets = ["key_secret"]

[sources.checkout]
provider = "checkout"
secrets = ["cko-key"]

[sources.slack]
provider = "slack"
secrets = ["8f742231b10e8888abcd99yyyzzz85a5"]

[sources.twilio]
provider = "twilio"
secrets = ["12345"]
public_url = "https://mycompany.com/myapp.php?foo=1&bar=2"

[sources.robokassa]
provider = "robokassa"
secrets = ["pass2"]

[sources.cloudpayments]
provider = "cloudpayments"
secrets = ["cp-secret"]

[sources.tbank]
provider = "tbank"
secrets = ["tb-password"]

[sources.zoom]
provider = "zoom"
secrets = ["zoom-token"]

[sources.woo]
provider = "woocommerce"
secrets = ["wc-secret"]

[sources.yookassa]
provider = "yookassa"
allow_ips = ["127.0.0.1/32", "77.75.153.0/25"]

[sources.yookassa-elsewhere]
provider = "yookassa"
allow_ips = ["185.71.76.0/27"]

[sources.gh-allow]
provider = "github"
secrets = ["{GITHUB_SECRET}"]
allow_ips = ["10.0.0.0/8"]

[sources.acme]
provider = "hmac"
secrets = ["acme-key"]
[sources.acme.signature]
header = "X-Acme-Sig"
algorithm = "hmac-sha256"
encoding = "base64"
prefix = "v1="
[sources.acme.event_id]
from = "header:X-Acme-Id"

[sources.paypal]
provider = "paypal"
[sources.paypal.paypal]
webhook_id = "WH-HTTP"
cert = "file:tests/fixtures/paypal/test-cert.pem"
"#
    )
}

pub(super) async fn app() -> TestApp {
    let mut opts = Opts::new(Backend::Embedded);
    opts.extra = extra();
    spawn_app(opts).await
}

pub(super) async fn send(
    app: &TestApp,
    path: &str,
    headers: &Headers,
    body: &[u8],
) -> (u16, String, String) {
    let mut req = app.client.post(app.url(&format!("/webhooks/{path}")));
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let r = req.body(body.to_vec()).send().await.expect("request sent");
    let status = r.status().as_u16();
    let dedup = dedup_header(&r);
    (status, r.text().await.unwrap(), dedup)
}

fn adyen_body(psp: &str, reference: &str) -> Vec<u8> {
    let fields = format!("{psp}::Acme:{reference}:1000:EUR:AUTHORISATION:true");
    let key = hex::decode(ADYEN_HEX).unwrap();
    let sig = B64.encode(signers::hmac256(&key, fields.as_bytes()));
    serde_json::to_vec(&serde_json::json!({
        "live": "false",
        "notificationItems": [{"NotificationRequestItem": {
            "additionalData": {"hmacSignature": sig},
            "amount": {"currency": "EUR", "value": 1000},
            "eventCode": "AUTHORISATION",
            "merchantAccountCode": "Acme",
            "merchantReference": reference,
            "pspReference": psp,
            "success": "true"
        }}]
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payment_providers_verify_and_answer_per_provider() {
    let app = app().await;

    // Adyen: [accepted] for the new event and for its duplicate.
    let body = adyen_body("PSP-HTTP-1", "order-1");
    let first = send(&app, "adyen", &vec![], &body).await;
    assert_eq!(
        (first.0, first.1.as_str(), first.2.as_str()),
        (200, "[accepted]", "new")
    );
    let again = send(&app, "adyen", &vec![], &body).await;
    assert_eq!(
        (again.0, again.1.as_str(), again.2.as_str()),
        (200, "[accepted]", "duplicate")
    );
    let forged = String::from_utf8(body.clone())
        .unwrap()
        .replace("order-1", "order-2");
    assert_eq!(send(&app, "adyen", &vec![], forged.as_bytes()).await.0, 401);
    assert_eq!(app.rows("adyen", "PSP-HTTP-1:AUTHORISATION:true").await, 1);

    // GoCardless V11 (gocardless-pro-python tests): batch key; 498 when forged.
    let gc = include_bytes!("../../fixtures/vectors/gocardless_vector.json");
    // V11's signature was made with another endpoint secret: forged here.
    let gc_src_sig = "2693754819d3e32d7e8fcb13c729631f316c6de8dc1cf634d6527f1c07276e7e";
    let sig = hex256(b"gc-secret", gc);
    let (s, _, d) = send(&app, "gocardless", &h(&[("Webhook-Signature", &sig)]), gc).await;
    assert_eq!((s, d.as_str()), (200, "new"));
    assert_eq!(
        app.rows("gocardless", "EV00BD05S5VM2T,EV00BD05TB8K63")
            .await,
        1
    );
    let (s, text, _) = send(
        &app,
        "gocardless",
        &h(&[("Webhook-Signature", gc_src_sig)]),
        gc,
    )
    .await;
    assert_eq!((s, text.trim()), (498, "invalid signature"));
    let (s, _, _) = send(&app, "gocardless", &vec![], gc).await;
    assert_eq!(s, 498, "missing signature is also 498");

    // Paddle: rotated secrets, stale timestamp.
    let body = br#"{"event_id":"evt_paddle_1","event_type":"transaction.paid"}"#;
    for (i, secret) in ["pdl_ntf_old", "pdl_ntf_new"].iter().enumerate() {
        let ts = now();
        let sig = hex256(
            secret.as_bytes(),
            &[format!("{ts}:").as_bytes(), body].concat(),
        );
        let hdr = h(&[("Paddle-Signature", &format!("ts={ts};h1={sig}"))]);
        let (s, _, d) = send(&app, "paddle", &hdr, body).await;
        assert_eq!(s, 200, "secret #{i}");
        assert_eq!(d, if i == 0 { "new" } else { "duplicate" });
    }
    let ts = now() - 3600;
    let sig = hex256(
        b"pdl_ntf_new",
        &[format!("{ts}:").as_bytes(), &body[..]].concat(),
    );
    let (s, text, _) = send(
        &app,
        "paddle",
        &h(&[("Paddle-Signature", &format!("ts={ts};h1={sig}"))]),
        body,
    )
    .await;
    assert_eq!((s, text.trim()), (401, "timestamp outside tolerance"));

    // Square: the configured public URL is signed, not the Host header.
    let body = br#"{"event_id":"sq-evt-1","type":"payment.updated"}"#;
    let url = "https://hooks.example.com/webhooks/square";
    let good = B64.encode(signers::hmac256(
        b"sq-key",
        &[url.as_bytes(), body].concat(),
    ));
    let (s, _, _) = send(
        &app,
        "square",
        &h(&[
            ("x-square-hmacsha256-signature", &good),
            ("host", "evil.example"),
        ]),
        body,
    )
    .await;
    assert_eq!(s, 200);
    let local = app.url("/webhooks/square");
    let wrong = B64.encode(signers::hmac256(
        b"sq-key",
        &[local.as_bytes(), body].concat(),
    ));
    assert_eq!(
        send(
            &app,
            "square",
            &h(&[("x-square-hmacsha256-signature", &wrong)]),
            body
        )
        .await
        .0,
        401
    );

    // Razorpay V10 (razorpay-python tests): event id from x-razorpay-event-id.
    let rz = include_bytes!("../../fixtures/vectors/razorpay_vector.json");
    let hdr = h(&[
        (
            "X-Razorpay-Signature",
            "d60e67fd884556c045e9be7dad57903e33efc7172c17c6e3ef77db42d2b366e9",
        ),
        ("x-razorpay-event-id", "rzp-evt-1"),
    ]);
    assert_eq!(send(&app, "razorpay", &hdr, rz).await.0, 200);
    assert_eq!(
        send(&app, "razorpay", &hdr, &rz[..rz.len() - 1]).await.0,
        401
    );

    // Checkout.com: wrong key.
    let body = br#"{"id":"evt_cko_1","type":"payment_approved"}"#;
    assert_eq!(
        send(
            &app,
            "checkout",
            &h(&[("Cko-Signature", &hex256(b"cko-key", body))]),
            body
        )
        .await
        .0,
        200
    );
    assert_eq!(
        send(
            &app,
            "checkout",
            &h(&[("Cko-Signature", &hex256(b"other", body))]),
            body
        )
        .await
        .0,
        401
    );

    // Robokassa: OK{InvId}, uppercase MD5, same answer for the duplicate.
    let form = "OutSum=10.000000&InvId=5&Shp_item=7";
    let digest = md5_hex_upper("10.000000:5:pass2:Shp_item=7");
    let body = format!("{form}&SignatureValue={digest}");
    for want in ["new", "duplicate"] {
        let (s, text, d) = send(&app, "robokassa", &vec![], body.as_bytes()).await;
        assert_eq!((s, text.as_str(), d.as_str()), (200, "OK5", want));
    }
    let forged = body.replace("OutSum=10.000000", "OutSum=1.000000");
    assert_eq!(
        send(&app, "robokassa", &vec![], forged.as_bytes()).await.0,
        401
    );

    // CloudPayments: {"code":0}.
    let body = b"TransactionId=777&Amount=10.00&Status=Completed";
    let sig = B64.encode(signers::hmac256(b"cp-secret", body));
    let (s, text, _) = send(&app, "cloudpayments", &h(&[("Content-HMAC", &sig)]), body).await;
    assert_eq!((s, text.as_str()), (200, r#"{"code":0}"#));

    // T-Bank: OK.
    // Sorted by name: Amount, Password, PaymentId, Status, Success, TerminalKey.
    let token = sha256_hex("1000tb-password99CONFIRMEDtrueT1");
    let body = format!(
        r#"{{"TerminalKey":"T1","PaymentId":99,"Status":"CONFIRMED","Amount":1000,"Success":true,"Token":"{token}"}}"#
    );
    let (s, text, _) = send(&app, "tbank", &vec![], body.as_bytes()).await;
    assert_eq!((s, text.as_str()), (200, "OK"));
    assert_eq!(app.rows("tbank", "99:CONFIRMED").await, 1);
}

fn md5_hex_upper(text: &str) -> String {
    use md5::Digest;
    hex::encode_upper(md5::Md5::digest(text.as_bytes()))
}

fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saas_challenges_pings_and_url_signing() {
    let app = app().await;

    // Slack V4 is from 2018 (stale): sign the same body now instead, then
    // the url_verification challenge is echoed after the signature check.
    let ts = now().to_string();
    let body = br#"{"token":"t","challenge":"chal-123","type":"url_verification"}"#;
    let sig = format!(
        "v0={}",
        hex256(
            b"8f742231b10e8888abcd99yyyzzz85a5",
            &[format!("v0:{ts}:").as_bytes(), body].concat()
        )
    );
    let hdr = h(&[
        ("X-Slack-Signature", &sig),
        ("X-Slack-Request-Timestamp", &ts),
    ]);
    let (s, text, d) = send(&app, "slack", &hdr, body).await;
    assert_eq!((s, text.as_str(), d.as_str()), (200, "chal-123", ""));
    let forged = h(&[
        ("X-Slack-Signature", "v0=00"),
        ("X-Slack-Request-Timestamp", &ts),
    ]);
    assert_eq!(send(&app, "slack", &forged, body).await.0, 401);

    // Zoom endpoint.url_validation: plainToken + HMAC(secret token, plainToken).
    let body =
        br#"{"event":"endpoint.url_validation","payload":{"plainToken":"pt-1"},"event_ts":1}"#;
    let sig = format!(
        "v0={}",
        hex256(
            b"zoom-token",
            &[format!("v0:{ts}:").as_bytes(), body].concat()
        )
    );
    let hdr = h(&[("x-zm-signature", &sig), ("x-zm-request-timestamp", &ts)]);
    let (s, text, _) = send(&app, "zoom", &hdr, body).await;
    assert_eq!(s, 200);
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["plainToken"], "pt-1");
    assert_eq!(json["encryptedToken"], hex256(b"zoom-token", b"pt-1"));

    // WooCommerce: the unsigned creation ping gets 200 and nothing is stored.
    let (s, _, d) = send(&app, "woo", &vec![], b"webhook_id=12").await;
    assert_eq!((s, d.as_str()), (200, ""));
    let stats = app.stats().await;
    assert_eq!(stats["sources"]["woo"]["unique"], 0);

    // Twilio V6 (twilio-python tests) + the port quirk (V6b), form body.
    let v6 = b"CallSid=CA1234567890ABCDE&Caller=%2B14158675309&Digits=1234&From=%2B14158675309&To=%2B18005551212";
    let path = "twilio?foo=1&bar=2";
    for sig in [
        "RSOYDt4T1cUTdK1PDd93/VVr8B8=",
        "kvajT1Ptam85bY51eRf/AJRuM3w=",
    ] {
        let hdr = h(&[
            ("X-Twilio-Signature", sig),
            ("I-Twilio-Idempotency-Token", sig),
        ]);
        let (s, text, _) = send(&app, path, &hdr, v6).await;
        assert_eq!((s, text.as_str()), (200, "<Response/>"), "{sig}");
    }
    // Same signature, other query string: the URL no longer matches.
    let hdr = h(&[("X-Twilio-Signature", "RSOYDt4T1cUTdK1PDd93/VVr8B8=")]);
    assert_eq!(send(&app, "twilio?foo=1&bar=3", &hdr, v6).await.0, 401);
    // An independent signer agrees with V6's construction.
    let content = "https://mycompany.com/myapp.php?foo=1&bar=2CallSidCA1234567890ABCDECaller+14158675309Digits1234From+14158675309To+18005551212";
    assert_eq!(
        sha1_b64(b"12345", content.as_bytes()),
        "RSOYDt4T1cUTdK1PDd93/VVr8B8="
    );

    // Generic hmac source, configured entirely in the source.
    let body = br#"{"x":1}"#;
    let sig = format!("v1={}", B64.encode(signers::hmac256(b"acme-key", body)));
    let hdr = h(&[("X-Acme-Sig", &sig), ("X-Acme-Id", "acme-1")]);
    assert_eq!(send(&app, "acme", &hdr, body).await.0, 200);
    assert_eq!(app.rows("acme", "acme-1").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_ips_guard_unsigned_and_signed_sources() {
    let app = app().await;
    let body = br#"{"type":"notification","event":"payment.succeeded","object":{"id":"yk-1"}}"#;
    let (s, _, d) = send(&app, "yookassa", &vec![], body).await;
    assert_eq!((s, d.as_str()), (200, "new"));
    assert_eq!(app.rows("yookassa", "payment.succeeded:yk-1").await, 1);
    let (s, text, _) = send(&app, "yookassa-elsewhere", &vec![], body).await;
    assert_eq!((s, text.trim()), (403, "client address not allowed"));
    // A forwarded-for header is ignored without trusted proxies.
    let spoof = h(&[("X-Forwarded-For", "185.71.76.1")]);
    assert_eq!(send(&app, "yookassa-elsewhere", &spoof, body).await.0, 403);
    // allow_ips combines with a signed provider: a valid GitHub signature from
    // the wrong address is still refused.
    let hdr = signers::github(GITHUB_SECRET, "d-allow", body);
    assert_eq!(send(&app, "gh-allow", &hdr, body).await.0, 403);
    let stats = app.stats().await;
    assert_eq!(
        stats["sources"]["gh-allow"]["rejected_by_reason"]["ip_not_allowed"],
        1
    );
}
