//! [`Outbox`] on PostgreSQL: claims with `FOR UPDATE SKIP LOCKED` on the
//! outbox pool (sequential scans priced out), attempt records as one
//! `UNNEST` statement on the record pool (asynchronous commit), the shared
//! rate buckets, and the cross-replica wake-ups of [`listen`](super::listen).
//! (Operator replay and redeliver live in `store::console`.)
//!
//! Rule: a delivery row changes only under its lease token, so two workers
//! never both own one row.

use super::PgStore;
use crate::primitives::time::Millis;
use crate::store::rows::{
    ORDERED_CANDIDATES_SQL, SUCCESSOR_SQL, claim_arguments, due_from_row, lease_arguments,
};
use crate::store::{
    AttemptRecord, DueDelivery, LeaseRequest, OnCommit, Outbox, RateGrant, StoreError, rows,
};
use async_trait::async_trait;
use foldhash::HashSet;
use sqlx::postgres::PgArguments;
use sqlx::{PgConnection, Postgres, Row};
use std::sync::LazyLock;
use tokio_util::sync::CancellationToken;

#[async_trait]
impl Outbox for PgStore {
    async fn claim_due(&self, r: &LeaseRequest<'_>) -> Result<Vec<DueDelivery>, StoreError> {
        self.bounded(&self.outbox, async |c| claim_due(c, r).await)
            .await
    }

    async fn claim_due_ordered(
        &self,
        r: &LeaseRequest<'_>,
        after: &str,
    ) -> Result<(Vec<DueDelivery>, Option<String>), StoreError> {
        self.bounded(&self.outbox, async |c| claim_due_ordered(c, r, after).await)
            .await
    }

    async fn claim_successor(
        &self,
        r: &LeaseRequest<'_>,
        key: &str,
    ) -> Result<Option<DueDelivery>, StoreError> {
        self.bounded(&self.outbox, async |c| claim_successor(c, r, key).await)
            .await
    }

    async fn take_rate_tokens(
        &self,
        target: &str,
        want: u32,
        per_sec: f64,
        capacity: f64,
    ) -> Result<Option<RateGrant>, StoreError> {
        self.bounded(&self.outbox, async |c| {
            take_rate_tokens(c, target, want, per_sec, capacity).await
        })
        .await
        .map(Some)
    }

    async fn finish_attempts(
        &self,
        token: &str,
        batch: &[(i64, AttemptRecord)],
    ) -> Result<Vec<bool>, StoreError> {
        self.bounded(&self.records, async |c| {
            finish_attempts(c, token, batch).await
        })
        .await
    }

    async fn expedite(&self, target: &str, now: Millis) -> Result<u64, StoreError> {
        self.bounded(&self.outbox, async |c| expedite(c, target, now).await)
            .await
    }

    async fn renew_leases(
        &self,
        token: &str,
        ids: &[i64],
        now: Millis,
        until: Millis,
    ) -> Result<Vec<i64>, StoreError> {
        // The outbox pool commits synchronously (the record pool does not).
        self.bounded(&self.outbox, async |c| {
            Ok(sqlx::query_scalar(
                "UPDATE hookgate_deliveries SET lease_until = $3
                 WHERE id = ANY($1) AND lease_token = $2 AND lease_until > $4
                 RETURNING id",
            )
            .bind(ids)
            .bind(token)
            .bind(until)
            .bind(now)
            .fetch_all(&mut *c)
            .await?)
        })
        .await
    }

    async fn release_leases(&self, token: &str, target: &str) -> Result<u64, StoreError> {
        self.bounded(&self.pool, async |c| {
            rows::release_leases(c, token, target).await
        })
        .await
    }

    async fn listen(&self, on_commit: OnCommit, stop: CancellationToken) {
        super::listen::listen(&self.pool, on_commit, stop).await
    }
}

/// `sql` with a claim's first five arguments bound (`rows::lease_arguments`).
fn claim(
    sql: &'static str,
    r: &LeaseRequest<'_>,
) -> Result<sqlx::query::Query<'static, Postgres, PgArguments>, StoreError> {
    Ok(sqlx::query_with(sql, lease_arguments::<Postgres>(r)?))
}

async fn claim_due(
    conn: &mut PgConnection,
    r: &LeaseRequest<'_>,
) -> Result<Vec<DueDelivery>, StoreError> {
    let rows = claim(
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
             RETURNING d.id, d.event_pk, d.source, d.target, d.attempts, d.earlier_attempts
         )
         SELECT l.id, l.source, l.target, e.event_id, e.body, e.headers, e.received_at,
                l.attempts, e.event_type, l.earlier_attempts
         FROM leased l JOIN hookgate_events e ON e.id = l.event_pk",
        r,
    )?
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
/// new, last sequence number in its key (`store::console`), so no snapshot
/// can see a row as first in its key while an earlier one is pending.
/// Returns the rows and the last key leased (the loop's next cursor).
async fn claim_due_ordered(
    conn: &mut PgConnection,
    r: &LeaseRequest<'_>,
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
                 RETURNING d.id, d.event_pk, d.source, d.target, d.attempts, d.earlier_attempts
             )
             SELECT l.id, l.source, l.target, e.event_id, e.body, e.headers, e.received_at,
                    l.attempts, e.event_type, l.earlier_attempts, due.k
             FROM leased l JOIN due ON due.id = l.id JOIN hookgate_events e ON e.id = l.event_pk
             ORDER BY due.pass, due.k"
        )
    });
    let rows = claim(SQL.as_str(), r)?
        .bind(after)
        .fetch_all(&mut *conn)
        .await?;
    let mut last = None;
    for r in &rows {
        if let Some(k) = r.try_get::<Option<String>, _>(10)? {
            last = Some(k);
        }
    }
    Ok((
        rows.iter().map(due_from_row).collect::<Result<_, _>>()?,
        last,
    ))
}

/// The key's next row, leased if due and free (see `Outbox::claim_successor`).
/// `$5` is the key here, not a limit: the statement leases at most one row.
async fn claim_successor(
    conn: &mut PgConnection,
    r: &LeaseRequest<'_>,
    key: &str,
) -> Result<Option<DueDelivery>, StoreError> {
    static SQL: LazyLock<String> = LazyLock::new(|| {
        format!(
            "WITH due AS ({SUCCESSOR_SQL} FOR UPDATE SKIP LOCKED
             ), leased AS (
                 UPDATE hookgate_deliveries d SET lease_until = $3, lease_token = $4
                 FROM due WHERE d.id = due.id
                 RETURNING d.id, d.event_pk, d.source, d.target, d.attempts, d.earlier_attempts
             )
             SELECT l.id, l.source, l.target, e.event_id, e.body, e.headers, e.received_at,
                    l.attempts, e.event_type, l.earlier_attempts, $5::text
             FROM leased l JOIN hookgate_events e ON e.id = l.event_pk"
        )
    });
    let row = sqlx::query_with(SQL.as_str(), claim_arguments::<Postgres, _>(r, key)?)
        .fetch_optional(&mut *conn)
        .await?;
    row.as_ref().map(due_from_row).transpose()
}

/// Takes up to `want` tokens from `target`'s shared bucket (migration
/// 0014), refilled by the database's clock: one statement, the row locked
/// for its duration, so replicas taking at once never both spend a token.
/// A missing row starts full.
async fn take_rate_tokens(
    conn: &mut PgConnection,
    target: &str,
    want: u32,
    per_sec: f64,
    capacity: f64,
) -> Result<RateGrant, StoreError> {
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
    Ok(RateGrant {
        granted: granted as u32,
        wait,
    })
}

/// Records a batch of attempts in ONE statement (so one round trip and one
/// commit for the whole batch): move each delivery on under our lease token,
/// and log an attempt row for each one that moved. Returns, per input, whether
/// its row was still ours.
async fn finish_attempts(
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
        let (state, at) = rec.next_columns();
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
             RETURNING d.id, d.earlier_attempts + d.attempts AS attempts
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
async fn expedite(conn: &mut PgConnection, target: &str, now: Millis) -> Result<u64, StoreError> {
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
