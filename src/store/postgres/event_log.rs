//! [`EventLog`] on PostgreSQL: batches through [`record`](super::record),
//! body claims and counts on the request path (bounded like a record), the
//! arrivals as one `UNNEST` statement, and the purge.
//!
//! Rule: every call an ingest request waits on runs under the client-side
//! deadline (`PgStore::bounded`); background work (arrivals, purge) does not.

use super::PgStore;
use crate::primitives::time::Millis;
use crate::store::body_hashes::{self, BodyClaim};
use crate::store::event_log::NewArrival;
use crate::store::{EventLog, NewEvent, StoreError, Written, rows};
use async_trait::async_trait;

#[async_trait]
impl EventLog for PgStore {
    async fn record(&self, batch: &[NewEvent]) -> Result<Written, StoreError> {
        let pause = &self.fresh_pause;
        self.bounded(&self.pool, async |c| {
            super::record::record(c, batch, pause).await
        })
        .await
    }

    async fn claim_body(&self, c: &BodyClaim<'_>) -> Result<String, StoreError> {
        // On the request path: bounded like `record`.
        self.bounded(&self.pool, async |conn| rows::claim_body(conn, c).await)
            .await
    }

    /// One statement: the arrivals of events still stored (their counts are
    /// counted from these rows when a page asks).
    async fn record_arrivals(&self, batch: &[NewArrival]) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        sqlx::query(
            "WITH u AS (
                 SELECT * FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::bool[],
                                      $5::int4[], $6::int8[])
                     WITH ORDINALITY AS u(s, i, at, c, n, last, o)
             )
             INSERT INTO hookgate_arrivals (event_pk, arrived_at, conflict, copies, last_at)
             SELECT e.id, u.at, u.c, u.n, NULLIF(u.last, u.at) FROM u
             JOIN hookgate_events e ON e.source = u.s AND e.event_id = u.i
             ORDER BY u.o",
        )
        .bind(batch.iter().map(|a| a.source.as_str()).collect::<Vec<_>>())
        .bind(
            batch
                .iter()
                .map(|a| a.event_id.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(batch.iter().map(|a| a.arrived_at.0).collect::<Vec<_>>())
        .bind(batch.iter().map(|a| a.conflict).collect::<Vec<_>>())
        .bind(batch.iter().map(copies).collect::<Vec<_>>())
        .bind(batch.iter().map(|a| a.last_at.0).collect::<Vec<_>>())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn purge(&self, now: Millis) -> Result<u64, StoreError> {
        // Bounded batches (crate::store::PURGE_BATCH), one transaction
        // each: a backlog never becomes one huge DELETE holding its locks
        // and WAL until the end.
        let mut total = 0;
        loop {
            let n = self.purge_batch(now).await?;
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
        self.bounded(&self.pool, async |c| {
            rows::event_count(c, source, event_id).await
        })
        .await
    }
}

impl PgStore {
    /// Deletes at most `PURGE_BATCH` expired, fully delivered events with
    /// their arrival, attempt and delivery rows (no foreign keys since
    /// migrations 0008 and 0011: they go in the same statement), in one
    /// transaction without a statement timeout (background work).
    async fn purge_batch(&self, now: Millis) -> Result<u64, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET LOCAL statement_timeout = 0")
            .execute(&mut *tx)
            .await?;
        let n: i64 = sqlx::query_scalar(
            "WITH gone AS (
                 DELETE FROM hookgate_events e WHERE e.id IN (
                     SELECT x.id FROM hookgate_events x WHERE x.expires_at < $1 AND NOT EXISTS (
                         SELECT 1 FROM hookgate_deliveries d
                         WHERE d.event_pk = x.id AND d.state <> 'delivered')
                     LIMIT $2)
                 RETURNING e.id
             ), arrivals AS (
                 DELETE FROM hookgate_arrivals a USING gone WHERE a.event_pk = gone.id
             ), attempts AS (
                 DELETE FROM hookgate_attempts t USING hookgate_deliveries d, gone
                 WHERE t.delivery_id = d.id AND d.event_pk = gone.id
             ), deliveries AS (
                 DELETE FROM hookgate_deliveries d USING gone WHERE d.event_pk = gone.id
             )
             SELECT COUNT(*) FROM gone",
        )
        .bind(now)
        .bind(crate::store::PURGE_BATCH)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(n as u64)
    }
}

/// The row's copy count as the column's type (a flush folds at most the
/// queue's capacity, far below `i32::MAX`).
fn copies(a: &NewArrival) -> i32 {
    i32::try_from(a.copies).unwrap_or(i32::MAX)
}
