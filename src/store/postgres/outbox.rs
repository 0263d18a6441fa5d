//! The outbox side of the PostgreSQL ledger: leasing due deliveries,
//! recording attempts, giving leases back, making a recovered target's
//! retries due. (Operator replay and redeliver live in `store::events`.)
//!
//! Rule: a delivery row changes only under its lease token, so two workers
//! never both own one row.

use super::super::rows::{
    ORDERED_CANDIDATES_SQL, RELEASE_LEASES_SQL, SUCCESSOR_SQL, due_from_row, next_columns,
};
use super::super::{AttemptRecord, DueDelivery, StoreError};
use crate::primitives::time::Millis;
use sqlx::PgConnection;
use sqlx::Row;
use std::collections::HashSet;
use std::sync::LazyLock;

pub(super) async fn claim_due(
    conn: &mut PgConnection,
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
                l.attempts, e.event_type
         FROM leased l JOIN hookgate_events e ON e.id = l.event_pk",
    )
    .bind(target)
    .bind(now)
    .bind(lease_until)
    .bind(token)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    rows.iter().map(due_from_row).collect()
}

/// [`claim_due`] for a target with `order_by` (its own statement, so the
/// unordered claim keeps its plan): only each key's first pending row is a
/// candidate ([`ORDERED_CANDIDATES_SQL`]). Pending includes leased and
/// retrying rows, so at most one row per key is ever leased. Eligibility is
/// stable under concurrent claims: a pending row leaves `pending` only
/// forward (delivered, dead), and a row made pending again by replay gets a
/// new, last sequence number in its key (`store::events`), so no snapshot
/// can see a row as first in its key while an earlier one is pending.
/// Returns the rows and the last key leased (the loop's next cursor).
pub(super) async fn claim_due_ordered(
    conn: &mut PgConnection,
    target: &str,
    now: Millis,
    lease_until: Millis,
    token: &str,
    limit: i64,
    after: &str,
) -> Result<(Vec<DueDelivery>, Option<String>), StoreError> {
    static SQL: LazyLock<String> = LazyLock::new(|| {
        format!(
            "{ORDERED_CANDIDATES_SQL}, due AS (
                 SELECT d.id, c.pass, c.k FROM hookgate_deliveries d JOIN candidates c ON c.id = d.id
                 WHERE d.target = $1 AND d.state = 'pending' AND d.next_attempt_at <= $2
                   AND (d.lease_until IS NULL OR d.lease_until < $2)
                 ORDER BY c.pass, c.k
                 LIMIT $5
                 FOR UPDATE OF d SKIP LOCKED
             ), leased AS (
                 UPDATE hookgate_deliveries d SET lease_until = $3, lease_token = $4
                 FROM due WHERE d.id = due.id
                 RETURNING d.id, d.event_pk, d.source, d.target, d.attempts
             )
             SELECT l.id, l.source, l.target, e.event_id, e.body, e.headers, e.received_at,
                    l.attempts, e.event_type, due.k
             FROM leased l JOIN due ON due.id = l.id JOIN hookgate_events e ON e.id = l.event_pk
             ORDER BY due.pass, due.k"
        )
    });
    let rows = sqlx::query(SQL.as_str())
        .bind(target)
        .bind(now)
        .bind(lease_until)
        .bind(token)
        .bind(limit)
        .bind(after)
        .fetch_all(&mut *conn)
        .await?;
    let mut last = None;
    for r in &rows {
        if let Some(k) = r.try_get::<Option<String>, _>(9)? {
            last = Some(k);
        }
    }
    Ok((
        rows.iter().map(due_from_row).collect::<Result<_, _>>()?,
        last,
    ))
}

/// The key's next row, leased if due and free (see `Ledger::claim_successor`).
pub(super) async fn claim_successor(
    conn: &mut PgConnection,
    target: &str,
    key: &str,
    now: Millis,
    lease_until: Millis,
    token: &str,
) -> Result<Option<DueDelivery>, StoreError> {
    static SQL: LazyLock<String> = LazyLock::new(|| {
        format!(
            "WITH due AS ({SUCCESSOR_SQL} FOR UPDATE SKIP LOCKED
             ), leased AS (
                 UPDATE hookgate_deliveries d SET lease_until = $3, lease_token = $4
                 FROM due WHERE d.id = due.id
                 RETURNING d.id, d.event_pk, d.source, d.target, d.attempts
             )
             SELECT l.id, l.source, l.target, e.event_id, e.body, e.headers, e.received_at,
                    l.attempts, e.event_type, $5::text
             FROM leased l JOIN hookgate_events e ON e.id = l.event_pk"
        )
    });
    let row = sqlx::query(SQL.as_str())
        .bind(target)
        .bind(now)
        .bind(lease_until)
        .bind(token)
        .bind(key)
        .fetch_optional(&mut *conn)
        .await?;
    row.as_ref().map(due_from_row).transpose()
}

/// Takes up to `want` tokens from `target`'s shared bucket (migration
/// 0014), refilled by the database's clock: one statement, the row locked
/// for its duration, so replicas taking at once never both spend a token.
/// A missing row starts full.
pub(super) async fn take_rate_tokens(
    conn: &mut PgConnection,
    target: &str,
    want: u32,
    per_sec: f64,
    capacity: f64,
) -> Result<crate::store::RateGrant, StoreError> {
    const SQL: &str = "WITH now AS (
             SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint AS us
         ), seed AS (
             INSERT INTO hookgate_rate_buckets (target, tokens, at_us)
             SELECT $1, $4, now.us FROM now
             ON CONFLICT (target) DO NOTHING
         ), cur AS (
             SELECT LEAST($4, b.tokens + GREATEST(0, now.us - b.at_us) * $3 / 1e6) AS t,
                    GREATEST(b.at_us, now.us) AS at_us
             FROM hookgate_rate_buckets b, now
             WHERE b.target = $1
             FOR UPDATE OF b
         ), got AS (
             SELECT t, at_us, LEAST($2::float8, floor(t)) AS n FROM cur
         )
         UPDATE hookgate_rate_buckets b SET tokens = got.t - got.n, at_us = got.at_us
         FROM got WHERE b.target = $1
         RETURNING got.n, b.tokens";
    let row: Option<(f64, f64)> = sqlx::query_as(SQL)
        .bind(target)
        .bind(f64::from(want))
        .bind(per_sec)
        .bind(capacity)
        .fetch_optional(&mut *conn)
        .await?;
    // First call for this target: the seed row is not visible to the rest
    // of the statement (one snapshot), so the bucket starts on the next.
    let (granted, left) = row.unwrap_or((0.0, capacity));
    let wait = if granted >= 1.0 {
        std::time::Duration::ZERO
    } else {
        std::time::Duration::from_secs_f64(((1.0 - left).max(0.0) / per_sec).max(0.001))
    };
    Ok(crate::store::RateGrant {
        granted: granted as u32,
        wait,
    })
}

/// Records a batch of attempts in ONE statement (so one round trip and one
/// commit for the whole batch): move each delivery on under our lease token,
/// and log an attempt row for each one that moved. Returns, per input, whether
/// its row was still ours.
pub(super) async fn finish_attempts(
    conn: &mut PgConnection,
    token: &str,
    batch: &[(i64, AttemptRecord)],
) -> Result<Vec<bool>, StoreError> {
    if batch.is_empty() {
        return Ok(vec![]);
    }
    let (mut ids, mut states, mut next_at, mut status) = (vec![], vec![], vec![], vec![]);
    let (mut error, mut started, mut latency) = (vec![], vec![], vec![]);
    for (id, rec) in batch {
        let (state, at) = next_columns(rec);
        ids.push(*id);
        states.push(state);
        next_at.push(at);
        status.push(rec.status);
        error.push(rec.error.as_deref());
        started.push(rec.started_at);
        latency.push(rec.latency_ms);
    }
    // Batches never share a row (each lease is held by one worker, and one
    // attempt of it is in flight), so batches cannot wait on each other.
    let done: Vec<i64> = sqlx::query_scalar(
        "WITH input AS (
             SELECT * FROM UNNEST($2::int8[], $3::text[], $4::int8[], $5::int4[], $6::text[],
                                  $7::int8[], $8::int8[])
                 AS i(id, state, next_at, status, error, started_at, latency_ms)
         ), moved AS (
             UPDATE hookgate_deliveries d
             SET state = i.state, attempts = d.attempts + 1,
                 next_attempt_at = COALESCE(i.next_at, d.next_attempt_at),
                 lease_until = NULL, lease_token = NULL, last_status = i.status,
                 last_error = i.error, updated_at = i.started_at + i.latency_ms
             FROM input i
             WHERE d.id = i.id AND d.lease_token = $1
             RETURNING d.id, d.attempts
         ), logged AS (
             INSERT INTO hookgate_attempts
                 (delivery_id, attempt, started_at, latency_ms, status, error)
             SELECT m.id, m.attempts, i.started_at, i.latency_ms, i.status, i.error
             FROM moved m JOIN input i ON i.id = m.id
         )
         SELECT id FROM moved",
    )
    .bind(token)
    .bind(&ids)
    .bind(&states)
    .bind(&next_at)
    .bind(&status)
    .bind(&error)
    .bind(&started)
    .bind(&latency)
    .fetch_all(&mut *conn)
    .await?;
    let done: HashSet<i64> = done.into_iter().collect();
    Ok(batch.iter().map(|(id, _)| done.contains(id)).collect())
}

/// Unleased retrying rows of `target` become due now; rows another
/// transaction holds are skipped rather than waited for.
pub(super) async fn expedite(
    conn: &mut PgConnection,
    target: &str,
    now: Millis,
) -> Result<u64, StoreError> {
    let r = sqlx::query(
        "UPDATE hookgate_deliveries SET next_attempt_at = $2
         WHERE id IN (
             SELECT id FROM hookgate_deliveries
             WHERE target = $1 AND state = 'pending' AND attempts > 0 AND next_attempt_at > $2
               AND (lease_until IS NULL OR lease_until < $2)
             FOR UPDATE SKIP LOCKED)",
    )
    .bind(target)
    .bind(now)
    .execute(&mut *conn)
    .await?;
    Ok(r.rows_affected())
}

pub(super) async fn release_leases(
    conn: &mut PgConnection,
    token: &str,
    target: &str,
) -> Result<u64, StoreError> {
    let r = sqlx::query(RELEASE_LEASES_SQL)
        .bind(token)
        .bind(target)
        .execute(&mut *conn)
        .await?;
    Ok(r.rows_affected())
}
