//! [`ReconcileStore`] on either backend's main pool: the statements, and
//! the one implementation that runs them.
//!
//! Rule: a lease is taken only when none is live, and changed only by its
//! owner, each in the statement's own `WHERE` (a compare-and-set), so two
//! replicas never both run a source.

use super::{Applied, Checkpoint, Finish, Lease, ReconcileStore, Status};
use crate::primitives::time::Millis;
use crate::store::StoreError;
use crate::store::portable::Portable;
use crate::store::rows::{Bind, Column, RowsAffected};
use async_trait::async_trait;
use sqlx::{AssertSqlSafe, Database, Executor, IntoArguments};
use std::collections::HashSet;

const ENSURE_SQL: &str =
    "INSERT INTO hookgate_reconcile (source) VALUES ($1) ON CONFLICT (source) DO NOTHING";

/// `$1` source, `$2` owner, `$3` lease until, `$4` next run at, `$5` now,
/// `$6` force. A compare-and-set: of two replicas, one row update wins.
const START_SQL: &str = "UPDATE hookgate_reconcile
     SET lease_owner = $2, lease_until = $3, next_run_at = $4, last_run = $5
     WHERE source = $1
       AND (lease_until IS NULL OR lease_until < $5)
       AND ($6 OR next_run_at <= $5)
     RETURNING cursor_since, cursor";

/// `$1` source, `$2` owner, `$3` since, `$4` cursor, `$5` lease until.
const CURSOR_SQL: &str = "UPDATE hookgate_reconcile
     SET cursor_since = $3, cursor = $4, lease_until = $5
     WHERE source = $1 AND lease_owner = $2";

/// `$1` source, `$2` owner, `$3` lease until.
const RENEW_SQL: &str = "UPDATE hookgate_reconcile
     SET lease_until = $3
     WHERE source = $1 AND lease_owner = $2";

/// `$1` source, `$2` event id, `$3` requested at, `$4` expires at.
const RESEND_SQL: &str = "INSERT INTO hookgate_resends (source, event_id, requested_at, expires_at)
     VALUES ($1, $2, $3, $4)
     ON CONFLICT (source, event_id) DO UPDATE SET expires_at = excluded.expires_at";

/// `$1` source. Driven by the few resend rows (the ledger's unique key
/// finds each event); an event received before its request is left alone.
const MARK_SQL: &str = "UPDATE hookgate_events SET recovered = TRUE
     WHERE source = $1
       AND event_id IN (SELECT r.event_id FROM hookgate_resends r WHERE r.source = $1)
       AND NOT recovered
       AND received_at >= (SELECT r.requested_at FROM hookgate_resends r
                           WHERE r.source = hookgate_events.source
                             AND r.event_id = hookgate_events.event_id)";

/// `$1` source, `$2` now. Runs after [`MARK_SQL`] committed: an event that
/// arrived since is neither recovered nor received before its request, so
/// its row stays for the next pass instead of being lost.
const FORGET_SQL: &str = "DELETE FROM hookgate_resends
     WHERE expires_at <= $2
        OR (source = $1 AND EXISTS (
              SELECT 1 FROM hookgate_events e
              WHERE e.source = hookgate_resends.source
                AND e.event_id = hookgate_resends.event_id
                AND (e.recovered OR e.received_at < hookgate_resends.requested_at)))";

/// `$1` source, `$2` requested since.
const WAITING_SQL: &str =
    "SELECT COUNT(*) FROM hookgate_resends WHERE source = $1 AND requested_at >= $2";

/// `$1` source, `$2` owner, `$3` now, `$4` recovered, `$5` checkpointed.
const SUCCESS_SQL: &str = "UPDATE hookgate_reconcile
     SET lease_owner = NULL, lease_until = NULL,
         cursor_since = CASE WHEN $5 THEN NULL ELSE cursor_since END,
         cursor = CASE WHEN $5 THEN NULL ELSE cursor END,
         last_success = $3, last_error = NULL, recovered = recovered + $4
     WHERE source = $1 AND lease_owner = $2";

/// `$1` source, `$2` owner, `$3` recovered, `$4` error.
const FAILURE_SQL: &str = "UPDATE hookgate_reconcile
     SET lease_owner = NULL, lease_until = NULL, last_error = $4,
         recovered = recovered + $3, failed_runs = failed_runs + 1
     WHERE source = $1 AND lease_owner = $2";

/// `$1` source, `$2` owner, `$3` now, `$4` recovered.
const RELEASE_SQL: &str = "UPDATE hookgate_reconcile
     SET lease_owner = NULL, lease_until = NULL, next_run_at = $3, recovered = recovered + $4
     WHERE source = $1 AND lease_owner = $2";

const STATUS_SQL: &str = "SELECT source, last_run, last_success, last_error, recovered, failed_runs
     FROM hookgate_reconcile ORDER BY source";

/// `SELECT event_id … WHERE source = $1 AND event_id IN ($2, …)` for `n` ids.
pub(super) fn known_sql(n: usize) -> String {
    let list: Vec<String> = (0..n).map(|i| format!("${}", i + 2)).collect();
    format!(
        "SELECT event_id FROM hookgate_events WHERE source = $1 AND event_id IN ({})",
        list.join(", ")
    )
}

#[async_trait]
impl<DB> ReconcileStore for Portable<DB>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'a> &'a str: Bind<DB>,
    i64: Bind<DB>,
    bool: Bind<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
    i64: Column<DB>,
    String: Column<DB>,
    DB::QueryResult: RowsAffected,
{
    async fn known(&self, source: &str, ids: &[String]) -> Result<HashSet<String>, StoreError> {
        let mut out = HashSet::new();
        // Bounded statements: a page is at most 100 ids, but a caller may
        // pass more.
        for chunk in ids.chunks(500) {
            let mut q =
                sqlx::query_scalar::<_, String>(AssertSqlSafe(known_sql(chunk.len()))).bind(source);
            for id in chunk {
                q = q.bind(id.as_str());
            }
            out.extend(q.fetch_all(&self.pool).await?);
        }
        Ok(out)
    }

    async fn start(&self, l: &Lease<'_>) -> Result<Option<Option<Checkpoint>>, StoreError> {
        sqlx::query(ENSURE_SQL)
            .bind(l.source)
            .execute(&self.pool)
            .await?;
        let row: Option<(Option<i64>, Option<String>)> = sqlx::query_as(START_SQL)
            .bind(l.source)
            .bind(l.owner)
            .bind(l.until.0)
            .bind(l.next_run_at.0)
            .bind(l.now.0)
            .bind(l.force)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|(since, cursor)| match (since, cursor) {
            (Some(since), Some(cursor)) => Some(Checkpoint {
                since: Millis(since),
                cursor,
            }),
            _ => None,
        }))
    }

    async fn save_cursor(
        &self,
        source: &str,
        owner: &str,
        c: &Checkpoint,
        lease_until: Millis,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(CURSOR_SQL)
            .bind(source)
            .bind(owner)
            .bind(c.since.0)
            .bind(c.cursor.as_str())
            .bind(lease_until.0)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn renew(&self, source: &str, owner: &str, until: Millis) -> Result<bool, StoreError> {
        let done = sqlx::query(RENEW_SQL)
            .bind(source)
            .bind(owner)
            .bind(until.0)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn resend_requested(
        &self,
        source: &str,
        event_id: &str,
        requested_at: Millis,
        expires_at: Millis,
    ) -> Result<(), StoreError> {
        sqlx::query(RESEND_SQL)
            .bind(source)
            .bind(event_id)
            .bind(requested_at.0)
            .bind(expires_at.0)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn apply_resends(
        &self,
        source: &str,
        now: Millis,
        since: Millis,
    ) -> Result<Applied, StoreError> {
        // Three statements in this order, each committed on its own:
        // FORGET_SQL keeps whatever MARK_SQL has not seen yet.
        let marked = sqlx::query(MARK_SQL)
            .bind(source)
            .execute(&self.pool)
            .await?
            .rows_affected();
        sqlx::query(FORGET_SQL)
            .bind(source)
            .bind(now.0)
            .execute(&self.pool)
            .await?;
        let waiting: i64 = sqlx::query_scalar(WAITING_SQL)
            .bind(source)
            .bind(since.0)
            .fetch_one(&self.pool)
            .await?;
        Ok(Applied {
            marked,
            waiting: u64::try_from(waiting).unwrap_or(0),
        })
    }

    async fn finish(&self, f: &Finish<'_>) -> Result<(), StoreError> {
        match f.error {
            None => sqlx::query(SUCCESS_SQL)
                .bind(f.source)
                .bind(f.owner)
                .bind(f.now.0)
                .bind(f.recovered)
                .bind(f.checkpointed),
            Some(e) => sqlx::query(FAILURE_SQL)
                .bind(f.source)
                .bind(f.owner)
                .bind(f.recovered)
                .bind(e),
        }
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn release(
        &self,
        source: &str,
        owner: &str,
        now: Millis,
        recovered: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(RELEASE_SQL)
            .bind(source)
            .bind(owner)
            .bind(now.0)
            .bind(recovered)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn statuses(&self) -> Result<Vec<Status>, StoreError> {
        let rows: Vec<(String, Option<i64>, Option<i64>, Option<String>, i64, i64)> =
            sqlx::query_as(STATUS_SQL).fetch_all(&self.pool).await?;
        Ok(rows
            .into_iter()
            .map(|(source, run, ok, error, recovered, failed_runs)| Status {
                source,
                last_run: run.map(Millis),
                last_success: ok.map(Millis),
                last_error: error,
                recovered,
                failed_runs,
            })
            .collect())
    }
}
