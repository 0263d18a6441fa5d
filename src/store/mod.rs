//! Store: the durable ledger (PostgreSQL, or SQLite for the embedded default).
//!
//! Rule: an event row and its delivery rows are written in one transaction,
//! and a request is answered 2xx only after that transaction committed.
//! Concurrent requests share transactions through [`batch::GroupCommit`].

pub mod arrivals;
pub mod batch;
pub mod body_hashes;
pub mod events;
pub mod idempotency;
pub mod postgres;
mod rows;
pub mod sqlite;

use crate::config::Database;
use crate::primitives::time::Millis;
use async_trait::async_trait;
use bytes::Bytes;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A verified event ready to be written.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub source: String,
    pub event_id: String,
    pub body: Bytes,
    pub body_sha256: [u8; 32],
    /// JSON array of `[name, value]` pairs.
    pub headers: String,
    pub received_at: Millis,
    pub expires_at: Millis,
    /// One delivery row per target is written with the event.
    pub targets: Vec<String>,
    /// Verification facts shown by the admin console (see `store::events`).
    pub facts: EventFacts,
}

/// What verification learned besides the id: event type, matched secret,
/// provider timestamp (unix seconds).
#[derive(Debug, Clone, Default)]
pub struct EventFacts {
    pub event_type: Option<String>,
    pub key_index: Option<i32>,
    pub provider_ts: Option<i64>,
}

/// What the ledger did with one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// First time: the row and its deliveries are committed.
    New,
    /// Already there; `stored_sha256` is the hash of the body first recorded,
    /// `expires_at` the end of that row's dedup window.
    Duplicate {
        stored_sha256: Vec<u8>,
        expires_at: Millis,
    },
}

/// The ledger could not be reached or refused the write. Always a 503 for
/// ingest: the provider's retry will be accepted later.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("ledger writer stopped")]
    Closed,
    /// The failure of a group-commit batch this event was part of.
    #[error("{0}")]
    Shared(Arc<StoreError>),
}

/// A delivery a worker has leased.
#[derive(Debug, Clone)]
pub struct DueDelivery {
    pub id: i64,
    pub source: String,
    pub target: String,
    pub event_id: String,
    pub body: Bytes,
    pub headers: String,
    pub received_at: Millis,
    /// Attempts made before this one.
    pub attempts: i32,
}

/// Where a delivery goes after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextState {
    Delivered,
    RetryAt(Millis),
    Dead,
}

/// One attempt, as recorded.
#[derive(Debug, Clone)]
pub struct AttemptRecord {
    pub started_at: Millis,
    pub latency_ms: i64,
    pub status: Option<i32>,
    pub error: Option<String>,
    pub next: NextState,
}

impl AttemptRecord {
    /// When the attempt ended (the delivery's new `updated_at`).
    pub fn finished_at(&self) -> Millis {
        Millis(self.started_at.0.saturating_add(self.latency_ms))
    }
}

/// Deliveries grouped by source, target and state (`retrying` = pending
/// with at least one failed attempt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryCount {
    pub source: String,
    pub target: String,
    pub state: String,
    pub count: i64,
}

/// One recorded attempt, for `/admin` and tests.
#[derive(Debug, Clone)]
pub struct AttemptRow {
    pub attempt: i32,
    pub status: Option<i32>,
    pub error: Option<String>,
    pub latency_ms: i64,
}

/// Called with a target name when deliveries for it were committed.
pub type OnCommit = Arc<dyn for<'a> Fn(&'a str) + Send + Sync>;

/// The durable truth. Sized to what dedup, delivery and stats need.
#[async_trait]
pub trait Ledger: Send + Sync + 'static {
    /// Applies the backend's migrations.
    async fn migrate(&self) -> Result<(), StoreError>;
    /// One round trip that proves the database answers.
    async fn ping(&self) -> Result<(), StoreError>;
    /// Inserts every event not already present, with its delivery rows, in
    /// ONE transaction. Results are in input order.
    async fn record(&self, batch: &[NewEvent]) -> Result<Vec<Recorded>, StoreError>;
    /// `dedup_by_body`: claims the body for `c.event_id` unless another id
    /// holds it within its window; returns the id holding it afterwards
    /// (see [`body_hashes`]).
    async fn claim_body(&self, c: &body_hashes::BodyClaim<'_>) -> Result<String, StoreError>;
    /// Adds `(source, counter, delta)` to the cluster-wide counters.
    async fn add_counters(&self, deltas: &[(String, String, i64)]) -> Result<(), StoreError>;
    /// All cluster-wide counters.
    async fn counters(&self) -> Result<Vec<(String, String, i64)>, StoreError>;
    /// Deletes events past their window whose deliveries are all delivered,
    /// and body claims past theirs.
    async fn purge(&self, now: Millis) -> Result<u64, StoreError>;

    /// Leases up to `limit` due deliveries of `target` to the caller.
    async fn claim_due(
        &self,
        target: &str,
        now: Millis,
        lease_until: Millis,
        token: &str,
        limit: i64,
    ) -> Result<Vec<DueDelivery>, StoreError>;
    /// Records attempts and moves their deliveries on, all in ONE
    /// transaction (group commit of outcomes). One result per input, in
    /// order: `false` when the lease was lost (another worker owns the row).
    async fn finish_attempts(
        &self,
        token: &str,
        batch: &[(i64, AttemptRecord)],
    ) -> Result<Vec<bool>, StoreError>;
    /// Records one attempt (see [`Ledger::finish_attempts`]).
    async fn finish_attempt(
        &self,
        delivery_id: i64,
        token: &str,
        rec: &AttemptRecord,
    ) -> Result<bool, StoreError> {
        let done = self
            .finish_attempts(token, &[(delivery_id, rec.clone())])
            .await?;
        Ok(done.first().copied().unwrap_or(false))
    }
    /// Makes `target`'s unleased retrying deliveries due at `now` (the target
    /// answered again after failures: its backlog should not sit out its
    /// backoff). Returns how many rows moved.
    async fn expedite(&self, target: &str, now: Millis) -> Result<u64, StoreError>;
    /// Gives back the leases held under `token` on `target`'s deliveries
    /// (graceful shutdown of that target's loop). Per target: another
    /// target's loop of the same process may still be finishing attempts
    /// under the same token, and its leases must hold until it has recorded
    /// them.
    async fn release_leases(&self, token: &str, target: &str) -> Result<u64, StoreError>;
    async fn delivery_counts(&self) -> Result<Vec<DeliveryCount>, StoreError>;
    /// Attempts of one event's delivery to one target, oldest first.
    async fn attempts(
        &self,
        source: &str,
        event_id: &str,
        target: &str,
    ) -> Result<Vec<AttemptRow>, StoreError>;
    /// Calls `on_commit(target)` whenever any process commits deliveries for
    /// `target`, until `stop`. Single-process backends have nothing to hear.
    async fn listen(&self, on_commit: OnCommit, stop: CancellationToken) {
        let _ = on_commit;
        stop.cancelled().await;
    }
    /// The admin console's reads and operator writes (`store::events`).
    fn console(&self) -> &dyn events::Console;
    /// Number of event rows (tests and diagnostics).
    async fn event_count(&self, source: &str, event_id: &str) -> Result<i64, StoreError>;
}

/// Opens the ledger named by the config.
pub async fn connect(
    db: &Database,
    max_connections: Option<u32>,
) -> Result<Arc<dyn Ledger>, StoreError> {
    Ok(match db {
        Database::Postgres(url) => Arc::new(postgres::PgLedger::connect(url, max_connections)?),
        Database::Sqlite(url) => {
            Arc::new(sqlite::SqliteLedger::connect(url, max_connections).await?)
        }
    })
}
