//! The console's queries on SQLite (text built in `store::events`), and its
//! two batch writes as one transaction of small statements (one writer).

use super::SqliteLedger;
use crate::primitives::time::Millis;
use crate::store::StoreError;
use crate::store::events::{NewArrival, begin_write, bind_args, console_ledger};
use async_trait::async_trait;
use sqlx::sqlite::SqliteRow;

console_ledger!(SqliteLedger, SqliteRow, Dialect::Sqlite);

impl SqliteLedger {
    async fn write_arrivals(&self, batch: &[NewArrival]) -> Result<(), StoreError> {
        // It reads before it writes: the write lock first (see `begin_write`).
        let mut tx = self.pool.begin_with(begin_write(Dialect::Sqlite)).await?;
        for a in batch {
            let pk: Option<i64> = sqlx::query_scalar(
                "SELECT id FROM hookgate_events WHERE source = ? AND event_id = ?",
            )
            .bind(&a.source)
            .bind(&a.event_id)
            .fetch_optional(&mut *tx)
            .await?;
            if let Some(pk) = pk {
                sqlx::query(
                    "INSERT INTO hookgate_arrivals (event_pk, arrived_at, conflict, copies, last_at)
                     VALUES (?, ?, ?, ?, NULLIF(?, ?))",
                )
                .bind(pk)
                .bind(a.arrived_at.0)
                .bind(a.conflict)
                .bind(i64::from(a.copies))
                .bind(a.last_at.0)
                .bind(a.arrived_at.0)
                .execute(&mut *tx)
                .await?;
            }
        }
        tx.commit().await?;
        Ok(())
    }

    async fn write_minute_counters(
        &self,
        minute: i64,
        deltas: &[(String, String, i64)],
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        for (source, name, delta) in deltas {
            sqlx::query(
                "INSERT INTO hookgate_counter_minutes (minute, source, name, value)
                 VALUES (?, ?, ?, ?)
                 ON CONFLICT (minute, source, name) DO UPDATE
                     SET value = hookgate_counter_minutes.value + excluded.value",
            )
            .bind(minute)
            .bind(source)
            .bind(name)
            .bind(delta)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::primitives::time::Millis;
    use crate::store::Ledger;
    use crate::store::events::NewArrival;
    use crate::store::sqlite::SqliteLedger;
    use crate::store::sqlite::ordering_tests::event;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// The arrivals write reads (the event's row) before it writes. Begun
    /// deferred, it could not become the writer once another connection
    /// committed in between (`SQLITE_BUSY` at once, busy timeout or not),
    /// and the arrivals were dropped: seen as an API test that waited for a
    /// duplicate's arrival in vain while the stats counters were flushed.
    #[tokio::test]
    async fn arrivals_are_written_while_other_writes_commit_beside_them() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("hg.db").display());
        let l = Arc::new(SqliteLedger::connect(&url, Some(4)).await.unwrap());
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
            if l.console().record_arrivals(&[a]).await.is_err() {
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
}
