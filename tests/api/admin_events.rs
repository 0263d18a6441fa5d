//! The events API (issue #10) on both backends: list filters and cursor,
//! the full record with redaction, redelivery, filtered bulk replay, the
//! per-minute series, and the refusals (auth, malformed cursor, 404).

use crate::both_backends;
use crate::helpers::*;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::time::Duration;

both_backends!(
    events_are_listed_filtered_and_shown_with_credentials_redacted,
    redeliver_records_a_new_attempt_and_the_target_gets_it_again,
    bulk_replay_with_a_filter_touches_only_matching_dead_deliveries,
    pagination_is_stable_under_concurrent_inserts,
    the_events_api_refuses_what_it_should,
    the_series_counts_per_minute_from_the_ledger,
    a_page_of_the_largest_size_still_links_the_next,
);

const WAIT: Duration = Duration::from_secs(15);

/// A gateway whose `stripe` source delivers to `billing` (healthy) and
/// `broken` (answers 500; one attempt, then dead).
async fn gateway(b: Backend) -> (TestApp, TestTarget, TestTarget) {
    let (billing, broken) = (TestTarget::start().await, TestTarget::start().await);
    broken.always(Some(500));
    let mut opts = Opts::new(b);
    opts.stripe_targets = vec!["billing".into(), "broken".into()];
    opts.extra = format!(
        "[targets.billing]\nurl = \"{}\"\n[targets.broken]\nurl = \"{}\"\nmax_attempts = 1\n",
        billing.url, broken.url
    );
    (spawn_app(opts).await, billing, broken)
}

fn typed_body(id: &str, ty: &str) -> Vec<u8> {
    format!(r#"{{"id":"{id}","object":"event","type":"{ty}"}}"#).into_bytes()
}

async fn get(app: &TestApp, path: &str) -> (u16, Value) {
    send(app.client.get(app.url(path))).await
}

async fn post_json(app: &TestApp, path: &str, body: Value) -> (u16, Value) {
    let req = app
        .client
        .post(app.url(path))
        .header("content-type", "application/json")
        .body(body.to_string());
    send(req).await
}

/// Sends with the admin token; the status and the JSON answer (or null).
async fn send(req: reqwest::RequestBuilder) -> (u16, Value) {
    let r = req.bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    let status = r.status().as_u16();
    let body = r.bytes().await.unwrap();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// Event ids of a list answer, in order.
fn ids(doc: &Value) -> Vec<String> {
    doc["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["event_id"].as_str().unwrap().to_owned())
        .collect()
}

async fn list_ids(app: &TestApp, query: &str) -> Vec<String> {
    let (status, doc) = get(app, &format!("/admin/events?{query}")).await;
    assert_eq!(status, 200, "{query}: {doc}");
    ids(&doc)
}

/// Three Stripe events (two `evt_a*` of type charge.succeeded, one
/// `evt_b1` of type invoice.paid) and one GitHub push; waits until every
/// Stripe delivery is settled (billing delivered, broken dead).
async fn seed(app: &TestApp) {
    for (id, ty) in [
        ("evt_a1", "charge.succeeded"),
        ("evt_a2", "charge.succeeded"),
        ("evt_b1", "invoice.paid"),
    ] {
        let r = app.post_stripe_body(&typed_body(id, ty)).await;
        assert_eq!(dedup_header(&r), "new");
        // Distinct received_at, so "newest first" is unambiguous.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let body = br#"{"ref":"refs/heads/main"}"#;
    let h = signers::github(GITHUB_SECRET, "gh-delivery-1", body);
    assert_eq!(dedup_header(&app.post("github", &h, body).await), "new");
    let settled = eventually(WAIT, || async {
        let dead = list_ids(app, "target=broken&state=dead").await.len();
        let delivered = list_ids(app, "target=billing&state=delivered").await.len();
        dead == 3 && delivered == 3
    })
    .await;
    assert!(settled, "deliveries did not settle");
}

async fn events_are_listed_filtered_and_shown_with_credentials_redacted(b: Backend) {
    let (app, _billing, _broken) = gateway(b).await;
    seed(&app).await;

    let (status, all) = get(&app, "/admin/events").await;
    assert_eq!(status, 200);
    assert_eq!(ids(&all), ["gh-delivery-1", "evt_b1", "evt_a2", "evt_a1"]);
    assert_eq!(all["next_cursor"], Value::Null);
    let first = &all["items"][3];
    assert_eq!(first["source"], "stripe");
    assert_eq!(first["type"], "charge.succeeded");
    assert_eq!(
        first["body_size"],
        typed_body("evt_a1", "charge.succeeded").len()
    );
    assert!(first["received_at"].as_str().unwrap().ends_with('Z'));
    let d = first["deliveries"].as_array().unwrap();
    assert_eq!(d.len(), 2);
    assert_eq!(d[0]["target"], "billing");
    assert_eq!(d[0]["state"], "delivered");
    assert_eq!(d[0]["last_status"], 200);
    assert_eq!(d[1]["state"], "dead");
    assert_eq!(d[1]["attempts"], 1);
    assert_eq!(all["items"][0]["type"], "push");

    // Every filter.
    assert_eq!(list_ids(&app, "source=github").await, ["gh-delivery-1"]);
    assert_eq!(list_ids(&app, "type=invoice.paid").await, ["evt_b1"]);
    assert_eq!(list_ids(&app, "type=push").await, ["gh-delivery-1"]);
    assert_eq!(list_ids(&app, "q=evt_a").await, ["evt_a2", "evt_a1"]);
    assert_eq!(list_ids(&app, "q=evt_a1").await, ["evt_a1"]);
    assert_eq!(
        list_ids(&app, "q=evt_a&source=stripe&type=charge.succeeded")
            .await
            .len(),
        2
    );
    assert_eq!(list_ids(&app, "target=broken").await.len(), 3);
    assert_eq!(
        list_ids(&app, "target=broken&state=delivered").await.len(),
        0
    );
    assert_eq!(list_ids(&app, "state=dead").await.len(), 3);
    assert_eq!(list_ids(&app, "state=pending").await.len(), 0);
    assert_eq!(list_ids(&app, "state=retrying").await.len(), 0);
    assert_eq!(list_ids(&app, "since=2999-01-01T00:00:00Z").await.len(), 0);
    assert_eq!(
        list_ids(&app, "until=2000-01-01T00:00:00%2B02:00")
            .await
            .len(),
        0
    );
    assert_eq!(
        list_ids(
            &app,
            "since=2000-01-01T00:00:00Z&until=2999-01-01T00:00:00Z"
        )
        .await
        .len(),
        4
    );
    // since/until split exactly at an event's received_at.
    let at = all["items"][1]["received_at"].as_str().unwrap().to_owned();
    assert_eq!(
        list_ids(&app, &format!("since={at}")).await,
        ["gh-delivery-1", "evt_b1"]
    );
    assert_eq!(
        list_ids(&app, &format!("until={at}")).await,
        ["evt_a2", "evt_a1"]
    );

    // Duplicates: one identical copy, one with another body (a conflict).
    for ty in ["charge.succeeded", "charge.refunded"] {
        let r = app.post_stripe_body(&typed_body("evt_a1", ty)).await;
        let dedup = r.headers().get("hookgate-dedup").cloned();
        assert_eq!(
            (
                r.status().as_u16(),
                dedup.as_ref().and_then(|v| v.to_str().ok())
            ),
            (200, Some("duplicate")),
            "{ty}"
        );
    }
    let recorded = eventually(WAIT, || async {
        get(&app, "/admin/events/stripe/evt_a1").await.1["duplicates"] == 2
    })
    .await;
    assert!(recorded, "duplicate arrivals recorded");
    let (status, rec) = get(&app, "/admin/events/stripe/evt_a1").await;
    assert_eq!(status, 200);
    assert_eq!(rec["conflicts"], 1);
    let arrivals = rec["arrivals"].as_array().unwrap();
    assert_eq!(arrivals.len(), 2);
    assert_eq!(arrivals[0]["conflict"], false);
    assert_eq!(arrivals[1]["conflict"], true);
    // A burst of identical copies: folded per flush (dedup::arrivals), the
    // counts still add up to every copy.
    for _ in 0..3 {
        let r = app
            .post_stripe_body(&typed_body("evt_a1", "charge.succeeded"))
            .await;
        assert_eq!(r.status().as_u16(), 200);
    }
    let recorded = eventually(WAIT, || async {
        get(&app, "/admin/events/stripe/evt_a1").await.1["duplicates"] == 5
    })
    .await;
    assert!(recorded, "the burst's arrivals recorded");
    let (_, rec) = get(&app, "/admin/events/stripe/evt_a1").await;
    let arrivals = rec["arrivals"].as_array().unwrap();
    let copies: i64 = arrivals.iter().map(|a| a["copies"].as_i64().unwrap()).sum();
    assert_eq!(copies, 5, "{arrivals:?}");
    assert!(arrivals.len() <= 5, "{arrivals:?}");
    assert!(
        arrivals
            .iter()
            .all(|a| a["last_at"].as_str() >= a["at"].as_str())
    );
    assert_eq!(rec["conflicts"], 1);
    // The body as stored, verification facts, attempts per target.
    assert_eq!(rec["body"]["encoding"], "utf-8");
    assert_eq!(
        rec["body"]["data"].as_str().unwrap().as_bytes(),
        typed_body("evt_a1", "charge.succeeded")
    );
    assert_eq!(rec["verification"]["key_index"], 0);
    let ts = rec["verification"]["provider_timestamp"].as_i64().unwrap();
    assert!((ts - now()).abs() < 60, "{ts}");
    assert_eq!(rec["attempts"]["billing"][0]["status"], 200);
    assert_eq!(rec["attempts"]["broken"][0]["status"], 500);
    assert!(rec["attempts"]["broken"][0]["latency_ms"].is_i64());
    // Redaction: the signature never comes back.
    let text = rec.to_string();
    let headers = rec["headers"].as_array().unwrap();
    let sig = headers
        .iter()
        .find(|h| h[0] == "stripe-signature")
        .expect("stored header listed");
    assert_eq!(sig[1], "[redacted]");
    assert!(!text.contains("v1="), "{text}");
    let gh = get(&app, "/admin/events/github/gh-delivery-1").await.1;
    let gh_text = gh.to_string();
    assert!(!gh_text.contains("sha256="), "{gh_text}");
    assert!(gh_text.contains("\"push\""));
}

async fn redeliver_records_a_new_attempt_and_the_target_gets_it_again(b: Backend) {
    let (app, billing, broken) = gateway(b).await;
    seed(&app).await;
    let before = billing.count();
    let (status, doc) = post_json(
        &app,
        "/admin/events/stripe/evt_a2/redeliver",
        json!({"target": "billing"}),
    )
    .await;
    assert_eq!((status, &doc), (200, &json!({"queued": 1})));
    assert!(eventually(WAIT, || async { billing.count() == before + 1 }).await);
    let again = billing.received().last().unwrap().body.clone();
    assert_eq!(again.as_ref(), typed_body("evt_a2", "charge.succeeded"));
    let attempts_recorded = eventually(WAIT, || async {
        let rec = get(&app, "/admin/events/stripe/evt_a2").await.1;
        rec["attempts"]["billing"].as_array().map(Vec::len) == Some(2)
    })
    .await;
    assert!(attempts_recorded);
    let rec = get(&app, "/admin/events/stripe/evt_a2").await.1;
    assert_eq!(rec["attempts"]["billing"][1]["attempt"], 2);
    assert_eq!(rec["deliveries"][0]["state"], "delivered");
    // No target: every delivery of the event, the dead one included.
    broken.always(None);
    let (status, doc) = post_json(&app, "/admin/events/stripe/evt_b1/redeliver", json!({})).await;
    assert_eq!((status, doc["queued"].as_i64()), (200, Some(2)));
    assert!(eventually(WAIT, || async { broken.count() == 4 }).await);
    // An unknown target or event is refused.
    let (status, _) = post_json(
        &app,
        "/admin/events/stripe/evt_b1/redeliver",
        json!({"target": "nope"}),
    )
    .await;
    assert_eq!(status, 400);
    let (status, _) = post_json(&app, "/admin/events/stripe/evt_zz/redeliver", json!({})).await;
    assert_eq!(status, 404);
}

async fn bulk_replay_with_a_filter_touches_only_matching_dead_deliveries(b: Backend) {
    let (app, _billing, broken) = gateway(b).await;
    seed(&app).await;
    assert_eq!(broken.count(), 3);
    broken.always(None);
    let (status, doc) = post_json(
        &app,
        "/admin/replay",
        json!({"q": "evt_a", "target": "broken", "type": "charge.succeeded"}),
    )
    .await;
    assert_eq!((status, &doc), (200, &json!({"replayed": 2})));
    assert!(eventually(WAIT, || async { broken.count() == 5 }).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got: HashSet<String> = broken.received()[3..]
        .iter()
        .map(|r| r.headers["hookgate-event-id"].to_str().unwrap().to_owned())
        .collect();
    assert_eq!(got, HashSet::from(["evt_a1".into(), "evt_a2".into()]));
    assert_eq!(list_ids(&app, "state=dead").await, ["evt_b1"]);
    // Filters that match nothing queue nothing; a bad state is refused.
    let (_, doc) = post_json(&app, "/admin/replay", json!({"source": "github"})).await;
    assert_eq!(doc["replayed"], 0);
    let (status, _) = post_json(&app, "/admin/replay", json!({"state": "delivered"})).await;
    assert_eq!(status, 400);
    let (status, _) = post_json(&app, "/admin/replay", json!({"color": "red"})).await;
    assert_eq!(status, 400);
    // The old body still works.
    let (_, doc) = post_json(
        &app,
        "/admin/replay",
        json!({"source": "stripe", "event_id": "evt_b1", "target": "broken"}),
    )
    .await;
    assert_eq!(doc["replayed"], 1);
}

async fn pagination_is_stable_under_concurrent_inserts(b: Backend) {
    let app = spawn_app(Opts::new(b)).await;
    let mut before = Vec::new();
    for i in 0..30 {
        let id = format!("evt_page_{i:03}");
        assert_eq!(dedup_header(&app.post_stripe(&id).await), "new");
        before.push(id);
    }
    let app = std::sync::Arc::new(app);
    let writer = {
        let app = app.clone();
        tokio::spawn(async move {
            for i in 0..20 {
                app.post_stripe(&format!("evt_late_{i:03}")).await;
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        })
    };
    let mut seen = Vec::new();
    let mut cursor = String::new();
    let mut last: Option<(i64, String)> = None;
    loop {
        let (status, doc) = get(&app, &format!("/admin/events?limit=7&cursor={cursor}")).await;
        assert_eq!(status, 200, "{doc}");
        for item in doc["items"].as_array().unwrap() {
            let at = item["received_at_ms"].as_i64().unwrap();
            if let Some((prev, _)) = &last {
                assert!(at <= *prev, "newest first");
            }
            last = Some((at, item["event_id"].as_str().unwrap().to_owned()));
            seen.push(item["event_id"].as_str().unwrap().to_owned());
        }
        match doc["next_cursor"].as_str() {
            Some(c) => cursor = c.to_owned(),
            None => break,
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    writer.await.unwrap();
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no event twice: {seen:?}");
    for id in &before {
        assert!(unique.contains(id), "{id} missing");
    }
}

async fn the_events_api_refuses_what_it_should(b: Backend) {
    let app = spawn_app(Opts::new(b)).await;
    app.post_stripe("evt_auth_1").await;
    for path in [
        "/admin/events",
        "/admin/events/stripe/evt_auth_1",
        "/admin/stats/series",
    ] {
        let r = app.client.get(app.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path}");
        let r = app
            .client
            .get(app.url(path))
            .bearer_auth("wrong")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{path}");
    }
    let r = app
        .client
        .post(app.url("/admin/events/stripe/evt_auth_1/redeliver"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(get(&app, "/admin/events?cursor=not-a-cursor").await.0, 400);
    assert_eq!(get(&app, "/admin/events?limit=0").await.0, 400);
    assert_eq!(get(&app, "/admin/events?state=lost").await.0, 400);
    assert_eq!(get(&app, "/admin/events?since=yesterday").await.0, 400);
    assert_eq!(get(&app, "/admin/events?colour=red").await.0, 400);
    assert_eq!(get(&app, "/admin/events/stripe/evt_nope").await.0, 404);
    assert_eq!(get(&app, "/admin/events/github/evt_auth_1").await.0, 404);
    assert_eq!(get(&app, "/admin/stats/series?window=9d").await.0, 400);
}

async fn the_series_counts_per_minute_from_the_ledger(b: Backend) {
    let app = spawn_app(Opts::new(b)).await;
    for i in 0..3 {
        app.post_stripe(&format!("evt_series_{i}")).await;
    }
    app.post_stripe("evt_series_0").await;
    let body = stripe_body("evt_forged");
    let mut h = signers::stripe(STRIPE_SECRET, now(), &body);
    h[0].1.push('0');
    app.post("stripe", &h, &body).await;
    let sum = |doc: &Value, m: &str| -> i64 {
        doc["sources"]["stripe"][m]
            .as_array()
            .map(|v| v.iter().filter_map(Value::as_i64).sum())
            .unwrap_or(0)
    };
    let counted = eventually(WAIT, || async {
        let doc = get(&app, "/admin/stats/series?window=10m").await.1;
        sum(&doc, "received") == 5
            && sum(&doc, "unique") == 3
            && sum(&doc, "duplicates") == 1
            && sum(&doc, "rejected") == 1
    })
    .await;
    let doc = get(&app, "/admin/stats/series?window=10m").await.1;
    assert!(counted, "{doc}");
    assert_eq!(doc["window_minutes"], 10);
    assert_eq!(
        doc["sources"]["stripe"]["received"]
            .as_array()
            .unwrap()
            .len(),
        10
    );
}

/// `limit=500` (the most a page holds) with 501 events: the page is full
/// and links the next one, which holds the last event.
async fn a_page_of_the_largest_size_still_links_the_next(b: Backend) {
    let app = spawn_app(Opts::new(b)).await;
    let ids: Vec<String> = (0..501).map(|i| format!("evt_page_{i:04}")).collect();
    for id in &ids {
        app.post_stripe_body(&typed_body(id, "charge.succeeded"))
            .await;
    }
    let (status, page) = get(&app, "/admin/events?limit=500").await;
    assert_eq!(status, 200);
    assert_eq!(page["items"].as_array().unwrap().len(), 500);
    let cursor = page["next_cursor"]
        .as_str()
        .expect("a next page")
        .to_owned();
    let (_, next) = get(&app, &format!("/admin/events?limit=500&cursor={cursor}")).await;
    assert_eq!(next["items"].as_array().unwrap().len(), 1);
    assert!(next["next_cursor"].is_null(), "{next}");
}
