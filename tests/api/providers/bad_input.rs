//! Broken and hostile input over HTTP: a clear 4xx with a reason, never a 5xx.

use super::{Headers, app, h, hex256, send};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_clear_4xx_never_a_5xx() {
    let app = app().await;
    let huge = "a".repeat(9_000);
    let cases: Vec<(&str, Headers, Vec<u8>)> = vec![
        (
            "checkout",
            h(&[("Cko-Signature", "zz-not-hex")]),
            b"{}".to_vec(),
        ),
        ("checkout", h(&[("Cko-Signature", "abcd")]), b"{}".to_vec()),
        ("checkout", h(&[("Cko-Signature", &huge)]), b"{}".to_vec()),
        (
            "square",
            h(&[("x-square-hmacsha256-signature", "GF4YkrJgGBDZ9NIY")]),
            b"{}".to_vec(),
        ),
        (
            "paddle",
            h(&[("Paddle-Signature", "ts=;h1=")]),
            b"{}".to_vec(),
        ),
        (
            "slack",
            h(&[
                ("X-Slack-Signature", "v0=abc"),
                ("X-Slack-Request-Timestamp", "soon"),
            ]),
            b"{}".to_vec(),
        ),
        ("adyen", vec![], b"\xff\xfe\xfd".to_vec()),
        ("adyen", vec![], b"[1,2,3]".to_vec()),
        ("adyen", vec![], br#"{"notificationItems":"nope"}"#.to_vec()),
        ("tbank", vec![], b"\"string\"".to_vec()),
        (
            "robokassa",
            vec![],
            b"OutSum=1&InvId=1&SignatureValue=%%".to_vec(),
        ),
        (
            "paypal",
            h(&[
                (
                    "PAYPAL-CERT-URL",
                    "https://api.paypal.com/v1/notifications/certs/X",
                ),
                ("PAYPAL-TRANSMISSION-SIG", "!!"),
            ]),
            b"{}".to_vec(),
        ),
        (
            "twilio?bodySHA256=00",
            h(&[("X-Twilio-Signature", "AAAA")]),
            b"{}".to_vec(),
        ),
    ];
    for (source, hdr, body) in &cases {
        let (s, text, _) = send(&app, source, hdr, body).await;
        assert!((400..500).contains(&s), "{source}: {s} {text}");
        assert!(!text.trim().is_empty(), "{source}: a reason is given");
    }
    // Valid signatures over unusable bodies: 400 with the reason.
    for (body, reason) in [
        (&b"[1,2]"[..], "JSON body is not an object"),
        (b"\xff\xfe", "body is not UTF-8 JSON"),
    ] {
        let hdr = h(&[("Cko-Signature", &hex256(b"cko-key", body))]);
        let (s, text, _) = send(&app, "checkout", &hdr, body).await;
        assert_eq!((s, text.trim()), (400, reason));
    }
    // An absurdly long event id.
    let body = format!(r#"{{"id":"{}"}}"#, "e".repeat(4096));
    let hdr = h(&[("Cko-Signature", &hex256(b"cko-key", body.as_bytes()))]);
    assert_eq!(send(&app, "checkout", &hdr, body.as_bytes()).await.0, 400);
}
