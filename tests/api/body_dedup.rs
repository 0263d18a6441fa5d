//! `dedup_by_body` (docs/design.md "Dedup by body"): for providers whose
//! event id is not signed, the same body under a fresh id is a duplicate
//! within the source's window, on every replica and after a restart.

use crate::both_backends;
use crate::helpers::*;
use std::time::Duration;

both_backends!(
    the_same_body_under_a_fresh_id_is_a_flagged_duplicate_and_forwarded_once,
    different_bodies_under_fresh_ids_are_both_new,
    a_body_is_new_again_after_the_window,
);

/// `gh-body` opts in, with a target; `github` (from the default config) does not.
fn opts(b: Backend, window: &str, target: &str) -> Opts {
    let mut opts = Opts::new(b);
    opts.extra = format!(
        r#"
[sources.gh-body]
provider = "github"
secrets = ["{GITHUB_SECRET}"]
dedup_by_body = true
dedup_window = "{window}"
targets = ["sink"]

[targets.sink]
url = "{target}"
"#
    );
    opts
}

async fn send(app: &TestApp, source: &str, delivery: &str, body: &[u8]) -> String {
    let r = app
        .post(
            source,
            &signers::github(GITHUB_SECRET, delivery, body),
            body,
        )
        .await;
    assert_eq!(r.status(), 200);
    dedup_header(&r)
}

async fn the_same_body_under_a_fresh_id_is_a_flagged_duplicate_and_forwarded_once(b: Backend) {
    let target = TestTarget::start().await;
    let app = spawn_app(opts(b, "1h", &target.url)).await;
    let body = br#"{"action":"opened","number":7}"#;

    assert_eq!(send(&app, "gh-body", "delivery-1", body).await, "new");
    // A captured request resent under a new (unsigned) delivery id.
    assert_eq!(send(&app, "gh-body", "delivery-2", body).await, "duplicate");
    // The original id is still an ordinary duplicate.
    assert_eq!(send(&app, "gh-body", "delivery-1", body).await, "duplicate");
    assert_eq!(app.rows("gh-body", "delivery-1").await, 1);
    assert_eq!(app.rows("gh-body", "delivery-2").await, 0, "not stored");
    // Off by default: the source without the option takes it as new.
    assert_eq!(send(&app, "github", "delivery-1", body).await, "new");
    assert_eq!(send(&app, "github", "delivery-2", body).await, "new");

    let delivered = eventually(Duration::from_secs(10), || async { target.count() >= 1 }).await;
    assert!(delivered);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(target.count(), 1, "the target receives the body once");

    let s = &app.stats().await["sources"]["gh-body"];
    assert_eq!(s["unique"], 1, "{s}");
    assert_eq!(s["duplicates"], 2, "{s}");
    assert_eq!(s["duplicates_by_layer"]["body"], 1, "{s}");
    let metrics = app.admin_text("/metrics").await;
    assert!(metrics.contains("duplicate_body"), "{metrics}");

    // The ledger holds it: after a restart (and on another replica of the
    // same database) the body is still taken.
    let (opts, prefix) = (app.opts.clone(), app.prefix.clone());
    let db = app.stop().await;
    let again = spawn_on(opts, db, prefix).await;
    assert_eq!(
        send(&again, "gh-body", "delivery-3", body).await,
        "duplicate"
    );
    assert_eq!(again.rows("gh-body", "delivery-3").await, 0);
}

async fn different_bodies_under_fresh_ids_are_both_new(b: Backend) {
    let target = TestTarget::start().await;
    let app = spawn_app(opts(b, "1h", &target.url)).await;
    assert_eq!(send(&app, "gh-body", "d-a", br#"{"n":1}"#).await, "new");
    assert_eq!(send(&app, "gh-body", "d-b", br#"{"n":2}"#).await, "new");
    let both = eventually(Duration::from_secs(10), || async { target.count() == 2 }).await;
    assert!(both, "both events are forwarded");
    let s = &app.stats().await["sources"]["gh-body"];
    assert_eq!(s["duplicates_by_layer"]["body"], 0, "{s}");
}

async fn a_body_is_new_again_after_the_window(b: Backend) {
    let target = TestTarget::start().await;
    // Each pair below must land within one window and the sleep must
    // outlast it: a 3 s window leaves a pair seconds of margin on a loaded
    // machine (with 1 s, a pair's second request once came too late).
    let app = spawn_app(opts(b, "3s", &target.url)).await;
    let body = br#"{"action":"closed"}"#;
    assert_eq!(send(&app, "gh-body", "w-1", body).await, "new");
    assert_eq!(send(&app, "gh-body", "w-2", body).await, "duplicate");
    tokio::time::sleep(Duration::from_millis(3100)).await;
    assert_eq!(
        send(&app, "gh-body", "w-3", body).await,
        "new",
        "the window of the body's first event is over"
    );
    assert_eq!(send(&app, "gh-body", "w-4", body).await, "duplicate");
}
