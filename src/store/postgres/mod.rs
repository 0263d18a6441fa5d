//! PostgreSQL: the production backend, shared by every replica.
//!
//! Rule: every statement here is PostgreSQL-specific or the shared text of
//! [`super::rows`]; nothing is imported from the SQLite backend. One file
//! per capability whose statements are its own:
//! - [`event_log`](self::event_log) (batched inserts in [`record`](self::record), `UNNEST`);
//! - [`outbox`](self::outbox): leasing, finishing and expediting deliveries,
//!   the shared rate buckets, and [`listen`](self::listen)'s `LISTEN`/`NOTIFY`
//!   wake-ups across replicas;
//! - [`tallies`](self::tallies).

mod event_log;
mod listen;
mod outbox;
mod record;
mod record_sql;
mod tallies;

use super::console::Dialect;
use super::portable::Portable;
use super::{Backend, StoreError};
use crate::primitives::secret::Secret;
use crate::primitives::time::Millis;
use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, PgConnection, Postgres};
use std::str::FromStr;
use std::time::Duration;

pub struct PgStore {
    pool: PgPool,
    /// The delivery loops' claims, successor claims and `expedite`: a few
    /// connections of their own with sequential scans priced out (see [`PgStore::connect`]).
    outbox: PgPool,
    /// Attempt records only: the outbox's settings plus asynchronous commit
    /// (see [`PgStore::connect`]).
    records: PgPool,
    /// Bound of one ledger call once it holds a connection (see
    /// [`PgStore::bounded`]).
    statement_timeout: Duration,
    /// Batches still to write with conflict handling before a fresh batch
    /// is tried as a plain INSERT again (see `record::FreshPause`).
    fresh_pause: record::FreshPause,
}

/// The NOTIFY channel carrying target names with newly committed deliveries.
const NOTIFY_CHANNEL: &str = "hookgate_deliveries";

/// Connections of the outbox pool: the claims of the target loops.
const OUTBOX_CONNECTIONS: u32 = 6;

/// Connections of the record pool: `deliver::record`'s one writer (its
/// commits are asynchronous, so a batch returns in a fraction of a
/// millisecond while the next one forms).
const RECORD_CONNECTIONS: u32 = 1;

/// Longest wait for a pooled connection (the pool is full, or opening a new
/// connection gets no answer).
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

/// The migrations. `ignore_missing`: a ledger that a newer release has
/// already migrated further (a rolling upgrade, a rollback) still opens;
/// docs/upgrade.md says why that is safe (each release's migrations only
/// add) and what is checked.
static MIGRATOR: sqlx::migrate::Migrator = {
    let mut m = sqlx::migrate!("migrations/postgres");
    m.ignore_missing = true;
    m
};

/// How long a pooled connection may sit unused before it is pinged on its
/// way out of the pool. Under load the writers take a connection back within
/// milliseconds, so none is pinged; on a quiet gateway, where a round trip
/// more costs nothing, nearly every checkout still is.
const PING_AFTER_IDLE: Duration = Duration::from_millis(100);

/// The pools' options. sqlx pings every connection it hands out by default,
/// one more round trip before each ledger write, on the path every event
/// waits on. A connection in steady use answered a moment ago; only one
/// that sat idle for [`PING_AFTER_IDLE`]
/// (the ones a database restart in a quiet hour leaves behind) is pinged, and
/// dropped for a new one if the ping fails. A connection that breaks while in
/// use fails its call, and the pool drops it when it comes back (sqlx pings
/// every connection returned to it).
fn pool_options() -> PgPoolOptions {
    PgPoolOptions::new()
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= PING_AFTER_IDLE {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
}

impl PgStore {
    /// Creates a lazy pool: the process starts even while the database is
    /// down, and requests then get 503 instead of hanging.
    /// `statement_timeout` bounds each call on the request and delivery
    /// paths (client side, see [`PgStore::bounded`]) and each statement
    /// (server side, except migrations and purge, which may legitimately run
    /// longer).
    pub fn connect(
        url: &Secret,
        max_connections: Option<u32>,
        statement_timeout: Duration,
    ) -> Result<Self, StoreError> {
        let opts = PgConnectOptions::from_str(url.expose())?
            .options([(
                "statement_timeout",
                format!("{}ms", statement_timeout.as_millis().max(1)),
            )])
            .log_statements(tracing::log::LevelFilter::Debug)
            .log_slow_statements(tracing::log::LevelFilter::Warn, Duration::from_secs(1));
        // The outbox's statements find their rows by index (the due index,
        // the primary key). sqlx prepares each statement once per
        // connection, and after five runs PostgreSQL may keep a generic
        // plan made while the table was still small: a sequential scan of
        // hookgate_deliveries in the attempt record, kept while the table
        // grew to millions of rows. With sequential scans priced out, every
        // plan of these statements uses the index.
        let outbox = pool_options()
            .max_connections(OUTBOX_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_lazy_with(opts.clone().options([("enable_seqscan", "off")]));
        // Attempt records commit asynchronously: COMMIT returns before its
        // WAL is flushed (PostgreSQL, "Asynchronous Commit": a server crash
        // may lose the last few hundred milliseconds of such commits, never
        // corrupts). Losing one only undoes the record: the row is still
        // leased under our token, the lease expires and the event is sent
        // again, which is the at-least-once promise a crash between send and
        // record already makes. Every commit that must not be lost (an
        // event's, a claim's, a replay's) stays synchronous, and it flushes
        // the WAL written before it, records included: a claim that saw a
        // row delivered (an ordered key's successor) is never durable
        // without that record.
        let records = pool_options()
            .max_connections(RECORD_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_lazy_with(
                opts.clone()
                    .options([("enable_seqscan", "off"), ("synchronous_commit", "off")]),
            );
        let pool = pool_options()
            .max_connections(max_connections.unwrap_or(10))
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_lazy_with(opts);
        Ok(Self {
            pool,
            outbox,
            records,
            statement_timeout,
            fresh_pause: record::FreshPause::default(),
        })
    }

    /// Runs `work` on one connection of `pool` for at most the ledger's
    /// `statement_timeout`.
    ///
    /// Why a client-side deadline as well as the server-side one: when the
    /// network goes silent (a blackholed route, a frozen proxy) the server's
    /// `statement_timeout` error never arrives either. On timeout the
    /// connection is detached and dropped, closing its socket at once:
    /// returned to the pool, sqlx would ping it before reuse, and that ping
    /// would hang holding a pool slot. sqlx 0.9 has no TCP keepalive option
    /// for PostgreSQL, so this deadline is what bounds a silent connection.
    async fn bounded<T>(
        &self,
        pool: &PgPool,
        work: impl AsyncFnOnce(&mut PgConnection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut conn = pool.acquire().await?;
        match tokio::time::timeout(self.statement_timeout, work(&mut conn)).await {
            Ok(result) => result,
            Err(_) => {
                drop(conn.detach());
                Err(StoreError::Timeout(self.statement_timeout))
            }
        }
    }

    /// The capabilities whose SQL both backends share, on the main pool.
    pub(super) fn portable(&self) -> Portable<Postgres> {
        Portable::new(self.pool.clone(), Dialect::Postgres)
    }
}

#[async_trait]
impl Backend for PgStore {
    async fn migrate(&self) -> Result<(), StoreError> {
        // A pool of its own without the statement timeout: a migration (an
        // index build) may run longer. The later `-c` option wins.
        let opts = (*self.pool.connect_options())
            .clone()
            .options([("statement_timeout", "0")]);
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(opts)
            .await?;
        let done = MIGRATOR.run(&pool).await;
        pool.close().await;
        Ok(done?)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.bounded(&self.pool, async |c| {
            sqlx::query("SELECT 1").execute(&mut *c).await?;
            Ok(())
        })
        .await
    }

    async fn clock(&self) -> Result<Option<Millis>, StoreError> {
        // clock_timestamp(), not now(): the time the statement runs, not
        // when its transaction began.
        self.bounded(&self.pool, async |c| {
            let ms: i64 =
                sqlx::query_scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::int8")
                    .fetch_one(&mut *c)
                    .await?;
            Ok(Some(Millis(ms)))
        })
        .await
    }
}
