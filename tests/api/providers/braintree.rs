//! Braintree's webhook URL check over HTTP: `GET ?bt_challenge=<hex>` is
//! answered `public_key|hex(HMAC-SHA1(SHA-1(private key), challenge))`,
//! nothing is stored, and other GETs get 404/405/400.

use super::send;
use crate::helpers::*;

// braintree_python tests/unit/test_webhooks.py (same in the Ruby, PHP and
// Node SDKs), with the SDK tests' integration merchant keys.
const CHALLENGE: &str = "20f9f8ed05f77439fe955c977e4c8a53";
const ANSWER: &str = "integration_public_key|d9b899556c966b3f06945ec21311865d35df3ce4";

async fn get(app: &TestApp, path: &str) -> (u16, String, Option<String>) {
    let r = app
        .client
        .get(app.url(&format!("/webhooks/{path}")))
        .send()
        .await
        .unwrap();
    let allow = r
        .headers()
        .get("allow")
        .map(|v| v.to_str().unwrap().to_owned());
    (r.status().as_u16(), r.text().await.unwrap(), allow)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn braintree_challenge_is_answered_and_nothing_is_stored() {
    let mut opts = Opts::new(Backend::Embedded);
    opts.extra = r#"
[sources.bt]
provider = "braintree"
secrets = ["integration_private_key"]
[sources.bt.braintree]
public_key = "integration_public_key"

[sources.bt-nokey]
provider = "braintree"
secrets = ["integration_private_key"]
"#
    .into();
    let app = spawn_app(opts).await;

    let (s, text, _) = get(&app, &format!("bt?bt_challenge={CHALLENGE}")).await;
    assert_eq!((s, text.as_str()), (200, ANSWER));
    let (s, text, _) = get(&app, "bt?bt_challenge=bad%20challenge").await;
    assert_eq!(s, 400, "{text}");
    assert_eq!(get(&app, "bt").await.0, 400, "no bt_challenge");
    let (s, text, _) = get(&app, &format!("bt-nokey?bt_challenge={CHALLENGE}")).await;
    assert_eq!(s, 404);
    assert!(text.contains("public_key"), "{text}");
    let (s, _, allow) = get(&app, "stripe").await;
    assert_eq!((s, allow.as_deref()), (405, Some("POST")));
    assert_eq!(get(&app, "nope").await.0, 404);

    // The answer is an HMAC of the challenge: replayed as a signature over a
    // payload equal to the challenge, it must not pass as an event.
    let form = format!(
        "bt_signature={}&bt_payload={CHALLENGE}",
        ANSWER.replace('|', "%7C")
    );
    let (s, _, _) = send(&app, "bt", &vec![], form.as_bytes()).await;
    assert_eq!(s, 401);
    let stats = app.stats().await;
    assert_eq!(stats["sources"]["bt"]["unique"], 0);
    assert_eq!(
        stats["sources"]["bt"]["received"], 1,
        "only the POST counts"
    );
}
