//! Duplicate arrivals, recorded without touching the duplicate hot path.
//!
//! A duplicate is answered after one cache round trip; writing its arrival
//! there would add a database round trip to every provider retry. Instead
//! the request pushes `(source, id, time, conflict)` into a bounded
//! in-memory queue (no await, no lock held across I/O) and a background task
//! writes whatever is queued in one batch (≤ [`MAX_BATCH`]) every
//! [`FLUSH_EVERY`]. Best effort, by design: when the queue is full the
//! arrival is dropped and counted (`hookgate_arrivals_dropped_total`), a
//! failed write drops its batch, and a crash loses what was queued. The
//! per-event `duplicates` / `conflicts` counts are counted from these rows
//! when a page asks, so they are exactly as complete as the arrival rows.

use super::Ledger;
use super::events::NewArrival;
use crate::primitives::time::Millis;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Most arrivals waiting in memory; beyond this they are dropped.
pub const CAPACITY: usize = 10_000;
/// Most arrivals written by one statement.
pub const MAX_BATCH: usize = 512;
/// How often queued arrivals are written.
pub const FLUSH_EVERY: Duration = Duration::from_millis(250);

/// Handle to the arrivals queue; cheap to clone.
#[derive(Clone)]
pub struct Arrivals {
    tx: mpsc::Sender<NewArrival>,
    dropped: Arc<AtomicU64>,
}

impl Arrivals {
    /// Starts the writer; it drains the queue once more after `stop`.
    pub fn start(
        ledger: Arc<dyn Ledger>,
        stop: CancellationToken,
    ) -> (Self, impl Future<Output = ()>) {
        let (tx, rx) = mpsc::channel(CAPACITY);
        let this = Self {
            tx,
            dropped: Arc::new(AtomicU64::new(0)),
        };
        (this, writer(ledger, rx, stop))
    }

    /// Queues one duplicate arrival; never waits.
    pub fn push(&self, source: &str, event_id: &str, arrived_at: Millis, conflict: bool) {
        let a = NewArrival {
            source: source.to_owned(),
            event_id: event_id.to_owned(),
            arrived_at,
            conflict,
        };
        if self.tx.try_send(a).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("hookgate_arrivals_dropped_total").increment(1);
        }
    }

    /// Arrivals dropped because the queue was full (this process).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

async fn writer(
    ledger: Arc<dyn Ledger>,
    mut rx: mpsc::Receiver<NewArrival>,
    stop: CancellationToken,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        let stopping = tokio::select! {
            _ = tokio::time::sleep(FLUSH_EVERY) => false,
            _ = stop.cancelled() => true,
        };
        loop {
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(a) => batch.push(a),
                    Err(_) => break,
                }
            }
            if batch.is_empty() {
                break;
            }
            if let Err(e) = ledger.console().record_arrivals(&batch).await {
                metrics::counter!("hookgate_arrivals_dropped_total").increment(batch.len() as u64);
                tracing::debug!(error = %e, n = batch.len(), "arrivals not recorded");
            }
            let full = batch.len() == MAX_BATCH;
            batch.clear();
            if !full {
                break;
            }
        }
        if stopping {
            return;
        }
    }
}
