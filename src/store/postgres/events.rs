//! The console's queries on PostgreSQL (text built in `store::events`), and
//! its two batch writes as single `UNNEST` statements.

use super::PgLedger;
use crate::primitives::time::Millis;
use crate::store::StoreError;
use crate::store::events::{NewArrival, bind_args, console_ledger};
use async_trait::async_trait;
use sqlx::postgres::PgRow;

console_ledger!(PgLedger, PgRow, Dialect::Postgres);

impl PgLedger {
    /// One statement: insert the arrivals of events still stored (their
    /// counts are counted from these rows when a page asks).
    async fn write_arrivals(&self, batch: &[NewArrival]) -> Result<(), StoreError> {
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

    async fn write_minute_counters(
        &self,
        minute: i64,
        deltas: &[(String, String, i64)],
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO hookgate_counter_minutes (minute, source, name, value)
             SELECT $1, s, n, v FROM UNNEST($2::text[], $3::text[], $4::int8[]) AS u(s, n, v)
             ON CONFLICT (minute, source, name) DO UPDATE
                 SET value = hookgate_counter_minutes.value + excluded.value",
        )
        .bind(minute)
        .bind(deltas.iter().map(|d| d.0.as_str()).collect::<Vec<_>>())
        .bind(deltas.iter().map(|d| d.1.as_str()).collect::<Vec<_>>())
        .bind(deltas.iter().map(|d| d.2).collect::<Vec<_>>())
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

/// The row's copy count as the column's type (a flush folds at most the
/// queue's capacity, far below `i32::MAX`).
fn copies(a: &NewArrival) -> i32 {
    i32::try_from(a.copies).unwrap_or(i32::MAX)
}
