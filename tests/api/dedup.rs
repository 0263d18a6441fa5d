//! The dedup contract (the state machine in docs/design.md), on PostgreSQL + Redis and
//! on the embedded default.

use crate::both_backends;
use crate::helpers::*;
use std::sync::Arc;

both_backends!(
    new_then_duplicate_then_retry_with_fresh_signature,
    same_event_id_under_another_source_is_new,
    forged_request_does_not_consume_the_event_id,
    different_body_for_the_same_id_is_a_counted_conflict,
    hundred_concurrent_copies_make_exactly_one_row,
    a_lost_cache_still_answers_duplicate_from_the_ledger,
    stats_are_cluster_wide_and_survive_restarts,
    ids_are_new_again_after_the_window_even_when_a_delivery_is_unfinished,
);

async fn new_then_duplicate_then_retry_with_fresh_signature(b: Backend) {
    let app = spawn_app(Opts::new(b)).await;
    let body = stripe_body("evt_dup_1");

    let first = app.post_stripe_body(&body).await;
    assert_eq!(first.status(), 200);
    assert_eq!(dedup_header(&first), "new");

    let second = app.post_stripe_body(&body).await;
    assert_eq!(second.status(), 200);
    assert_eq!(dedup_header(&second), "duplicate");

    // Stripe's retry an hour later carries a new timestamp and signature.
    let retry = app
        .post(
            "stripe",
            &signers::stripe(STRIPE_SECRET, now() - 200, &body),
            &body,
        )
        .await;
    assert_eq!(dedup_header(&retry), "duplicate");
    assert_eq!(app.rows("stripe", "evt_dup_1").await, 1);

    // Header-id providers too: GitHub redelivery, Standard Webhooks retry.
    let gh = br#"{"zen":"hi"}"#;
    for expect in ["new", "duplicate"] {
        let r = app
            .post(
                "github",
                &signers::github(GITHUB_SECRET, "gh-delivery-1", gh),
                gh,
            )
            .await;
        assert_eq!(dedup_header(&r), expect);
    }
    for (i, expect) in ["new", "duplicate"].iter().enumerate() {
        let h = signers::standard(SW_KEY, "msg_1", now() - i as i64, gh);
        assert_eq!(dedup_header(&app.post("svix", &h, gh).await), *expect);
    }
}

async fn same_event_id_under_another_source_is_new(b: Backend) {
    let mut opts = Opts::new(b);
    opts.extra =
        format!("[sources.stripe-eu]\nprovider = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n");
    let app = spawn_app(opts).await;
    let body = stripe_body("evt_shared_id");
    let h = signers::stripe(STRIPE_SECRET, now(), &body);
    assert_eq!(dedup_header(&app.post("stripe", &h, &body).await), "new");
    assert_eq!(dedup_header(&app.post("stripe-eu", &h, &body).await), "new");
    assert_eq!(
        dedup_header(&app.post("stripe-eu", &h, &body).await),
        "duplicate"
    );
}

async fn forged_request_does_not_consume_the_event_id(b: Backend) {
    let app = spawn_app(Opts::new(b)).await;
    let body = stripe_body("evt_target_of_forgery");
    let forged = app
        .post(
            "stripe",
            &signers::stripe("whsec_attacker", now(), &body),
            &body,
        )
        .await;
    assert_eq!(forged.status(), 401);
    let stale = app
        .post(
            "stripe",
            &signers::stripe(STRIPE_SECRET, now() - 3600, &body),
            &body,
        )
        .await;
    assert_eq!(stale.status(), 401);
    assert_eq!(app.rows("stripe", "evt_target_of_forgery").await, 0);

    let genuine = app.post_stripe_body(&body).await;
    assert_eq!(genuine.status(), 200);
    assert_eq!(dedup_header(&genuine), "new");
}

async fn different_body_for_the_same_id_is_a_counted_conflict(b: Backend) {
    let app = spawn_app(Opts::new(b)).await;
    let a = stripe_body("evt_conflict");
    let other = br#"{"id":"evt_conflict","object":"event","amount":999999}"#;
    assert_eq!(dedup_header(&app.post_stripe_body(&a).await), "new");
    let r = app.post_stripe_body(other).await;
    assert_eq!(r.status(), 200);
    assert_eq!(dedup_header(&r), "duplicate");
    // Same body again: a duplicate but not a conflict.
    app.post_stripe_body(&a).await;

    let s = &app.stats().await["sources"]["stripe"];
    assert_eq!(s["conflicts"], 1, "{s}");
    assert_eq!(s["duplicates"], 2);
    assert_eq!(s["unique"], 1);
}

async fn hundred_concurrent_copies_make_exactly_one_row(b: Backend) {
    let app = Arc::new(spawn_app(Opts::new(b)).await);
    let body = Arc::new(stripe_body("evt_stampede"));
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let (app, body) = (app.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let r = app.post_stripe_body(&body).await;
            let retry_after = r.headers().contains_key("retry-after");
            (r.status().as_u16(), dedup_header(&r), retry_after)
        }));
    }
    let mut new = 0;
    for t in tasks {
        let (status, dedup, retry_after) = t.await.unwrap();
        match status {
            200 if dedup == "new" => new += 1,
            200 => assert_eq!(dedup, "duplicate"),
            409 => assert!(retry_after, "409 without Retry-After"),
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!(new, 1, "exactly one copy is new");
    assert_eq!(app.rows("stripe", "evt_stampede").await, 1);
}

async fn a_lost_cache_still_answers_duplicate_from_the_ledger(b: Backend) {
    let app = spawn_app(Opts::new(b)).await;
    assert_eq!(
        dedup_header(&app.post_stripe("evt_cache_lost").await),
        "new"
    );
    // The in-process cache (and, with Redis, the near cache) dies with the
    // process.
    let (opts, prefix) = (app.opts.clone(), app.prefix.clone());
    let db = app.stop().await;
    if b == Backend::Production {
        // Flush only this test's keys: the shared Redis is not ours to flush.
        del_redis_keys(&prefix).await;
    }
    let app = spawn_on(opts, db, prefix).await;
    let r = app.post_stripe("evt_cache_lost").await;
    assert_eq!(dedup_header(&r), "duplicate");
    assert_eq!(
        app.stats().await["sources"]["stripe"]["duplicates_by_layer"]["ledger"],
        1
    );
    // …and the ledger answer refilled the cache.
    app.post_stripe("evt_cache_lost").await;
    assert_eq!(
        app.stats().await["sources"]["stripe"]["duplicates_by_layer"]["cache"],
        1
    );
}

async fn stats_are_cluster_wide_and_survive_restarts(b: Backend) {
    let app = spawn_app(Opts::new(b)).await;
    app.post_stripe("evt_s1").await;
    app.post_stripe("evt_s1").await;
    let body = stripe_body("evt_s2");
    app.post(
        "stripe",
        &signers::stripe("whsec_wrong", now(), &body),
        &body,
    )
    .await;
    let (opts, prefix) = (app.opts.clone(), app.prefix.clone());
    let db = app.stop().await; // graceful stop flushes counters

    let first = spawn_on(opts.clone(), db.clone(), prefix.clone()).await;
    let s = &first.stats().await["sources"]["stripe"];
    assert_eq!(s["received"], 3, "{s}");
    assert_eq!(s["unique"], 1);
    assert_eq!(s["duplicates"], 1);
    assert_eq!(s["rejected_by_reason"]["invalid_signature"], 1);

    if b == Backend::Production {
        // A second replica on the same database sees the first one's counts
        // once they are flushed (stats_flush_interval = 200ms in tests).
        let second = spawn_on(opts, db, prefix).await;
        second.post_stripe("evt_s3").await;
        let ok = eventually(std::time::Duration::from_secs(5), || async {
            first.stats().await["sources"]["stripe"]["unique"] == 2
        })
        .await;
        assert!(ok, "replica counts reach the other replica's /stats");
    }
}

async fn ids_are_new_again_after_the_window_even_when_a_delivery_is_unfinished(b: Backend) {
    let down = TestTarget::start().await;
    down.always(Some(500));
    let mut opts = Opts::new(b);
    opts.extra = format!(
        r#"
[sources.short]
provider = "stripe"
secrets = ["{STRIPE_SECRET}"]
dedup_window = "1s"
# Not shorter than the timestamp window (refused since issue #32).
tolerance = "1s"

[sources.short-undelivered]
provider = "stripe"
secrets = ["{STRIPE_SECRET}"]
dedup_window = "1s"
# Not shorter than the timestamp window (refused since issue #32).
tolerance = "1s"
targets = ["down"]

[targets.down]
url = "{}"
max_attempts = 1000
"#,
        down.url
    );
    let app = spawn_app(opts).await;
    let body = stripe_body("evt_window");
    let send = |source: &'static str| {
        let body = body.clone();
        let app = &app;
        async move {
            let h = signers::stripe(STRIPE_SECRET, now(), &body);
            dedup_header(&app.post(source, &h, &body).await)
        }
    };
    for source in ["short", "short-undelivered"] {
        assert_eq!(send(source).await, "new");
        assert_eq!(send(source).await, "duplicate");
    }
    let purged = eventually(std::time::Duration::from_secs(10), || async {
        app.rows("short", "evt_window").await == 0
    })
    .await;
    assert!(purged, "the row is purged after its window");
    if b == Backend::Production {
        // Arrival and attempt rows have no foreign key (migration 0008):
        // purge deletes them with their event.
        use sqlx::Connection;
        let mut c = sqlx::PgConnection::connect(&app.db.url).await.unwrap();
        let orphans: i64 = sqlx::query_scalar(
            "SELECT (SELECT COUNT(*) FROM hookgate_arrivals a WHERE NOT EXISTS
                        (SELECT 1 FROM hookgate_events e WHERE e.id = a.event_pk))
                  + (SELECT COUNT(*) FROM hookgate_attempts t WHERE NOT EXISTS
                        (SELECT 1 FROM hookgate_deliveries d WHERE d.id = t.delivery_id))",
        )
        .fetch_one(&mut c)
        .await
        .unwrap();
        assert_eq!(orphans, 0, "no arrival or attempt row outlives its event");
    }
    assert_eq!(send("short").await, "new", "a forgotten id is new again");
    // An event whose delivery is still retrying is kept for the operator,
    // under a renamed id, and its id is new again all the same.
    assert_eq!(app.rows("short-undelivered", "evt_window").await, 1);
    assert_eq!(send("short-undelivered").await, "new", "past its window");
    assert_eq!(send("short-undelivered").await, "duplicate");
    let kept = app
        .admin_text("/admin/events?source=short-undelivered")
        .await;
    assert!(kept.contains("evt_window~expired~"), "{kept}");
}

/// With Redis, a copy of an event this replica marked `done` is answered
/// by its near cache (`dedup::near`) without asking Redis: with the Redis
/// keys gone it is still a cache duplicate, where without the near cache the
/// ledger answers it; a copy with another body is a counted conflict there.
#[tokio::test]
async fn the_near_cache_answers_copies_of_events_this_replica_marked() {
    // (capacity, copies answered by the cache, by the ledger): without the
    // near cache the first copy is the ledger's, which marks Redis again.
    for (capacity, cache, ledger) in [("100", 2, 0), ("0", 1, 1)] {
        let mut opts = Opts::new(Backend::Production);
        opts.storage_extra = format!("near_cache_capacity = {capacity}");
        let app = spawn_app(opts).await;
        let body = stripe_body("evt_near");
        assert_eq!(dedup_header(&app.post_stripe_body(&body).await), "new");
        // The `done` mark reaches Redis after the answer: wait for it, or
        // it would come back after the keys are deleted.
        let marked = eventually(std::time::Duration::from_secs(5), || async {
            redis_values(&app.prefix)
                .await
                .iter()
                .any(|v| v.starts_with("done:"))
        })
        .await;
        assert!(marked, "the mark reached Redis");
        del_redis_keys(&app.prefix).await;

        assert_eq!(
            dedup_header(&app.post_stripe_body(&body).await),
            "duplicate"
        );
        let other = br#"{"id":"evt_near","object":"event","amount":1}"#;
        assert_eq!(
            dedup_header(&app.post_stripe_body(other).await),
            "duplicate"
        );

        let s = &app.stats().await["sources"]["stripe"];
        assert_eq!(
            s["duplicates_by_layer"]["cache"], cache,
            "near {capacity}: {s}"
        );
        assert_eq!(
            s["duplicates_by_layer"]["ledger"], ledger,
            "near {capacity}: {s}"
        );
        assert_eq!(s["conflicts"], 1, "near {capacity}: {s}");
        app.stop().await;
    }
}

/// The rule (docs/design.md, "Dedup window"): an id is a duplicate while
/// its ledger row's window is open. When the cache has lost an id and a copy
/// is answered by the ledger, the cache entry it writes back ends with the
/// row's window, not a full `cache_ttl` later; otherwise the id would stay
/// "duplicate" in the cache after the row is purged.
#[tokio::test]
async fn a_ledger_duplicate_does_not_rearm_the_cache_past_the_rows_window() {
    let mut opts = Opts::new(Backend::Production);
    opts.extra = format!(
        "[sources.short]\nprovider = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\ndedup_window = \"3s\"\ntolerance = \"3s\"\n"
    );
    // Without the near cache, which would answer the copy before Redis and
    // the ledger are asked.
    opts.storage_extra = "near_cache_capacity = 0".into();
    let app = spawn_app(opts).await;
    let body = stripe_body("evt_rearm");
    let send = || {
        let h = signers::stripe(STRIPE_SECRET, now(), &body);
        let app = &app;
        let body = body.clone();
        async move { dedup_header(&app.post("short", &h, &body).await) }
    };
    assert_eq!(send().await, "new");
    // The cache loses the id (eviction, a Redis restart): the next copy is
    // answered by the ledger, late in the row's window.
    del_redis_keys(&app.prefix).await;
    tokio::time::sleep(std::time::Duration::from_millis(2000)).await;
    assert_eq!(send().await, "duplicate");
    let purged = eventually(std::time::Duration::from_secs(10), || async {
        app.rows("short", "evt_rearm").await == 0
    })
    .await;
    assert!(purged, "the row is purged after its window");
    assert_eq!(send().await, "new", "the cache forgot it with the row");
}

/// A batch whose events all took their cache claim and have no delivery
/// rows is written without `ON CONFLICT` (store::postgres::record). When one
/// of its ids is in the ledger after all (the cache lost it), that statement
/// fails as a whole and the batch is written again with conflict handling:
/// the stored id is a duplicate carrying the first body's hash, every other
/// id is new and stored once, and a repeat inside the batch is a duplicate
/// of its first. Fresh batches with delivery rows take the statement with
/// conflict handling at once.
#[tokio::test]
async fn a_fresh_batch_holding_a_stored_id_is_written_with_conflict_handling() {
    use hookgate::primitives::time::Millis;
    use hookgate::store::{EventFacts, NewEvent, Recorded};
    let db = TestDb::create(Backend::Production).await;
    let ledger = hookgate::store::connect(
        &hookgate::config::Database::Postgres(hookgate::primitives::secret::Secret::new(
            db.url.clone(),
        )),
        Some(2),
        std::time::Duration::from_secs(10),
    )
    .await
    .unwrap();
    ledger.backend.migrate().await.unwrap();
    let ledger = ledger.event_log;
    let event = |id: &str, sha: u8| NewEvent {
        source: "stripe".into(),
        event_id: id.into(),
        body: bytes::Bytes::from(stripe_body(id)),
        body_sha256: [sha; 32],
        headers: Default::default(),
        received_at: Millis(now() * 1000),
        expires_at: Millis(now() * 1000 + 3_600_000),
        targets: vec![],
        order_keys: vec![],
        facts: EventFacts::default(),
        handoff: None,
        fresh: true,
    };
    // A duplicate carrying the stored body's hash ([sha; 32]).
    let dup_of = |r: &Recorded, sha: u8| matches!(r, Recorded::Duplicate { stored_sha256, .. } if stored_sha256[..] == [sha; 32]);
    // A clean fresh batch: all new, a repeat inside it a duplicate.
    let first = ledger
        .record(&[event("evt_f1", 1), event("evt_f2", 2), event("evt_f1", 1)])
        .await
        .unwrap()
        .outcomes;
    assert_eq!(first[0], Recorded::New);
    assert_eq!(first[1], Recorded::New);
    assert!(dup_of(&first[2], 1), "{first:?}");
    // evt_f2 is stored already: its fresh copy sends the batch to ON CONFLICT.
    let second = ledger
        .record(&[event("evt_f3", 3), event("evt_f2", 9), event("evt_f4", 4)])
        .await
        .unwrap()
        .outcomes;
    assert_eq!(second[0], Recorded::New, "{second:?}");
    assert!(
        dup_of(&second[1], 2),
        "the stored body's hash, not this copy's: {second:?}"
    );
    assert_eq!(second[2], Recorded::New, "{second:?}");
    // With delivery rows: the new event gets its one delivery row, the
    // stored evt_f1 is a duplicate and gets none.
    let to_billing = |id: &str, sha: u8| NewEvent {
        targets: vec!["billing".into()],
        order_keys: vec![None],
        ..event(id, sha)
    };
    let third = ledger
        .record(&[to_billing("evt_f5", 5), to_billing("evt_f1", 7)])
        .await
        .unwrap()
        .outcomes;
    assert_eq!(third[0], Recorded::New, "{third:?}");
    assert!(dup_of(&third[1], 1), "{third:?}");
    // A fresh batch with delivery rows and no stored id.
    let fourth = ledger
        .record(&[to_billing("evt_f6", 6)])
        .await
        .unwrap()
        .outcomes;
    assert_eq!(fourth, vec![Recorded::New]);
    for id in ["evt_f1", "evt_f2", "evt_f3", "evt_f4", "evt_f5", "evt_f6"] {
        assert_eq!(ledger.event_count("stripe", id).await.unwrap(), 1, "{id}");
    }
    let mut c = <sqlx::PgConnection as sqlx::Connection>::connect(&db.url)
        .await
        .unwrap();
    let deliveries: Vec<(String, String)> = sqlx::query_as(
        "SELECT e.event_id, d.target FROM hookgate_deliveries d
         JOIN hookgate_events e ON e.id = d.event_pk ORDER BY e.event_id",
    )
    .fetch_all(&mut c)
    .await
    .unwrap();
    assert_eq!(
        deliveries,
        vec![
            ("evt_f5".to_owned(), "billing".to_owned()),
            ("evt_f6".to_owned(), "billing".to_owned())
        ]
    );
}
