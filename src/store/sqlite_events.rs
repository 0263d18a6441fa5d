//! The console's queries on SQLite (text built in `store::events`), and its
//! two batch writes as one transaction of small statements (one writer).

use super::SqliteLedger;
use crate::primitives::time::Millis;
use crate::store::StoreError;
use crate::store::events::{NewArrival, bind_args, console_ledger};
use async_trait::async_trait;
use sqlx::sqlite::SqliteRow;

console_ledger!(SqliteLedger, SqliteRow, Dialect::Sqlite);

impl SqliteLedger {
    async fn write_arrivals(&self, batch: &[NewArrival]) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
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
