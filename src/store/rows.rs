//! What both backends share below the capability traits: SQL text whose
//! shape is the same on PostgreSQL and SQLite, single statements written
//! once generically over sqlx's `Database` (each backend runs them on the
//! connection or pool it chooses), and row mappers.
//!
//! Rule: backends import from here and never from each other. Shared SQL uses
//! `$N` placeholders, which both databases accept.

use super::outbox::{DueDelivery, LeaseRequest};
use super::tallies::{DeliveryCount, MINUTES_KEPT, MinuteCount};
use super::{StoreError, body_hashes};
use crate::primitives::headers::StoredHeaders;
use crate::primitives::time::Millis;
use sqlx::{Database, Executor, IntoArguments, Row};

/// A value a shared statement binds on backend `DB`.
pub(crate) trait Bind<DB: Database>:
    for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB> + Send
{
}
impl<DB: Database, T: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB> + Send> Bind<DB> for T {}

/// A column type the row mappers decode on backend `DB`.
pub(crate) trait Column<DB: sqlx::Database>:
    for<'a> sqlx::Decode<'a, DB> + sqlx::Type<DB>
{
}
impl<DB: sqlx::Database, T: for<'a> sqlx::Decode<'a, DB> + sqlx::Type<DB>> Column<DB> for T {}

/// Counts per source, target and state, with `retrying` split out of
/// `pending`.
pub(crate) const COUNTS_SQL: &str = "SELECT source, target,
        CASE WHEN state = 'pending' AND attempts > 0 THEN 'retrying' ELSE state END AS st,
        COUNT(*) AS n
     FROM hookgate_deliveries GROUP BY source, target, st";

/// `$1` = target, `$2` = ordering key. The key's next sequence number; the
/// counter row stays locked until the transaction ends (docs/design.md
/// "Ordering"). SQLite's ingest and both backends' replays use it;
/// PostgreSQL's ingest bumps every key of a batch in its one statement.
pub(crate) const NEXT_SEQ_SQL: &str =
    "INSERT INTO hookgate_order_keys (target, order_key, last_seq)
     VALUES ($1, $2, 1)
     ON CONFLICT (target, order_key) DO UPDATE SET last_seq = hookgate_order_keys.last_seq + 1
     RETURNING last_seq";

/// The rows an ordered target may lease now (docs/design.md "Ordering"):
/// `(pass, k, id)`, to be ordered by `pass, k` and limited. A row with a key
/// is eligible only when it is its key's first pending row (lowest
/// sequence number, leased or not, retrying or not); `heads` finds each
/// key's first pending row on `hookgate_deliveries_order_pending` without
/// reading the rows queued behind it, so a hot key's backlog costs nothing
/// here. The walk over keys starts after `$6` (the loop's cursor: the last
/// key it leased) and wraps around (`pass` 2), so every key gets its turn,
/// and stops once `$5` eligible heads are found. Rows of an ordered target
/// whose event had no key (`order_key` NULL, `order_seq` 0) are `pass` 3.
/// `$1` = target, `$2` = now, `$5` = limit, `$6` = cursor ('' at first).
/// Shared text: PostgreSQL uses it as is, SQLite with `?N` placeholders.
pub(crate) const ORDERED_CANDIDATES_SQL: &str = "WITH RECURSIVE
     walk1(k, found) AS (
         SELECT (SELECT MIN(order_key) FROM hookgate_deliveries
                 WHERE target = $1 AND state = 'pending' AND order_seq IS NOT NULL
                   AND order_key > $6), CAST(0 AS BIGINT)
         UNION ALL
         SELECT (SELECT MIN(order_key) FROM hookgate_deliveries
                 WHERE target = $1 AND state = 'pending' AND order_seq IS NOT NULL
                   AND order_key > w.k),
                w.found + (SELECT COUNT(*) FROM hookgate_deliveries h
                           WHERE h.id = (SELECT id FROM hookgate_deliveries
                                         WHERE target = $1 AND state = 'pending'
                                           AND order_seq IS NOT NULL AND order_key = w.k
                                         ORDER BY order_seq LIMIT 1)
                             AND h.next_attempt_at <= $2
                             AND (h.lease_until IS NULL OR h.lease_until < $2))
         FROM walk1 w WHERE w.k IS NOT NULL AND w.found < $5
     ),
     walk2(k, found) AS (
         SELECT (SELECT MIN(order_key) FROM hookgate_deliveries
                 WHERE target = $1 AND state = 'pending' AND order_seq IS NOT NULL
                   AND order_key IS NOT NULL AND order_key <= $6), CAST(0 AS BIGINT)
         UNION ALL
         SELECT (SELECT MIN(order_key) FROM hookgate_deliveries
                 WHERE target = $1 AND state = 'pending' AND order_seq IS NOT NULL
                   AND order_key > w.k AND order_key <= $6),
                w.found + (SELECT COUNT(*) FROM hookgate_deliveries h
                           WHERE h.id = (SELECT id FROM hookgate_deliveries
                                         WHERE target = $1 AND state = 'pending'
                                           AND order_seq IS NOT NULL AND order_key = w.k
                                         ORDER BY order_seq LIMIT 1)
                             AND h.next_attempt_at <= $2
                             AND (h.lease_until IS NULL OR h.lease_until < $2))
         FROM walk2 w WHERE w.k IS NOT NULL AND w.found < $5
     ),
     heads_k(pass, k) AS (
         SELECT 1, k FROM walk1 WHERE k IS NOT NULL
         UNION ALL
         SELECT 2, k FROM walk2 WHERE k IS NOT NULL
     ),
     candidates(pass, k, id) AS (
         SELECT pass, k, (SELECT id FROM hookgate_deliveries
                          WHERE target = $1 AND state = 'pending' AND order_seq IS NOT NULL
                            AND order_key = heads_k.k
                          ORDER BY order_seq LIMIT 1)
         FROM heads_k
         UNION ALL
         SELECT * FROM (SELECT 3, NULL, id FROM hookgate_deliveries
                        WHERE target = $1 AND state = 'pending' AND order_seq IS NOT NULL
                          AND order_key IS NULL AND next_attempt_at <= $2
                          AND (lease_until IS NULL OR lease_until < $2)
                        ORDER BY order_seq LIMIT $5) AS keyless
     )";

/// `$1` = target, `$2` = now, `$5` = key: the key's first pending row if it
/// is due and unleased (see `Outbox::claim_successor`).
pub(crate) const SUCCESSOR_SQL: &str = "SELECT id FROM hookgate_deliveries
     WHERE id = (SELECT id FROM hookgate_deliveries
                 WHERE target = $1 AND state = 'pending' AND order_seq IS NOT NULL
                   AND order_key = $5
                 ORDER BY order_seq LIMIT 1)
       AND next_attempt_at <= $2 AND (lease_until IS NULL OR lease_until < $2)";

/// Overtaken deliveries per source and target, as a [`DeliveryCount`] with
/// state `overtaken`: for each dead delivery with an ordering key, the
/// delivered rows of its key with a later sequence number (they went
/// ahead of it once it was dead).
pub(crate) const OVERTAKEN_SQL: &str =
    "SELECT d.source, d.target, 'overtaken' AS st, COUNT(o.id) AS n
     FROM hookgate_deliveries d
     JOIN hookgate_deliveries o ON o.target = d.target AND o.order_key = d.order_key
          AND o.order_seq > d.order_seq AND o.state = 'delivered'
     WHERE d.state = 'dead' AND d.order_key IS NOT NULL
     GROUP BY d.source, d.target";

/// Every cluster-wide counter, as `(source, name, value)`.
const COUNTERS_SQL: &str = "SELECT source, name, value FROM hookgate_counters";

/// `$1` = lease token, `$2` = target.
const RELEASE_LEASES_SQL: &str =
    "UPDATE hookgate_deliveries SET lease_until = NULL, lease_token = NULL
     WHERE lease_token = $1 AND target = $2";

/// `$1` = source, `$2` = event id.
const EVENT_COUNT_SQL: &str =
    "SELECT COUNT(*) FROM hookgate_events WHERE source = $1 AND event_id = $2";

/// `$1` = first minute.
const MINUTES_SQL: &str = "SELECT minute, source, name, value
    FROM hookgate_counter_minutes WHERE minute >= $1";

/// `$1` = first minute kept.
const MINUTES_PURGE_SQL: &str = "DELETE FROM hookgate_counter_minutes WHERE minute < $1";

/// The arguments of a claim statement: `$1` = target, `$2` = now, `$3` =
/// lease until, `$4` = token, `$5` = limit (every claim binds these first).
pub(crate) fn lease_arguments<DB>(r: &LeaseRequest<'_>) -> Result<DB::Arguments, StoreError>
where
    DB: Database,
    for<'a> &'a str: Bind<DB>,
    i64: Bind<DB>,
{
    claim_arguments::<DB, _>(r, r.limit)
}

/// [`lease_arguments`] with `fifth` as `$5` instead of the limit: the key
/// of a successor claim (`SUCCESSOR_SQL`), which leases at most one row.
pub(crate) fn claim_arguments<DB, T>(
    r: &LeaseRequest<'_>,
    fifth: T,
) -> Result<DB::Arguments, StoreError>
where
    DB: Database,
    for<'a> &'a str: Bind<DB>,
    i64: Bind<DB>,
    T: Bind<DB>,
{
    use sqlx::Arguments;
    let mut args = DB::Arguments::default();
    args.add(r.target)
        .and_then(|()| args.add(r.now.0))
        .and_then(|()| args.add(r.until.0))
        .and_then(|()| args.add(r.token))
        .and_then(|()| args.add(fifth))
        .map_err(encode_error)?;
    Ok(args)
}

/// A value the driver could not encode, as the store's error (about the
/// data: see `StoreError::is_about_the_data`).
pub(crate) fn encode_error(e: sqlx::error::BoxDynError) -> StoreError {
    StoreError::Database(sqlx::Error::Encode(e))
}

/// A claimed row: `id, source, target, event_id, body, headers,
/// received_at, attempts, event_type, earlier_attempts` and, on the
/// ordered claims, the ordering key. The headers are read from their row text once, here.
pub(crate) fn due_from_row<R: Row>(r: &R) -> Result<DueDelivery, StoreError>
where
    usize: sqlx::ColumnIndex<R>,
    i64: Column<R::Database>,
    i32: Column<R::Database>,
    String: Column<R::Database>,
    for<'a> &'a str: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    Vec<u8>: Column<R::Database>,
    Millis: Column<R::Database>,
    Option<String>: Column<R::Database>,
{
    Ok(DueDelivery {
        id: r.try_get(0usize)?,
        source: r.try_get(1usize)?,
        target: r.try_get(2usize)?,
        event_id: r.try_get(3usize)?,
        body: r.try_get::<Vec<u8>, _>(4usize)?.into(),
        headers: StoredHeaders::from_json(r.try_get::<&str, _>(5usize)?),
        received_at: r.try_get(6usize)?,
        attempts: r.try_get(7usize)?,
        event_type: r.try_get(8usize)?,
        earlier_attempts: r.try_get(9usize)?,
        // Only the ordered claims read an eleventh column (the key).
        order_key: r.try_get(10usize).ok().flatten(),
    })
}

/// The rows of [`COUNTS_SQL`] (`Tallies::delivery_counts`) or
/// [`OVERTAKEN_SQL`] (`Tallies::overtaken`) as [`DeliveryCount`]s.
pub(crate) async fn counts<'c, DB, E>(
    e: E,
    sql: &'static str,
) -> Result<Vec<DeliveryCount>, StoreError>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    E: Executor<'c, Database = DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
    i64: Column<DB>,
    String: Column<DB>,
{
    let rows = sqlx::query(sql).fetch_all(e).await?;
    rows.iter()
        .map(|r| {
            Ok(DeliveryCount {
                source: r.try_get(0usize)?,
                target: r.try_get(1usize)?,
                state: r.try_get(2usize)?,
                count: r.try_get(3usize)?,
            })
        })
        .collect()
}

/// Every cluster-wide counter (`Tallies::counters`).
pub(crate) async fn counters<'c, DB, E>(e: E) -> Result<Vec<(String, String, i64)>, StoreError>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    E: Executor<'c, Database = DB>,
    (String, String, i64): for<'r> sqlx::FromRow<'r, DB::Row>,
{
    Ok(sqlx::query_as(COUNTERS_SQL).fetch_all(e).await?)
}

/// Per-minute counters from `since_minute` on (`Tallies::minute_counters`).
pub(crate) async fn minute_counters<'c, DB, E>(
    e: E,
    since_minute: i64,
) -> Result<Vec<MinuteCount>, StoreError>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    E: Executor<'c, Database = DB>,
    i64: Bind<DB>,
    (i64, String, String, i64): for<'r> sqlx::FromRow<'r, DB::Row>,
{
    let rows: Vec<(i64, String, String, i64)> = sqlx::query_as(MINUTES_SQL)
        .bind(since_minute)
        .fetch_all(e)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(minute, source, name, value)| MinuteCount {
            minute,
            source,
            name,
            value,
        })
        .collect())
}

/// On the hour (`minute` a multiple of 60), deletes the per-minute
/// counters older than [`MINUTES_KEPT`]; otherwise nothing.
pub(crate) async fn purge_old_minutes<'c, DB, E>(e: E, minute: i64) -> Result<(), StoreError>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    E: Executor<'c, Database = DB>,
    i64: Bind<DB>,
{
    if minute % 60 == 0 {
        sqlx::query(MINUTES_PURGE_SQL)
            .bind(minute - MINUTES_KEPT)
            .execute(e)
            .await?;
    }
    Ok(())
}

/// Event rows of one id (`EventLog::event_count`).
pub(crate) async fn event_count<'c, DB, E>(
    e: E,
    source: &str,
    event_id: &str,
) -> Result<i64, StoreError>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    E: Executor<'c, Database = DB>,
    for<'a> &'a str: Bind<DB>,
    (i64,): for<'r> sqlx::FromRow<'r, DB::Row>,
{
    Ok(sqlx::query_scalar(EVENT_COUNT_SQL)
        .bind(source)
        .bind(event_id)
        .fetch_one(e)
        .await?)
}

/// The id holding a body after claiming it (`EventLog::claim_body`).
pub(crate) async fn claim_body<'c, DB, E>(
    e: E,
    c: &body_hashes::BodyClaim<'_>,
) -> Result<String, StoreError>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    E: Executor<'c, Database = DB>,
    for<'a> &'a str: Bind<DB>,
    for<'a> &'a [u8]: Bind<DB>,
    i64: Bind<DB>,
    (String,): for<'r> sqlx::FromRow<'r, DB::Row>,
{
    Ok(sqlx::query_scalar(body_hashes::CLAIM_SQL)
        .bind(c.source)
        .bind(&c.body_sha256[..])
        .bind(c.event_id)
        .bind(c.expires_at.0)
        .bind(c.now.0)
        .fetch_one(e)
        .await?)
}

/// Gives back `token`'s leases on `target` (`Outbox::release_leases`).
pub(crate) async fn release_leases<'c, DB, E>(
    e: E,
    token: &str,
    target: &str,
) -> Result<u64, StoreError>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    E: Executor<'c, Database = DB>,
    for<'a> &'a str: Bind<DB>,
    DB::QueryResult: RowsAffected,
{
    let r = sqlx::query(RELEASE_LEASES_SQL)
        .bind(token)
        .bind(target)
        .execute(e)
        .await?;
    Ok(r.rows_affected())
}

/// How many rows a statement changed, on either backend's result type.
pub(crate) trait RowsAffected {
    fn rows_affected(&self) -> u64;
}

impl RowsAffected for sqlx::postgres::PgQueryResult {
    fn rows_affected(&self) -> u64 {
        sqlx::postgres::PgQueryResult::rows_affected(self)
    }
}

impl RowsAffected for sqlx::sqlite::SqliteQueryResult {
    fn rows_affected(&self) -> u64 {
        sqlx::sqlite::SqliteQueryResult::rows_affected(self)
    }
}
