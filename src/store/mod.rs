//! Store: the durable ledger (PostgreSQL, or SQLite for the embedded default).
//!
//! Rule: an event row and its delivery rows are written in one transaction,
//! and a request is answered 2xx only after that transaction committed.
//! Concurrent requests share transactions through [`batch::GroupCommit`].

pub mod arrivals;
pub mod batch;
pub mod body_hashes;
pub mod events;
pub mod handoff;
pub mod idempotency;
pub mod postgres;
pub mod reconcile;
mod rows;
pub mod sqlite;

use crate::config::Database;
use crate::primitives::time::Millis;
use async_trait::async_trait;
use bytes::Bytes;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A verified event ready to be written.
#[derive(Debug)]
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
    /// Parallel to `targets`: the delivery's ordering key. `None`: the
    /// target has no `order_by`; `Some("")`: it has, but the event holds no
    /// key (delivered unordered); otherwise the key, and the row gets the
    /// next sequence number of its (target, key) in the event's transaction.
    pub order_keys: Vec<Option<String>>,
    /// Verification facts shown by the admin console (see `store::events`).
    pub facts: EventFacts,
    /// Slots on this process's delivery lanes: reserved targets' rows are
    /// written leased and handed to their loops after COMMIT (`handoff`).
    pub handoff: Option<handoff::Reservation>,
    /// The cache had no entry for this id: this request took its claim, so
    /// the ledger is unlikely to hold it. PostgreSQL writes a batch of fresh
    /// events without delivery rows as a plain INSERT first, and only after
    /// a unique violation with `ON CONFLICT` (`postgres::record`).
    pub fresh: bool,
}

impl NewEvent {
    /// Target `i`'s ordering key, if it has one.
    pub fn order_key(&self, i: usize) -> Option<&str> {
        self.order_keys.get(i).and_then(Option::as_deref)
    }

    /// The lease to write on target `i`'s delivery row, if it was reserved.
    pub fn lease(&self, i: usize) -> Option<(&str, Millis)> {
        self.handoff.as_ref().and_then(|h| h.lease(i))
    }

    /// After this event committed as new: hands its leased rows
    /// (`(target index, delivery id)`) to their loops and wakes the others.
    pub fn committed(&self, leased: &[(usize, i64)]) {
        if let Some(h) = &self.handoff {
            h.committed(&self.targets, leased, |i, id| DueDelivery {
                id,
                source: self.source.clone(),
                target: self.targets[i].clone(),
                event_id: self.event_id.clone(),
                body: self.body.clone(),
                headers: self.headers.clone(),
                received_at: self.received_at,
                attempts: 0,
                event_type: self.facts.event_type.clone(),
                // Ordered targets have no hand-off lane.
                order_key: None,
            });
        }
    }
}

/// What verification learned besides the id: event type, matched secret,
/// provider timestamp (unix seconds), and whether reconciliation recovered
/// it from the provider's API instead of receiving it.
#[derive(Debug, Clone, Default)]
pub struct EventFacts {
    pub event_type: Option<String>,
    pub key_index: Option<i32>,
    pub provider_ts: Option<i64>,
    pub recovered: bool,
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
    /// The call outlived `storage.statement_timeout`: the database hangs or
    /// the network stopped answering (its connection is discarded).
    #[error("ledger call exceeded the statement timeout ({0:?})")]
    Timeout(std::time::Duration),
    /// The failure of a group-commit batch this event was part of.
    #[error("{0}")]
    Shared(Arc<StoreError>),
}

impl StoreError {
    /// True when the database refused the rows themselves (a constraint, an
    /// invalid value), not the connection: the same write split into smaller
    /// transactions can then succeed for the other rows. Connection errors
    /// and timeouts are false: retrying them would only repeat the wait.
    pub fn is_about_the_data(&self) -> bool {
        match self {
            Self::Database(sqlx::Error::Database(db)) => {
                use sqlx::error::ErrorKind;
                match db.kind() {
                    ErrorKind::UniqueViolation
                    | ErrorKind::ForeignKeyViolation
                    | ErrorKind::NotNullViolation
                    | ErrorKind::CheckViolation => true,
                    _ => rows_refused(db.as_ref()),
                }
            }
            // A value the driver could not encode (e.g. out of range).
            Self::Database(sqlx::Error::Encode(_)) => true,
            Self::Shared(e) => e.is_about_the_data(),
            _ => false,
        }
    }
}

/// Backend codes that blame the rows: PostgreSQL SQLSTATE classes 22 (data
/// exception, e.g. a NUL byte in text) and 23 (integrity constraint);
/// SQLite primary codes `SQLITE_TOOBIG`, `SQLITE_CONSTRAINT` (also a
/// trigger's `RAISE(ABORT, …)`) and `SQLITE_MISMATCH`.
/// <https://www.postgresql.org/docs/current/errcodes-appendix.html>,
/// <https://www.sqlite.org/rescode.html>
fn rows_refused(db: &dyn sqlx::error::DatabaseError) -> bool {
    let Some(code) = db.code() else {
        return false;
    };
    if db
        .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
        .is_some()
    {
        return code.starts_with("22") || code.starts_with("23");
    }
    if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
        return code
            .parse::<i32>()
            .is_ok_and(|c| matches!(c & 0xff, 18..=20));
    }
    false
}

/// What a cluster-wide rate bucket gave ([`Ledger::take_rate_tokens`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateGrant {
    pub granted: u32,
    /// With nothing granted: how long until the bucket holds a token.
    pub wait: std::time::Duration,
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
    /// The provider's event type, where it gives one (broker names, metadata).
    pub event_type: Option<String>,
    /// The ordering key, on rows leased by [`Ledger::claim_due_ordered`]
    /// (its loop then asks for the key's next row: [`Ledger::claim_successor`]).
    pub order_key: Option<String>,
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
    /// [`Ledger::claim_due`] for a target with `order_by`: a row with an
    /// ordering key is leased only when no pending row (leased or not,
    /// retrying or not) of the same (target, key) has a lower sequence
    /// number, so at most one row per key is out at a time, in sequence
    /// order, across every replica. Rows whose event had no key are claimed
    /// as usual. Keys are visited round-robin from the one after `after`
    /// (`""` at first); returns the rows and the last key leased, the
    /// caller's next `after`.
    async fn claim_due_ordered(
        &self,
        target: &str,
        now: Millis,
        lease_until: Millis,
        token: &str,
        limit: i64,
        after: &str,
    ) -> Result<(Vec<DueDelivery>, Option<String>), StoreError>;
    /// The first pending row of (`target`, `key`), leased to the caller if
    /// it is due and not leased: a target loop asks this after a row of the
    /// key was delivered or went dead, so a key's backlog flows without a
    /// walk over every key. One index probe.
    async fn claim_successor(
        &self,
        target: &str,
        key: &str,
        now: Millis,
        lease_until: Millis,
        token: &str,
    ) -> Result<Option<DueDelivery>, StoreError>;
    /// `rate`: takes up to `want` tokens from `target`'s bucket shared by
    /// every replica (refilled at `per_sec`, holding at most `capacity`).
    /// `None`: this ledger serves one process, whose own bucket is the cap
    /// (the embedded backend).
    async fn take_rate_tokens(
        &self,
        target: &str,
        want: u32,
        per_sec: f64,
        capacity: f64,
    ) -> Result<Option<RateGrant>, StoreError> {
        let _ = (target, want, per_sec, capacity);
        Ok(None)
    }
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
    /// Per source and target (state `overtaken`): how many deliveries went
    /// ahead of their key's dead deliveries (see [`rows::OVERTAKEN_SQL`]).
    async fn overtaken(&self) -> Result<Vec<DeliveryCount>, StoreError>;
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
    /// Reconciliation's lease, checkpoint and status rows (`store::reconcile`).
    fn reconcile(&self) -> &dyn reconcile::ReconcileStore;
    /// Number of event rows (tests and diagnostics).
    async fn event_count(&self, source: &str, event_id: &str) -> Result<i64, StoreError>;
}

/// Opens the ledger named by the config.
pub async fn connect(
    db: &Database,
    max_connections: Option<u32>,
    statement_timeout: std::time::Duration,
) -> Result<Arc<dyn Ledger>, StoreError> {
    Ok(match db {
        Database::Postgres(url) => Arc::new(postgres::PgLedger::connect(
            url,
            max_connections,
            statement_timeout,
        )?),
        Database::Sqlite(url) => {
            Arc::new(sqlite::SqliteLedger::connect(url, max_connections).await?)
        }
    })
}
