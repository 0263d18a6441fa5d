//! Bulk actions and the audit log (migration 0025): a bulk action's plan,
//! state and progress live in the ledger, so any replica answers for it and
//! a runner that died leaves a row that says so (`interrupted`); the audit
//! log records who changed what from the admin API.
//!
//! Rule: state changes are conditional updates on the row's current state,
//! so two replicas can never both start, or both finish, one action.
//! Both backends run the same SQL text ([`Portable`]).

use super::StoreError;
use super::portable::Portable;
use super::rows::{Bind, Column};
use crate::primitives::time::Millis;
use async_trait::async_trait;
use sqlx::{Database, Executor, IntoArguments, Row};

/// One bulk action as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkRow {
    pub id: String,
    pub kind: String,
    /// The filter as JSON text (its kind parses it).
    pub filter: String,
    /// The plan's counts as JSON text.
    pub plan: String,
    /// How many items the plan counted.
    pub planned: i64,
    /// The largest row id the plan covers.
    pub bound: i64,
    pub page_size: i64,
    pub pause_ms: i64,
    /// `planned`, `running`, `cancelling`, `cancelled`, `done`, `failed`
    /// or `interrupted`.
    pub state: String,
    /// Items counted again at the start (what `done` goes up to).
    pub total: i64,
    pub done: i64,
    pub created_by: String,
    pub started_by: Option<String>,
    pub created_at: Millis,
    pub expires_at: Millis,
    pub started_at: Option<Millis>,
    pub finished_at: Option<Millis>,
    pub heartbeat_at: Option<Millis>,
    pub error: Option<String>,
}

/// One audit log entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    pub id: i64,
    pub at: Millis,
    /// The token's name (`admin` for `server.admin_token`).
    pub who: String,
    /// `bulk.replay`, `replay`, `redeliver`…
    pub action: String,
    /// What it applied to, as JSON text.
    pub filter: String,
    pub count: i64,
    /// `done`, or a bulk action's state (`running`, `cancelled`…).
    pub outcome: String,
    pub bulk_id: Option<String>,
}

/// Most audit entries one read returns.
pub const MAX_AUDIT_PAGE: i64 = 500;

#[async_trait]
pub trait BulkStore: Send + Sync + 'static {
    async fn create_bulk(&self, row: &BulkRow) -> Result<(), StoreError>;
    /// The action, after marking it `interrupted` when it is running but
    /// its runner's heartbeat is older than `stale_before` less its pause.
    async fn bulk(&self, id: &str, stale_before: Millis) -> Result<Option<BulkRow>, StoreError>;
    /// Newest first, stale ones marked `interrupted` first (as [`BulkStore::bulk`]).
    async fn recent_bulk(
        &self,
        limit: i64,
        stale_before: Millis,
    ) -> Result<Vec<BulkRow>, StoreError>;
    /// `planned` → `running` with `total`, unless expired at `now`; false
    /// when the action is not (or no longer) a plan that may start.
    async fn start_bulk(
        &self,
        id: &str,
        total: i64,
        by: &str,
        now: Millis,
    ) -> Result<bool, StoreError>;
    /// Records `done` and a heartbeat while the action runs; returns its
    /// state after (`None`: no such action).
    async fn bulk_progress(
        &self,
        id: &str,
        done: i64,
        now: Millis,
    ) -> Result<Option<String>, StoreError>;
    /// A running (or cancelling) action ends in `state`; false when it had
    /// already ended (e.g. marked `interrupted`).
    async fn finish_bulk(
        &self,
        id: &str,
        state: &str,
        error: Option<&str>,
        now: Millis,
    ) -> Result<bool, StoreError>;
    /// A plan becomes `cancelled`, a running action `cancelling` (its runner
    /// stops at the next page); returns the state after.
    async fn cancel_bulk(&self, id: &str, now: Millis) -> Result<Option<String>, StoreError>;
    /// Appends an entry (its `id` is ignored); returns the id given.
    async fn audit(&self, entry: &AuditEntry) -> Result<i64, StoreError>;
    /// Sets the count and outcome of a bulk action's entry.
    async fn audit_outcome(
        &self,
        bulk_id: &str,
        count: i64,
        outcome: &str,
    ) -> Result<(), StoreError>;
    /// Newest first, ids below `before`, at most `limit`.
    async fn audit_log(
        &self,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<AuditEntry>, StoreError>;
}

const COLUMNS: &str = "id, kind, filter, plan, planned, bound, page_size, pause_ms, state,
    total, done, created_by, started_by, created_at, expires_at, started_at, finished_at,
    heartbeat_at, error";

const INSERT_SQL: &str = "INSERT INTO hookgate_bulk_actions
    (id, kind, filter, plan, planned, bound, page_size, pause_ms, state, created_by,
     created_at, expires_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'planned', $9, $10, $11)";

/// `$1` = id, `$2` = now, `$3` = stale before (less the row's pause: a
/// runner sleeps that long between two heartbeats).
const INTERRUPT_SQL: &str = "UPDATE hookgate_bulk_actions
    SET state = 'interrupted', finished_at = $2
    WHERE id = $1 AND state IN ('running', 'cancelling') AND heartbeat_at < $3 - pause_ms";

/// [`INTERRUPT_SQL`] for every action: `$1` = now, `$2` = stale before.
const INTERRUPT_ALL_SQL: &str = "UPDATE hookgate_bulk_actions
    SET state = 'interrupted', finished_at = $1
    WHERE state IN ('running', 'cancelling') AND heartbeat_at < $2 - pause_ms";

/// `$1` = id, `$2` = total, `$3` = by, `$4` = now.
const START_SQL: &str = "UPDATE hookgate_bulk_actions
    SET state = 'running', total = $2, started_by = $3, started_at = $4, heartbeat_at = $4
    WHERE id = $1 AND state = 'planned' AND expires_at > $4";

const PROGRESS_SQL: &str = "UPDATE hookgate_bulk_actions SET done = $2, heartbeat_at = $3
    WHERE id = $1 AND state IN ('running', 'cancelling')";

const STATE_SQL: &str = "SELECT state FROM hookgate_bulk_actions WHERE id = $1";

const FINISH_SQL: &str = "UPDATE hookgate_bulk_actions
    SET state = $2, error = $3, finished_at = $4
    WHERE id = $1 AND state IN ('running', 'cancelling')";

const CANCEL_SQL: &str = "UPDATE hookgate_bulk_actions
    SET state = CASE WHEN state = 'planned' THEN 'cancelled' ELSE 'cancelling' END,
        finished_at = CASE WHEN state = 'planned' THEN $2 ELSE finished_at END
    WHERE id = $1 AND state IN ('planned', 'running')";

const AUDIT_SQL: &str = "INSERT INTO hookgate_audit
    (at, who, action, filter, count, outcome, bulk_id)
    VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id";

const AUDIT_OUTCOME_SQL: &str = "UPDATE hookgate_audit SET count = $2, outcome = $3
    WHERE bulk_id = $1";

const AUDIT_LOG_SQL: &str = "SELECT id, at, who, action, filter, count, outcome, bulk_id
    FROM hookgate_audit WHERE id < $1 ORDER BY id DESC LIMIT $2";

fn bulk_row<R: Row>(r: &R) -> Result<BulkRow, sqlx::Error>
where
    usize: sqlx::ColumnIndex<R>,
    i64: Column<R::Database>,
    String: Column<R::Database>,
{
    let at = |i: usize| -> Result<Option<Millis>, sqlx::Error> {
        Ok(r.try_get::<Option<i64>, _>(i)?.map(Millis))
    };
    Ok(BulkRow {
        id: r.try_get(0usize)?,
        kind: r.try_get(1usize)?,
        filter: r.try_get(2usize)?,
        plan: r.try_get(3usize)?,
        planned: r.try_get(4usize)?,
        bound: r.try_get(5usize)?,
        page_size: r.try_get(6usize)?,
        pause_ms: r.try_get(7usize)?,
        state: r.try_get(8usize)?,
        total: r.try_get(9usize)?,
        done: r.try_get(10usize)?,
        created_by: r.try_get(11usize)?,
        started_by: r.try_get(12usize)?,
        created_at: Millis(r.try_get(13usize)?),
        expires_at: Millis(r.try_get(14usize)?),
        started_at: at(15)?,
        finished_at: at(16)?,
        heartbeat_at: at(17)?,
        error: r.try_get(18usize)?,
    })
}

#[async_trait]
impl<DB> BulkStore for Portable<DB>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'a> &'a str: Bind<DB>,
    for<'a> Option<&'a str>: sqlx::Encode<'a, DB> + sqlx::Type<DB> + Send,
    i64: Bind<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
    i64: Column<DB>,
    String: Column<DB>,
    DB::QueryResult: super::rows::RowsAffected,
{
    async fn create_bulk(&self, b: &BulkRow) -> Result<(), StoreError> {
        sqlx::query(INSERT_SQL)
            .bind(b.id.as_str())
            .bind(b.kind.as_str())
            .bind(b.filter.as_str())
            .bind(b.plan.as_str())
            .bind(b.planned)
            .bind(b.bound)
            .bind(b.page_size)
            .bind(b.pause_ms)
            .bind(b.created_by.as_str())
            .bind(b.created_at.0)
            .bind(b.expires_at.0)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn bulk(&self, id: &str, stale_before: Millis) -> Result<Option<BulkRow>, StoreError> {
        sqlx::query(INTERRUPT_SQL)
            .bind(id)
            .bind(Millis::now().0)
            .bind(stale_before.0)
            .execute(&self.pool)
            .await?;
        let sql = format!("SELECT {COLUMNS} FROM hookgate_bulk_actions WHERE id = $1");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.as_ref().map(bulk_row).transpose()?)
    }

    async fn recent_bulk(
        &self,
        limit: i64,
        stale_before: Millis,
    ) -> Result<Vec<BulkRow>, StoreError> {
        sqlx::query(INTERRUPT_ALL_SQL)
            .bind(Millis::now().0)
            .bind(stale_before.0)
            .execute(&self.pool)
            .await?;
        let sql = format!(
            "SELECT {COLUMNS} FROM hookgate_bulk_actions ORDER BY created_at DESC, id LIMIT $1"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.iter().map(bulk_row).collect::<Result<_, _>>()?)
    }

    async fn start_bulk(
        &self,
        id: &str,
        total: i64,
        by: &str,
        now: Millis,
    ) -> Result<bool, StoreError> {
        use super::rows::RowsAffected;
        let r = sqlx::query(START_SQL)
            .bind(id)
            .bind(total)
            .bind(by)
            .bind(now.0)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected() == 1)
    }

    async fn bulk_progress(
        &self,
        id: &str,
        done: i64,
        now: Millis,
    ) -> Result<Option<String>, StoreError> {
        sqlx::query(PROGRESS_SQL)
            .bind(id)
            .bind(done)
            .bind(now.0)
            .execute(&self.pool)
            .await?;
        Ok(sqlx::query_scalar(STATE_SQL)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?)
    }

    async fn finish_bulk(
        &self,
        id: &str,
        state: &str,
        error: Option<&str>,
        now: Millis,
    ) -> Result<bool, StoreError> {
        use super::rows::RowsAffected;
        let r = sqlx::query(FINISH_SQL)
            .bind(id)
            .bind(state)
            .bind(error)
            .bind(now.0)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected() == 1)
    }

    async fn cancel_bulk(&self, id: &str, now: Millis) -> Result<Option<String>, StoreError> {
        sqlx::query(CANCEL_SQL)
            .bind(id)
            .bind(now.0)
            .execute(&self.pool)
            .await?;
        Ok(sqlx::query_scalar(STATE_SQL)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?)
    }

    async fn audit(&self, e: &AuditEntry) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(AUDIT_SQL)
            .bind(e.at.0)
            .bind(e.who.as_str())
            .bind(e.action.as_str())
            .bind(e.filter.as_str())
            .bind(e.count)
            .bind(e.outcome.as_str())
            .bind(e.bulk_id.as_deref())
            .fetch_one(&self.pool)
            .await?)
    }

    async fn audit_outcome(
        &self,
        bulk_id: &str,
        count: i64,
        outcome: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(AUDIT_OUTCOME_SQL)
            .bind(bulk_id)
            .bind(count)
            .bind(outcome)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn audit_log(
        &self,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        let rows = sqlx::query(AUDIT_LOG_SQL)
            .bind(before.unwrap_or(i64::MAX))
            .bind(limit.clamp(1, MAX_AUDIT_PAGE))
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(AuditEntry {
                    id: r.try_get(0usize)?,
                    at: Millis(r.try_get(1usize)?),
                    who: r.try_get(2usize)?,
                    action: r.try_get(3usize)?,
                    filter: r.try_get(4usize)?,
                    count: r.try_get(5usize)?,
                    outcome: r.try_get(6usize)?,
                    bulk_id: r.try_get(7usize)?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::from)
    }
}
