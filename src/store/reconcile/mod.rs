//! Reconciliation's rows (`hookgate_reconcile`, migration 0007): one per
//! reconciled source, holding the lease that lets one replica at a time
//! run it, when the next run is due, the cursor an interrupted run resumes
//! from, and the last run's outcome; and the resends it asked for
//! (`hookgate_resends`, migration 0013), until the events they bring are
//! marked recovered.
//!
//! Rule: the SQL is the same text on both backends (`$N` placeholders,
//! which both accept), so one implementation serves either backend's main
//! pool ([`portable`](self::portable)); each statement commits on its own.

mod portable;

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
pub trait ReconcileStore: Send + Sync + 'static {
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

#[cfg(test)]
mod tests {
    #[test]
    fn known_sql_numbers_the_ids_after_the_source() {
        assert_eq!(
            super::portable::known_sql(2),
            "SELECT event_id FROM hookgate_events WHERE source = $1 AND event_id IN ($2, $3)"
        );
    }
}
