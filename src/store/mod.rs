//! Store: the durable ledger (PostgreSQL, or SQLite for the embedded
//! default), offered as one capability per kind of caller:
//! - [`EventLog`]: events, their delivery rows, body claims and duplicate
//!   arrivals (dedup's writer, ingest's arrivals, the purge);
//! - [`Outbox`]: leasing due deliveries and recording attempts (deliver);
//! - [`Tallies`]: cluster-wide counters and delivery counts (stats, `/stats`);
//! - [`Backlog`]: each target's backlog and each source's last stored event
//!   (`/metrics`, read once per scrape and shared by concurrent scrapes);
//! - [`Console`]: the admin console's queries and operator writes;
//! - [`ReconcileStore`]: reconciliation's leases, checkpoints and resends;
//! - [`IdempotencyStore`]: the Idempotency-Key proxy's rows;
//! - [`BulkStore`]: bulk actions (plan, progress, cancel) and the audit log;
//! - [`RefusedLog`]: requests that failed verification (ingest's writer,
//!   the console's refused view);
//! - [`AlertState`]: alert conditions' episodes (compare-and-set);
//! - [`Backend`]: the database itself (migrations, readiness).
//!
//! Rule: an event row and its delivery rows are written in one transaction,
//! and a request is answered 2xx only after that transaction committed. A
//! caller holds only the capability it uses ([`Store`] hands them out);
//! statements that are the same text on both databases live once, in the
//! capability's module or in `rows`, and the backends hold only what
//! differs.

pub mod alert_state;
pub mod backlog;
pub mod body_hashes;
pub mod bulk;
pub mod clock;

/// Most rows one purge statement deletes; purges loop over batches so a
/// backlog (a long outage, a lowered `dedup_window`) never becomes one
/// statement that holds its locks, WAL or SQLite's single writer until it
/// ends.
pub const PURGE_BATCH: i64 = 1000;
pub mod console;
pub mod event_log;
pub mod handshake_secrets;
pub mod idempotency;
pub mod outbox;
mod portable;
pub mod postgres;
pub mod provider_keys;
pub mod reconcile;
pub mod refused;
mod rows;
pub mod sqlite;
pub mod tallies;

pub use alert_state::AlertState;
pub use backlog::Backlog;
pub use bulk::BulkStore;
pub use console::Console;
pub use event_log::{EventFacts, EventLog, HandoffLease, LeasedRow, NewEvent, Recorded, Written};
pub use handshake_secrets::HandshakeSecrets;
pub use idempotency::IdempotencyStore;
pub use outbox::{
    AttemptRecord, DueDelivery, LeaseRequest, NextState, OnCommit, Outbox, RateGrant,
};
pub use provider_keys::ProviderKeys;
pub use reconcile::ReconcileStore;
pub use refused::RefusedLog;
pub use tallies::{DeliveryCount, Tallies};

use async_trait::async_trait;
use portable::Portable;
use std::sync::Arc;

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
    /// The failure of the group-commit batch this job was written in, the
    /// same error for every job of the batch.
    #[error("{0}")]
    BatchFailed(Arc<StoreError>),
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
            Self::BatchFailed(e) => e.is_about_the_data(),
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

/// The database behind every capability.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// Applies the backend's migrations.
    async fn migrate(&self) -> Result<(), StoreError>;
    /// One round trip that proves the database answers.
    async fn ping(&self) -> Result<(), StoreError>;
    /// The database server's clock when replicas share the ledger
    /// (PostgreSQL), which they then all follow
    /// (`primitives::time::follow_ledger_clock`); `None` for a ledger one
    /// process opens (SQLite), which keeps the wall clock.
    async fn clock(&self) -> Result<Option<crate::primitives::time::Millis>, StoreError>;
}

/// One ledger's capabilities, each a handle to the same database; cheap to
/// clone. Wiring gives each caller the field it uses, so a signature says
/// which part of the ledger a module touches.
#[derive(Clone)]
pub struct Store {
    pub backend: Arc<dyn Backend>,
    pub event_log: Arc<dyn EventLog>,
    pub outbox: Arc<dyn Outbox>,
    pub tallies: Arc<dyn Tallies>,
    /// Shared by every clone: one read serves concurrent scrapes.
    pub backlog: Arc<dyn Backlog>,
    /// The same reads, never cached: the alert evaluator's (a reading
    /// older than a peer's would undo the change the peer told).
    pub backlog_now: Arc<dyn Backlog>,
    pub console: Arc<dyn Console>,
    pub reconcile: Arc<dyn ReconcileStore>,
    pub idempotency: Arc<dyn IdempotencyStore>,
    pub handshake_secrets: Arc<dyn HandshakeSecrets>,
    pub provider_keys: Arc<dyn ProviderKeys>,
    /// Bulk actions and the audit log.
    pub bulk: Arc<dyn BulkStore>,
    pub refused: Arc<dyn RefusedLog>,
    /// Alert conditions' episodes (`alerts`).
    pub alert_state: Arc<dyn AlertState>,
}

impl Store {
    /// The handles of a backend that implements the capabilities whose
    /// statements differ per database, and of the portable ones (the same
    /// statements on its main pool).
    fn of<B, DB: sqlx::Database>(backend: Arc<B>, portable: Portable<DB>) -> Self
    where
        B: Backend + EventLog + Outbox + Tallies,
        Portable<DB>: Backlog
            + Console
            + ReconcileStore
            + IdempotencyStore
            + HandshakeSecrets
            + ProviderKeys
            + BulkStore
            + RefusedLog
            + AlertState,
    {
        let portable = Arc::new(portable);
        Self {
            backend: backend.clone(),
            event_log: backend.clone(),
            outbox: backend.clone(),
            tallies: backend,
            backlog: Arc::new(backlog::Cached::new(portable.clone(), backlog::FRESH_FOR)),
            backlog_now: portable.clone(),
            console: portable.clone(),
            reconcile: portable.clone(),
            idempotency: portable.clone(),
            handshake_secrets: portable.clone(),
            provider_keys: portable.clone(),
            bulk: portable.clone(),
            refused: portable.clone(),
            alert_state: portable,
        }
    }
}

/// Opens the ledger named by the config.
pub async fn connect(
    db: &crate::config::Database,
    max_connections: Option<u32>,
    statement_timeout: std::time::Duration,
) -> Result<Store, StoreError> {
    use crate::config::Database;
    Ok(match db {
        Database::Postgres(url) => {
            let pg = postgres::PgStore::connect(url, max_connections, statement_timeout)?;
            let portable = pg.portable();
            Store::of(Arc::new(pg), portable)
        }
        Database::Sqlite(url) => {
            let lite = sqlite::SqliteStore::connect(url, max_connections).await?;
            let portable = lite.portable();
            Store::of(Arc::new(lite), portable)
        }
    })
}
