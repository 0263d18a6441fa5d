//! Duplicate arrivals, recorded without touching the duplicate hot path.
//!
//! A duplicate is answered after one cache round trip; writing its arrival
//! there would add a database round trip to every provider retry. Instead
//! the request pushes `(source, id, time, conflict)` into a bounded
//! in-memory queue (no await, no lock held across I/O) and a background task
//! writes whatever is queued every [`FLUSH_EVERY`]. A flush folds the
//! arrivals of one event id (same body, or conflicting) into one row with
//! their count and first/last time, so a retry storm of one id costs one
//! narrow row per flush, not one per copy; rows go out ≤ [`MAX_BATCH`] per
//! statement. Best effort, by design: when the queue is full the arrival is
//! dropped and counted (`hookgate_arrivals_dropped_total`), a failed write
//! drops its batch, and a crash loses what was queued. The per-event
//! `duplicates` / `conflicts` counts are summed from these rows when a page
//! asks, so they are exactly as complete as the arrival rows.
//!
//! Rule: nothing on the request path waits for this writer or its database.

use crate::primitives::time::Millis;
use crate::store::EventLog;
use crate::store::event_log::NewArrival;
use foldhash::{HashMap, HashMapExt};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Most arrivals waiting in memory; beyond this they are dropped.
pub const CAPACITY: usize = 10_000;
/// Most arrival rows (each folding any number of copies) written by one
/// statement.
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
        log: Arc<dyn EventLog>,
        stop: CancellationToken,
    ) -> (Self, impl Future<Output = ()>) {
        let (tx, rx) = mpsc::channel(CAPACITY);
        let this = Self {
            tx,
            dropped: Arc::new(AtomicU64::new(0)),
        };
        (this, writer(log, rx, stop))
    }

    /// Queues one duplicate arrival; never waits.
    pub fn push(&self, source: &str, event_id: &str, arrived_at: Millis, conflict: bool) {
        let a = NewArrival {
            source: source.to_owned(),
            event_id: event_id.to_owned(),
            arrived_at,
            last_at: arrived_at,
            copies: 1,
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
    log: Arc<dyn EventLog>,
    mut rx: mpsc::Receiver<NewArrival>,
    stop: CancellationToken,
) {
    let mut queued = Vec::with_capacity(CAPACITY);
    loop {
        let stopping = tokio::select! {
            _ = tokio::time::sleep(FLUSH_EVERY) => false,
            _ = stop.cancelled() => true,
        };
        // Everything queued now (at most CAPACITY), folded per event.
        while queued.len() < CAPACITY {
            match rx.try_recv() {
                Ok(a) => queued.push(a),
                Err(_) => break,
            }
        }
        let rows = fold(std::mem::take(&mut queued));
        for batch in rows.chunks(MAX_BATCH) {
            if let Err(e) = log.record_arrivals(batch).await {
                let lost: u64 = batch.iter().map(|a| u64::from(a.copies)).sum();
                metrics::counter!("hookgate_arrivals_dropped_total").increment(lost);
                tracing::debug!(error = %e, n = lost, "arrivals not recorded");
            }
        }
        if stopping {
            return;
        }
    }
}

/// Folds arrivals of the same (source, event id, conflict) into one row:
/// copies summed, first and last time kept; rows in order of first arrival.
fn fold(arrivals: Vec<NewArrival>) -> Vec<NewArrival> {
    // Row of each arrival, numbered by first occurrence (keys borrowed).
    let slots: Vec<usize> = {
        let mut at: HashMap<(&str, &str, bool), usize> = HashMap::new();
        arrivals
            .iter()
            .map(|a| {
                let next = at.len();
                *at.entry((&a.source, &a.event_id, a.conflict))
                    .or_insert(next)
            })
            .collect()
    };
    let mut rows: Vec<NewArrival> = Vec::new();
    for (a, slot) in arrivals.into_iter().zip(slots) {
        if slot == rows.len() {
            rows.push(a);
        } else {
            let row = &mut rows[slot];
            row.copies = row.copies.saturating_add(a.copies);
            row.arrived_at = row.arrived_at.min(a.arrived_at);
            row.last_at = row.last_at.max(a.last_at);
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrival(id: &str, at: i64, conflict: bool) -> NewArrival {
        NewArrival {
            source: "stripe".into(),
            event_id: id.into(),
            arrived_at: Millis(at),
            last_at: Millis(at),
            copies: 1,
            conflict,
        }
    }

    #[test]
    fn a_flush_folds_copies_of_one_id_and_keeps_conflicts_apart() {
        let rows = fold(vec![
            arrival("evt_a", 10, false),
            arrival("evt_b", 11, false),
            arrival("evt_a", 12, false),
            arrival("evt_a", 13, true),
            arrival("evt_a", 14, false),
        ]);
        let seen: Vec<(&str, i64, i64, u32, bool)> = rows
            .iter()
            .map(|r| {
                (
                    r.event_id.as_str(),
                    r.arrived_at.0,
                    r.last_at.0,
                    r.copies,
                    r.conflict,
                )
            })
            .collect();
        assert_eq!(
            seen,
            vec![
                ("evt_a", 10, 14, 3, false),
                ("evt_b", 11, 11, 1, false),
                ("evt_a", 13, 13, 1, true),
            ]
        );
    }
}
