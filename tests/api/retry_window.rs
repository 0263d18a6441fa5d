//! Retries that outlast an outage (issue #33), on a short schedule: a
//! delivery is retried for its target's `retry_for` and dead only after it,
//! or at once on a status the target declares permanent; `/stats` shows the
//! target failing, then recovering.

use crate::helpers::{Backend, Opts, TestTarget, eventually, spawn_app};
use serde_json::Value;
use std::time::Duration;

async fn health(app: &crate::helpers::TestApp, target: &str) -> Value {
    app.stats().await["targets"][target]["health"].clone()
}

async fn delivery(app: &crate::helpers::TestApp, id: &str) -> (String, i64) {
    let text = app.admin_text(&format!("/admin/events/stripe/{id}")).await;
    let doc: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let d = &doc["deliveries"][0];
    (
        d["state"].as_str().unwrap_or_default().to_owned(),
        d["attempts"].as_i64().unwrap_or(0),
    )
}

async fn retried_for_the_window_then_dead(b: Backend) {
    let t = TestTarget::start().await;
    t.always(Some(503));
    let opts = Opts::forwarding_to(b, "down", &t, "retry_for = \"2s\"");
    let app = spawn_app(opts).await;
    let started = std::time::Instant::now();
    assert_eq!(app.post_stripe("evt_window").await.status(), 200);

    // Failing after a few attempts, and shown so while the window runs.
    let failing = eventually(Duration::from_secs(5), || async {
        health(&app, "down").await["state"] == "failing"
    })
    .await;
    assert!(failing, "{}", health(&app, "down").await);
    let h = health(&app, "down").await;
    assert!(h["failed_attempts"].as_u64().unwrap() >= 3, "{h}");
    assert_eq!(h["last_error"], "HTTP 503");
    assert!(h["since"].is_string());
    let (state, _) = delivery(&app, "evt_window").await;
    assert_eq!(state, "retrying", "not dead inside the window");

    let dead = eventually(Duration::from_secs(10), || async {
        delivery(&app, "evt_window").await.0 == "dead"
    })
    .await;
    assert!(dead, "dead once the window is over");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "not before the window's end ({:?})",
        started.elapsed()
    );
    let (_, attempts) = delivery(&app, "evt_window").await;
    assert!(
        attempts >= 4,
        "retried across the window: {attempts} attempts"
    );

    // The target comes back: the next delivery recovers it.
    t.always(None);
    assert_eq!(app.post_stripe("evt_back").await.status(), 200);
    let recovering = eventually(Duration::from_secs(5), || async {
        health(&app, "down").await["state"] == "recovering"
    })
    .await;
    assert!(recovering, "{}", health(&app, "down").await);
}

async fn a_declared_permanent_status_is_dead_at_once(b: Backend) {
    let t = TestTarget::start().await;
    t.always(Some(410));
    let opts = Opts::forwarding_to(b, "gone", &t, "retry_for = \"1h\"");
    let app = spawn_app(opts).await;
    assert_eq!(app.post_stripe("evt_gone").await.status(), 200);
    let dead = eventually(Duration::from_secs(5), || async {
        delivery(&app, "evt_gone").await.0 == "dead"
    })
    .await;
    assert!(dead);
    assert_eq!(delivery(&app, "evt_gone").await.1, 1, "no retry after 410");
    assert_eq!(t.count(), 1);

    // 404 is not declared permanent by default: retried.
    let t2 = TestTarget::start().await;
    t2.always(Some(404));
    let opts = Opts::forwarding_to(b, "missing", &t2, "retry_for = \"1h\"");
    let app2 = spawn_app(opts).await;
    assert_eq!(app2.post_stripe("evt_404").await.status(), 200);
    let retried = eventually(Duration::from_secs(5), || async { t2.count() >= 3 }).await;
    assert!(retried);
    assert_eq!(delivery(&app2, "evt_404").await.0, "retrying");
}

crate::both_backends!(
    retried_for_the_window_then_dead,
    a_declared_permanent_status_is_dead_at_once
);
