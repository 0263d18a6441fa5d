//! PostgreSQL ledger: production backend, shared by every replica.
//!
//! Rule: every statement here is PostgreSQL-specific or uses the shared text
//! of [`super::rows`]; nothing is imported from the SQLite backend.
//! - [`record`](self::record): batched event + delivery inserts (`UNNEST`).
//! - [`outbox`](self::outbox): leasing, finishing and replaying deliveries.
//! - [`listen`](self::listen): `LISTEN`/`NOTIFY` wake-ups across replicas.

mod events;
mod idempotency;
mod listen;
mod outbox;
mod record;

use super::rows::{
    ATTEMPTS_SQL, COUNTERS_SQL, COUNTS_SQL, EVENT_COUNT_SQL, attempt_from_row, count_from_row,
};
use super::*;
use crate::primitives::secret::Secret;
use sqlx::ConnectOptions;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
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
        record::record(&self.pool, batch).await
    }

    async fn claim_body(
        &self,
        c: &crate::store::body_hashes::BodyClaim<'_>,
    ) -> Result<String, StoreError> {
        Ok(sqlx::query_scalar(crate::store::body_hashes::CLAIM_SQL)
            .bind(c.source)
            .bind(&c.body_sha256[..])
            .bind(c.event_id)
            .bind(c.expires_at)
            .bind(c.now)
            .fetch_one(&self.pool)
            .await?)
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
        Ok(sqlx::query_as(COUNTERS_SQL).fetch_all(&self.pool).await?)
    }

    async fn purge(&self, now: Millis) -> Result<u64, StoreError> {
        let r = sqlx::query(
            "DELETE FROM hookgate_events e WHERE e.expires_at < $1 AND NOT EXISTS (
                 SELECT 1 FROM hookgate_deliveries d
                 WHERE d.event_pk = e.id AND d.state <> 'delivered')",
        )
        .bind(now)
        .execute(&self.pool)
        .await?;
        sqlx::query(crate::store::body_hashes::PURGE_SQL)
            .bind(now)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected())
    }

    async fn claim_due(
        &self,
        target: &str,
        now: Millis,
        lease_until: Millis,
        token: &str,
        limit: i64,
    ) -> Result<Vec<DueDelivery>, StoreError> {
        outbox::claim_due(&self.pool, target, now, lease_until, token, limit).await
    }

    async fn finish_attempts(
        &self,
        token: &str,
        batch: &[(i64, AttemptRecord)],
    ) -> Result<Vec<bool>, StoreError> {
        outbox::finish_attempts(&self.pool, token, batch).await
    }

    async fn expedite(&self, target: &str, now: Millis) -> Result<u64, StoreError> {
        outbox::expedite(&self.pool, target, now).await
    }

    async fn release_leases(&self, token: &str, target: &str) -> Result<u64, StoreError> {
        outbox::release_leases(&self.pool, token, target).await
    }

    async fn delivery_counts(&self) -> Result<Vec<DeliveryCount>, StoreError> {
        let rows = sqlx::query(COUNTS_SQL).fetch_all(&self.pool).await?;
        rows.iter().map(count_from_row).collect()
    }

    async fn attempts(
        &self,
        source: &str,
        event_id: &str,
        target: &str,
    ) -> Result<Vec<AttemptRow>, StoreError> {
        let rows = sqlx::query(ATTEMPTS_SQL)
            .bind(source)
            .bind(event_id)
            .bind(target)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(attempt_from_row).collect()
    }

    fn console(&self) -> &dyn crate::store::events::Console {
        self
    }

    async fn listen(&self, on_commit: OnCommit, stop: CancellationToken) {
        listen::listen(&self.pool, on_commit, stop).await
    }

    async fn event_count(&self, source: &str, event_id: &str) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(EVENT_COUNT_SQL)
            .bind(source)
            .bind(event_id)
            .fetch_one(&self.pool)
            .await?)
    }
}
