//! The messaging and commerce catalogue (issue #34): round trips through
//! `hookgate sign` and a vector per provider. Pusher's and Sinch's come
//! from their SDKs' tests (cited on the test); the others were computed
//! apart from hookgate with Python's `hmac`/`hashlib` exactly as each
//! provider's docs describe the signed text (see catalogue_payments.rs).

use super::catalogue_payments::S;
use super::payments::{Case, NOW, round_trips};
use super::*;

#[test]
fn messaging_and_commerce_catalogue_round_trips() {
    round_trips(&[
        Case::new(
            "line",
            r#"{"destination":"U1","events":[{"type":"message","webhookEventId":"01G1","message":{"text":"MARK42"}},{"type":"follow","webhookEventId":"01G2"}]}"#,
            "01G1,01G2",
        ),
        Case::new(
            "viber",
            r#"{"event":"message","timestamp":1457764197627,"message_token":4912661846655238145,"message":{"text":"MARK42"}}"#,
            "message:4912661846655238145",
        ),
        Case::new(
            "webex",
            r#"{"id":"wh1","resource":"messages","event":"created","data":{"id":"m1","roomId":"MARK42"}}"#,
            "messages:created:m1",
        ),
        Case::new(
            "pusher",
            r#"{"time_ms":1327078148132,"events":[{"name":"channel_occupied","channel":"MARK42"}]}"#,
            "sha256:",
        ),
        Case {
            timestamped: true,
            ..Case::new(
                "sinch",
                r#"{"app_id":"a1","message":{"id":"m1","contact_message":{"text_message":{"text":"MARK42"}}}}"#,
                "sha256:",
            )
        },
        Case::new(
            "sendbird",
            r#"{"category":"group_channel:message_send","payload":{"message_id":7,"message":"MARK42"}}"#,
            "group_channel:message_send:7",
        ),
        Case::new(
            "sendbird",
            r#"{"category":"group_channel:create","channel":{"name":"MARK42"}}"#,
            "sha256:",
        ),
        Case {
            secret: "c2VjcmV0LXRlYW1zLWtleQ==",
            wrong: "b3RoZXItdGVhbXMta2V5",
            ..Case::new(
                "msteams-outgoing",
                r#"{"type":"message","id":"1485983408511","text":"MARK42"}"#,
                "1485983408511",
            )
        },
        Case::new(
            "stream",
            r#"{"type":"message.new","message":{"id":"m1","text":"MARK42"}}"#,
            "sha256:",
        ),
        Case::new(
            "ably",
            r#"{"items":[{"webhookId":"w1","source":"channel.message","data":"MARK42"}]}"#,
            "sha256:",
        ),
        Case::new(
            "easypost",
            r#"{"id":"evt_1","description":"tracker.updated","result":{"id":"MARK42"}}"#,
            "evt_1",
        ),
        Case::new(
            "btcpay",
            r#"{"deliveryId":"d2","originalDeliveryId":"d1","type":"InvoiceSettled","invoiceId":"MARK42"}"#,
            "d1",
        ),
        Case::new(
            "lago",
            r#"{"webhook_type":"invoice.created","invoice":{"lago_id":"MARK42"}}"#,
            "",
        ),
        Case::new(
            "midtrans-iris",
            r#"{"reference_no":"r-1","status":"completed","notes":"MARK42"}"#,
            "r-1:completed",
        ),
        Case::new(
            "coinpayments",
            "ipn_mode=hmac&ipn_type=api&txn_id=T1&status=100&custom=MARK42",
            "T1:100",
        ),
        Case {
            body_signed: false,
            ..Case::new(
                "asaas",
                r#"{"id":"evt_1","event":"PAYMENT_CONFIRMED","x":"MARK42"}"#,
                "evt_1",
            )
        },
        Case::new(
            "ecwid",
            r#"{"eventId":"MARK42-e1","eventCreated":1469434610,"eventType":"order.created"}"#,
            "MARK42-e1",
        ),
    ]);
}

/// Patreon keys on the unsigned X-Patreon-Event header, which the signer
/// does not invent: the request carries it as Patreon sends it.
#[test]
fn patreon_round_trip_with_its_event_header() {
    let src = source("patreon", &["pt-secret"]);
    let body = r#"{"data":{"id":"p1","attributes":{"note":"MARK42"}}}"#;
    let req = SignRequest {
        body: body.as_bytes(),
        ..Default::default()
    };
    let signed = sign(&src.provider, &src.keys[0], &req).unwrap();
    let mut h = signed.headers.clone();
    h.push(("x-patreon-event".into(), "members:pledge:create".into()));
    let h = payments_headers(&h);
    let v = verify(&src, &h, Bytes::from(body.to_owned()), NOW).unwrap();
    assert_eq!(v.event_id().as_str(), "members:pledge:create:p1");
    let tampered = Bytes::from(body.replace("MARK42", "MARK43"));
    assert_eq!(
        verify(&src, &h, tampered, NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
}

// pusher-http-go webhook_test.go: secret "secret", body {"hello":"world"}.
#[test]
fn pusher_sdk_vector() {
    let h = [
        ("x-pusher-key", "key"),
        (
            "x-pusher-signature",
            "2677ad3e7c090b2fa2c0fb13020d66d5420879b8316eb356a2d60fb9073bc778",
        ),
    ];
    let id = vector("pusher", &["secret"], &h, r#"{"hello":"world"}"#, NOW);
    assert!(id.starts_with("sha256:"), "{id}");
}

// sinch-sdk-dotnet Tests/Conversation/WebhooksTests.cs ValidateRequest:
// body, nonce, timestamp, secret and signature as published.
#[test]
fn sinch_sdk_vector() {
    let body = r#"{"app_id":"","accepted_time":"2021-10-18T17:49:13.813615Z","project_id":"e2df3a34-a71b-4448-9db5-a8d2baad28e4","contact_create_notification":{"contact":{"id":"01FJA8B466Y0R2GNXD78MD9SM1","channel_identities":[{"channel":"SMS","identity":"48123456789","app_id":""}],"display_name":"New Test Contact","email":"new.contact@email.com","external_id":"","metadata":"","language":"EN_US"}},"message_metadata":""}"#;
    let h = [
        (
            "x-sinch-webhook-signature-nonce",
            "01FJA8B4A7BM43YGWSG9GBV067",
        ),
        ("x-sinch-webhook-signature-timestamp", "1634579353"),
        ("x-sinch-webhook-signature-algorithm", "HmacSHA256"),
        (
            "x-sinch-webhook-signature",
            "6bpJoRmFoXVjfJIVglMoJzYXxnoxRujzR4k2GOXewOE=",
        ),
    ];
    let id = vector("sinch", &["foo_secret1234"], &h, body, 1_634_579_353);
    assert!(id.starts_with("sha256:"), "{id}");
    // The nonce is signed.
    let mut other = h;
    other[0].1 = "01FJA8B4A7BM43YGWSG9GBV068";
    let src = source("sinch", &["foo_secret1234"]);
    let e = check(&src, &other, body, 1_634_579_353).unwrap_err();
    assert_eq!(e, VerifyError::InvalidSignature);
}

// base64(hmac(channel_secret, body)); the console's Verify request has no
// events, so its key is the body hash.
#[test]
fn line_vector_and_the_empty_verify_request() {
    let body = r#"{"destination":"U8e742f61d673b39c7fff3cecb7536ef0","events":[{"type":"message","message":{"type":"text","id":"468789577898262530","text":"Hello"},"webhookEventId":"01G17EJCGAVV66J5WNA7HCHXEH","deliveryContext":{"isRedelivery":false},"timestamp":1650591346585,"source":{"type":"user","userId":"U1"},"replyToken":"x","mode":"active"}]}"#;
    let h = [(
        "x-line-signature",
        "ZJSPDRz93iMYXsV8tDXtZWH2PsnAheWtbPyk68zTE7k=",
    )];
    assert_eq!(
        vector("line", &[S], &h, body, NOW),
        "01G17EJCGAVV66J5WNA7HCHXEH"
    );
    let empty = r#"{"destination":"U8e742f61d673b39c7fff3cecb7536ef0","events":[]}"#;
    let h = [(
        "x-line-signature",
        "wQBagfcs31X5MSXSMQcK9JtpfshMTu0Ky9VVjN9xW9o=",
    )];
    assert!(vector("line", &[S], &h, empty, NOW).starts_with("sha256:"));
}

// hex hmac(auth_token, body); the signed `webhook` event set up by
// set_webhook is answered, not stored.
#[test]
fn viber_vector_and_the_webhook_event_answered() {
    let body = r#"{"event":"delivered","timestamp":1457764197627,"chat_hostname":"SN-376_","message_token":4912661846655238145,"user_id":"01234567890A="}"#;
    let h = [(
        "x-viber-content-signature",
        "be2d961cb5ee853f6ac59be5d7a32b0f293fec9a8e97f69c41e22629400d23b9",
    )];
    assert_eq!(
        vector("viber", &[S], &h, body, NOW),
        "delivered:4912661846655238145"
    );
    let src = source("viber", &[S]);
    let hook = r#"{"event":"webhook","timestamp":1457764197627,"chat_hostname":"SN-376_","message_token":241256543215}"#;
    let h = headers(&[(
        "x-viber-content-signature",
        "296ff40b1f4e0235177d63dd92155d3341b262e7bdcc9a0897e5573471ce74fd",
    )]);
    let answered = run(&src, &h, Bytes::from(hook.to_owned()), None, NOW).unwrap();
    assert!(matches!(answered, Checked::Answer(_)), "{answered:?}");
    // Forged, it is refused like any request.
    let forged = hook.replace("241256543215", "241256543216");
    assert_eq!(
        run(&src, &h, Bytes::from(forged), None, NOW).unwrap_err(),
        VerifyError::InvalidSignature
    );
}

// One hex, base64 or digest vector each, made as the docs say.
#[test]
fn body_signature_vectors() {
    let webex = r#"{"id":"Y2lzY29zcGFyazovL3VzL1dFQkhPT0svZjRlNjA1NjAtNjYwMi00ZmIwLWEyNWEtOTQ5ODgxNjA5NDk3","name":"New message in Project room","resource":"messages","event":"created","data":{"id":"Y2lzY29zcGFyazovL3VzL01FU1NBR0UvOTJkYjNiZTAtNDNiZC0xMWU2LThhZTktZGQ1YjNkZmM1NjVk"}}"#;
    let h = [(
        "x-spark-signature",
        "2f44a87aacd6e060a3b1ad2d79281f5598448b7e",
    )];
    assert_eq!(
        vector("webex", &[S], &h, webex, NOW),
        "messages:created:Y2lzY29zcGFyazovL3VzL01FU1NBR0UvOTJkYjNiZTAtNDNiZC0xMWU2LThhZTktZGQ1YjNkZmM1NjVk"
    );
    let ep =
        r#"{"id":"evt_1c4a5b","object":"Event","description":"tracker.updated","mode":"test"}"#;
    let h = [(
        "x-hmac-signature",
        "hmac-sha256-hex=be09eb62c9fd6c54f33809c42adb75d0f3fc5e2787da93720c87322a3743f7ce",
    )];
    assert_eq!(vector("easypost", &[S], &h, ep, NOW), "evt_1c4a5b");
    let sb = r#"{"category":"group_channel:message_send","payload":{"message_id":4398798795,"message":"hi"},"app_id":"A1"}"#;
    let h = [(
        "x-sendbird-signature",
        "c76c80ac696e659569d4655c06cd914060488299747da9453856adfd010e3520",
    )];
    assert_eq!(
        vector("sendbird", &[S], &h, sb, NOW),
        "group_channel:message_send:4398798795"
    );
    let bt = r#"{"deliveryId":"Dv2","webhookId":"Wh1","originalDeliveryId":"Dv1","isRedelivery":true,"type":"InvoiceSettled","timestamp":1700000000,"storeId":"St1","invoiceId":"Inv1"}"#;
    let h = [(
        "btcpay-sig",
        "sha256=e50a7c6c76fe6d0a50f76a20a5f51151094fe9893f7a2680da1f07929413584a",
    )];
    // A redelivery keeps the first delivery's id.
    assert_eq!(vector("btcpay", &[S], &h, bt, NOW), "Dv1");
    let lago = r#"{"webhook_type":"invoice.created","object_type":"invoice","invoice":{"lago_id":"inv-1"}}"#;
    let h = [
        (
            "x-lago-signature",
            "37ym3uDaGyjM/l1+E0lIfzcRF3O1P6VWILs7xXWC+WM=",
        ),
        ("x-lago-signature-algorithm", "hmac"),
        ("x-lago-unique-key", "wh-uuid-1"),
    ];
    assert_eq!(vector("lago", &[S], &h, lago, NOW), "wh-uuid-1");
    let iris = r#"{"reference_no":"1ff4c9d9bd85bca3b2","amount":"100000.00","status":"completed","updated_at":"2024-01-01T00:00:00Z"}"#;
    let h = [(
        "iris-signature",
        "069b3cac8d325e1e517178cf720a328afc5e80ef96a152123c599cae9e42971db19fba3f510f8f023c31d26853f28d60b32c9f13e7b722ae07f585fba28880f9",
    )];
    assert_eq!(
        vector("midtrans-iris", &["IRIS-merchant-key"], &h, iris, NOW),
        "1ff4c9d9bd85bca3b2:completed"
    );
    let ably = r#"{"items":[{"webhookId":"ABcDEf","source":"channel.message","serial":"a7bcdEFghIjklm123456789","timestamp":1562124922426,"name":"channel.message","data":{"channelId":"chat-channel-4"}}]}"#;
    let h = [
        ("x-ably-key", "appid.keyid"),
        (
            "x-ably-signature",
            "NCPEZI0/Rf8hV5/nG2MEst7tIizYUCY+jx+J3o+JhyE=",
        ),
    ];
    assert!(vector("ably", &["secret-part-of-key"], &h, ably, NOW).starts_with("sha256:"));
    let cp = "ipn_version=1.0&ipn_type=api&ipn_mode=hmac&ipn_id=8a8e8ecfa2cc4bdf8e3b1e7d7c1f1fa0&merchant=m1&txn_id=CPFK7A5HBBPHBUUV&status=100&status_text=Complete";
    let h = [(
        "hmac",
        "80df6788477fa83265669aecebb6a03aa8ea7f003b6b39f738e47ea0e3f366558f508c09dcad526e65875d537acc899f3b69fe19b5e88c5139286ea284f5bae3",
    )];
    assert_eq!(
        vector("coinpayments", &[S], &h, cp, NOW),
        "CPFK7A5HBBPHBUUV:100"
    );
    let st = r#"{"type":"message.new","cid":"messaging:fun","message":{"id":"m1","text":"hi"},"created_at":"2024-01-01T00:00:00.123456789Z"}"#;
    let h = [(
        "x-signature",
        "c2742e685fc53ccd015e34e87dc71b712cb03c1bf646fcf5adee33a1697ca5c6",
    )];
    assert!(vector("stream", &[S], &h, st, NOW).starts_with("sha256:"));
}

// Teams keys the HMAC with the base64-decoded security token.
#[test]
fn msteams_vector() {
    let body = r#"{"type":"message","id":"1485983408511","timestamp":"2017-02-01T21:10:07.437Z","text":"<at>Bot</at> hello"}"#;
    let h = [(
        "authorization",
        "HMAC oCSo5t72+rMoMH+WT6vzpW7UTDoI+VrVdImyhDAB3kM=",
    )];
    let token = "dGVhbXMtc2VjdXJpdHktdG9rZW4tMzItYnl0ZXMhISE=";
    assert_eq!(
        vector("msteams-outgoing", &[token], &h, body, NOW),
        "1485983408511"
    );
}

// Ecwid signs only "{eventCreated}.{eventId}": the id is covered, the rest
// of the body, the type included, is not.
#[test]
fn ecwid_vector_signs_two_fields_only() {
    let body = r#"{"eventId":"80aece08-40e8-4145-8764-6c2f0d38678","eventCreated":1469434610,"storeId":1003,"entityId":158246081,"eventType":"order.created","data":{"orderId":"XJ12H"}}"#;
    let h = [(
        "x-ecwid-webhook-signature",
        "vBnkJpAID6aE82QaKKFxoS3S/6XK/aMwoDoS7sD6AsQ=",
    )];
    assert_eq!(
        vector("ecwid", &[S], &h, body, NOW),
        "80aece08-40e8-4145-8764-6c2f0d38678"
    );
    let src = source("ecwid", &[S]);
    assert!(
        check(
            &src,
            &h,
            &body.replace("order.created", "order.deleted"),
            NOW
        )
        .is_ok()
    );
    let s = crate::verify::signedness::of(&src.provider);
    assert_eq!(
        s.describe(),
        "event id signed; event type unsigned (json:/eventType)"
    );
}

#[test]
fn token_providers_authenticate_the_sender_only() {
    for (provider, header) in [
        ("telegram", "x-telegram-bot-api-secret-token"),
        ("asaas", "asaas-access-token"),
    ] {
        let src = source(provider, &["tok-1"]);
        let body = r#"{"update_id":1,"id":"evt_1","event":"PAYMENT_CONFIRMED"}"#;
        assert!(
            check(&src, &[(header, "tok-1")], body, NOW).is_ok(),
            "{provider}"
        );
        assert_eq!(
            check(&src, &[(header, "tok-2")], body, NOW).unwrap_err(),
            VerifyError::InvalidSignature,
            "{provider}"
        );
        let s = crate::verify::signedness::of(&src.provider);
        assert_eq!(s.event_id.cover, schemes::Cover::Unsigned, "{provider}");
    }
}
