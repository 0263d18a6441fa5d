//! Reconciliation's rows (`hookgate_reconcile`, migration 0007): one per
//! reconciled source, holding the lease that lets one replica at a time
//! run it, when the next run is due, the cursor an interrupted run resumes
//! from, and the last run's outcome; and the resends it asked for
//! (`hookgate_resends`, migration 0013), until the events they bring are
//! marked recovered. Shared SQL (`$N` placeholders, which both backends
//! accept), implemented for each backend by [`impl_reconcile_store!`].

use super::StoreError;
use crate::primitives::time::Millis;
use async_trait::async_trait;
use std::collections::HashSet;

/// Where an unfinished run stopped: its window start and the provider's
/// page cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub since: Millis,
    pub cursor: String,
}

/// A run's ownership, as taken by [`ReconcileStore::start`].
#[derive(Debug, Clone)]
pub struct Lease<'a> {
    pub source: &'a str,
    /// Unique per run.
    pub owner: &'a str,
    pub now: Millis,
    pub until: Millis,
    /// Earliest start of the next run (`now + interval`).
    pub next_run_at: Millis,
    /// Start even if the interval has not passed (the CLI); a live lease
    /// still wins.
    pub force: bool,
}

/// How a run ended, for [`ReconcileStore::finish`].
#[derive(Debug, Clone)]
pub struct Finish<'a> {
    pub source: &'a str,
    pub owner: &'a str,
    pub now: Millis,
    /// Events recovered (or resent) by this run.
    pub recovered: i64,
    /// Why it failed; `None` on success.
    pub error: Option<&'a str>,
    /// The run kept the checkpoint (a scheduled run): success clears it.
    /// An unscheduled run (the CLI) leaves it for the scheduled ones.
    pub checkpointed: bool,
}

/// What [`ReconcileStore::apply_resends`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// Events newly marked recovered.
    pub marked: u64,
    /// The source's resends requested at or after the given time whose
    /// event has not arrived yet.
    pub waiting: u64,
}

/// The last run of a source, for `/stats` and `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    pub source: String,
    pub last_run: Option<Millis>,
    pub last_success: Option<Millis>,
    pub last_error: Option<String>,
    pub recovered: i64,
    pub failed_runs: i64,
}

#[async_trait]
pub trait ReconcileStore: Send + Sync {
    /// Which of `ids` the ledger holds for `source`.
    async fn known(&self, source: &str, ids: &[String]) -> Result<HashSet<String>, StoreError>;
    /// Takes the source's lease when no live lease exists and the run is due
    /// (or `force`). `None`: another replica runs it, or ran it this
    /// interval. `Some(checkpoint)`: ours, resuming there if a run stopped.
    async fn start(&self, lease: &Lease<'_>) -> Result<Option<Option<Checkpoint>>, StoreError>;
    /// Records the cursor after a page is done, and extends the lease.
    /// `false`: `owner` no longer holds the lease (nothing was written).
    async fn save_cursor(
        &self,
        source: &str,
        owner: &str,
        checkpoint: &Checkpoint,
        lease_until: Millis,
    ) -> Result<bool, StoreError>;
    /// Extends the lease to `until` while `owner` holds it. `false`:
    /// another replica took it (ours had expired), or it was released.
    async fn renew(&self, source: &str, owner: &str, until: Millis) -> Result<bool, StoreError>;
    /// Records that the provider accepted a resend of `event_id`, asked for
    /// at `requested_at` (a repeated request keeps the first time and moves
    /// `expires_at` on).
    async fn resend_requested(
        &self,
        source: &str,
        event_id: &str,
        requested_at: Millis,
        expires_at: Millis,
    ) -> Result<(), StoreError>;
    /// Marks recovered the events of `source` received at or after their
    /// resend was requested; forgets the resends applied, the moot ones
    /// (the event was received before the request: it came by itself) and,
    /// for every source, those expired at `now`. Counts what still waits
    /// among the resends requested at or after `since`.
    async fn apply_resends(
        &self,
        source: &str,
        now: Millis,
        since: Millis,
    ) -> Result<Applied, StoreError>;
    /// Ends the run: releases the lease, adds `recovered`; on success clears
    /// the cursor and the last error, on failure keeps the cursor (the next
    /// run resumes there) and records `error`.
    async fn finish(&self, f: &Finish<'_>) -> Result<(), StoreError>;
    /// Gives the lease back after a run was interrupted by shutdown: its
    /// checkpoint stays, and the run is due at once so another replica
    /// resumes it.
    async fn release(
        &self,
        source: &str,
        owner: &str,
        now: Millis,
        recovered: i64,
    ) -> Result<(), StoreError>;
    /// Every source's row.
    async fn statuses(&self) -> Result<Vec<Status>, StoreError>;
}

pub(crate) const ENSURE_SQL: &str =
    "INSERT INTO hookgate_reconcile (source) VALUES ($1) ON CONFLICT (source) DO NOTHING";

/// `$1` source, `$2` owner, `$3` lease until, `$4` next run at, `$5` now,
/// `$6` force. A compare-and-set: of two replicas, one row update wins.
pub(crate) const START_SQL: &str = "UPDATE hookgate_reconcile
     SET lease_owner = $2, lease_until = $3, next_run_at = $4, last_run = $5
     WHERE source = $1
       AND (lease_until IS NULL OR lease_until < $5)
       AND ($6 OR next_run_at <= $5)
     RETURNING cursor_since, cursor";

/// `$1` source, `$2` owner, `$3` since, `$4` cursor, `$5` lease until.
pub(crate) const CURSOR_SQL: &str = "UPDATE hookgate_reconcile
     SET cursor_since = $3, cursor = $4, lease_until = $5
     WHERE source = $1 AND lease_owner = $2";

/// `$1` source, `$2` owner, `$3` lease until.
pub(crate) const RENEW_SQL: &str = "UPDATE hookgate_reconcile
     SET lease_until = $3
     WHERE source = $1 AND lease_owner = $2";

/// `$1` source, `$2` event id, `$3` requested at, `$4` expires at.
pub(crate) const RESEND_SQL: &str =
    "INSERT INTO hookgate_resends (source, event_id, requested_at, expires_at)
     VALUES ($1, $2, $3, $4)
     ON CONFLICT (source, event_id) DO UPDATE SET expires_at = excluded.expires_at";

/// `$1` source. Driven by the few resend rows (the ledger's unique key
/// finds each event); an event received before its request is left alone.
pub(crate) const MARK_SQL: &str = "UPDATE hookgate_events SET recovered = TRUE
     WHERE source = $1
       AND event_id IN (SELECT r.event_id FROM hookgate_resends r WHERE r.source = $1)
       AND NOT recovered
       AND received_at >= (SELECT r.requested_at FROM hookgate_resends r
                           WHERE r.source = hookgate_events.source
                             AND r.event_id = hookgate_events.event_id)";

/// `$1` source, `$2` now. Runs after [`MARK_SQL`] committed: an event that
/// arrived since is neither recovered nor received before its request, so
/// its row stays for the next pass instead of being lost.
pub(crate) const FORGET_SQL: &str = "DELETE FROM hookgate_resends
     WHERE expires_at <= $2
        OR (source = $1 AND EXISTS (
              SELECT 1 FROM hookgate_events e
              WHERE e.source = hookgate_resends.source
                AND e.event_id = hookgate_resends.event_id
                AND (e.recovered OR e.received_at < hookgate_resends.requested_at)))";

/// `$1` source, `$2` requested since.
pub(crate) const WAITING_SQL: &str =
    "SELECT COUNT(*) FROM hookgate_resends WHERE source = $1 AND requested_at >= $2";

/// `$1` source, `$2` owner, `$3` now, `$4` recovered, `$5` checkpointed.
pub(crate) const SUCCESS_SQL: &str = "UPDATE hookgate_reconcile
     SET lease_owner = NULL, lease_until = NULL,
         cursor_since = CASE WHEN $5 THEN NULL ELSE cursor_since END,
         cursor = CASE WHEN $5 THEN NULL ELSE cursor END,
         last_success = $3, last_error = NULL, recovered = recovered + $4
     WHERE source = $1 AND lease_owner = $2";

/// `$1` source, `$2` owner, `$3` recovered, `$4` error.
pub(crate) const FAILURE_SQL: &str = "UPDATE hookgate_reconcile
     SET lease_owner = NULL, lease_until = NULL, last_error = $4,
         recovered = recovered + $3, failed_runs = failed_runs + 1
     WHERE source = $1 AND lease_owner = $2";

/// `$1` source, `$2` owner, `$3` now, `$4` recovered.
pub(crate) const RELEASE_SQL: &str = "UPDATE hookgate_reconcile
     SET lease_owner = NULL, lease_until = NULL, next_run_at = $3, recovered = recovered + $4
     WHERE source = $1 AND lease_owner = $2";

pub(crate) const STATUS_SQL: &str =
    "SELECT source, last_run, last_success, last_error, recovered, failed_runs
     FROM hookgate_reconcile ORDER BY source";

/// `SELECT event_id … WHERE source = $1 AND event_id IN ($2, …)` for `n` ids.
pub(crate) fn known_sql(n: usize) -> String {
    let list: Vec<String> = (0..n).map(|i| format!("${}", i + 2)).collect();
    format!(
        "SELECT event_id FROM hookgate_events WHERE source = $1 AND event_id IN ({})",
        list.join(", ")
    )
}

/// Implements [`ReconcileStore`] for a backend type with a `pool` field.
macro_rules! impl_reconcile_store {
    ($ty:ty) => {
        #[async_trait::async_trait]
        impl $crate::store::reconcile::ReconcileStore for $ty {
            async fn known(
                &self,
                source: &str,
                ids: &[String],
            ) -> Result<std::collections::HashSet<String>, $crate::store::StoreError> {
                use $crate::store::reconcile as r;
                let mut out = std::collections::HashSet::new();
                // Bounded statements: a page is at most 100 ids, but a
                // caller may pass more.
                for chunk in ids.chunks(500) {
                    let sql = r::known_sql(chunk.len());
                    let mut q =
                        sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(sql)).bind(source);
                    for id in chunk {
                        q = q.bind(id.as_str());
                    }
                    out.extend(q.fetch_all(&self.pool).await?);
                }
                Ok(out)
            }

            async fn start(
                &self,
                l: &$crate::store::reconcile::Lease<'_>,
            ) -> Result<
                Option<Option<$crate::store::reconcile::Checkpoint>>,
                $crate::store::StoreError,
            > {
                use $crate::store::reconcile as r;
                sqlx::query(r::ENSURE_SQL)
                    .bind(l.source)
                    .execute(&self.pool)
                    .await?;
                let row: Option<(Option<i64>, Option<String>)> = sqlx::query_as(r::START_SQL)
                    .bind(l.source)
                    .bind(l.owner)
                    .bind(l.until)
                    .bind(l.next_run_at)
                    .bind(l.now)
                    .bind(l.force)
                    .fetch_optional(&self.pool)
                    .await?;
                Ok(row.map(|(since, cursor)| match (since, cursor) {
                    (Some(since), Some(cursor)) => Some(r::Checkpoint {
                        since: $crate::primitives::time::Millis(since),
                        cursor,
                    }),
                    _ => None,
                }))
            }

            async fn save_cursor(
                &self,
                source: &str,
                owner: &str,
                c: &$crate::store::reconcile::Checkpoint,
                lease_until: $crate::primitives::time::Millis,
            ) -> Result<bool, $crate::store::StoreError> {
                let done = sqlx::query($crate::store::reconcile::CURSOR_SQL)
                    .bind(source)
                    .bind(owner)
                    .bind(c.since)
                    .bind(c.cursor.as_str())
                    .bind(lease_until)
                    .execute(&self.pool)
                    .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn renew(
                &self,
                source: &str,
                owner: &str,
                until: $crate::primitives::time::Millis,
            ) -> Result<bool, $crate::store::StoreError> {
                let done = sqlx::query($crate::store::reconcile::RENEW_SQL)
                    .bind(source)
                    .bind(owner)
                    .bind(until)
                    .execute(&self.pool)
                    .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn resend_requested(
                &self,
                source: &str,
                event_id: &str,
                requested_at: $crate::primitives::time::Millis,
                expires_at: $crate::primitives::time::Millis,
            ) -> Result<(), $crate::store::StoreError> {
                sqlx::query($crate::store::reconcile::RESEND_SQL)
                    .bind(source)
                    .bind(event_id)
                    .bind(requested_at)
                    .bind(expires_at)
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn apply_resends(
                &self,
                source: &str,
                now: $crate::primitives::time::Millis,
                since: $crate::primitives::time::Millis,
            ) -> Result<$crate::store::reconcile::Applied, $crate::store::StoreError> {
                use $crate::store::reconcile as r;
                // Three statements in this order, each committed on its own:
                // FORGET_SQL keeps whatever MARK_SQL has not seen yet.
                let marked = sqlx::query(r::MARK_SQL)
                    .bind(source)
                    .execute(&self.pool)
                    .await?
                    .rows_affected();
                sqlx::query(r::FORGET_SQL)
                    .bind(source)
                    .bind(now)
                    .execute(&self.pool)
                    .await?;
                let waiting: i64 = sqlx::query_scalar(r::WAITING_SQL)
                    .bind(source)
                    .bind(since)
                    .fetch_one(&self.pool)
                    .await?;
                Ok(r::Applied {
                    marked,
                    waiting: u64::try_from(waiting).unwrap_or(0),
                })
            }

            async fn finish(
                &self,
                f: &$crate::store::reconcile::Finish<'_>,
            ) -> Result<(), $crate::store::StoreError> {
                use $crate::store::reconcile as r;
                match f.error {
                    None => sqlx::query(r::SUCCESS_SQL)
                        .bind(f.source)
                        .bind(f.owner)
                        .bind(f.now)
                        .bind(f.recovered)
                        .bind(f.checkpointed),
                    Some(e) => sqlx::query(r::FAILURE_SQL)
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
                now: $crate::primitives::time::Millis,
                recovered: i64,
            ) -> Result<(), $crate::store::StoreError> {
                sqlx::query($crate::store::reconcile::RELEASE_SQL)
                    .bind(source)
                    .bind(owner)
                    .bind(now)
                    .bind(recovered)
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn statuses(
                &self,
            ) -> Result<Vec<$crate::store::reconcile::Status>, $crate::store::StoreError> {
                use $crate::primitives::time::Millis;
                let rows: Vec<(String, Option<i64>, Option<i64>, Option<String>, i64, i64)> =
                    sqlx::query_as($crate::store::reconcile::STATUS_SQL)
                        .fetch_all(&self.pool)
                        .await?;
                Ok(rows
                    .into_iter()
                    .map(|(source, run, ok, error, recovered, failed_runs)| {
                        $crate::store::reconcile::Status {
                            source,
                            last_run: run.map(Millis),
                            last_success: ok.map(Millis),
                            last_error: error,
                            recovered,
                            failed_runs,
                        }
                    })
                    .collect())
            }
        }
    };
}
pub(crate) use impl_reconcile_store;

#[cfg(test)]
mod tests {
    #[test]
    fn known_sql_numbers_the_ids_after_the_source() {
        assert_eq!(
            super::known_sql(2),
            "SELECT event_id FROM hookgate_events WHERE source = $1 AND event_id IN ($2, $3)"
        );
    }
}
