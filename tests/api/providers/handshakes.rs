//! Handshakes over HTTP, one gateway with a source per provider: each
//! verification exchange gets the provider's answer, stores nothing,
//! forwards nothing, counts as a handshake and not as a received event,
//! and is refused when its token or signature is wrong. Asana's handed-over
//! secret is stored in the ledger and verifies later events on every
//! replica and after a restart (both backends). Signatures and answers
//! are computed here, the way each provider's page (cited in its file)
//! describes.

use super::{Headers, h, hex256, send};
use crate::both_backends;
use crate::helpers::*;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use std::time::Duration;

both_backends!(an_asana_secret_handed_over_verifies_events_on_every_replica);

const CONFIG: &str = r#"
[sources.wa]
provider = "whatsapp"
secrets = ["meta-app-secret"]
verify_token = "meatyhamhock"
targets = ["sink"]

[sources.twitch]
provider = "twitch"
secrets = ["s3cre7-twitch-secret"]
targets = ["sink"]

[sources.okta]
provider = "okta"
secrets = ["okta-shared-secret"]
targets = ["sink"]

[sources.dropbox]
provider = "dropbox"
secrets = ["dropbox-app-secret"]
targets = ["sink"]

[sources.x]
provider = "twitter"
secrets = ["z3ZX4v7mAAUGykl3EcmkqbartmuW8VFOOzCloLx9Q45P0hLrFu"]
targets = ["sink"]

[sources.graph]
provider = "microsoft-graph"
secrets = ["graph-client-state"]
targets = ["sink"]

[sources.xero]
provider = "xero"
secrets = ["xero-webhook-key"]
targets = ["sink"]

[sources.notion]
provider = "notion"
verify_token = "notion-url-token"
targets = ["sink"]

[sources.monday]
provider = "monday"
secrets = ["monday-signing-secret"]
targets = ["sink"]

[sources.mailchimp]
provider = "mailchimp"
secrets = ["mc-url-secret"]
targets = ["sink"]
"#;

async fn gateway(b: Backend, extra: &str) -> (TestApp, TestTarget) {
    let target = TestTarget::start().await;
    let mut opts = Opts::new(b);
    opts.extra = format!("{extra}\n[targets.sink]\nurl = \"{}\"\n", target.url);
    (spawn_app(opts).await, target)
}

/// A GET to `/webhooks/<path>`: status, body, content type, the nosniff header.
async fn get(app: &TestApp, path: &str, headers: &Headers) -> (u16, String, String, String) {
    let mut req = app.client.get(app.url(&format!("/webhooks/{path}")));
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let r = req.send().await.unwrap();
    let header = |n: &str| {
        r.headers()
            .get(n)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    let (ct, nosniff) = (header("content-type"), header("x-content-type-options"));
    (r.status().as_u16(), r.text().await.unwrap(), ct, nosniff)
}

/// POSTs with a query string; status, body, and every response header.
async fn post_q(
    app: &TestApp,
    path_and_query: &str,
    headers: &Headers,
    body: &[u8],
) -> (u16, String, reqwest::header::HeaderMap) {
    let mut req = app
        .client
        .post(app.url(&format!("/webhooks/{path_and_query}")));
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let r = req.body(body.to_vec()).send().await.unwrap();
    let (status, headers) = (r.status().as_u16(), r.headers().clone());
    (status, r.text().await.unwrap(), headers)
}

/// Nothing stored or received for `source`, `handshakes` counted.
async fn only_handshakes(app: &TestApp, source: &str, handshakes: u64) {
    let s = &app.stats().await["sources"][source];
    assert_eq!(s["unique"], 0, "{source}: {s}");
    assert_eq!(
        s["received"], s["rejected"],
        "{source}: not counted as events, {s}"
    );
    assert_eq!(s["handshakes"], handshakes, "{source}: {s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_handshake_is_answered_stores_nothing_and_refuses_a_wrong_token() {
    let (app, target) = gateway(Backend::Embedded, CONFIG).await;

    // Meta: GET hub.challenge with the verify token.
    let q = "wa?hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=meatyhamhock";
    let (s, body, ct, _) = get(&app, q, &vec![]).await;
    assert_eq!((s, body.as_str()), (200, "1158201444"));
    assert!(ct.starts_with("text/plain"), "{ct}");
    let q = "wa?hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=guess";
    let (s, body, _, _) = get(&app, q, &vec![]).await;
    assert_eq!(s, 403, "{body}");
    assert!(!body.contains("1158201444"));
    only_handshakes(&app, "wa", 1).await;

    // Twitch: the signed webhook_callback_verification, answered raw.
    let challenge = br#"{"challenge":"pogchamp-kappa-360noscope-vohiyo","subscription":{"id":"f1c2a387","status":"webhook_callback_verification_pending","type":"channel.follow","version":"2"}}"#;
    let ts = now();
    let ts_text = time_rfc3339(ts);
    let msg_id = "a2b3c4d5-0000-4000-8000-000000000001";
    let mut signed_content = format!("{msg_id}{ts_text}").into_bytes();
    signed_content.extend_from_slice(challenge);
    let sig = hex256(b"s3cre7-twitch-secret", &signed_content);
    let twitch = |sig: &str| {
        h(&[
            ("twitch-eventsub-message-id", msg_id),
            ("twitch-eventsub-message-timestamp", &ts_text),
            (
                "twitch-eventsub-message-type",
                "webhook_callback_verification",
            ),
            (
                "twitch-eventsub-message-signature",
                &format!("sha256={sig}"),
            ),
        ])
    };
    let (s, body, dedup) = send(&app, "twitch", &twitch(&sig), challenge).await;
    assert_eq!(
        (s, body.as_str(), dedup.as_str()),
        (200, "pogchamp-kappa-360noscope-vohiyo", "")
    );
    let (s, body, _) = send(&app, "twitch", &twitch(&"0".repeat(64)), challenge).await;
    assert_eq!(s, 401);
    assert!(!body.contains("pogchamp"));
    let stats = &app.stats().await["sources"]["twitch"];
    assert_eq!(stats["unique"], 0, "{stats}");
    assert_eq!(stats["handshakes"], 1, "{stats}");

    // Okta: GET with the challenge header and the hook's Authorization.
    let okta = |auth: &str| {
        h(&[
            (
                "x-okta-verification-challenge",
                "Me_rShK8JHsTnbyYrWXCEoMGbM_zsZ6k0hLPZ_Pg",
            ),
            ("authorization", auth),
        ])
    };
    let (s, body, ct, _) = get(&app, "okta", &okta("okta-shared-secret")).await;
    assert_eq!(
        (s, body.as_str()),
        (
            200,
            r#"{"verification":"Me_rShK8JHsTnbyYrWXCEoMGbM_zsZ6k0hLPZ_Pg"}"#
        )
    );
    assert!(ct.starts_with("application/json"), "{ct}");
    let (s, body, _, _) = get(&app, "okta", &okta("wrong")).await;
    assert_eq!(s, 401, "{body}");
    only_handshakes(&app, "okta", 1).await;

    // Dropbox: GET ?challenge= echoed as text/plain with nosniff.
    let (s, body, ct, nosniff) = get(&app, "dropbox?challenge=abc123", &vec![]).await;
    assert_eq!(
        (s, body.as_str(), nosniff.as_str()),
        (200, "abc123", "nosniff")
    );
    assert!(ct.starts_with("text/plain"), "{ct}");
    let (s, _, _, _) = get(&app, "dropbox", &vec![]).await;
    assert_eq!(s, 400, "no challenge");
    only_handshakes(&app, "dropbox", 1).await;

    // X: the CRC answer is the token's HMAC with the consumer secret
    // (X's sample secret and token).
    let (s, body, _, _) = get(
        &app,
        "x?crc_token=9b4507b3-9040-4669-9ca3-6b94edb50553",
        &vec![],
    )
    .await;
    assert_eq!(
        (s, body.as_str()),
        (
            200,
            r#"{"response_token":"sha256=Cytd4Sq+NvEcV3MMrXxWJGJx5A+y/lXzzU2Maartkx8="}"#
        )
    );
    only_handshakes(&app, "x", 1).await;

    // Microsoft Graph: POST ?validationToken= echoed, decoded, as text.
    let (s, body, headers) = post_q(
        &app,
        "graph?validationToken=Validation%3A%20Testing%20client%20application",
        &vec![],
        b"",
    )
    .await;
    assert_eq!(
        (s, body.as_str()),
        (200, "Validation: Testing client application")
    );
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    // A notification with a clientState that is not ours is refused.
    let forged = br#"{"value":[{"subscriptionId":"s","changeType":"created","resource":"r","clientState":"guess"}]}"#;
    let (s, _, _) = send(&app, "graph", &vec![], forged).await;
    assert_eq!(s, 401);
    let stats = &app.stats().await["sources"]["graph"];
    assert_eq!(
        (stats["unique"].as_i64(), stats["handshakes"].as_i64()),
        (Some(0), Some(1))
    );

    // Xero intent to receive: 200 and an empty body when signed, 401 when not.
    let itr = br#"{"events":[],"firstEventSequence": 0,"lastEventSequence": 0, "entropy": "S0m3r4Nd0mt3xt"}"#;
    let good = B64.encode(signers::hmac256(b"xero-webhook-key", itr));
    let (s, body, _) = send(&app, "xero", &h(&[("x-xero-signature", &good)]), itr).await;
    assert_eq!((s, body.as_str()), (200, ""));
    let bad = B64.encode(signers::hmac256(b"another-key", itr));
    let (s, _, _) = send(&app, "xero", &h(&[("x-xero-signature", &bad)]), itr).await;
    assert_eq!(s, 401);
    let stats = &app.stats().await["sources"]["xero"];
    assert_eq!(stats["unique"], 0, "{stats}");
    assert_eq!(stats["handshakes"], 1, "{stats}");

    // Notion: the unsigned verification_token is taken (with our URL token)
    // and then verifies the events signed with it.
    let token = "secret_tMrlL1qK5vuQAh1b6cZGhFChZTSYJlce98V0pYn7yBl";
    let verification = format!(r#"{{"verification_token":"{token}"}}"#);
    let (s, _, _) = post_q(
        &app,
        "notion?verify_token=guess",
        &vec![],
        verification.as_bytes(),
    )
    .await;
    assert_eq!(s, 403);
    let (s, _, _) = post_q(
        &app,
        "notion?verify_token=notion-url-token",
        &vec![],
        verification.as_bytes(),
    )
    .await;
    assert_eq!(s, 200);
    only_handshakes(&app, "notion", 1).await;
    let event = br#"{"id":"367cba44-b6f3-4c92-81e7-6a2e9659efd4","type":"page.created","entity":{"id":"153104cd","type":"page"}}"#;
    let sig = format!("sha256={}", hex256(token.as_bytes(), event));
    let (s, _, dedup) = send(&app, "notion", &h(&[("x-notion-signature", &sig)]), event).await;
    assert_eq!((s, dedup.as_str()), (200, "new"));

    // monday.com: the challenge echoed as JSON.
    let challenge = br#"{"challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}"#;
    let (s, body, _) = send(&app, "monday", &vec![], challenge).await;
    assert_eq!((s, body.as_bytes()), (200, &challenge[..]));
    let (s, _, _) = send(&app, "monday", &h(&[("authorization", "a.b.c")]), challenge).await;
    assert_eq!(s, 401, "a bad token is not answered");
    only_handshakes(&app, "monday", 1).await;

    // Mailchimp: the URL check carries our secret.
    let (s, body, _, _) = get(&app, "mailchimp?secret=mc-url-secret", &vec![]).await;
    assert_eq!((s, body.as_str()), (200, ""));
    let (s, _, _, _) = get(&app, "mailchimp?secret=guess", &vec![]).await;
    assert_eq!(s, 401);
    only_handshakes(&app, "mailchimp", 1).await;

    // Nothing but Notion's one real event reached the target.
    let one = eventually(Duration::from_secs(10), || async { target.count() >= 1 }).await;
    assert!(one);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(target.count(), 1, "handshakes are never forwarded");
    assert_eq!(target.received()[0].body.as_ref(), &event[..]);
}

/// RFC 3339 with nanoseconds, as Twitch writes its timestamps.
fn time_rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.634234626Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

const ASANA: &str = r#"
[sources.asana]
provider = "asana"
verify_token = "asana-url-token"
targets = ["sink"]
"#;

async fn an_asana_secret_handed_over_verifies_events_on_every_replica(b: Backend) {
    let (app, target) = gateway(b, ASANA).await;
    // A second replica on the same ledger, started before the handshake:
    // it has read no secret yet.
    let other = spawn_on(app.opts.clone(), app.db.clone(), app.prefix.clone()).await;
    let secret = "b537207f20cbfa02357cf448134da559e8bd39d61597dcd5631b8012eae53e81";
    let event = br#"{"events":[{"user":{"gid":"1199","resource_type":"user"},"created_at":"2024-02-01T12:00:00.000Z","action":"changed","resource":{"gid":"1201","resource_type":"task"},"parent":null}]}"#;
    let signed = h(&[("x-hook-signature", &hex256(secret.as_bytes(), event))]);
    let (s, _, _) = send(&other, "asana", &signed, event).await;
    assert_eq!(s, 401, "no secret before the handshake");

    // Without our URL token the handshake is refused and nothing is learned.
    let handshake = h(&[("x-hook-secret", secret)]);
    let (s, _, headers) = post_q(&app, "asana?verify_token=guess", &handshake, b"").await;
    assert_eq!(s, 403);
    assert!(headers.get("x-hook-secret").is_none());
    let (s, _, _) = send(&app, "asana", &signed, event).await;
    assert_eq!(s, 401);

    let (s, _, headers) = post_q(&app, "asana?verify_token=asana-url-token", &handshake, b"").await;
    assert_eq!(s, 200);
    assert_eq!(headers["x-hook-secret"], secret, "the secret is echoed");
    only_handshakes(&app, "asana", 1).await;

    // The replica that learned it, the other one (its first check fails
    // and reads the ledger again), and a restarted gateway all verify.
    let (s, _, dedup) = send(&app, "asana", &signed, event).await;
    assert_eq!((s, dedup.as_str()), (200, "new"));
    tokio::time::sleep(verify_refresh()).await;
    let (s, _, dedup) = send(&other, "asana", &signed, event).await;
    assert_eq!((s, dedup.as_str()), (200, "duplicate"));
    let db = other.stop().await;
    let restarted = spawn_on(app.opts.clone(), db, app.prefix.clone()).await;
    let (s, _, dedup) = send(&restarted, "asana", &signed, event).await;
    assert_eq!((s, dedup.as_str()), (200, "duplicate"));
    // A forged event is still refused.
    let forged = h(&[("x-hook-signature", &hex256(b"guess", event))]);
    assert_eq!(send(&restarted, "asana", &forged, event).await.0, 401);
    assert!(eventually(Duration::from_secs(10), || async { target.count() == 1 }).await);
}

/// How long a replica waits before reading learned secrets again.
fn verify_refresh() -> Duration {
    hookgate::verify::learned::REFRESH_EVERY + Duration::from_millis(100)
}
