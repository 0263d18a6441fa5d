//! Finding events by what they are about (issue #36) on both backends: the
//! provider object id each event stores (the provider's default and a
//! source's own locator), and a body field over a bounded time range; and
//! the overview's series (every target, healthy or failing).

use crate::both_backends;
use crate::helpers::*;
use hookgate::primitives::time::Millis;
use serde_json::Value;

both_backends!(
    events_are_found_by_the_object_they_are_about,
    a_body_field_filter_finds_matches_over_a_bounded_range_page_by_page,
    the_overview_lists_every_target_with_its_health_rate_and_latency,
);

/// A Stripe event about `object` (its `data.object.id`) for `customer`.
fn about(id: &str, object: &str, customer: &str) -> Vec<u8> {
    format!(
        r#"{{"id":"{id}","object":"event","type":"payment_intent.succeeded","data":{{"object":{{"id":"{object}","object":"payment_intent","customer":"{customer}","amount":250}}}}}}"#
    )
    .into_bytes()
}

async fn get(app: &TestApp, path: &str) -> (u16, Value) {
    let r = app
        .client
        .get(app.url(path))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn ids(doc: &Value) -> Vec<String> {
    doc["items"]
        .as_array()
        .unwrap_or_else(|| panic!("{doc}"))
        .iter()
        .map(|i| i["event_id"].as_str().unwrap().to_owned())
        .collect()
}

async fn events_are_found_by_the_object_they_are_about(b: Backend) {
    // `stripe` uses Stripe's default (`data.object.id`); `by_customer` is a
    // Stripe source that says the object is the customer.
    let mut opts = Opts::new(b);
    opts.extra = format!(
        "[sources.by_customer]\nprovider = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\nobject_id = \"json:/data/object/customer\"\n"
    );
    let app = spawn_app(opts).await;
    for (id, object) in [("evt_1", "pi_1"), ("evt_2", "pi_2"), ("evt_3", "pi_1")] {
        let r = app.post_stripe_body(&about(id, object, "cus_7")).await;
        assert_eq!(dedup_header(&r), "new");
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    let body = about("evt_c1", "pi_9", "cus_7");
    let h = signers::stripe(STRIPE_SECRET, now(), &body);
    assert_eq!(
        dedup_header(&app.post("by_customer", &h, &body).await),
        "new"
    );
    // An event without an object stores none.
    let plain = br#"{"id":"evt_plain","object":"event","type":"balance.available"}"#;
    assert_eq!(dedup_header(&app.post_stripe_body(plain).await), "new");

    let (status, doc) = get(&app, "/admin/events?object=pi_1").await;
    assert_eq!(status, 200, "{doc}");
    assert_eq!(ids(&doc), ["evt_3", "evt_1"]);
    assert_eq!(doc["items"][0]["object_id"], "pi_1");
    let (_, doc) = get(&app, "/admin/events?object=cus_7").await;
    assert_eq!(
        ids(&doc),
        ["evt_c1"],
        "only the source that locates customers"
    );
    let (_, doc) = get(&app, "/admin/events?object=pi_1&source=by_customer").await;
    assert_eq!(ids(&doc), Vec::<String>::new());
    let (_, doc) = get(&app, "/admin/events?object=pi_").await;
    assert_eq!(ids(&doc), Vec::<String>::new(), "exact, not a prefix");
    let (_, doc) = get(&app, "/admin/events/stripe/evt_plain").await;
    assert_eq!(doc["object_id"], Value::Null);
    let (_, doc) = get(&app, "/admin/events/stripe/evt_2").await;
    assert_eq!(doc["object_id"], "pi_2");
    app.stop().await;
}

async fn a_body_field_filter_finds_matches_over_a_bounded_range_page_by_page(b: Backend) {
    let app = spawn_app(Opts::new(b)).await;
    for i in 0..7 {
        let customer = if i % 2 == 0 { "cus_even" } else { "cus_odd" };
        let r = app
            .post_stripe_body(&about(&format!("evt_{i}"), &format!("pi_{i}"), customer))
            .await;
        assert_eq!(dedup_header(&r), "new");
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    let since = "2020-01-01T00:00:00Z";
    // Unbounded: refused, saying what to add.
    let (status, text) = get(&app, "/admin/events?field=/data/object/customer:cus_even").await;
    assert_eq!(status, 400);
    assert!(text.to_string().contains("since"), "{text}");
    let (status, _) = get(
        &app,
        &format!("/admin/events?field=/data/object/customer:cus_even&since={since}"),
    )
    .await;
    assert_eq!(status, 400, "more than 7 days");

    let since = Millis(now() * 1000 - 3_600_000).rfc3339();
    let q = format!("field=/data/object/customer:cus_even&since={since}");
    let (status, doc) = get(&app, &format!("/admin/events?{q}")).await;
    assert_eq!(status, 200, "{doc}");
    assert_eq!(ids(&doc), ["evt_6", "evt_4", "evt_2", "evt_0"]);
    assert_eq!(doc["next_cursor"], Value::Null);
    // Numbers match as written; a prefix does not.
    let (_, doc) = get(
        &app,
        &format!("/admin/events?field=/data/object/amount:250&since={since}&limit=2"),
    )
    .await;
    assert_eq!(ids(&doc), ["evt_6", "evt_5"]);
    let cursor = doc["next_cursor"].as_str().expect("a next page").to_owned();
    let (_, doc) = get(
        &app,
        &format!(
            "/admin/events?field=/data/object/amount:250&since={since}&limit=2&cursor={cursor}"
        ),
    )
    .await;
    assert_eq!(ids(&doc), ["evt_4", "evt_3"]);
    let (_, doc) = get(
        &app,
        &format!("/admin/events?field=/data/object/customer:cus_&since={since}"),
    )
    .await;
    assert_eq!(ids(&doc), Vec::<String>::new());
    // With the other filters.
    let (_, doc) = get(&app, &format!("/admin/events?{q}&q=evt_4")).await;
    assert_eq!(ids(&doc), ["evt_4"]);
    app.stop().await;
}

async fn the_overview_lists_every_target_with_its_health_rate_and_latency(b: Backend) {
    let (billing, broken) = (TestTarget::start().await, TestTarget::start().await);
    broken.always(Some(500));
    let mut opts = Opts::new(b);
    opts.stripe_targets = vec!["billing".into(), "broken".into()];
    // `idle` is configured and routed nothing: it is listed all the same.
    opts.extra = format!(
        "[targets.billing]\nurl = \"{}\"\n[targets.broken]\nurl = \"{}\"\nmax_attempts = 1\n[targets.idle]\nurl = \"{}\"\n",
        billing.url, broken.url, billing.url
    );
    let app = spawn_app(opts).await;
    for i in 0..4 {
        app.post_stripe(&format!("evt_ov_{i}")).await;
    }
    let body = stripe_body("evt_forged");
    let mut h = signers::stripe(STRIPE_SECRET, now(), &body);
    h[0].1.push('0');
    app.post("stripe", &h, &body).await;
    let settled = eventually(std::time::Duration::from_secs(20), || async {
        let doc = get(&app, "/admin/stats/series?window=6h").await.1;
        let t = &doc["targets"];
        t["billing"]["delivered_total"] == 4
            && t["broken"]["attempts_total"] == 4
            && doc["sources"]["stripe"]["totals"]["rejected"] == 1
    })
    .await;
    let doc = get(&app, "/admin/stats/series?window=6h").await.1;
    assert!(settled, "{doc}");
    assert_eq!(doc["step_seconds"], 120);
    assert_eq!(doc["points"], 180);
    let (ok, bad, idle) = (
        &doc["targets"]["billing"],
        &doc["targets"]["broken"],
        &doc["targets"]["idle"],
    );
    assert_eq!(ok["success_rate"], 1.0);
    assert_eq!(ok["health"]["state"], "healthy");
    assert!(ok["health"]["last_success"].is_string(), "{ok}");
    assert!(ok["latency_ms"]["p50"].as_i64().is_some(), "{ok}");
    assert!(ok["latency_ms"]["p99"].as_i64().unwrap() >= ok["latency_ms"]["p50"].as_i64().unwrap());
    assert_eq!(bad["success_rate"], 0.0);
    assert_eq!(bad["health"]["state"], "failing", "{bad}");
    assert!(bad["health"]["since"].is_string());
    assert!(
        bad["health"]["last_failure"]["error"]
            .as_str()
            .unwrap()
            .contains("500"),
        "{bad}"
    );
    assert_eq!(bad["dead"], 4);
    assert_eq!(idle["attempts_total"], 0);
    assert_eq!(idle["success_rate"], Value::Null);
    assert_eq!(idle["health"]["state"], "healthy");
    let s = &doc["sources"]["stripe"];
    assert_eq!(s["totals"]["received"], 5);
    assert_eq!(s["rejected_by_reason"]["malformed_signature"], 1, "{s}");
    assert!(
        s["last_accepted"].is_string() && s["last_received"].is_string(),
        "{s}"
    );
    assert_eq!(doc["sources"]["github"]["last_accepted"], Value::Null);
    app.stop().await;
}
