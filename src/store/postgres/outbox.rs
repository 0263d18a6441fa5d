//! The outbox side of the PostgreSQL ledger: leasing due deliveries,
//! recording attempts, giving leases back, replaying dead deliveries.
//!
//! Rule: a delivery row changes only under its lease token (or, for replay,
//! only while it is dead), so two workers never both own one row.

use super::super::rows::{
    FINISH_ATTEMPT_SQL, INSERT_ATTEMPT_SQL, RELEASE_LEASES_SQL, due_from_row, next_columns,
};
use super::super::{AttemptRecord, DueDelivery, ReplayFilter, StoreError};
use crate::primitives::time::Millis;
use sqlx::Row;
use sqlx::postgres::PgPool;

pub(super) async fn claim_due(
    pool: &PgPool,
    target: &str,
    now: Millis,
    lease_until: Millis,
    token: &str,
    limit: i64,
) -> Result<Vec<DueDelivery>, StoreError> {
    let rows = sqlx::query(
        "WITH due AS (
             SELECT id FROM hookgate_deliveries
             WHERE target = $1 AND state = 'pending' AND next_attempt_at <= $2
               AND (lease_until IS NULL OR lease_until < $2)
             ORDER BY next_attempt_at
             LIMIT $5
             FOR UPDATE SKIP LOCKED
         ), leased AS (
             UPDATE hookgate_deliveries d SET lease_until = $3, lease_token = $4
             FROM due WHERE d.id = due.id
             RETURNING d.id, d.event_pk, d.source, d.target, d.attempts
         )
         SELECT l.id, l.source, l.target, e.event_id, e.body, e.headers, e.received_at,
                l.attempts
         FROM leased l JOIN hookgate_events e ON e.id = l.event_pk",
    )
    .bind(target)
    .bind(now)
    .bind(lease_until)
    .bind(token)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    rows.iter().map(due_from_row).collect()
}

pub(super) async fn finish_attempt(
    pool: &PgPool,
    delivery_id: i64,
    token: &str,
    rec: &AttemptRecord,
) -> Result<bool, StoreError> {
    let (state, next_at) = next_columns(rec);
    let mut tx = pool.begin().await?;
    let updated = sqlx::query(FINISH_ATTEMPT_SQL)
        .bind(delivery_id)
        .bind(token)
        .bind(state)
        .bind(next_at)
        .bind(rec.status)
        .bind(rec.error.as_deref())
        .bind(rec.finished_at())
        .fetch_optional(&mut *tx)
        .await?;
    let Some(row) = updated else {
        return Ok(false);
    };
    let attempt: i32 = row.try_get(0)?;
    sqlx::query(INSERT_ATTEMPT_SQL)
        .bind(delivery_id)
        .bind(attempt)
        .bind(rec.started_at)
        .bind(rec.latency_ms)
        .bind(rec.status)
        .bind(rec.error.as_deref())
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(true)
}

pub(super) async fn release_leases(pool: &PgPool, token: &str) -> Result<u64, StoreError> {
    let r = sqlx::query(RELEASE_LEASES_SQL)
        .bind(token)
        .execute(pool)
        .await?;
    Ok(r.rows_affected())
}

pub(super) async fn replay(
    pool: &PgPool,
    f: &ReplayFilter,
    now: Millis,
) -> Result<u64, StoreError> {
    let r = sqlx::query(
        "UPDATE hookgate_deliveries d
         SET state = 'pending', attempts = 0, next_attempt_at = $1, updated_at = $1,
             lease_until = NULL, lease_token = NULL
         FROM hookgate_events e
         WHERE e.id = d.event_pk AND d.state = 'dead'
           AND ($2::text IS NULL OR d.source = $2)
           AND ($3::text IS NULL OR e.event_id = $3)
           AND ($4::text IS NULL OR d.target = $4)",
    )
    .bind(now)
    .bind(f.source.as_deref())
    .bind(f.event_id.as_deref())
    .bind(f.target.as_deref())
    .execute(pool)
    .await?;
    Ok(r.rows_affected())
}
