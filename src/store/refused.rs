//! The refused-request log (`hookgate_refused`, migration 0024): requests
//! that failed verification, written in batches by `ingest::refused`'s
//! background writer, listed and re-verified by `admin::refused`.
//!
//! Rule: both backends run the same SQL text (`$N` placeholders work on
//! both), so one implementation serves either backend's main pool
//! ([`Portable`]). Every delete is bounded ([`PRUNE_BATCH`] rows a
//! statement); the table never holds more than `[refused] max_rows` after
//! a prune.

use super::StoreError;
use super::portable::Portable;
use super::rows::{Bind, Column, RowsAffected};
use crate::primitives::time::Millis;
use async_trait::async_trait;
use sqlx::{Database, Executor, IntoArguments, Row};

/// Most rows one prune statement deletes.
pub const PRUNE_BATCH: i64 = 1000;
/// Largest page of `GET /admin/refused`.
pub const MAX_LIMIT: i64 = 500;

/// `state` of a row that still fails verification.
pub const REFUSED: &str = "refused";
/// `state` of a row that verified later and was admitted.
pub const REVERIFIED: &str = "re-verified";

/// One refused request, as the writer stores it.
#[derive(Debug, Clone)]
pub struct NewRefused {
    pub received_at: Millis,
    pub source: String,
    /// The rejection reason's label (`invalid_signature`, …).
    pub reason: String,
    /// The reason's text (`malformed signature header: …`).
    pub detail: String,
    pub peer: Option<String>,
    pub query: Option<String>,
    /// JSON `[[name, value], …]`.
    pub headers: String,
    /// `None` unless body capture is on; at most `body_cap` bytes.
    pub body: Option<Vec<u8>>,
    pub body_size: i64,
}

/// One stored refused request.
#[derive(Debug, Clone)]
pub struct RefusedRow {
    pub id: i64,
    pub received_at: Millis,
    pub source: String,
    pub reason: String,
    pub detail: String,
    pub peer: Option<String>,
    pub query: Option<String>,
    pub headers: String,
    pub body: Option<Vec<u8>>,
    pub body_size: i64,
    /// [`REFUSED`] or [`REVERIFIED`].
    pub state: String,
    /// When it was last re-verified (either way).
    pub checked_at: Option<Millis>,
    /// The event id it was admitted under, once re-verified.
    pub event_id: Option<String>,
}

/// Which refused requests to list or re-verify; `None` matches all.
#[derive(Debug, Clone, Default)]
pub struct RefusedFilter {
    pub source: Option<String>,
    pub reason: Option<String>,
    /// `received_at >= since`.
    pub since: Option<Millis>,
    /// `received_at < until`.
    pub until: Option<Millis>,
    /// Only rows in this state.
    pub state: Option<String>,
}

#[async_trait]
pub trait RefusedLog: Send + Sync {
    /// Stores `rows` in one transaction.
    async fn record(&self, rows: &[NewRefused]) -> Result<(), StoreError>;
    /// Deletes rows received before `before`, then the oldest beyond
    /// `max_rows`; each at most [`PRUNE_BATCH`] rows a statement, looping
    /// until none is left. Returns how many were deleted.
    async fn prune(&self, before: Millis, max_rows: i64) -> Result<u64, StoreError>;
    /// Newest first, ids below `before_id`, at most `limit` (+1 to tell a
    /// next page); bodies are left out.
    async fn list(
        &self,
        filter: &RefusedFilter,
        before_id: Option<i64>,
        limit: i64,
    ) -> Result<Vec<RefusedRow>, StoreError>;
    /// One row with its body.
    async fn get(&self, id: i64) -> Result<Option<RefusedRow>, StoreError>;
    /// Records a re-verification's result.
    async fn mark(
        &self,
        id: i64,
        state: &str,
        reason: &str,
        detail: &str,
        event_id: Option<&str>,
        now: Millis,
    ) -> Result<(), StoreError>;
    /// Rows stored now.
    async fn count(&self) -> Result<i64, StoreError>;
    /// What `filter` matches among ids up to `bound` (every id when
    /// `None`): rows per source, and the largest id matched (0 if none).
    async fn plan(
        &self,
        filter: &RefusedFilter,
        bound: Option<i64>,
    ) -> Result<(i64, Vec<(String, i64)>), StoreError>;
}

const INSERT_SQL: &str = "INSERT INTO hookgate_refused
     (received_at, source, reason, detail, peer, query, headers, body, body_size)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";

const PRUNE_OLD_SQL: &str = "DELETE FROM hookgate_refused WHERE id IN
     (SELECT id FROM hookgate_refused WHERE received_at < $1 ORDER BY received_at LIMIT $2)";

/// The rows beyond the newest `$1`, oldest first, at most `$2` of them.
const PRUNE_EXCESS_SQL: &str = "DELETE FROM hookgate_refused WHERE id IN
     (SELECT id FROM hookgate_refused ORDER BY id DESC LIMIT $2 OFFSET $1)";

/// The filters `list` and `plan` share: `$1` source, `$2` reason, `$3`
/// since, `$4` until, `$5` state.
macro_rules! refused_matching {
    () => {
        " FROM hookgate_refused
      WHERE ($1 IS NULL OR source = $1)
        AND ($2 IS NULL OR reason = $2)
        AND ($3 IS NULL OR received_at >= $3)
        AND ($4 IS NULL OR received_at < $4)
        AND ($5 IS NULL OR state = $5)"
    };
}

/// The filters, `$6` the largest id counted, per source.
const PLAN_SQL: &str = concat!(
    "SELECT source, COUNT(*), MAX(id)",
    refused_matching!(),
    " AND ($6 IS NULL OR id <= $6) GROUP BY source ORDER BY source"
);

/// The filters, `$6` below this id, `$7` limit. The table is bounded by
/// `max_rows`, and the page walks the primary key newest first.
const LIST_SQL: &str = concat!(
    "SELECT id, received_at, source, reason, detail, peer, query, headers,
            body_size, state, checked_at, event_id",
    refused_matching!(),
    " AND ($6 IS NULL OR id < $6) ORDER BY id DESC LIMIT $7"
);

const GET_SQL: &str = "SELECT id, received_at, source, reason, detail, peer, query, headers,
            body_size, state, checked_at, event_id, body
       FROM hookgate_refused WHERE id = $1";

const MARK_SQL: &str = "UPDATE hookgate_refused
     SET state = $2, reason = $3, detail = $4, event_id = $5, checked_at = $6
     WHERE id = $1";

fn row<R: Row>(r: &R, with_body: bool) -> Result<RefusedRow, StoreError>
where
    usize: sqlx::ColumnIndex<R>,
    i64: Column<R::Database>,
    String: Column<R::Database>,
    Vec<u8>: Column<R::Database>,
{
    Ok(RefusedRow {
        id: r.try_get(0usize)?,
        received_at: Millis(r.try_get(1usize)?),
        source: r.try_get(2usize)?,
        reason: r.try_get(3usize)?,
        detail: r.try_get(4usize)?,
        peer: r.try_get(5usize)?,
        query: r.try_get(6usize)?,
        headers: r.try_get(7usize)?,
        body_size: r.try_get(8usize)?,
        state: r.try_get(9usize)?,
        checked_at: r.try_get::<Option<i64>, _>(10usize)?.map(Millis),
        event_id: r.try_get(11usize)?,
        body: if with_body { r.try_get(12usize)? } else { None },
    })
}

#[async_trait]
impl<DB> RefusedLog for Portable<DB>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'a> &'a str: Bind<DB>,
    for<'a> Option<&'a str>: sqlx::Encode<'a, DB> + sqlx::Type<DB> + Send,
    Option<i64>: Bind<DB>,
    Option<Vec<u8>>: Bind<DB>,
    i64: Bind<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
    i64: Column<DB>,
    String: Column<DB>,
    Vec<u8>: Column<DB>,
    DB::QueryResult: RowsAffected,
{
    async fn record(&self, rows: &[NewRefused]) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut tx = self.pool.begin().await?;
        for r in rows {
            sqlx::query(INSERT_SQL)
                .bind(r.received_at.0)
                .bind(r.source.as_str())
                .bind(r.reason.as_str())
                .bind(r.detail.as_str())
                .bind(r.peer.as_deref())
                .bind(r.query.as_deref())
                .bind(r.headers.as_str())
                .bind(r.body.clone())
                .bind(r.body_size)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn prune(&self, before: Millis, max_rows: i64) -> Result<u64, StoreError> {
        let mut deleted = 0;
        loop {
            let n = sqlx::query(PRUNE_OLD_SQL)
                .bind(before.0)
                .bind(PRUNE_BATCH)
                .execute(&self.pool)
                .await?
                .rows_affected();
            deleted += n;
            if n < PRUNE_BATCH as u64 {
                break;
            }
        }
        loop {
            let n = sqlx::query(PRUNE_EXCESS_SQL)
                .bind(max_rows.max(0))
                .bind(PRUNE_BATCH)
                .execute(&self.pool)
                .await?
                .rows_affected();
            deleted += n;
            if n < PRUNE_BATCH as u64 {
                break;
            }
        }
        Ok(deleted)
    }

    async fn list(
        &self,
        filter: &RefusedFilter,
        before_id: Option<i64>,
        limit: i64,
    ) -> Result<Vec<RefusedRow>, StoreError> {
        let rows = sqlx::query(LIST_SQL)
            .bind(filter.source.as_deref())
            .bind(filter.reason.as_deref())
            .bind(filter.since.map(|m| m.0))
            .bind(filter.until.map(|m| m.0))
            .bind(filter.state.as_deref())
            .bind(before_id)
            .bind(limit.clamp(1, MAX_LIMIT + 1))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(|r| row(r, false)).collect()
    }

    async fn get(&self, id: i64) -> Result<Option<RefusedRow>, StoreError> {
        let found = sqlx::query(GET_SQL)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        found.as_ref().map(|r| row(r, true)).transpose()
    }

    async fn mark(
        &self,
        id: i64,
        state: &str,
        reason: &str,
        detail: &str,
        event_id: Option<&str>,
        now: Millis,
    ) -> Result<(), StoreError> {
        sqlx::query(MARK_SQL)
            .bind(id)
            .bind(state)
            .bind(reason)
            .bind(detail)
            .bind(event_id)
            .bind(now.0)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn count(&self) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM hookgate_refused")
            .fetch_one(&self.pool)
            .await?)
    }

    async fn plan(
        &self,
        filter: &RefusedFilter,
        bound: Option<i64>,
    ) -> Result<(i64, Vec<(String, i64)>), StoreError> {
        let rows = sqlx::query(PLAN_SQL)
            .bind(filter.source.as_deref())
            .bind(filter.reason.as_deref())
            .bind(filter.since.map(|m| m.0))
            .bind(filter.until.map(|m| m.0))
            .bind(filter.state.as_deref())
            .bind(bound)
            .fetch_all(&self.pool)
            .await?;
        let mut largest = 0;
        let mut per_source = Vec::with_capacity(rows.len());
        for r in &rows {
            per_source.push((r.try_get(0usize)?, r.try_get(1usize)?));
            largest = largest.max(r.try_get::<i64, _>(2usize)?);
        }
        Ok((largest, per_source))
    }
}
