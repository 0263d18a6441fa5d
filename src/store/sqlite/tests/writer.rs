//! The writer's own connection, batches SQLite ended by itself, and
//! arrivals written while other writers commit.

use super::event;
use crate::primitives::time::Millis;
use crate::store::event_log::NewArrival;
use crate::store::sqlite::SqliteStore;
use crate::store::{Backend, EventLog, Recorded, Tallies};
use sqlx::Connection;
use sqlx::sqlite::SqliteConnection;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

async fn ledger(dir: &tempfile::TempDir) -> SqliteStore {
    let url = format!("sqlite://{}", dir.path().join("hg.db").display());
    let l = SqliteStore::connect(&url, Some(2)).await.unwrap();
    l.migrate().await.unwrap();
    l
}

/// Triggers on `table` that make SQLite roll back the whole transaction
/// by itself for a row whose `column` is `rollback` (as a full disk
/// does), and refuse the statement for `abort`.
async fn refuse_rows(l: &SqliteStore, table: &str, column: &str) {
    let sql = format!(
        "CREATE TRIGGER hgtest_rollback BEFORE INSERT ON {table}
         WHEN NEW.{column} = 'rollback'
         BEGIN SELECT RAISE(ROLLBACK, 'rolled back by the test'); END;
         CREATE TRIGGER hgtest_abort BEFORE INSERT ON {table}
         WHEN NEW.{column} = 'abort'
         BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;"
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(&l.pool)
        .await
        .unwrap();
}

/// Whether the writer's current connection is the one that made the
/// TEMP table `probe` (a TEMP table lives on its connection only).
async fn has_probe(l: &SqliteStore) -> bool {
    l.on_writer(async |c| {
        Ok(sqlx::query("SELECT 1 FROM temp.probe")
            .fetch_optional(&mut *c)
            .await
            .is_ok())
    })
    .await
    .unwrap()
}

/// Batches go through one connection, kept across batches; any error
/// replaces it, and the next batch writes on a new one.
#[tokio::test]
async fn the_writer_keeps_its_connection_until_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let l = ledger(&dir).await;
    l.on_writer(async |c| {
        sqlx::query("CREATE TEMP TABLE probe (x INTEGER)")
            .execute(&mut *c)
            .await?;
        Ok(())
    })
    .await
    .unwrap();
    l.record(&[event("evt_1", &[])]).await.unwrap();
    l.record(&[event("evt_2", &[])]).await.unwrap();
    assert!(has_probe(&l).await, "a batch took another connection");
    let refused = l
        .on_writer(async |c| {
            sqlx::query("SELECT * FROM no_such_table")
                .execute(&mut *c)
                .await?;
            Ok(())
        })
        .await;
    assert!(refused.is_err());
    assert!(!has_probe(&l).await, "kept the connection after an error");
    l.record(&[event("evt_3", &[])]).await.unwrap();
    // What the writer committed, the pool's connections read.
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM hookgate_events")
        .fetch_one(&l.pool)
        .await
        .unwrap();
    assert_eq!(n, 3);
}

/// A batch that SQLite rolls back by itself (here a trigger's
/// `RAISE(ROLLBACK)`; a full disk does the same), then a batch the
/// database refuses: the next batch is still committed, visible to
/// the pool's connections, and leaves the database free for other
/// writers. On a kept connection, sqlx would still count the first
/// transaction as open, and the last batch would only release a
/// savepoint inside it.
#[tokio::test]
async fn a_batch_after_one_that_sqlite_rolled_back_itself_is_committed() {
    let dir = tempfile::tempdir().unwrap();
    let l = ledger(&dir).await;
    refuse_rows(&l, "hookgate_events", "event_id").await;
    assert!(l.record(&[event("rollback", &[])]).await.is_err());
    assert!(l.record(&[event("abort", &[])]).await.is_err());
    l.record(&[event("evt_ok", &[])]).await.unwrap();
    let stored: Vec<String> = sqlx::query_scalar("SELECT event_id FROM hookgate_events")
        .fetch_all(&l.pool)
        .await
        .unwrap();
    assert_eq!(stored, ["evt_ok"]);
    // The write lock is free: another connection writes at once.
    l.add_counters(&[("s".into(), "received".into(), 1)])
        .await
        .unwrap();
}

/// The same on the pool's connections (here through the counters'
/// writes, one pooled connection): after a write SQLite rolled back by
/// itself and a refused one, the next write is committed and seen by
/// another connection.
#[tokio::test]
async fn a_pooled_write_after_one_that_sqlite_rolled_back_itself_is_committed() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("hg.db").display());
    let l = SqliteStore::connect(&url, Some(1)).await.unwrap();
    l.migrate().await.unwrap();
    refuse_rows(&l, "hookgate_counters", "name").await;
    for (name, ok) in [("rollback", false), ("abort", false), ("ok", true)] {
        let r = l.add_counters(&[("s".into(), name.into(), 1)]).await;
        assert_eq!(r.is_ok(), ok, "{name}: {r:?}");
    }
    let mut other = SqliteConnection::connect(&url).await.unwrap();
    let names: Vec<String> = sqlx::query_scalar("SELECT name FROM hookgate_counters")
        .fetch_all(&mut other)
        .await
        .unwrap();
    assert_eq!(names, ["ok"]);
}

/// A batch without delivery rows is written by its INSERT alone
/// (autocommit); the ids it finds stored go on to a transaction: a
/// stored id is a duplicate of the stored row, one past its window is
/// new again (the old row renamed), and a repeat within the batch is a
/// duplicate of its first occurrence. The new rows are committed, and
/// the next batch takes the short path again.
#[tokio::test]
async fn a_batch_without_targets_holding_stored_ids_is_decided_per_event() {
    let dir = tempfile::tempdir().unwrap();
    let l = ledger(&dir).await;
    let mut old = event("evt_old", &[]);
    old.expires_at = Millis(5);
    assert_eq!(
        l.record(&[event("evt_stored", &[]), old])
            .await
            .unwrap()
            .outcomes,
        [Recorded::New, Recorded::New]
    );
    let mut again = event("evt_stored", &[]);
    again.body_sha256 = [1; 32];
    let mut old_again = event("evt_old", &[]);
    old_again.received_at = Millis(10);
    let batch = [
        event("evt_new_1", &[]),
        again,
        old_again,
        event("evt_new_1", &[]),
        event("evt_new_2", &[]),
    ];
    let stored = Recorded::Duplicate {
        stored_sha256: vec![0; 32],
        expires_at: Millis(1_000_000),
    };
    assert_eq!(
        l.record(&batch).await.unwrap().outcomes,
        [
            Recorded::New,
            stored.clone(),
            Recorded::New,
            stored.clone(),
            Recorded::New
        ]
    );
    let mut ids: Vec<String> = sqlx::query_scalar("SELECT event_id FROM hookgate_events")
        .fetch_all(&l.pool)
        .await
        .unwrap();
    ids.sort();
    assert_eq!(ids.len(), 5, "{ids:?}");
    assert_eq!(ids[..3], ["evt_new_1", "evt_new_2", "evt_old"]);
    assert!(ids[3].starts_with("evt_old~expired~"), "{ids:?}");
    assert_eq!(ids[4], "evt_stored");
    assert_eq!(
        l.record(&[event("evt_new_3", &[])]).await.unwrap().outcomes,
        [Recorded::New]
    );
}

/// Statement journals stay in memory on the writer's and the pool's
/// connections (`temp_store` 2 = MEMORY).
#[tokio::test]
async fn temporary_files_stay_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let l = ledger(&dir).await;
    let pool: i64 = sqlx::query_scalar("PRAGMA temp_store")
        .fetch_one(&l.pool)
        .await
        .unwrap();
    let writer: i64 = l
        .on_writer(async |c| {
            Ok(sqlx::query_scalar("PRAGMA temp_store")
                .fetch_one(&mut *c)
                .await?)
        })
        .await
        .unwrap();
    assert_eq!((pool, writer), (2, 2));
}

/// The arrivals write reads (the event's row) before it writes. Begun
/// deferred, it could not become the writer once another connection
/// committed in between (`SQLITE_BUSY` at once, busy timeout or not),
/// and the arrivals were dropped: seen as an API test that waited for a
/// duplicate's arrival in vain while the stats counters were flushed.
#[tokio::test]
async fn arrivals_are_written_while_other_writes_commit_beside_them() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("hg.db").display());
    let l = Arc::new(SqliteStore::connect(&url, Some(4)).await.unwrap());
    l.migrate().await.unwrap();
    l.record(&[event("evt_1", &[])]).await.unwrap();
    // Another writer committing all the time, as the counter flushes do.
    let stop = Arc::new(AtomicBool::new(false));
    let other = tokio::spawn({
        let (l, stop) = (l.clone(), stop.clone());
        async move {
            while !stop.load(Ordering::Relaxed) {
                l.add_counters(&[("s".into(), "received".into(), 1)])
                    .await
                    .unwrap();
            }
        }
    });
    let mut failed = 0;
    for i in 0..200 {
        let a = NewArrival {
            source: "s".into(),
            event_id: "evt_1".into(),
            arrived_at: Millis(i),
            last_at: Millis(i),
            copies: 1,
            conflict: false,
        };
        if l.record_arrivals(&[a]).await.is_err() {
            failed += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    other.await.unwrap();
    assert_eq!(failed, 0, "arrival writes refused");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM hookgate_arrivals")
        .fetch_one(&l.pool)
        .await
        .unwrap();
    assert_eq!(rows, 200);
}
