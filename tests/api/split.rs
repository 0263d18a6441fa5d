//! `split` (docs/config.md, "Batches"): a batch's items admitted one by
//! one, each with its own id, so a retry that regroups the items still
//! stores and delivers each item once. WhatsApp (Meta) sends `entry[]`,
//! up to 1000 per request, and may regroup them when it retries; its file
//! splits by default, each entry named by the hash of its bytes.

use crate::both_backends;
use crate::helpers::*;
use sha2::{Digest, Sha256};
use std::time::Duration;

both_backends!(
    a_regrouped_retry_delivers_each_item_once,
    an_unsplit_source_takes_the_batch_as_one_event,
);

const APP_SECRET: &str = "meta-app-secret";

fn entry(n: u32) -> String {
    format!(
        r#"{{"id":"1022901293403{n:02}","changes":[{{"value":{{"messaging_product":"whatsapp","messages":[{{"id":"wamid.{n}","type":"text","text":{{"body":"hello {n}"}}}}]}},"field":"messages"}}]}}"#
    )
}

fn batch(entries: &[u32]) -> Vec<u8> {
    let items: Vec<String> = entries.iter().map(|n| entry(*n)).collect();
    format!(
        r#"{{"object":"whatsapp_business_account","entry":[{}]}}"#,
        items.join(",")
    )
    .into_bytes()
}

fn signed(body: &[u8]) -> Vec<(String, String)> {
    let sig = hex::encode(signers::hmac256(APP_SECRET.as_bytes(), body));
    vec![("x-hub-signature-256".into(), format!("sha256={sig}"))]
}

/// The id an item is stored under: the hash of its bytes.
fn item_id(n: u32) -> String {
    format!(
        "sha256:{}",
        hex::encode(Sha256::digest(entry(n).as_bytes()))
    )
}

fn opts(b: Backend, target: &str, split: &str) -> Opts {
    let mut opts = Opts::new(b);
    opts.extra = format!(
        r#"
[sources.wa]
provider = "whatsapp"
secrets = ["{APP_SECRET}"]
verify_token = "meatyhamhock"
{split}
targets = ["sink"]

[targets.sink]
url = "{target}"
"#
    );
    opts
}

async fn a_regrouped_retry_delivers_each_item_once(b: Backend) {
    let target = TestTarget::start().await;
    let app = spawn_app(opts(b, &target.url, "")).await;

    let first = batch(&[1, 2]);
    let r = app.post("wa", &signed(&first), &first).await;
    assert_eq!(
        (r.status().as_u16(), dedup_header(&r)),
        (200, "new".to_owned())
    );
    // Meta's retry regroups: item 2 again beside a new item 3, then item 1 alone.
    let regrouped = batch(&[2, 3]);
    let r = app.post("wa", &signed(&regrouped), &regrouped).await;
    assert_eq!(
        (r.status().as_u16(), dedup_header(&r)),
        (200, "new".to_owned())
    );
    let again = batch(&[1]);
    let r = app.post("wa", &signed(&again), &again).await;
    assert_eq!(
        (r.status().as_u16(), dedup_header(&r)),
        (200, "duplicate".to_owned())
    );
    // A forged batch changes nothing.
    let forged = batch(&[4]);
    let r = app.post("wa", &signed(b"other"), &forged).await;
    assert_eq!(r.status(), 401);

    for n in [1, 2, 3] {
        assert_eq!(app.rows("wa", &item_id(n)).await, 1, "item {n} stored once");
    }
    assert_eq!(app.rows("wa", &item_id(4)).await, 0);
    let all = eventually(Duration::from_secs(10), || async { target.count() >= 3 }).await;
    assert!(all, "every item is delivered");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut bodies: Vec<String> = target
        .received()
        .iter()
        .map(|r| String::from_utf8(r.body.to_vec()).unwrap())
        .collect();
    bodies.sort();
    let mut want: Vec<String> = [1, 2, 3].iter().map(|n| entry(*n)).collect();
    want.sort();
    assert_eq!(bodies, want, "each item once, its bytes as sent");
    for r in target.received() {
        assert!(
            r.headers.get("x-hub-signature-256").is_none(),
            "the batch's signature is not forwarded with an item"
        );
    }
    let s = &app.stats().await["sources"]["wa"];
    assert_eq!(s["received"], 4, "three batches and the forged one, {s}");
    assert_eq!(s["rejected"], 1, "{s}");
    assert_eq!(s["unique"], 3, "{s}");
    assert_eq!(s["duplicates"], 2, "{s}");
    assert_eq!(s["unique_by_type"]["messages"], 3, "{s}");
}

async fn an_unsplit_source_takes_the_batch_as_one_event(b: Backend) {
    let target = TestTarget::start().await;
    let app = spawn_app(opts(b, &target.url, "split = false")).await;
    let body = batch(&[1, 2]);
    let r = app.post("wa", &signed(&body), &body).await;
    assert_eq!(dedup_header(&r), "new");
    let r = app.post("wa", &signed(&body), &body).await;
    assert_eq!(dedup_header(&r), "duplicate");
    let whole = format!("sha256:{}", hex::encode(Sha256::digest(&body)));
    assert_eq!(app.rows("wa", &whole).await, 1);
    assert_eq!(app.rows("wa", &item_id(1)).await, 0);
    assert!(eventually(Duration::from_secs(10), || async { target.count() == 1 }).await);
    assert_eq!(target.received()[0].body.as_ref(), &body[..]);
}
