//! [`EventLog`] on SQLite: batches through [`record`](super::record) on the
//! writer's own connection; the arrivals as one transaction of small
//! statements (one writer at a time makes them cheap).
//!
//! Rule: batches go through the writer's own connection (`on_writer`),
//! everything else through the pool.

use super::SqliteStore;
use crate::primitives::time::Millis;
use crate::store::body_hashes::{self, BodyClaim};
use crate::store::event_log::NewArrival;
use crate::store::{EventLog, NewEvent, StoreError, Written, rows};
use async_trait::async_trait;

#[async_trait]
impl EventLog for SqliteStore {
    async fn record(&self, batch: &[NewEvent]) -> Result<Written, StoreError> {
        self.on_writer(async |conn| super::record::record(conn, batch).await)
            .await
    }

    async fn claim_body(&self, c: &BodyClaim<'_>) -> Result<String, StoreError> {
        rows::claim_body(&self.pool, c).await
    }

    async fn record_arrivals(&self, batch: &[NewArrival]) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        // It reads before it writes: the write lock first (`IMMEDIATE`), or
        // a deferred reader could not become the writer once another
        // connection committed (`SQLITE_BUSY` at once, busy timeout or not).
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
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

    async fn purge(&self, now: Millis) -> Result<u64, StoreError> {
        // Bounded batches (crate::store::PURGE_BATCH), each its own
        // statement: the single writer is never held for a whole backlog.
        let mut total = 0;
        loop {
            let n = sqlx::query(
                "DELETE FROM hookgate_events WHERE id IN (
                     SELECT e.id FROM hookgate_events e WHERE e.expires_at < ? AND NOT EXISTS (
                         SELECT 1 FROM hookgate_deliveries d
                         WHERE d.event_pk = e.id AND d.state <> 'delivered')
                     LIMIT ?)",
            )
            .bind(now)
            .bind(crate::store::PURGE_BATCH)
            .execute(&self.pool)
            .await?
            .rows_affected();
            total += n;
            if n < crate::store::PURGE_BATCH as u64 {
                break;
            }
        }
        loop {
            let n = sqlx::query(body_hashes::PURGE_SQL)
                .bind(now)
                .bind(crate::store::PURGE_BATCH)
                .execute(&self.pool)
                .await?
                .rows_affected();
            if n < crate::store::PURGE_BATCH as u64 {
                break;
            }
        }
        Ok(total)
    }

    async fn event_count(&self, source: &str, event_id: &str) -> Result<i64, StoreError> {
        rows::event_count(&self.pool, source, event_id).await
    }
}
