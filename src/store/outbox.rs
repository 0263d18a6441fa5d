//! The outbox as the delivery loops use it: leasing due deliveries,
//! recording attempts, giving leases back, making a recovered target's
//! retries due, a cluster-wide rate bucket, and the wake-ups of commits by
//! other processes. (Operator replay lives in [`super::console`].)
//!
//! Rule: a delivery row changes only under its lease token, so two workers
//! never both own one row.

use super::StoreError;
use crate::primitives::headers::StoredHeaders;
use crate::primitives::time::Millis;
use async_trait::async_trait;
use bytes::Bytes;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// One claim of a target loop: lease up to `limit` of `target`'s rows that
/// are due at `now` to `token`, until `until`.
#[derive(Debug, Clone, Copy)]
pub struct LeaseRequest<'a> {
    pub target: &'a str,
    pub token: &'a str,
    pub now: Millis,
    pub until: Millis,
    /// Most rows to lease ([`Outbox::claim_successor`] leases one).
    pub limit: i64,
}

/// A delivery a worker has leased.
#[derive(Debug, Clone)]
pub struct DueDelivery {
    pub id: i64,
    pub source: String,
    pub target: String,
    pub event_id: String,
    pub body: Bytes,
    pub headers: StoredHeaders,
    pub received_at: Millis,
    /// Attempts made before this one since the delivery was last replayed
    /// (what its retry budget counts).
    pub attempts: i32,
    /// The provider's event type, where it gives one (broker names, metadata).
    pub event_type: Option<String>,
    /// Attempts made before the delivery's last replay: this attempt's
    /// number is `earlier_attempts + attempts + 1`.
    pub earlier_attempts: i32,
    /// The ordering key, on rows leased by [`Outbox::claim_due_ordered`]
    /// (its loop then asks for the key's next row: [`Outbox::claim_successor`]).
    pub order_key: Option<String>,
}

/// Where a delivery goes after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextState {
    Delivered,
    RetryAt(Millis),
    Dead,
}

/// One attempt, as recorded.
#[derive(Debug, Clone)]
pub struct AttemptRecord {
    pub started_at: Millis,
    pub latency_ms: i64,
    pub status: Option<i32>,
    pub error: Option<String>,
    pub next: NextState,
}

impl AttemptRecord {
    /// When the attempt ended (the delivery's new `updated_at`).
    pub fn finished_at(&self) -> Millis {
        Millis(self.started_at.0.saturating_add(self.latency_ms))
    }

    /// The `state` and `next_attempt_at` columns after it (`None` keeps the
    /// current `next_attempt_at`).
    pub(crate) fn next_columns(&self) -> (&'static str, Option<Millis>) {
        match self.next {
            NextState::Delivered => ("delivered", None),
            NextState::RetryAt(at) => ("pending", Some(at)),
            NextState::Dead => ("dead", None),
        }
    }
}

/// What a cluster-wide rate bucket gave ([`Outbox::take_rate_tokens`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateGrant {
    pub granted: u32,
    /// With nothing granted: how long until the bucket holds a token.
    pub wait: std::time::Duration,
}

/// Called with a target name when deliveries for it were committed.
pub type OnCommit = Arc<dyn for<'a> Fn(&'a str) + Send + Sync>;

#[async_trait]
pub trait Outbox: Send + Sync + 'static {
    /// Leases up to `r.limit` due deliveries of `r.target` to `r.token`.
    async fn claim_due(&self, r: &LeaseRequest<'_>) -> Result<Vec<DueDelivery>, StoreError>;
    /// [`Outbox::claim_due`] for a target with `order_by`: a row with an
    /// ordering key is leased only when no pending row (leased or not,
    /// retrying or not) of the same (target, key) has a lower sequence
    /// number, so at most one row per key is out at a time, in sequence
    /// order, across every replica. Rows whose event had no key are claimed
    /// as usual. Keys are visited round-robin from the one after `after`
    /// (`""` at first); returns the rows and the last key leased, the
    /// caller's next `after`.
    async fn claim_due_ordered(
        &self,
        r: &LeaseRequest<'_>,
        after: &str,
    ) -> Result<(Vec<DueDelivery>, Option<String>), StoreError>;
    /// The first pending row of (`r.target`, `key`), leased to the caller if
    /// it is due and not leased: a target loop asks this after a row of the
    /// key was delivered or went dead, so a key's backlog flows without a
    /// walk over every key. One index probe.
    async fn claim_successor(
        &self,
        r: &LeaseRequest<'_>,
        key: &str,
    ) -> Result<Option<DueDelivery>, StoreError>;
    /// `rate`: takes up to `want` tokens from `target`'s bucket shared by
    /// every replica (refilled at `per_sec`, holding at most `capacity`).
    /// `None`: this ledger serves one process, whose own bucket is the cap
    /// (the embedded backend).
    async fn take_rate_tokens(
        &self,
        target: &str,
        want: u32,
        per_sec: f64,
        capacity: f64,
    ) -> Result<Option<RateGrant>, StoreError> {
        let _ = (target, want, per_sec, capacity);
        Ok(None)
    }
    /// Records attempts and moves their deliveries on, all in ONE
    /// transaction (group commit of outcomes). One result per input, in
    /// order: `false` when the lease was lost (another worker owns the row).
    async fn finish_attempts(
        &self,
        token: &str,
        batch: &[(i64, AttemptRecord)],
    ) -> Result<Vec<bool>, StoreError>;
    /// Records one attempt (see [`Outbox::finish_attempts`]).
    async fn finish_attempt(
        &self,
        delivery_id: i64,
        token: &str,
        rec: &AttemptRecord,
    ) -> Result<bool, StoreError> {
        let done = self
            .finish_attempts(token, &[(delivery_id, rec.clone())])
            .await?;
        Ok(done.first().copied().unwrap_or(false))
    }
    /// Makes `target`'s unleased retrying deliveries due at `now` (the target
    /// answered again after failures: its backlog should not sit out its
    /// backoff). Returns how many rows moved.
    async fn expedite(&self, target: &str, now: Millis) -> Result<u64, StoreError>;
    /// The heartbeat (`deliver::lease`): extends to `until` the leases on
    /// `ids` still held under `token` (not run out at `now`), in ONE
    /// statement however many rows. Returns the ids renewed; a row missing
    /// from the answer is no longer this process's to send. Committed
    /// synchronously: a renewal lost in a database crash would let another
    /// worker take a row while this one still sends it.
    async fn renew_leases(
        &self,
        token: &str,
        ids: &[i64],
        now: Millis,
        until: Millis,
    ) -> Result<Vec<i64>, StoreError>;
    /// Gives back the leases held under `token` on `target`'s deliveries
    /// (graceful shutdown of that target's loop). Per target: another
    /// target's loop of the same process may still be finishing attempts
    /// under the same token, and its leases must hold until it has recorded
    /// them.
    async fn release_leases(&self, token: &str, target: &str) -> Result<u64, StoreError>;
    /// Calls `on_commit(target)` whenever any process commits deliveries for
    /// `target`, until `stop`. Single-process backends have nothing to hear.
    async fn listen(&self, on_commit: OnCommit, stop: CancellationToken) {
        let _ = on_commit;
        stop.cancelled().await;
    }
}
