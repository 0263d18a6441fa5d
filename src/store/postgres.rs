//! PostgreSQL ledger: production backend, shared by every replica.
//!
//! Batches use `UNNEST` so a group of events costs the same round trips as
//! one: insert events, insert their deliveries, read conflicting hashes
//! (only when there are conflicts), commit.

use super::*;
use crate::primitives::secret::Secret;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Row};
use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

pub struct PgLedger {
    pool: PgPool,
}

/// The NOTIFY channel carrying target names with newly committed deliveries.
const NOTIFY_CHANNEL: &str = "hookgate_deliveries";

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

impl PgLedger {
    /// Creates a lazy pool: the process starts even while the database is
    /// down, and requests then get 503 instead of hanging.
    pub fn connect(url: &Secret, max_connections: Option<u32>) -> Result<Self, StoreError> {
        let opts = PgConnectOptions::from_str(url.expose())?
            .log_statements(tracing::log::LevelFilter::Debug)
            .log_slow_statements(tracing::log::LevelFilter::Warn, Duration::from_secs(1));
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.unwrap_or(10))
            .acquire_timeout(Duration::from_secs(3))
            .connect_lazy_with(opts);
        Ok(Self { pool })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Passes every NOTIFY on to `on_commit` until the connection fails;
    /// returns that failure.
    async fn relay(&self, on_commit: &OnCommit, failing: &mut bool) -> sqlx::Error {
        let mut l = match sqlx::postgres::PgListener::connect_with(&self.pool).await {
            Ok(l) => l,
            Err(e) => return e,
        };
        if let Err(e) = l.listen(NOTIFY_CHANNEL).await {
            return e;
        }
        if std::mem::take(failing) {
            tracing::info!("LISTEN connection is back");
        }
        loop {
            match l.recv().await {
                Ok(n) => on_commit(n.payload()),
                Err(e) => return e,
            }
        }
    }
}

#[async_trait]
impl Ledger for PgLedger {
    async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn record(&self, batch: &[NewEvent]) -> Result<Vec<Recorded>, StoreError> {
        let repeats = first_occurrence(batch);
        let mut unique: Vec<&NewEvent> = batch
            .iter()
            .zip(&repeats)
            .filter(|(_, r)| r.is_none())
            .map(|(e, _)| e)
            .collect();
        // One lock order for every writer: two batches holding the same ids
        // (possible while the cache is down) wait for each other instead of
        // deadlocking.
        unique.sort_unstable_by(|a, b| (&a.source, &a.event_id).cmp(&(&b.source, &b.event_id)));

        let mut tx = self.pool.begin().await?;
        let inserted = sqlx::query(
            "INSERT INTO hookgate_events
                 (source, event_id, body, body_sha256, headers, received_at, expires_at)
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::bytea[], $4::bytea[],
                                  $5::text[], $6::int8[], $7::int8[])
             ON CONFLICT (source, event_id) DO NOTHING
             RETURNING id, source, event_id",
        )
        .bind(unique.iter().map(|e| e.source.as_str()).collect::<Vec<_>>())
        .bind(
            unique
                .iter()
                .map(|e| e.event_id.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            unique
                .iter()
                .map(|e| e.body.as_ref())
                .collect::<Vec<&[u8]>>(),
        )
        .bind(
            unique
                .iter()
                .map(|e| &e.body_sha256[..])
                .collect::<Vec<&[u8]>>(),
        )
        .bind(
            unique
                .iter()
                .map(|e| e.headers.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(unique.iter().map(|e| e.received_at).collect::<Vec<_>>())
        .bind(unique.iter().map(|e| e.expires_at).collect::<Vec<_>>())
        .fetch_all(&mut *tx)
        .await?;
        // Rows come back in no particular order: match them to `unique` by
        // key, borrowing the batch's strings (no copies per lookup).
        let position: HashMap<(&str, &str), usize> = unique
            .iter()
            .enumerate()
            .map(|(i, e)| ((e.source.as_str(), e.event_id.as_str()), i))
            .collect();
        let mut pk: Vec<Option<i64>> = vec![None; unique.len()];
        for row in &inserted {
            let (s, i): (&str, &str) = (row.try_get(1)?, row.try_get(2)?);
            if let Some(&at) = position.get(&(s, i)) {
                pk[at] = Some(row.try_get(0)?);
            }
        }

        let (mut d_event, mut d_source, mut d_target, mut d_at) = (vec![], vec![], vec![], vec![]);
        for (e, pk) in unique.iter().zip(&pk) {
            if let Some(pk) = *pk {
                for t in &e.targets {
                    d_event.push(pk);
                    d_source.push(e.source.as_str());
                    d_target.push(t.as_str());
                    d_at.push(e.received_at);
                }
            }
        }
        if !d_event.is_empty() {
            sqlx::query(
                "INSERT INTO hookgate_deliveries
                     (event_pk, source, target, next_attempt_at, updated_at)
                 SELECT e, s, t, a, a FROM UNNEST($1::int8[], $2::text[], $3::text[], $4::int8[])
                     AS u(e, s, t, a)",
            )
            .bind(&d_event)
            .bind(&d_source)
            .bind(&d_target)
            .bind(&d_at)
            .execute(&mut *tx)
            .await?;
            // Delivered at COMMIT: wakes the workers of every replica.
            let mut targets = d_target.clone();
            targets.sort_unstable();
            targets.dedup();
            sqlx::query("SELECT pg_notify($1, t) FROM UNNEST($2::text[]) AS t")
                .bind(NOTIFY_CHANNEL)
                .bind(&targets)
                .execute(&mut *tx)
                .await?;
        }

        let conflicted: Vec<&&NewEvent> = unique
            .iter()
            .zip(&pk)
            .filter(|(_, pk)| pk.is_none())
            .map(|(e, _)| e)
            .collect();
        let mut stored: Vec<Option<Vec<u8>>> = vec![None; unique.len()];
        if !conflicted.is_empty() {
            // READ COMMITTED: this statement sees the row whose commit our
            // INSERT waited for.
            let rows = sqlx::query(
                "SELECT e.source, e.event_id, e.body_sha256 FROM hookgate_events e
                 JOIN UNNEST($1::text[], $2::text[]) AS k(s, i)
                   ON e.source = k.s AND e.event_id = k.i",
            )
            .bind(
                conflicted
                    .iter()
                    .map(|e| e.source.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(
                conflicted
                    .iter()
                    .map(|e| e.event_id.as_str())
                    .collect::<Vec<_>>(),
            )
            .fetch_all(&mut *tx)
            .await?;
            for r in &rows {
                let (s, i): (&str, &str) = (r.try_get(0)?, r.try_get(1)?);
                if let Some(&at) = position.get(&(s, i)) {
                    stored[at] = Some(r.try_get(2)?);
                }
            }
        }
        tx.commit().await?;

        Ok(batch
            .iter()
            .zip(&repeats)
            .map(|(e, rep)| match rep {
                Some(first) => Recorded::Duplicate {
                    stored_sha256: batch[*first].body_sha256.to_vec(),
                },
                None => {
                    let at = position[&(e.source.as_str(), e.event_id.as_str())];
                    match pk[at] {
                        Some(_) => Recorded::New,
                        None => Recorded::Duplicate {
                            stored_sha256: stored[at].take().unwrap_or_default(),
                        },
                    }
                }
            })
            .collect())
    }

    async fn add_counters(&self, deltas: &[(String, String, i64)]) -> Result<(), StoreError> {
        if deltas.is_empty() {
            return Ok(());
        }
        sqlx::query(
            "INSERT INTO hookgate_counters (source, name, value)
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::int8[])
             ON CONFLICT (source, name) DO UPDATE
                 SET value = hookgate_counters.value + excluded.value",
        )
        .bind(deltas.iter().map(|d| d.0.as_str()).collect::<Vec<_>>())
        .bind(deltas.iter().map(|d| d.1.as_str()).collect::<Vec<_>>())
        .bind(deltas.iter().map(|d| d.2).collect::<Vec<_>>())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn counters(&self) -> Result<Vec<(String, String, i64)>, StoreError> {
        let rows = sqlx::query("SELECT source, name, value FROM hookgate_counters")
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
            .collect()
    }

    async fn purge(&self, now_ms: i64) -> Result<u64, StoreError> {
        let r = sqlx::query(
            "DELETE FROM hookgate_events e WHERE e.expires_at < $1 AND NOT EXISTS (
                 SELECT 1 FROM hookgate_deliveries d
                 WHERE d.event_pk = e.id AND d.state <> 'delivered')",
        )
        .bind(now_ms)
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected())
    }

    async fn claim_due(
        &self,
        target: &str,
        now_ms: i64,
        lease_until: i64,
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
        .bind(now_ms)
        .bind(lease_until)
        .bind(token)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(due_from_row).collect()
    }

    async fn finish_attempt(
        &self,
        delivery_id: i64,
        token: &str,
        rec: &AttemptRecord,
    ) -> Result<bool, StoreError> {
        let (state, next_at) = next_columns(rec);
        let mut tx = self.pool.begin().await?;
        let updated = sqlx::query(
            "UPDATE hookgate_deliveries
             SET state = $3, attempts = attempts + 1, next_attempt_at = COALESCE($4, next_attempt_at),
                 lease_until = NULL, lease_token = NULL, last_status = $5, last_error = $6,
                 updated_at = $7
             WHERE id = $1 AND lease_token = $2
             RETURNING attempts",
        )
        .bind(delivery_id)
        .bind(token)
        .bind(state)
        .bind(next_at)
        .bind(rec.status)
        .bind(rec.error.as_deref())
        .bind(rec.started_at + rec.latency_ms)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = updated else {
            return Ok(false);
        };
        let attempt: i32 = row.try_get(0)?;
        sqlx::query(
            "INSERT INTO hookgate_attempts (delivery_id, attempt, started_at, latency_ms, status, error)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
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

    async fn release_leases(&self, token: &str) -> Result<u64, StoreError> {
        let r = sqlx::query(
            "UPDATE hookgate_deliveries SET lease_until = NULL, lease_token = NULL
             WHERE lease_token = $1",
        )
        .bind(token)
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected())
    }

    async fn next_due(&self, target: &str) -> Result<Option<i64>, StoreError> {
        let v: Option<i64> = sqlx::query_scalar(
            "SELECT MIN(next_attempt_at) FROM hookgate_deliveries
             WHERE target = $1 AND state = 'pending'",
        )
        .bind(target)
        .fetch_one(&self.pool)
        .await?;
        Ok(v)
    }

    async fn delivery_counts(&self) -> Result<Vec<DeliveryCount>, StoreError> {
        let rows = sqlx::query(COUNTS_SQL).fetch_all(&self.pool).await?;
        rows.iter().map(count_from_row).collect()
    }

    async fn replay(&self, f: &ReplayFilter, now_ms: i64) -> Result<u64, StoreError> {
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
        .bind(now_ms)
        .bind(f.source.as_deref())
        .bind(f.event_id.as_deref())
        .bind(f.target.as_deref())
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected())
    }

    async fn attempts(
        &self,
        source: &str,
        event_id: &str,
        target: &str,
    ) -> Result<Vec<AttemptRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT a.attempt, a.status, a.error, a.latency_ms
             FROM hookgate_attempts a
             JOIN hookgate_deliveries d ON d.id = a.delivery_id
             JOIN hookgate_events e ON e.id = d.event_pk
             WHERE e.source = $1 AND e.event_id = $2 AND d.target = $3
             ORDER BY a.id",
        )
        .bind(source)
        .bind(event_id)
        .bind(target)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(attempt_from_row).collect()
    }

    async fn listen(&self, on_commit: OnCommit, stop: CancellationToken) {
        // Log an outage once when it starts, and once when it ends.
        let mut failing = false;
        while !stop.is_cancelled() {
            tokio::select! {
                e = self.relay(&on_commit, &mut failing) => {
                    if !failing {
                        tracing::warn!(error = %e, "LISTEN connection lost; polling until it is back");
                    }
                    failing = true;
                }
                _ = stop.cancelled() => return,
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.cancelled() => return,
            }
        }
    }

    async fn event_count(&self, source: &str, event_id: &str) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT COUNT(*) FROM hookgate_events WHERE source = $1 AND event_id = $2",
        )
        .bind(source)
        .bind(event_id)
        .fetch_one(&self.pool)
        .await?)
    }
}

/// Shared by both backends: counts per source, target and state, with
/// `retrying` split out of `pending`.
pub(crate) const COUNTS_SQL: &str = "SELECT source, target,
        CASE WHEN state = 'pending' AND attempts > 0 THEN 'retrying' ELSE state END AS st,
        COUNT(*) AS n
     FROM hookgate_deliveries GROUP BY source, target, st";

pub(crate) fn next_columns(rec: &AttemptRecord) -> (&'static str, Option<i64>) {
    match rec.next {
        NextState::Delivered => ("delivered", None),
        NextState::RetryAt(at) => ("pending", Some(at)),
        NextState::Dead => ("dead", None),
    }
}

pub(crate) fn due_from_row<R: Row>(r: &R) -> Result<DueDelivery, StoreError>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    usize: sqlx::ColumnIndex<R>,
    i64: for<'a> sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    i32: for<'a> sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    String: for<'a> sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    Vec<u8>: for<'a> sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    Ok(DueDelivery {
        id: r.try_get(0usize)?,
        source: r.try_get(1usize)?,
        target: r.try_get(2usize)?,
        event_id: r.try_get(3usize)?,
        body: r.try_get(4usize)?,
        headers: r.try_get(5usize)?,
        received_at: r.try_get(6usize)?,
        attempts: r.try_get(7usize)?,
    })
}

pub(crate) fn count_from_row<R: Row>(r: &R) -> Result<DeliveryCount, StoreError>
where
    usize: sqlx::ColumnIndex<R>,
    i64: for<'a> sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    String: for<'a> sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    Ok(DeliveryCount {
        source: r.try_get(0usize)?,
        target: r.try_get(1usize)?,
        state: r.try_get(2usize)?,
        count: r.try_get(3usize)?,
    })
}

pub(crate) fn attempt_from_row<R: Row>(r: &R) -> Result<AttemptRow, StoreError>
where
    usize: sqlx::ColumnIndex<R>,
    i64: for<'a> sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    i32: for<'a> sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    String: for<'a> sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    Option<i32>: for<'a> sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    Option<String>: for<'a> sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    Ok(AttemptRow {
        attempt: r.try_get(0usize)?,
        status: r.try_get(1usize)?,
        error: r.try_get(2usize)?,
        latency_ms: r.try_get(3usize)?,
    })
}
