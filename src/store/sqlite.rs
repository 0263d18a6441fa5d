//! SQLite ledger: the embedded default (one process, one file).
//!
//! WAL with `synchronous = FULL`: a commit is on disk before the 2xx. SQLite
//! has one writer at a time, so group commit (one writer task) is what makes
//! concurrent requests cheap here.
//!
//! Rule: statements are SQLite-specific or the shared text of
//! [`super::rows`]; nothing is imported from the PostgreSQL backend.

mod idempotency;

use super::rows::{
    ATTEMPTS_SQL, COUNTERS_SQL, COUNTS_SQL, EVENT_COUNT_SQL, FINISH_ATTEMPT_SQL,
    INSERT_ATTEMPT_SQL, NEXT_SEQ_SQL, ORDERED_CANDIDATES_SQL, OVERTAKEN_SQL, RELEASE_LEASES_SQL,
    SUCCESSOR_SQL, attempt_from_row, count_from_row, due_from_row, first_occurrence, fresh_results,
    next_columns,
};
use super::*;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection, Executor};
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::LazyLock;
use std::time::Duration;

#[path = "sqlite_events.rs"]
mod events;

pub struct SqliteLedger {
    pool: SqlitePool,
    /// The group-commit writer's own connection (see [`SqliteLedger::on_writer`]).
    writer: tokio::sync::Mutex<Option<SqliteConnection>>,
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

impl SqliteLedger {
    pub async fn connect(url: &str, max_connections: Option<u32>) -> Result<Self, StoreError> {
        let opts = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(5))
            // A multi-row INSERT inside the batch's transaction keeps a
            // statement journal (to undo that one statement); past 64 KiB
            // SQLite spills it to a temporary file, created and deleted in
            // every batch. In memory it stays (https://sqlite.org/tempfiles.html,
            // "Statement Journals" and "Temporary File Storage Locations").
            // It is never read for crash recovery, which is the WAL's job.
            .pragma("temp_store", "memory");
        let pool = SqlitePoolOptions::new()
            .max_connections(max_connections.unwrap_or(4))
            .acquire_timeout(Duration::from_secs(5))
            // No ping on each checkout: there is no server to hang up, and
            // a crashed worker thread is still found on return, where the
            // pool pings and drops a broken connection.
            .test_before_acquire(false)
            // A connection on which sqlx still counts a transaction as open
            // (its ROLLBACK failed because SQLite had already ended the
            // transaction, see `on_writer`) is closed, not reused: its next
            // user's transaction would be a savepoint, and a failed one
            // would leave SQLite's transaction open, holding the write lock
            // against every other writer. A transaction dropped on an error
            // path may still have its rollback queued at this point; that
            // connection is closed too (rare, and harmless), so no extra
            // round trip is spent on every release to tell the two apart.
            .after_release(|conn, _| Box::pin(async move { Ok(!conn.is_in_transaction()) }))
            .connect_with(opts)
            .await?;
        Ok(Self {
            pool,
            writer: tokio::sync::Mutex::new(None),
        })
    }

    /// Runs the group-commit writer's batch on a connection of its own.
    /// From the pool it would get a different connection most times, and a
    /// connection that finds the database written by another one since its
    /// last transaction starts from an empty page cache: every b-tree page
    /// of the batch read again (docs/design.md, "Thirteenth pass").
    ///
    /// Any error drops the connection, and the next batch opens a new one.
    /// A refused row is not only the database's answer: on some errors
    /// (`SQLITE_FULL`, an I/O error, a trigger's `RAISE(ROLLBACK)`) SQLite
    /// ends the transaction itself, sqlx's own `ROLLBACK` then fails, and
    /// sqlx 0.9 still counts the transaction as open. Kept, the connection
    /// would make the next batches savepoints inside a transaction that
    /// never commits. Errors are rare; a cold cache after one costs
    /// nothing that matters.
    async fn on_writer<T>(
        &self,
        work: impl AsyncFnOnce(&mut SqliteConnection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut slot = self.writer.lock().await;
        let conn = match &mut *slot {
            Some(c) => c,
            // The pool's own options: the same file and pragmas.
            None => slot.insert(self.pool.connect_options().connect().await?),
        };
        let done = work(conn).await;
        if done.is_err() {
            *slot = None;
        }
        done
    }
}

#[async_trait]
impl Ledger for SqliteLedger {
    async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.pool.execute("SELECT 1").await?;
        Ok(())
    }

    async fn record(&self, batch: &[NewEvent]) -> Result<Vec<Recorded>, StoreError> {
        self.on_writer(async |conn| record(conn, batch).await).await
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
        let mut tx = self.pool.begin().await?;
        for (source, name, delta) in deltas {
            sqlx::query(
                "INSERT INTO hookgate_counters (source, name, value) VALUES (?, ?, ?)
                 ON CONFLICT (source, name) DO UPDATE
                     SET value = hookgate_counters.value + excluded.value",
            )
            .bind(source)
            .bind(name)
            .bind(delta)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn counters(&self) -> Result<Vec<(String, String, i64)>, StoreError> {
        Ok(sqlx::query_as(COUNTERS_SQL).fetch_all(&self.pool).await?)
    }

    async fn purge(&self, now: Millis) -> Result<u64, StoreError> {
        let r = sqlx::query(
            "DELETE FROM hookgate_events WHERE expires_at < ? AND NOT EXISTS (
                 SELECT 1 FROM hookgate_deliveries d
                 WHERE d.event_pk = hookgate_events.id AND d.state <> 'delivered')",
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
        self.claim(CLAIM_SQL, target, now, lease_until, token, limit)
            .await
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
        // One writer: the claim and the cursor's read are one transaction.
        let mut tx = self.pool.begin().await?;
        let ids: Vec<i64> = sqlx::query_scalar(CLAIM_ORDERED_SQL.as_str())
            .bind(target)
            .bind(now)
            .bind(lease_until)
            .bind(token)
            .bind(limit)
            .bind(after)
            .fetch_all(&mut *tx)
            .await?;
        let rows = read_claimed(&mut tx, &ids).await?;
        tx.commit().await?;
        let keys = rows.iter().filter_map(|r| r.order_key.clone()).collect();
        Ok((rows, last_key(keys, after)))
    }

    async fn claim_successor(
        &self,
        target: &str,
        key: &str,
        now: Millis,
        lease_until: Millis,
        token: &str,
    ) -> Result<Option<DueDelivery>, StoreError> {
        static SQL: LazyLock<String> = LazyLock::new(|| {
            format!(
                "UPDATE hookgate_deliveries SET lease_until = ?3, lease_token = ?4
                 WHERE id IN ({SUCCESSOR_SQL}) RETURNING id"
            )
            .replace('$', "?")
        });
        let mut tx = self.pool.begin().await?;
        let ids: Vec<i64> = sqlx::query_scalar(SQL.as_str())
            .bind(target)
            .bind(now)
            .bind(lease_until)
            .bind(token)
            .bind(key)
            .fetch_all(&mut *tx)
            .await?;
        let rows = read_claimed(&mut tx, &ids).await?;
        tx.commit().await?;
        Ok(rows.into_iter().next())
    }

    async fn finish_attempts(
        &self,
        token: &str,
        batch: &[(i64, AttemptRecord)],
    ) -> Result<Vec<bool>, StoreError> {
        // One transaction (one fsync) for the whole batch.
        let mut tx = self.pool.begin().await?;
        let mut out = Vec::with_capacity(batch.len());
        for (delivery_id, rec) in batch {
            let (state, next_at) = next_columns(rec);
            let attempt: Option<i32> = sqlx::query_scalar(FINISH_ATTEMPT_SQL)
                .bind(delivery_id)
                .bind(token)
                .bind(state)
                .bind(next_at)
                .bind(rec.status)
                .bind(rec.error.as_deref())
                .bind(rec.finished_at())
                .fetch_optional(&mut *tx)
                .await?;
            let Some(attempt) = attempt else {
                out.push(false);
                continue;
            };
            sqlx::query(INSERT_ATTEMPT_SQL)
                .bind(delivery_id)
                .bind(attempt)
                .bind(rec.started_at)
                .bind(rec.latency_ms)
                .bind(rec.status)
                .bind(rec.error.as_deref())
                .execute(&mut *tx)
                .await?;
            out.push(true);
        }
        tx.commit().await?;
        Ok(out)
    }

    async fn expedite(&self, target: &str, now: Millis) -> Result<u64, StoreError> {
        let r = sqlx::query(
            "UPDATE hookgate_deliveries SET next_attempt_at = ?2
             WHERE target = ?1 AND state = 'pending' AND attempts > 0 AND next_attempt_at > ?2
               AND (lease_until IS NULL OR lease_until < ?2)",
        )
        .bind(target)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected())
    }

    async fn release_leases(&self, token: &str, target: &str) -> Result<u64, StoreError> {
        let r = sqlx::query(RELEASE_LEASES_SQL)
            .bind(token)
            .bind(target)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected())
    }

    async fn delivery_counts(&self) -> Result<Vec<DeliveryCount>, StoreError> {
        let rows = sqlx::query(COUNTS_SQL).fetch_all(&self.pool).await?;
        rows.iter().map(count_from_row).collect()
    }

    async fn overtaken(&self) -> Result<Vec<DeliveryCount>, StoreError> {
        let rows = sqlx::query(OVERTAKEN_SQL).fetch_all(&self.pool).await?;
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

    fn reconcile(&self) -> &dyn crate::store::reconcile::ReconcileStore {
        self
    }

    async fn event_count(&self, source: &str, event_id: &str) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(EVENT_COUNT_SQL)
            .bind(source)
            .bind(event_id)
            .fetch_one(&self.pool)
            .await?)
    }
}
crate::store::reconcile::impl_reconcile_store!(SqliteLedger);

/// `?` = lease until, token, target, now, now, limit. One writer at a time
/// in SQLite makes this UPDATE the whole claim.
const CLAIM_SQL: &str = "UPDATE hookgate_deliveries SET lease_until = ?, lease_token = ?
     WHERE id IN (
         SELECT id FROM hookgate_deliveries
         WHERE target = ? AND state = 'pending' AND next_attempt_at <= ?
           AND (lease_until IS NULL OR lease_until < ?)
         ORDER BY next_attempt_at LIMIT ?)
     RETURNING id";

/// [`CLAIM_SQL`] for a target with `order_by`: the candidates of
/// [`ORDERED_CANDIDATES_SQL`] (each key's first pending row, round-robin
/// from the cursor), with `?N` placeholders.
static CLAIM_ORDERED_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{ORDERED_CANDIDATES_SQL}
         UPDATE hookgate_deliveries SET lease_until = ?3, lease_token = ?4
         WHERE id IN (
             SELECT d.id FROM hookgate_deliveries d JOIN candidates c ON c.id = d.id
             WHERE d.target = ?1 AND d.state = 'pending' AND d.next_attempt_at <= ?2
               AND (d.lease_until IS NULL OR d.lease_until < ?2)
             ORDER BY c.pass, c.k
             LIMIT ?5)
         RETURNING id"
    )
    .replace('$', "?")
});

impl SqliteLedger {
    async fn claim(
        &self,
        sql: &'static str,
        target: &str,
        now: Millis,
        lease_until: Millis,
        token: &str,
        limit: i64,
    ) -> Result<Vec<DueDelivery>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let ids: Vec<i64> = sqlx::query_scalar(sql)
            .bind(lease_until)
            .bind(token)
            .bind(target)
            .bind(now)
            .bind(now)
            .bind(limit)
            .fetch_all(&mut *tx)
            .await?;
        let rows = read_claimed(&mut tx, &ids).await?;
        tx.commit().await?;
        Ok(rows)
    }
}

/// The ids as a JSON array, for `json_each`.
fn json_ids(ids: &[i64]) -> String {
    format!(
        "[{}]",
        ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
    )
}

/// The claimed rows with their events, in one read (the ids go in as a
/// JSON array).
async fn read_claimed(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    ids: &[i64],
) -> Result<Vec<DueDelivery>, StoreError> {
    if ids.is_empty() {
        return Ok(vec![]);
    }
    let rows = sqlx::query(
        "SELECT d.id, d.source, d.target, e.event_id, e.body, e.headers, e.received_at,
                d.attempts, e.event_type, d.order_key
         FROM hookgate_deliveries d JOIN hookgate_events e ON e.id = d.event_pk
         WHERE d.id IN (SELECT value FROM json_each(?))",
    )
    .bind(json_ids(ids))
    .fetch_all(&mut **tx)
    .await?;
    rows.iter().map(due_from_row).collect()
}

/// The ordered claim's next cursor: the last key in walk order, which
/// visits the keys after `after` first and then wraps around, so it is the
/// largest key not after `after` if the walk wrapped, else the largest.
/// (SQLite compares text by bytes, like `str`.)
fn last_key(keys: Vec<String>, after: &str) -> Option<String> {
    let wrapped = keys.iter().filter(|k| k.as_str() <= after).max().cloned();
    wrapped.or_else(|| keys.into_iter().max())
}

/// Rows of one multi-row event insert: 11 bound values each, far below
/// SQLite's limit on variables in one statement.
const EVENT_ROWS: usize = 128;

/// One group-commit batch in one transaction on the writer's connection:
/// the events' rows, the renamed rows of ids past their window, and each new
/// event's delivery rows (leased to this process where it hands them off).
async fn record(
    conn: &mut SqliteConnection,
    batch: &[NewEvent],
) -> Result<Vec<Recorded>, StoreError> {
    let repeats = first_occurrence(batch);
    // Every first occurrence in one statement, in batch order.
    let firsts: Vec<&NewEvent> = batch
        .iter()
        .zip(&repeats)
        .filter(|(_, rep)| rep.is_none())
        .map(|(e, _)| e)
        .collect();
    // Without delivery rows the events' INSERT is the whole write, and on
    // its own (autocommit) it is one implicit transaction: no BEGIN and
    // COMMIT, each a round trip to sqlx's worker thread and a wake-up of
    // this task behind the requests on the runtime (docs/design.md
    // "Fifteenth pass"). Only ids that were stored already go on to the
    // transaction below (renamed past their window, or read as duplicates).
    // One statement only: a batch longer than `EVENT_ROWS` (never, with
    // ingest's batches of at most as many) keeps the transaction.
    let autocommitted = if firsts.len() <= EVENT_ROWS && firsts.iter().all(|e| e.targets.is_empty())
    {
        let pks = insert_events(&mut *conn, &firsts).await?;
        if pks.iter().all(Option::is_some) {
            return Ok(fresh_results(batch, &repeats));
        }
        Some(pks)
    } else {
        None
    };
    let mut tx = conn.begin().await?;
    let mut out = Vec::with_capacity(batch.len());
    // Per new event: its rows leased to this process (hand-off).
    let mut leased: Vec<Option<Vec<(usize, i64)>>> = Vec::with_capacity(batch.len());
    let mut inserted = match autocommitted {
        Some(pks) => pks,
        None => insert_events(&mut tx, &firsts).await?,
    }
    .into_iter();
    for (e, rep) in batch.iter().zip(&repeats) {
        leased.push(None);
        if let Some(first) = rep {
            out.push(Recorded::Duplicate {
                stored_sha256: batch[*first].body_sha256.to_vec(),
                expires_at: batch[*first].expires_at,
            });
            continue;
        }
        let mut pk = inserted.next().flatten();
        if pk.is_none() {
            // Past its window, the id is new again; the kept row is
            // renamed (see postgres::record::readmit_expired).
            let renamed = sqlx::query(
                "UPDATE hookgate_events SET event_id = event_id || '~expired~' || id
                 WHERE source = ? AND event_id = ? AND expires_at <= ?",
            )
            .bind(&e.source)
            .bind(&e.event_id)
            .bind(e.received_at)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if renamed > 0 {
                pk = insert_events(&mut tx, &[e]).await?.pop().flatten();
            }
        }
        match pk {
            Some(pk) => {
                let mut handed = vec![];
                for (i, t) in e.targets.iter().enumerate() {
                    let lease = e.lease(i);
                    // Ordered target: the key's next number, in batch
                    // (arrival) order; one writer, so also commit order.
                    // No key found: unordered, sequence 0 (see NewEvent).
                    let key = e.order_key(i).filter(|k| !k.is_empty());
                    let seq: Option<i64> = match (e.order_key(i), key) {
                        (_, Some(k)) => Some(
                            sqlx::query_scalar(NEXT_SEQ_SQL)
                                .bind(t)
                                .bind(k)
                                .fetch_one(&mut *tx)
                                .await?,
                        ),
                        (Some(_), None) => Some(0),
                        (None, None) => None,
                    };
                    let id: i64 = sqlx::query_scalar(
                        "INSERT INTO hookgate_deliveries
                             (event_pk, source, target, next_attempt_at, updated_at,
                              lease_until, lease_token, order_key, order_seq)
                         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                    )
                    .bind(pk)
                    .bind(&e.source)
                    .bind(t)
                    .bind(e.received_at)
                    .bind(e.received_at)
                    .bind(lease.map(|l| l.1))
                    .bind(lease.map(|l| l.0))
                    .bind(key)
                    .bind(seq)
                    .fetch_one(&mut *tx)
                    .await?;
                    if lease.is_some() {
                        handed.push((i, id));
                    }
                }
                *leased.last_mut().expect("pushed above") = Some(handed);
                out.push(Recorded::New);
            }
            None => {
                let (stored, expires_at): (Vec<u8>, Millis) = sqlx::query_as(
                    "SELECT body_sha256, expires_at FROM hookgate_events
                     WHERE source = ? AND event_id = ?",
                )
                .bind(&e.source)
                .bind(&e.event_id)
                .fetch_one(&mut *tx)
                .await?;
                out.push(Recorded::Duplicate {
                    stored_sha256: stored,
                    expires_at,
                });
            }
        }
    }
    tx.commit().await?;
    for (e, handed) in batch.iter().zip(&leased) {
        if let Some(handed) = handed {
            e.committed(handed);
        }
    }
    Ok(out)
}

/// Inserts `events` (distinct keys) with one statement per [`EVENT_ROWS`],
/// skipping ids already stored: each event's new primary key, in input
/// order, `None` where its id was already there. One statement instead of
/// one per event: each statement is a round trip to sqlx's SQLite worker
/// thread (docs/design.md, "Fifth pass").
async fn insert_events(
    conn: &mut SqliteConnection,
    events: &[&NewEvent],
) -> Result<Vec<Option<i64>>, StoreError> {
    let mut pks = Vec::with_capacity(events.len());
    for chunk in events.chunks(EVENT_ROWS) {
        let mut q = sqlx::QueryBuilder::new(
            "INSERT INTO hookgate_events
                 (source, event_id, body, body_sha256, headers, received_at, expires_at,
                  event_type, key_index, provider_ts, recovered) ",
        );
        q.push_values(chunk, |mut row, e| {
            row.push_bind(e.source.as_str())
                .push_bind(e.event_id.as_str())
                .push_bind(e.body.as_ref())
                .push_bind(&e.body_sha256[..])
                .push_bind(e.headers.as_str())
                .push_bind(e.received_at)
                .push_bind(e.expires_at)
                // Console facts (store::events).
                .push_bind(e.facts.event_type.as_deref())
                .push_bind(e.facts.key_index)
                .push_bind(e.facts.provider_ts)
                .push_bind(e.facts.recovered);
        });
        q.push(" ON CONFLICT (source, event_id) DO NOTHING RETURNING id, source, event_id");
        let rows: Vec<(i64, String, String)> = q.build_query_as().fetch_all(&mut *conn).await?;
        let mut new: HashMap<(&str, &str), i64> = rows
            .iter()
            .map(|(id, s, e)| ((s.as_str(), e.as_str()), *id))
            .collect();
        pks.extend(
            chunk
                .iter()
                .map(|e| new.remove(&(e.source.as_str(), e.event_id.as_str()))),
        );
    }
    Ok(pks)
}

#[cfg(test)]
mod ordering_tests {
    use super::*;

    /// A new event of source `s` with a delivery row to `t<i>` per key.
    pub(super) fn event(id: &str, keys: &[Option<&str>]) -> NewEvent {
        NewEvent {
            source: "s".into(),
            event_id: id.into(),
            body: Bytes::from_static(b"{}"),
            body_sha256: [0; 32],
            headers: "[]".into(),
            received_at: Millis(1),
            expires_at: Millis(1_000_000),
            targets: (0..keys.len()).map(|i| format!("t{i}")).collect(),
            order_keys: keys.iter().map(|k| k.map(str::to_owned)).collect(),
            facts: EventFacts::default(),
            handoff: None,
            fresh: true,
        }
    }

    async fn claim(l: &SqliteLedger, after: &str, limit: i64) -> (Vec<String>, Option<String>) {
        let (rows, last) = l
            .claim_due_ordered("t0", Millis(10), Millis(1_000), "tok", limit, after)
            .await
            .unwrap();
        (rows.into_iter().map(|r| r.event_id).collect(), last)
    }

    async fn finish(l: &SqliteLedger, id: &str, next: NextState) {
        let pk: i64 = sqlx::query_scalar(
            "SELECT d.id FROM hookgate_deliveries d JOIN hookgate_events e ON e.id = d.event_pk
             WHERE e.event_id = ? AND d.target = 't0'",
        )
        .bind(id)
        .fetch_one(&l.pool)
        .await
        .unwrap();
        let rec = AttemptRecord {
            started_at: Millis(10),
            latency_ms: 1,
            status: Some(200),
            error: None,
            next,
        };
        assert!(l.finish_attempt(pk, "tok", &rec).await.unwrap());
    }

    /// Sequence per (target, key) in batch order; one row per key out at a
    /// time; retrying blocks, delivered and dead free the key; keys are
    /// visited round-robin from the cursor; a keyless row is unordered.
    #[tokio::test]
    async fn the_first_pending_row_of_each_key_is_the_only_one_claimed() {
        let l = SqliteLedger::connect("sqlite::memory:", Some(1))
            .await
            .unwrap();
        l.migrate().await.unwrap();
        let batch = [
            event("a1", &[Some("a"), None]),
            event("b1", &[Some("b")]),
            event("a2", &[Some("a")]),
            event("x1", &[Some("")]),
            event("a3", &[Some("a")]),
        ];
        l.record(&batch).await.unwrap();
        let seqs: Vec<(String, Option<String>, Option<i64>)> = sqlx::query_as(
            "SELECT e.event_id, d.order_key, d.order_seq FROM hookgate_deliveries d
             JOIN hookgate_events e ON e.id = d.event_pk ORDER BY d.id",
        )
        .fetch_all(&l.pool)
        .await
        .unwrap();
        let s =
            |id: &str, k: Option<&str>, n: Option<i64>| (id.to_owned(), k.map(str::to_owned), n);
        assert_eq!(
            seqs,
            [
                s("a1", Some("a"), Some(1)),
                s("a1", None, None),
                s("b1", Some("b"), Some(1)),
                s("a2", Some("a"), Some(2)),
                s("x1", None, Some(0)),
                s("a3", Some("a"), Some(3)),
            ]
        );

        // Heads of a and b, and the keyless row; a2 waits for a1.
        let (mut got, last) = claim(&l, "", 10).await;
        got.sort();
        assert_eq!(got, ["a1", "b1", "x1"]);
        assert_eq!(last.as_deref(), Some("b"));
        assert!(
            claim(&l, "", 10).await.0.is_empty(),
            "leased rows still block"
        );
        // A retry keeps the key blocked (a1 is due again, a2 is not).
        finish(&l, "a1", NextState::RetryAt(Millis(5))).await;
        assert_eq!(claim(&l, "", 10).await.0, ["a1"]);
        // Dead frees the key: a2 next, through the successor claim.
        finish(&l, "a1", NextState::Dead).await;
        let next = l
            .claim_successor("t0", "a", Millis(10), Millis(1_000), "tok")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (next.event_id.as_str(), next.order_key.as_deref()),
            ("a2", Some("a"))
        );
        finish(&l, "a2", NextState::Delivered).await;
        finish(&l, "b1", NextState::Delivered).await;
        // Round-robin: with one slot, the walk starts after the cursor.
        let more = [event("b2", &[Some("b")])];
        l.record(&more).await.unwrap();
        assert_eq!(
            claim(&l, "a", 1).await,
            (vec!["b2".to_owned()], Some("b".into()))
        );
        assert_eq!(
            claim(&l, "b", 1).await,
            (vec!["a3".to_owned()], Some("a".into()))
        );
        // a1 is dead, overtaken by a2 (delivered); a3 is still out.
        let over = l.overtaken().await.unwrap();
        assert_eq!(over.len(), 1);
        assert_eq!((over[0].target.as_str(), over[0].count), ("t0", 1));
    }

    #[test]
    fn the_cursor_is_the_last_key_in_walk_order() {
        let keys = |k: &[&str]| k.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(last_key(keys(&["c", "d"]), "b"), Some("d".into()));
        assert_eq!(last_key(keys(&["c", "d", "a"]), "b"), Some("a".into()));
        assert_eq!(last_key(vec![], "b"), None);
    }
}

#[cfg(test)]
mod writer_tests {
    use super::ordering_tests::event;
    use super::*;

    async fn ledger(dir: &tempfile::TempDir) -> SqliteLedger {
        let url = format!("sqlite://{}", dir.path().join("hg.db").display());
        let l = SqliteLedger::connect(&url, Some(2)).await.unwrap();
        l.migrate().await.unwrap();
        l
    }

    /// Triggers on `table` that make SQLite roll back the whole transaction
    /// by itself for a row whose `column` is `rollback` (as a full disk
    /// does), and refuse the statement for `abort`.
    async fn refuse_rows(l: &SqliteLedger, table: &str, column: &str) {
        let sql = format!(
            "CREATE TRIGGER hgtest_rollback BEFORE INSERT ON {table}
             WHEN NEW.{column} = 'rollback'
             BEGIN SELECT RAISE(ROLLBACK, 'rolled back by the test'); END;
             CREATE TRIGGER hgtest_abort BEFORE INSERT ON {table}
             WHEN NEW.{column} = 'abort'
             BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;"
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&l.pool)
            .await
            .unwrap();
    }

    /// Whether the writer's current connection is the one that made the
    /// TEMP table `probe` (a TEMP table lives on its connection only).
    async fn has_probe(l: &SqliteLedger) -> bool {
        l.on_writer(async |c| {
            Ok(sqlx::query("SELECT 1 FROM temp.probe")
                .fetch_optional(&mut *c)
                .await
                .is_ok())
        })
        .await
        .unwrap()
    }

    /// Batches go through one connection, kept across batches; any error
    /// replaces it, and the next batch writes on a new one.
    #[tokio::test]
    async fn the_writer_keeps_its_connection_until_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let l = ledger(&dir).await;
        l.on_writer(async |c| {
            sqlx::query("CREATE TEMP TABLE probe (x INTEGER)")
                .execute(&mut *c)
                .await?;
            Ok(())
        })
        .await
        .unwrap();
        l.record(&[event("evt_1", &[])]).await.unwrap();
        l.record(&[event("evt_2", &[])]).await.unwrap();
        assert!(has_probe(&l).await, "a batch took another connection");
        let refused = l
            .on_writer(async |c| {
                sqlx::query("SELECT * FROM no_such_table")
                    .execute(&mut *c)
                    .await?;
                Ok(())
            })
            .await;
        assert!(refused.is_err());
        assert!(!has_probe(&l).await, "kept the connection after an error");
        l.record(&[event("evt_3", &[])]).await.unwrap();
        // What the writer committed, the pool's connections read.
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM hookgate_events")
            .fetch_one(&l.pool)
            .await
            .unwrap();
        assert_eq!(n, 3);
    }

    /// A batch that SQLite rolls back by itself (here a trigger's
    /// `RAISE(ROLLBACK)`; a full disk does the same), then a batch the
    /// database refuses: the next batch is still committed, visible to
    /// the pool's connections, and leaves the database free for other
    /// writers. On a kept connection, sqlx would still count the first
    /// transaction as open, and the last batch would only release a
    /// savepoint inside it.
    #[tokio::test]
    async fn a_batch_after_one_that_sqlite_rolled_back_itself_is_committed() {
        let dir = tempfile::tempdir().unwrap();
        let l = ledger(&dir).await;
        refuse_rows(&l, "hookgate_events", "event_id").await;
        assert!(l.record(&[event("rollback", &[])]).await.is_err());
        assert!(l.record(&[event("abort", &[])]).await.is_err());
        l.record(&[event("evt_ok", &[])]).await.unwrap();
        let stored: Vec<String> = sqlx::query_scalar("SELECT event_id FROM hookgate_events")
            .fetch_all(&l.pool)
            .await
            .unwrap();
        assert_eq!(stored, ["evt_ok"]);
        // The write lock is free: another connection writes at once.
        l.add_counters(&[("s".into(), "received".into(), 1)])
            .await
            .unwrap();
    }

    /// The same on the pool's connections (here through the counters'
    /// writes, one pooled connection): after a write SQLite rolled back by
    /// itself and a refused one, the next write is committed and seen by
    /// another connection.
    #[tokio::test]
    async fn a_pooled_write_after_one_that_sqlite_rolled_back_itself_is_committed() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("hg.db").display());
        let l = SqliteLedger::connect(&url, Some(1)).await.unwrap();
        l.migrate().await.unwrap();
        refuse_rows(&l, "hookgate_counters", "name").await;
        for (name, ok) in [("rollback", false), ("abort", false), ("ok", true)] {
            let r = l.add_counters(&[("s".into(), name.into(), 1)]).await;
            assert_eq!(r.is_ok(), ok, "{name}: {r:?}");
        }
        let mut other = SqliteConnection::connect(&url).await.unwrap();
        let names: Vec<String> = sqlx::query_scalar("SELECT name FROM hookgate_counters")
            .fetch_all(&mut other)
            .await
            .unwrap();
        assert_eq!(names, ["ok"]);
    }

    /// A batch without delivery rows is written by its INSERT alone
    /// (autocommit); the ids it finds stored go on to a transaction: a
    /// stored id is a duplicate of the stored row, one past its window is
    /// new again (the old row renamed), and a repeat within the batch is a
    /// duplicate of its first occurrence. The new rows are committed, and
    /// the next batch takes the short path again.
    #[tokio::test]
    async fn a_batch_without_targets_holding_stored_ids_is_decided_per_event() {
        let dir = tempfile::tempdir().unwrap();
        let l = ledger(&dir).await;
        let mut old = event("evt_old", &[]);
        old.expires_at = Millis(5);
        assert_eq!(
            l.record(&[event("evt_stored", &[]), old]).await.unwrap(),
            [Recorded::New, Recorded::New]
        );
        let mut again = event("evt_stored", &[]);
        again.body_sha256 = [1; 32];
        let mut old_again = event("evt_old", &[]);
        old_again.received_at = Millis(10);
        let batch = [
            event("evt_new_1", &[]),
            again,
            old_again,
            event("evt_new_1", &[]),
            event("evt_new_2", &[]),
        ];
        let stored = Recorded::Duplicate {
            stored_sha256: vec![0; 32],
            expires_at: Millis(1_000_000),
        };
        assert_eq!(
            l.record(&batch).await.unwrap(),
            [
                Recorded::New,
                stored.clone(),
                Recorded::New,
                stored.clone(),
                Recorded::New
            ]
        );
        let mut ids: Vec<String> = sqlx::query_scalar("SELECT event_id FROM hookgate_events")
            .fetch_all(&l.pool)
            .await
            .unwrap();
        ids.sort();
        assert_eq!(ids.len(), 5, "{ids:?}");
        assert_eq!(ids[..3], ["evt_new_1", "evt_new_2", "evt_old"]);
        assert!(ids[3].starts_with("evt_old~expired~"), "{ids:?}");
        assert_eq!(ids[4], "evt_stored");
        assert_eq!(
            l.record(&[event("evt_new_3", &[])]).await.unwrap(),
            [Recorded::New]
        );
    }

    /// Statement journals stay in memory on the writer's and the pool's
    /// connections (`temp_store` 2 = MEMORY).
    #[tokio::test]
    async fn temporary_files_stay_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let l = ledger(&dir).await;
        let pool: i64 = sqlx::query_scalar("PRAGMA temp_store")
            .fetch_one(&l.pool)
            .await
            .unwrap();
        let writer: i64 = l
            .on_writer(async |c| {
                Ok(sqlx::query_scalar("PRAGMA temp_store")
                    .fetch_one(&mut *c)
                    .await?)
            })
            .await
            .unwrap();
        assert_eq!((pool, writer), (2, 2));
    }
}
