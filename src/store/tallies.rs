//! Tallies: the cluster-wide counters every instance flushes its deltas
//! into (totals and a per-minute series), and the delivery counts read live
//! from the outbox, for `/stats`, `/metrics` and the console's series.
//!
//! Rule: counts only. A counter row is only ever added to, so two replicas
//! flushing at once both land; the one exception, [`Tallies::fold_counters`],
//! moves a row's value into another row in one atomic step.

use super::StoreError;
use async_trait::async_trait;

/// Per-minute counters older than this many minutes are deleted: the
/// console's longest window (7 days).
pub const MINUTES_KEPT: i64 = 7 * 24 * 60;

/// Deliveries grouped by source, target and state (`retrying` = pending
/// with at least one failed attempt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryCount {
    pub source: String,
    pub target: String,
    pub state: String,
    pub count: i64,
}

/// One per-minute counter row.
#[derive(Debug, Clone)]
pub struct MinuteCount {
    /// Unix minute (milliseconds / 60 000).
    pub minute: i64,
    pub source: String,
    pub name: String,
    pub value: i64,
}

#[async_trait]
pub trait Tallies: Send + Sync + 'static {
    /// Adds `(source, counter, delta)` to the cluster-wide counters.
    async fn add_counters(&self, deltas: &[(String, String, i64)]) -> Result<(), StoreError>;
    /// All cluster-wide counters.
    async fn counters(&self) -> Result<Vec<(String, String, i64)>, StoreError>;
    /// Adds `(source, name, delta)` to the counters of `minute`; on the
    /// hour, deletes minutes older than [`MINUTES_KEPT`].
    async fn add_minute_counters(
        &self,
        minute: i64,
        deltas: &[(String, String, i64)],
    ) -> Result<(), StoreError>;
    /// Per-minute counters from `since_minute` on.
    async fn minute_counters(&self, since_minute: i64) -> Result<Vec<MinuteCount>, StoreError>;
    async fn delivery_counts(&self) -> Result<Vec<DeliveryCount>, StoreError>;
    /// Per source and target (state `overtaken`): how many deliveries went
    /// ahead of their key's dead deliveries (see `rows::OVERTAKEN_SQL`).
    async fn overtaken(&self) -> Result<Vec<DeliveryCount>, StoreError>;
    /// Deletes `source`'s counters `names` (at most `PURGE_BATCH` of them)
    /// and adds their sum to its counter `into`, atomically; the number of
    /// rows folded.
    async fn fold_counters(
        &self,
        source: &str,
        names: &[String],
        into: &str,
    ) -> Result<u64, StoreError>;
}
