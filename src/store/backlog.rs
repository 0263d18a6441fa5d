//! Backlog: what `/metrics` reads from the ledger on each scrape, so every
//! replica sharing a ledger reports the same numbers: per target the
//! pending, retrying and dead deliveries and when the oldest pending
//! delivery's event arrived; per source when its newest stored event did.
//!
//! Rule: a scrape costs two statements whatever the ledger's size beyond
//! the backlog itself, and concurrent scrapes share one read: the handle
//! [`Store`](super::Store) hands out is [`Cached`], which answers from the
//! last read for [`FRESH_FOR`] and lets one caller read while the others
//! wait for its answer. Both statements are the same text on both backends
//! ([`Portable`]).

use super::StoreError;
use super::portable::Portable;
use super::rows::Column;
use crate::primitives::time::Millis;
use async_trait::async_trait;
use sqlx::{Database, Executor, IntoArguments, Row};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long one read serves later scrapes: Prometheus servers (often two,
/// for redundancy) and dashboards scrape every few seconds at most, and the
/// numbers are minutes-scale signals; a second ledger read for each of them
/// would add load and nothing else.
pub const FRESH_FOR: Duration = Duration::from_secs(2);

/// One target's deliveries that are not delivered (targets a reload removed
/// included: their rows wait in the ledger).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetBacklog {
    pub target: String,
    /// Pending, never attempted.
    pub pending: i64,
    /// Pending with at least one failed attempt.
    pub retrying: i64,
    pub dead: i64,
    /// When the event of the oldest pending or retrying delivery (the lowest
    /// event row) was received; `None` with nothing pending.
    pub oldest_pending_received_at: Option<Millis>,
}

/// What one read found.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub targets: Vec<TargetBacklog>,
    /// Per source with events stored: the newest event's `received_at`.
    pub last_accepted: Vec<(String, Millis)>,
    /// How long the read took (the scrape's ledger cost).
    pub took: Duration,
}

#[async_trait]
pub trait Backlog: Send + Sync + 'static {
    /// The backlog now (or, through [`Cached`], as of at most [`FRESH_FOR`] ago).
    async fn backlog(&self) -> Result<Arc<Snapshot>, StoreError>;
}

/// Per target, the deliveries not delivered, split as `/stats` splits them,
/// and the lowest event row among the pending ones (event rows are numbered
/// in insertion order, so its `received_at` is the oldest; reading the
/// minimum of `received_at` instead would join every pending row to its
/// event). Only `pending` and `dead` rows are read: delivered rows, the bulk
/// of the table, are skipped by `hookgate_deliveries_state (state, …)` (on
/// PostgreSQL they are not in it at all, migration 0026).
const TARGETS_SQL: &str = "SELECT b.target, b.pending, b.retrying, b.dead,
        (SELECT e.received_at FROM hookgate_events e WHERE e.id = b.oldest) AS oldest_at
     FROM (SELECT target,
                  COUNT(CASE WHEN state = 'pending' AND attempts = 0 THEN 1 END) AS pending,
                  COUNT(CASE WHEN state = 'pending' AND attempts > 0 THEN 1 END) AS retrying,
                  COUNT(CASE WHEN state = 'dead' THEN 1 END) AS dead,
                  MIN(CASE WHEN state = 'pending' THEN event_pk END) AS oldest
             FROM hookgate_deliveries
            WHERE state IN ('pending', 'dead')
            GROUP BY target) b
     ORDER BY b.target";

/// Per source, its newest `received_at`: a walk over the distinct sources
/// of `hookgate_events_source_recent (source, received_at, id)`, one index
/// probe for the next source and one for its newest row, so it costs a few
/// probes per source, not a pass over the events (a plain `GROUP BY source`
/// reads every index entry on both databases).
const LAST_ACCEPTED_SQL: &str = "WITH RECURSIVE s(source) AS (
         SELECT MIN(source) FROM hookgate_events
         UNION ALL
         SELECT (SELECT MIN(e.source) FROM hookgate_events e WHERE e.source > s.source)
           FROM s WHERE s.source IS NOT NULL
     )
     SELECT s.source,
            (SELECT MAX(e.received_at) FROM hookgate_events e WHERE e.source = s.source) AS last_at
       FROM s WHERE s.source IS NOT NULL
      ORDER BY s.source";

#[async_trait]
impl<DB> Backlog for Portable<DB>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'c> &'c sqlx::Pool<DB>: Executor<'c, Database = DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
    String: Column<DB>,
    i64: Column<DB>,
    Option<i64>: Column<DB>,
{
    async fn backlog(&self) -> Result<Arc<Snapshot>, StoreError> {
        let t0 = Instant::now();
        let rows = sqlx::query(TARGETS_SQL).fetch_all(&self.pool).await?;
        let targets = rows
            .iter()
            .map(|r| {
                Ok(TargetBacklog {
                    target: r.try_get(0usize)?,
                    pending: r.try_get(1usize)?,
                    retrying: r.try_get(2usize)?,
                    dead: r.try_get(3usize)?,
                    oldest_pending_received_at: r.try_get::<Option<i64>, _>(4usize)?.map(Millis),
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
        let rows = sqlx::query(LAST_ACCEPTED_SQL).fetch_all(&self.pool).await?;
        let mut last_accepted = Vec::with_capacity(rows.len());
        for r in &rows {
            let at: Option<i64> = r.try_get(1usize)?;
            if let Some(at) = at {
                last_accepted.push((r.try_get(0usize)?, Millis(at)));
            }
        }
        Ok(Arc::new(Snapshot {
            targets,
            last_accepted,
            took: t0.elapsed(),
        }))
    }
}

/// A [`Backlog`] read shared by concurrent and close-together callers.
pub struct Cached {
    inner: Arc<dyn Backlog>,
    /// The last successful read and when it finished. A `tokio` mutex: it is
    /// held across the read so that concurrent scrapes wait for one read
    /// instead of each starting their own.
    last: tokio::sync::Mutex<Option<(Instant, Arc<Snapshot>)>>,
    fresh_for: Duration,
}

impl Cached {
    pub fn new(inner: Arc<dyn Backlog>, fresh_for: Duration) -> Self {
        Self {
            inner,
            last: tokio::sync::Mutex::new(None),
            fresh_for,
        }
    }
}

#[async_trait]
impl Backlog for Cached {
    async fn backlog(&self) -> Result<Arc<Snapshot>, StoreError> {
        let mut last = self.last.lock().await;
        if let Some((at, snap)) = last.as_ref()
            && at.elapsed() < self.fresh_for
        {
            return Ok(snap.clone());
        }
        // A failed read is not kept: the next scrape tries again.
        let snap = self.inner.backlog().await?;
        *last = Some((Instant::now(), snap.clone()));
        Ok(snap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts reads and takes a while, like a ledger.
    struct Slow(AtomicUsize);

    #[async_trait]
    impl Backlog for Slow {
        async fn backlog(&self) -> Result<Arc<Snapshot>, StoreError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok(Arc::new(Snapshot::default()))
        }
    }

    #[tokio::test]
    async fn concurrent_scrapes_share_one_read_until_it_is_stale() {
        let slow = Arc::new(Slow(AtomicUsize::new(0)));
        let cached = Arc::new(Cached::new(slow.clone(), Duration::from_millis(300)));
        let reads = (0..8).map(|_| {
            let c = cached.clone();
            tokio::spawn(async move { c.backlog().await.unwrap() })
        });
        for r in reads {
            r.await.unwrap();
        }
        assert_eq!(slow.0.load(Ordering::SeqCst), 1, "eight scrapes, one read");
        tokio::time::sleep(Duration::from_millis(350)).await;
        cached.backlog().await.unwrap();
        assert_eq!(slow.0.load(Ordering::SeqCst), 2, "stale: read again");
    }
}
