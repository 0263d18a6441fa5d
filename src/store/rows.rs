//! What both ledger backends share: SQL text whose shape is the same on
//! PostgreSQL and SQLite, row mappers, and batch helpers.
//!
//! Rule: backends import from here and never from each other. Shared SQL uses
//! `$N` placeholders, which both databases accept.

use super::{
    AttemptRecord, AttemptRow, DeliveryCount, DueDelivery, NewEvent, NextState, Recorded,
    StoreError,
};
use crate::primitives::time::Millis;
use sqlx::Row;
use std::collections::HashMap;

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
/// is due and unleased (see `Ledger::claim_successor`).
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
pub(crate) const COUNTERS_SQL: &str = "SELECT source, name, value FROM hookgate_counters";

/// `$1` = lease token, `$2` = target.
pub(crate) const RELEASE_LEASES_SQL: &str =
    "UPDATE hookgate_deliveries SET lease_until = NULL, lease_token = NULL
     WHERE lease_token = $1 AND target = $2";

/// `$1` = delivery id, `$2` = lease token, `$3` = state, `$4` = next attempt
/// (NULL keeps it), `$5` = status, `$6` = error, `$7` = updated at.
/// Returns the new attempt count; no row when the lease was lost.
pub(crate) const FINISH_ATTEMPT_SQL: &str = "UPDATE hookgate_deliveries
     SET state = $3, attempts = attempts + 1, next_attempt_at = COALESCE($4, next_attempt_at),
         lease_until = NULL, lease_token = NULL, last_status = $5, last_error = $6,
         updated_at = $7
     WHERE id = $1 AND lease_token = $2
     RETURNING attempts";

/// `$1` = delivery id, `$2` = attempt number, then started at, latency,
/// status, error.
pub(crate) const INSERT_ATTEMPT_SQL: &str = "INSERT INTO hookgate_attempts
         (delivery_id, attempt, started_at, latency_ms, status, error)
     VALUES ($1, $2, $3, $4, $5, $6)";

/// `$1` = source, `$2` = event id, `$3` = target; oldest attempt first.
pub(crate) const ATTEMPTS_SQL: &str = "SELECT a.attempt, a.status, a.error, a.latency_ms
     FROM hookgate_attempts a
     JOIN hookgate_deliveries d ON d.id = a.delivery_id
     JOIN hookgate_events e ON e.id = d.event_pk
     WHERE e.source = $1 AND e.event_id = $2 AND d.target = $3
     ORDER BY a.id";

/// `$1` = source, `$2` = event id.
pub(crate) const EVENT_COUNT_SQL: &str =
    "SELECT COUNT(*) FROM hookgate_events WHERE source = $1 AND event_id = $2";

/// The outcome of a batch whose first occurrences were all inserted (and
/// had no delivery rows to hand off): each new, and a repeat within the
/// batch a duplicate of its first occurrence. `repeats` is
/// [`first_occurrence`]'s.
pub(crate) fn fresh_results(batch: &[NewEvent], repeats: &[Option<usize>]) -> Vec<Recorded> {
    repeats
        .iter()
        .map(|rep| match rep {
            Some(first) => Recorded::Duplicate {
                stored_sha256: batch[*first].body_sha256.to_vec(),
                expires_at: batch[*first].expires_at,
            },
            None => Recorded::New,
        })
        .collect()
}

/// In-batch duplicates: the index of the first event with the same key, for
/// each event that repeats an earlier one.
pub(crate) fn first_occurrence(batch: &[NewEvent]) -> Vec<Option<usize>> {
    let mut seen = HashMap::new();
    batch
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let key = (e.source.as_str(), e.event_id.as_str());
            match seen.get(&key) {
                Some(&first) => Some(first),
                None => {
                    seen.insert(key, i);
                    None
                }
            }
        })
        .collect()
}

/// The `state` and `next_attempt_at` columns after an attempt (`None` keeps
/// the current `next_attempt_at`).
pub(crate) fn next_columns(rec: &AttemptRecord) -> (&'static str, Option<Millis>) {
    match rec.next {
        NextState::Delivered => ("delivered", None),
        NextState::RetryAt(at) => ("pending", Some(at)),
        NextState::Dead => ("dead", None),
    }
}

/// A column type the row mappers can decode on backend `DB`.
pub(crate) trait Column<DB: sqlx::Database>:
    for<'a> sqlx::Decode<'a, DB> + sqlx::Type<DB>
{
}
impl<DB: sqlx::Database, T: for<'a> sqlx::Decode<'a, DB> + sqlx::Type<DB>> Column<DB> for T {}

pub(crate) fn due_from_row<R: Row>(r: &R) -> Result<DueDelivery, StoreError>
where
    usize: sqlx::ColumnIndex<R>,
    i64: Column<R::Database>,
    i32: Column<R::Database>,
    String: Column<R::Database>,
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
        headers: r.try_get(5usize)?,
        received_at: r.try_get(6usize)?,
        attempts: r.try_get(7usize)?,
        event_type: r.try_get(8usize)?,
        // Only the ordered claims read a tenth column (the key).
        order_key: r.try_get(9usize).ok().flatten(),
    })
}

pub(crate) fn count_from_row<R: Row>(r: &R) -> Result<DeliveryCount, StoreError>
where
    usize: sqlx::ColumnIndex<R>,
    i64: Column<R::Database>,
    String: Column<R::Database>,
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
    i64: Column<R::Database>,
    i32: Column<R::Database>,
    String: Column<R::Database>,
    Option<i32>: Column<R::Database>,
    Option<String>: Column<R::Database>,
{
    Ok(AttemptRow {
        attempt: r.try_get(0usize)?,
        status: r.try_get(1usize)?,
        error: r.try_get(2usize)?,
        latency_ms: r.try_get(3usize)?,
    })
}
