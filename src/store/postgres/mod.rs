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
    ATTEMPTS_SQL, COUNTERS_SQL, COUNTS_SQL, EVENT_COUNT_SQL, OVERTAKEN_SQL, attempt_from_row,
    count_from_row,
};
use super::*;
use crate::primitives::secret::Secret;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, PgConnection};
use std::str::FromStr;
use std::time::Duration;

pub struct PgLedger {
    pool: PgPool,
    /// The delivery loops' claims, successor claims and `expedite`: a few
    /// connections of their own with sequential scans priced out (see [`PgLedger::connect`]).
    outbox: PgPool,
    /// Attempt records only: the outbox's settings plus asynchronous commit
    /// (see [`PgLedger::connect`]).
    records: PgPool,
    /// Bound of one ledger call once it holds a connection (see [`bounded`]).
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

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

/// Runs `$work`, an expression using the connection `$c`, on one pooled
/// connection for at most the ledger's `statement_timeout`.
///
/// Why a client-side deadline as well as the server-side one: when the
/// network goes silent (a blackholed route, a frozen proxy) the server's
/// `statement_timeout` error never arrives either. On timeout the
/// connection is detached and dropped, closing its socket at once: returned
/// to the pool, sqlx would ping it before reuse, and that ping would hang
/// holding a pool slot. sqlx 0.9 has no TCP keepalive option for
/// PostgreSQL, so this deadline is what bounds a silent connection.
macro_rules! bounded {
    ($ledger:expr, |$c:ident| $work:expr) => {{ bounded!($ledger, pool, |$c| $work) }};
    ($ledger:expr, $pool:ident, |$c:ident| $work:expr) => {{
        let ledger: &PgLedger = $ledger;
        let mut conn = ledger.$pool.acquire().await?;
        let outcome = {
            let $c: &mut PgConnection = &mut conn;
            tokio::time::timeout(ledger.statement_timeout, $work).await
        };
        match outcome {
            Ok(result) => result,
            Err(_) => {
                drop(conn.detach());
                Err(StoreError::Timeout(ledger.statement_timeout))
            }
        }
    }};
}

/// How long a pooled connection may sit unused before it is pinged on its
/// way out of the pool. Under load the writers take a connection back within
/// milliseconds, so none is pinged; on a quiet gateway, where a round trip
/// more costs nothing, nearly every checkout still is.
const PING_AFTER_IDLE: Duration = Duration::from_millis(100);

/// The pools' options. sqlx pings every connection it hands out by default,
/// one more round trip before each ledger write, on the path every event
/// waits on (docs/design.md, "Thirteenth pass"). A connection in steady use
/// answered a moment ago; only one that sat idle for [`PING_AFTER_IDLE`]
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

impl PgLedger {
    /// Creates a lazy pool: the process starts even while the database is
    /// down, and requests then get 503 instead of hanging.
    /// `statement_timeout` bounds each call on the request and delivery
    /// paths (client side, see [`bounded`]) and each statement (server side,
    /// except migrations and purge, which may legitimately run longer).
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
        // grew (measured: 20 M rows read in 6 s of load, a quarter of
        // PostgreSQL's CPU per delivered event). With sequential scans
        // priced out, every plan of these statements uses the index.
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
}

#[async_trait]
impl Ledger for PgLedger {
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
        bounded!(self, |c| async {
            sqlx::query("SELECT 1").execute(&mut *c).await?;
            Ok(())
        })
    }

    async fn record(&self, batch: &[NewEvent]) -> Result<Vec<Recorded>, StoreError> {
        bounded!(self, |c| record::record(c, batch, &self.fresh_pause))
    }

    async fn claim_body(
        &self,
        c: &crate::store::body_hashes::BodyClaim<'_>,
    ) -> Result<String, StoreError> {
        let claim = sqlx::query_scalar(crate::store::body_hashes::CLAIM_SQL)
            .bind(c.source)
            .bind(&c.body_sha256[..])
            .bind(c.event_id)
            .bind(c.expires_at)
            .bind(c.now);
        // On the request path: bounded like `record`.
        bounded!(self, |conn| async {
            Ok(claim.fetch_one(&mut *conn).await?)
        })
    }

    async fn add_counters(&self, deltas: &[(String, String, i64)]) -> Result<(), StoreError> {
        if deltas.is_empty() {
            return Ok(());
        }
        let write = sqlx::query(
            "INSERT INTO hookgate_counters (source, name, value)
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::int8[])
             ON CONFLICT (source, name) DO UPDATE
                 SET value = hookgate_counters.value + excluded.value",
        )
        .bind(deltas.iter().map(|d| d.0.as_str()).collect::<Vec<_>>())
        .bind(deltas.iter().map(|d| d.1.as_str()).collect::<Vec<_>>())
        .bind(deltas.iter().map(|d| d.2).collect::<Vec<_>>());
        bounded!(self, |c| async {
            write.execute(&mut *c).await?;
            Ok(())
        })
    }

    async fn counters(&self) -> Result<Vec<(String, String, i64)>, StoreError> {
        bounded!(self, |c| async {
            Ok(sqlx::query_as(COUNTERS_SQL).fetch_all(&mut *c).await?)
        })
    }

    async fn purge(&self, now: Millis) -> Result<u64, StoreError> {
        // Background work that may take long on a big table: no deadline,
        // and no server-side statement timeout for this transaction.
        // Arrival, attempt and delivery rows have no foreign key
        // (migrations 0008, 0011): they go in the same statement as their
        // event.
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET LOCAL statement_timeout = 0")
            .execute(&mut *tx)
            .await?;
        let n: i64 = sqlx::query_scalar(
            "WITH gone AS (
                 DELETE FROM hookgate_events e WHERE e.expires_at < $1 AND NOT EXISTS (
                     SELECT 1 FROM hookgate_deliveries d
                     WHERE d.event_pk = e.id AND d.state <> 'delivered')
                 RETURNING e.id
             ), arrivals AS (
                 DELETE FROM hookgate_arrivals a USING gone WHERE a.event_pk = gone.id
             ), attempts AS (
                 DELETE FROM hookgate_attempts t USING hookgate_deliveries d, gone
                 WHERE t.delivery_id = d.id AND d.event_pk = gone.id
             ), deliveries AS (
                 DELETE FROM hookgate_deliveries d USING gone WHERE d.event_pk = gone.id
             )
             SELECT COUNT(*) FROM gone",
        )
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        sqlx::query(crate::store::body_hashes::PURGE_SQL)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(n as u64)
    }

    async fn claim_due(
        &self,
        target: &str,
        now: Millis,
        lease_until: Millis,
        token: &str,
        limit: i64,
    ) -> Result<Vec<DueDelivery>, StoreError> {
        bounded!(self, outbox, |c| outbox::claim_due(
            c,
            target,
            now,
            lease_until,
            token,
            limit
        ))
    }

    async fn claim_due_ordered(
        &self,
        target: &str,
        now: Millis,
        lease_until: Millis,
        token: &str,
        limit: i64,
        after: &str,
    ) -> Result<(Vec<DueDelivery>, Option<String>), StoreError> {
        bounded!(self, outbox, |c| outbox::claim_due_ordered(
            c,
            target,
            now,
            lease_until,
            token,
            limit,
            after
        ))
    }

    async fn claim_successor(
        &self,
        target: &str,
        key: &str,
        now: Millis,
        lease_until: Millis,
        token: &str,
    ) -> Result<Option<DueDelivery>, StoreError> {
        bounded!(self, outbox, |c| outbox::claim_successor(
            c,
            target,
            key,
            now,
            lease_until,
            token
        ))
    }

    async fn take_rate_tokens(
        &self,
        target: &str,
        want: u32,
        per_sec: f64,
        capacity: f64,
    ) -> Result<Option<crate::store::RateGrant>, StoreError> {
        bounded!(self, outbox, |c| outbox::take_rate_tokens(
            c, target, want, per_sec, capacity
        ))
        .map(Some)
    }

    async fn finish_attempts(
        &self,
        token: &str,
        batch: &[(i64, AttemptRecord)],
    ) -> Result<Vec<bool>, StoreError> {
        bounded!(self, records, |c| outbox::finish_attempts(c, token, batch))
    }

    async fn expedite(&self, target: &str, now: Millis) -> Result<u64, StoreError> {
        bounded!(self, outbox, |c| outbox::expedite(c, target, now))
    }

    async fn release_leases(&self, token: &str, target: &str) -> Result<u64, StoreError> {
        bounded!(self, |c| outbox::release_leases(c, token, target))
    }

    async fn delivery_counts(&self) -> Result<Vec<DeliveryCount>, StoreError> {
        bounded!(self, |c| async {
            let rows = sqlx::query(COUNTS_SQL).fetch_all(&mut *c).await?;
            rows.iter().map(count_from_row).collect()
        })
    }

    async fn overtaken(&self) -> Result<Vec<DeliveryCount>, StoreError> {
        bounded!(self, |c| async {
            let rows = sqlx::query(OVERTAKEN_SQL).fetch_all(&mut *c).await?;
            rows.iter().map(count_from_row).collect()
        })
    }

    async fn attempts(
        &self,
        source: &str,
        event_id: &str,
        target: &str,
    ) -> Result<Vec<AttemptRow>, StoreError> {
        bounded!(self, |c| async {
            let rows = sqlx::query(ATTEMPTS_SQL)
                .bind(source)
                .bind(event_id)
                .bind(target)
                .fetch_all(&mut *c)
                .await?;
            rows.iter().map(attempt_from_row).collect()
        })
    }

    fn console(&self) -> &dyn crate::store::events::Console {
        self
    }

    fn reconcile(&self) -> &dyn crate::store::reconcile::ReconcileStore {
        self
    }

    async fn listen(&self, on_commit: OnCommit, stop: CancellationToken) {
        listen::listen(&self.pool, on_commit, stop).await
    }

    async fn event_count(&self, source: &str, event_id: &str) -> Result<i64, StoreError> {
        bounded!(self, |c| async {
            Ok(sqlx::query_scalar(EVENT_COUNT_SQL)
                .bind(source)
                .bind(event_id)
                .fetch_one(&mut *c)
                .await?)
        })
    }
}
crate::store::reconcile::impl_reconcile_store!(PgLedger);
