//! Bulk actions (issue #36) on both backends: a replay's plan counted per
//! source and target, started, followed to its end with every matching
//! delivery replayed once; a cancel that stops it; expired, changed and
//! crashed plans; the audit log with token names; scopes.

use crate::both_backends;
use crate::helpers::target::TestTarget;
use crate::helpers::*;
use serde_json::{Value, json};
use std::time::Duration;

both_backends!(
    a_planned_replay_counts_per_source_and_target_and_replays_each_once,
    a_cancelled_replay_stops_and_replays_no_more,
    stale_expired_and_crashed_actions_are_refused_or_shown_so,
);

const WAIT: Duration = Duration::from_secs(20);
const LISTEN_TOKEN: &str = "listen-token-0123456789";
const OPS_TOKEN: &str = "ops-token-0123456789abc";

/// `stripe` delivers to `billing` (healthy), `broken` and `broken2` (both
/// answer 500; one attempt, then dead); `gh2` (GitHub) to `broken`.
async fn gateway(b: Backend) -> (TestApp, TestTarget, TestTarget, TestTarget) {
    let (billing, broken, broken2) = (
        TestTarget::start().await,
        TestTarget::start().await,
        TestTarget::start().await,
    );
    broken.always(Some(500));
    broken2.always(Some(500));
    let mut opts = Opts::new(b);
    opts.stripe_targets = vec!["billing".into(), "broken".into(), "broken2".into()];
    opts.extra = format!(
        "[targets.billing]\nurl = \"{}\"\n\
         [targets.broken]\nurl = \"{}\"\nmax_attempts = 1\n\
         [targets.broken2]\nurl = \"{}\"\nmax_attempts = 1\n\
         [sources.gh2]\nprovider = \"github\"\nsecrets = [\"{GITHUB_SECRET}\"]\ntargets = [\"broken\"]\n\
         [server.tokens.laptop]\nsecret = \"{LISTEN_TOKEN}\"\nscopes = [\"listen\"]\n\
         [server.tokens.ops]\nsecret = \"{OPS_TOKEN}\"\nscopes = [\"admin\"]\n",
        billing.url, broken.url, broken2.url
    );
    (spawn_app(opts).await, billing, broken, broken2)
}

async fn call(app: &TestApp, token: &str, method: &str, path: &str, body: Value) -> (u16, Value) {
    let req = match method {
        "GET" => app.client.get(app.url(path)),
        _ => app
            .client
            .post(app.url(path))
            .header("content-type", "application/json")
            .body(body.to_string()),
    };
    let r = req.bearer_auth(token).send().await.unwrap();
    let status = r.status().as_u16();
    let body = r.bytes().await.unwrap();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

async fn post(app: &TestApp, path: &str, body: Value) -> (u16, Value) {
    call(app, ADMIN_TOKEN, "POST", path, body).await
}

async fn get(app: &TestApp, path: &str) -> Value {
    let (status, doc) = call(app, ADMIN_TOKEN, "GET", path, Value::Null).await;
    assert_eq!(status, 200, "{path}: {doc}");
    doc
}

async fn dead(app: &TestApp, target: &str) -> usize {
    get(
        app,
        &format!("/admin/events?target={target}&state=dead&limit=500"),
    )
    .await["items"]
        .as_array()
        .unwrap()
        .len()
}

/// `n` Stripe events `<prefix>_<i>`, then waits until each dead delivery
/// to `broken` (and `broken2`) is dead.
async fn seed_stripe(app: &TestApp, prefix: &str, n: usize) {
    for i in 0..n {
        assert_eq!(
            dedup_header(&app.post_stripe(&format!("{prefix}_{i}")).await),
            "new"
        );
    }
}

/// Follows a bulk action until it is no longer running; its last answer.
async fn until_ended(app: &TestApp, id: &str) -> Value {
    let mut last = Value::Null;
    let ended = eventually(WAIT, || {
        let path = format!("/admin/bulk/{id}");
        async move {
            let d = get(app, &path).await;
            let s = d["state"].as_str().unwrap_or("").to_owned();
            s != "running" && s != "cancelling"
        }
    })
    .await;
    if ended {
        last = get(app, &format!("/admin/bulk/{id}")).await;
    }
    assert!(ended, "bulk action {id} did not end: {last}");
    last
}

async fn a_planned_replay_counts_per_source_and_target_and_replays_each_once(b: Backend) {
    let (app, _billing, broken, broken2) = gateway(b).await;
    seed_stripe(&app, "evt_bulk", 4).await;
    for i in 0..2 {
        let body = format!(r#"{{"ref":"refs/heads/b{i}"}}"#);
        let h = signers::github(GITHUB_SECRET, &format!("gh-bulk-{i}"), body.as_bytes());
        assert_eq!(
            dedup_header(&app.post("gh2", &h, body.as_bytes()).await),
            "new"
        );
    }
    let settled = eventually(WAIT, || async {
        dead(&app, "broken").await == 6 && dead(&app, "broken2").await == 4
    })
    .await;
    assert!(settled, "deliveries did not die");

    // A listen-only token cannot plan; an unknown kind or target is a 400.
    let (status, _) = call(
        &app,
        LISTEN_TOKEN,
        "POST",
        "/admin/bulk/plan",
        json!({"kind": "replay"}),
    )
    .await;
    assert_eq!(status, 403);
    let (status, _) = post(&app, "/admin/bulk/plan", json!({"kind": "nuke"})).await;
    assert_eq!(status, 400);
    let (status, _) = post(
        &app,
        "/admin/bulk/plan",
        json!({"kind": "replay", "target": "nope"}),
    )
    .await;
    assert_eq!(status, 400);
    let (status, _) = post(
        &app,
        "/admin/bulk/plan",
        json!({"kind": "replay", "page_size": 0}),
    )
    .await;
    assert_eq!(status, 400);

    // The plan: events per source, dead deliveries per target.
    let (status, narrow) = post(
        &app,
        "/admin/bulk/plan",
        json!({"kind": "replay", "target": "broken2"}),
    )
    .await;
    assert_eq!(status, 201, "{narrow}");
    assert_eq!(
        narrow["counts"],
        json!({"events": 4, "deliveries": 4, "by_source": {"stripe": 4}, "by_target": {"broken2": 4}})
    );
    let (status, plan) = call(
        &app,
        OPS_TOKEN,
        "POST",
        "/admin/bulk/plan",
        json!({"kind": "replay", "page_size": 3, "pause_ms": 0}),
    )
    .await;
    assert_eq!(status, 201, "{plan}");
    assert_eq!(plan["state"], "planned");
    assert_eq!(plan["created_by"], "ops");
    assert_eq!(plan["planned"], 10);
    assert_eq!(
        plan["counts"],
        json!({
            "events": 6, "deliveries": 10,
            "by_source": {"gh2": 2, "stripe": 4},
            "by_target": {"broken": 6, "broken2": 4},
        })
    );
    // Nothing was replayed by planning.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!((broken.count(), broken2.count()), (6, 4));

    // Confirmed: `broken` recovered, `broken2` still fails (each of its
    // replays dies again and must not be replayed a second time).
    broken.always(None);
    let id = plan["id"].as_str().unwrap().to_owned();
    let (status, started) = post(&app, &format!("/admin/bulk/{id}/start"), json!({})).await;
    assert_eq!(status, 202, "{started}");
    assert_eq!(started["total"], 10);
    let end = until_ended(&app, &id).await;
    assert_eq!(end["state"], "done", "{end}");
    assert_eq!(
        (end["done"].clone(), end["total"].clone()),
        (json!(10), json!(10))
    );
    assert_eq!(end["started_by"], "admin");
    assert!(
        eventually(WAIT, || async {
            broken.count() == 12 && broken2.count() == 8 && dead(&app, "broken2").await == 4
        })
        .await,
        "replays arrived: broken {}, broken2 {}",
        broken.count(),
        broken2.count()
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    for t in [&broken, &broken2] {
        let per_id = t.sends_per_id();
        assert!(per_id.values().all(|n| *n == 2), "{per_id:?}");
    }
    assert_eq!((broken.count(), broken2.count()), (12, 8));
    assert_eq!(dead(&app, "broken").await, 0);
    // A started plan does not start twice.
    let (status, doc) = post(&app, &format!("/admin/bulk/{id}/start"), json!({})).await;
    assert_eq!((status, doc["error"].as_str()), (409, Some("not_a_plan")));

    // Single actions are audited too, with the token's name.
    let (status, _) = call(
        &app,
        OPS_TOKEN,
        "POST",
        "/admin/replay",
        json!({"target": "broken2", "event_id": "evt_bulk_0"}),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = post(
        &app,
        "/admin/events/stripe/evt_bulk_1/redeliver",
        json!({"target": "billing"}),
    )
    .await;
    assert_eq!(status, 200);
    let audit = get(&app, "/admin/audit").await;
    let items = audit["items"].as_array().unwrap();
    let summary: Vec<(String, String, i64, String)> = items
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap().to_owned(),
                e["who"].as_str().unwrap().to_owned(),
                e["count"].as_i64().unwrap(),
                e["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("redeliver".into(), "admin".into(), 1, "done".into()),
            ("replay".into(), "ops".into(), 1, "done".into()),
            ("bulk.replay".into(), "admin".into(), 10, "done".into()),
        ],
        "{audit}"
    );
    assert_eq!(items[2]["bulk_id"], json!(id));
    assert_eq!(items[1]["filter"]["event_id"], "evt_bulk_0");
    assert!(items[0]["at"].as_str().unwrap().ends_with('Z'));
    let page = get(&app, "/admin/audit?limit=2").await;
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    let rest = get(
        &app,
        &format!("/admin/audit?limit=2&before={}", page["next"]),
    )
    .await;
    assert_eq!(rest["items"][0]["action"], "bulk.replay");
    let (status, _) = call(&app, LISTEN_TOKEN, "GET", "/admin/audit", Value::Null).await;
    assert_eq!(status, 403);
}

async fn a_cancelled_replay_stops_and_replays_no_more(b: Backend) {
    let (app, _billing, broken, _broken2) = gateway(b).await;
    seed_stripe(&app, "evt_cancel", 12).await;
    assert!(eventually(WAIT, || async { dead(&app, "broken").await == 12 }).await);
    let (status, plan) = post(
        &app,
        "/admin/bulk/plan",
        json!({"kind": "replay", "target": "broken", "page_size": 2, "pause_ms": 400}),
    )
    .await;
    assert_eq!(status, 201, "{plan}");
    assert_eq!(plan["planned"], 12);
    broken.always(None);
    let id = plan["id"].as_str().unwrap().to_owned();
    let (status, _) = post(&app, &format!("/admin/bulk/{id}/start"), json!({})).await;
    assert_eq!(status, 202);
    // Progress shows while it runs.
    let path = format!("/admin/bulk/{id}");
    assert!(
        eventually(WAIT, || async {
            get(&app, &path).await["done"].as_i64().unwrap_or(0) >= 2
        })
        .await
    );
    let (status, doc) = call(
        &app,
        OPS_TOKEN,
        "POST",
        &format!("{path}/cancel"),
        json!({}),
    )
    .await;
    assert_eq!(status, 202, "{doc}");
    assert!(
        matches!(doc["state"].as_str(), Some("cancelling" | "cancelled")),
        "{doc}"
    );
    let end = until_ended(&app, &id).await;
    assert_eq!(end["state"], "cancelled", "{end}");
    let done = end["done"].as_i64().unwrap();
    assert!((2..12).contains(&done), "{end}");
    assert_eq!(end["total"], 12);
    // Exactly the replayed ones arrive again; the others stay dead, and no
    // page follows the cancel.
    assert!(eventually(WAIT, || async { broken.count() == 12 + done as usize }).await);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(broken.count(), 12 + done as usize);
    assert_eq!(dead(&app, "broken").await, 12 - done as usize);
    assert_eq!(get(&app, &path).await["done"], done);
    // An ended action cannot be cancelled again.
    let (status, _) = post(&app, &format!("{path}/cancel"), json!({})).await;
    assert_eq!(status, 409);
    let audit = get(&app, "/admin/audit").await;
    let items = audit["items"].as_array().unwrap();
    assert_eq!(items[0]["action"], "bulk.replay.cancel", "{audit}");
    assert_eq!(items[0]["who"], "ops");
    assert_eq!(items[1]["action"], "bulk.replay");
    assert_eq!(
        (items[1]["count"].as_i64(), items[1]["outcome"].as_str()),
        (Some(done), Some("cancelled"))
    );
    // The recent actions list it.
    let recent = get(&app, "/admin/bulk").await;
    assert_eq!(recent["items"][0]["id"], json!(id));
}

/// Runs `sql` on the test's ledger.
async fn exec(db: &TestDb, sql: &str) {
    use sqlx::Connection;
    if db.url.starts_with("sqlite") {
        let mut c = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&mut c)
            .await
            .unwrap();
    } else {
        let mut c = sqlx::PgConnection::connect(&db.url).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&mut c)
            .await
            .unwrap();
    }
}

async fn stale_expired_and_crashed_actions_are_refused_or_shown_so(b: Backend) {
    let (app, _billing, broken, _broken2) = gateway(b).await;
    seed_stripe(&app, "evt_stale", 2).await;
    assert!(eventually(WAIT, || async { dead(&app, "broken").await == 2 }).await);

    // The filter now matches more than the plan showed: refused. One of
    // the two is replayed by hand while `broken` hangs, so the plan counts
    // one; then it dies again (the same row, under the plan's bound).
    broken.hang(Some(Duration::from_secs(2)));
    let (status, _) = post(
        &app,
        "/admin/replay",
        json!({"target": "broken", "event_id": "evt_stale_0"}),
    )
    .await;
    assert_eq!(status, 200);
    let (_, plan) = post(
        &app,
        "/admin/bulk/plan",
        json!({"kind": "replay", "target": "broken"}),
    )
    .await;
    assert_eq!(plan["planned"], 1, "{plan}");
    broken.hang(None);
    assert!(eventually(WAIT, || async { dead(&app, "broken").await == 2 }).await);
    let (_, none) = post(
        &app,
        "/admin/bulk/plan",
        json!({"kind": "replay", "target": "broken2", "event_id": "evt_stale_0"}),
    )
    .await;
    assert_eq!(none["planned"], 1);
    let id = plan["id"].as_str().unwrap().to_owned();
    let (status, doc) = post(&app, &format!("/admin/bulk/{id}/start"), json!({})).await;
    assert_eq!(
        (status, doc["error"].as_str()),
        (409, Some("plan_changed")),
        "{doc}"
    );
    assert_eq!(doc["now"], 2);
    assert_eq!(
        get(&app, &format!("/admin/bulk/{id}")).await["state"],
        "planned"
    );

    // Expired: refused, shown `expired`; cancelling a plan is immediate.
    exec(
        &app.db,
        &format!("UPDATE hookgate_bulk_actions SET expires_at = 1 WHERE id = '{id}'"),
    )
    .await;
    let (status, doc) = post(&app, &format!("/admin/bulk/{id}/start"), json!({})).await;
    assert_eq!(
        (status, doc["error"].as_str()),
        (409, Some("plan_expired")),
        "{doc}"
    );
    assert_eq!(
        get(&app, &format!("/admin/bulk/{id}")).await["state"],
        "expired"
    );
    let nid = none["id"].as_str().unwrap();
    let (status, doc) = post(&app, &format!("/admin/bulk/{nid}/cancel"), json!({})).await;
    assert_eq!((status, doc["state"].as_str()), (202, Some("cancelled")));
    let (status, _) = post(&app, &format!("/admin/bulk/{nid}/start"), json!({})).await;
    assert_eq!(status, 409);
    let (status, _) = post(&app, "/admin/bulk/nope/start", json!({})).await;
    assert_eq!(status, 404);

    // A runner that died (its heartbeat stopped) shows `interrupted`, from
    // any replica's read, rather than running forever.
    exec(
        &app.db,
        "INSERT INTO hookgate_bulk_actions (id, kind, filter, plan, planned, bound, page_size,
             pause_ms, state, total, done, created_by, created_at, expires_at, started_at,
             heartbeat_at)
         VALUES ('crashed', 'replay', '{}', '{}', 5, 100, 100, 0, 'running', 5, 2, 'admin',
             1000, 2000, 1000, 1000)",
    )
    .await;
    let doc = get(&app, "/admin/bulk/crashed").await;
    assert_eq!(
        (doc["state"].as_str(), doc["done"].as_i64()),
        (Some("interrupted"), Some(2))
    );
    assert!(doc["finished_at"].is_string());
    assert_eq!(broken.count(), 3);
}

/// Two replicas on one PostgreSQL ledger: a plan made on one is started on
/// the other, followed and cancelled from the first; a replica that stops
/// while running leaves its action `interrupted`, not running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_replica_follows_cancels_and_sees_an_interrupted_run() {
    let (a, _billing, broken, _broken2) = gateway(Backend::Production).await;
    let b = spawn_on(a.opts.clone(), a.db.clone(), a.prefix.clone()).await;
    seed_stripe(&a, "evt_replica", 10).await;
    assert!(eventually(WAIT, || async { dead(&a, "broken").await == 10 }).await);
    broken.always(None);
    let body = json!({"kind": "replay", "target": "broken", "page_size": 2, "pause_ms": 400});
    let (status, plan) = post(&a, "/admin/bulk/plan", body.clone()).await;
    assert_eq!(status, 201);
    let id = plan["id"].as_str().unwrap().to_owned();
    let (status, _) = post(&b, &format!("/admin/bulk/{id}/start"), json!({})).await;
    assert_eq!(status, 202);
    let path = format!("/admin/bulk/{id}");
    assert!(
        eventually(WAIT, || async {
            get(&a, &path).await["done"].as_i64().unwrap_or(0) >= 2
        })
        .await
    );
    let (status, _) = post(&a, &format!("{path}/cancel"), json!({})).await;
    assert_eq!(status, 202);
    let end = until_ended(&a, &id).await;
    assert_eq!(end["state"], "cancelled", "{end}");
    let done = end["done"].as_i64().unwrap();
    assert!(done < 10, "{end}");
    assert!(
        eventually(WAIT, || async {
            dead(&a, "broken").await == 10 - done as usize
        })
        .await
    );

    // The rest, started on `b`, which then stops mid-run.
    let (_, plan) = post(&a, "/admin/bulk/plan", body).await;
    assert_eq!(plan["planned"], 10 - done);
    let id = plan["id"].as_str().unwrap().to_owned();
    let (status, _) = post(&b, &format!("/admin/bulk/{id}/start"), json!({})).await;
    assert_eq!(status, 202);
    b.stop().await;
    let end = until_ended(&a, &id).await;
    assert_eq!(end["state"], "interrupted", "{end}");
    assert!(end["done"].as_i64().unwrap() < 10 - done, "{end}");
}
