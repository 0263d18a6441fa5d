//! What both ledger backends share: SQL text whose shape is the same on
//! PostgreSQL and SQLite, row mappers, and batch helpers.
//!
//! Rule: backends import from here and never from each other. Shared SQL uses
//! `$N` placeholders, which both databases accept.

use super::{
    AttemptRecord, AttemptRow, DeliveryCount, DueDelivery, NewEvent, NextState, StoreError,
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
