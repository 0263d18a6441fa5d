//! Upgrades (issue #33, docs/upgrade.md): a ledger of the previous schema
//! with history is migrated by this binary; a ledger a newer release
//! migrated further still opens. The previous binary itself runs beside
//! this one in `scripts/upgrade-check.sh`.

use crate::both_backends;
use crate::helpers::*;
use crate::operations::{WAIT, admin_json, numbers, replay, run_in};
use std::path::Path;
use std::time::Duration;

both_backends!(
    a_ledger_a_newer_release_migrated_still_opens,
    a_ledger_of_the_previous_schema_is_migrated_with_its_deliveries,
);

/// The upgrade to this release on a ledger with history: the previous
/// release's migrations and a delivery that died after three attempts under
/// it (rows as that release wrote them); this binary migrates the ledger at
/// start, and a replay of that delivery numbers its attempts 4 and 5.
async fn a_ledger_of_the_previous_schema_is_migrated_with_its_deliveries(b: Backend) {
    // The schema before migration 0015 (earlier_attempts), this test's
    // subject; later releases leave it as the upgrade path it covers.
    const PREVIOUS_SCHEMA: i64 = 14;
    let db = TestDb::create(b).await;
    let dir = match b {
        Backend::Production => "postgres",
        Backend::Embedded => "sqlite",
    };
    let migrations = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(dir);
    let migrator = sqlx::migrate::Migrator::new(migrations).await.unwrap();
    assert!(migrator.iter().any(|m| m.version > PREVIOUS_SCHEMA));
    let now = now() * 1000;
    let seed = |body: &str| {
        format!(
            "INSERT INTO hookgate_events (source, event_id, body, body_sha256, headers, received_at, expires_at)
             VALUES ('stripe', 'evt_ops_upgraded', {body}, {body}, '[]', {now}, {later});
             INSERT INTO hookgate_deliveries (event_pk, source, target, state, attempts, next_attempt_at, updated_at)
             SELECT id, 'stripe', 'down', 'dead', 3, {now}, {now} FROM hookgate_events;
             INSERT INTO hookgate_attempts (delivery_id, attempt, started_at, latency_ms, status)
             SELECT d.id, k.n, {now}, 1, 500 FROM hookgate_deliveries d,
                 (SELECT 1 AS n UNION ALL SELECT 2 UNION ALL SELECT 3) k;",
            later = now + 86_400_000
        )
    };
    match b {
        Backend::Production => {
            let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
            migrator.run_to(PREVIOUS_SCHEMA, &pool).await.unwrap();
            sqlx::raw_sql(sqlx::AssertSqlSafe(seed("'\\x7b7d'::bytea")))
                .execute(&pool)
                .await
                .unwrap();
            pool.close().await;
        }
        Backend::Embedded => {
            let opts: sqlx::sqlite::SqliteConnectOptions = db.url.parse().unwrap();
            let pool = sqlx::SqlitePool::connect_with(opts.create_if_missing(true))
                .await
                .unwrap();
            migrator.run_to(PREVIOUS_SCHEMA, &pool).await.unwrap();
            sqlx::raw_sql(sqlx::AssertSqlSafe(seed("X'7b7d'")))
                .execute(&pool)
                .await
                .unwrap();
            pool.close().await;
        }
    }

    let down = TestTarget::start().await;
    down.always(Some(500));
    let mut opts = Opts::new(b);
    opts.stripe_targets = vec!["down".into()];
    opts.extra = format!("[targets.down]\nurl = \"{}\"\nmax_attempts = 2\n", down.url);
    let app = spawn_on(opts, db, unique_prefix()).await;
    let path = "/admin/events/stripe/evt_ops_upgraded";
    let rec = admin_json(&app, path).await;
    assert_eq!(rec["deliveries"][0]["state"], "dead", "{rec}");
    assert_eq!(replay(&app, "evt_ops_upgraded").await, 1);
    assert!(eventually(WAIT, || async { down.count() == 2 }).await);
    let dead = || async { admin_json(&app, path).await["deliveries"][0]["state"] == "dead" };
    assert!(eventually(WAIT, dead).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (recorded, sent) = numbers(&app, path, &down).await;
    assert_eq!(recorded, [1, 2, 3, 4, 5]);
    assert_eq!(sent, ["4", "5"]);
    assert_eq!(down.received()[0].body.as_ref(), b"{}");
}

/// During a rolling upgrade or after a rollback, a binary meets a ledger
/// that a newer release has migrated further: it still opens, migrates and
/// serves (its migrator ignores versions it does not know; docs/upgrade.md).
async fn a_ledger_a_newer_release_migrated_still_opens(b: Backend) {
    let db = TestDb::create(b).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("hookgate.toml"),
        format!("[storage]\ndatabase_url = \"{}\"\n", db.url),
    )
    .unwrap();
    let (ok, _, err) = run_in(&["migrate"], dir.path(), &[]);
    assert!(ok, "{err}");
    let newer =
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
                 VALUES (99990101000000, 'from a newer release', TRUE, $1, 1)";
    match b {
        Backend::Production => {
            use sqlx::Connection;
            let mut c = sqlx::PgConnection::connect(&db.url).await.unwrap();
            sqlx::query(newer)
                .bind(vec![0u8; 48])
                .execute(&mut c)
                .await
                .unwrap();
        }
        Backend::Embedded => {
            use sqlx::Connection;
            let mut c = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
            sqlx::query(newer)
                .bind(vec![0u8; 48])
                .execute(&mut c)
                .await
                .unwrap();
        }
    }
    let (ok, out, err) = run_in(&["migrate"], dir.path(), &[]);
    assert!(ok, "{err}");
    assert!(out.starts_with("migrated"), "{out}");
    let app = spawn_on(Opts::new(b), db, unique_prefix()).await;
    assert_eq!(dedup_header(&app.post_stripe("evt_ops_newer").await), "new");
    assert_eq!(
        dedup_header(&app.post_stripe("evt_ops_newer").await),
        "duplicate"
    );
}
