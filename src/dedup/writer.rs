//! The event writer: dedup's group commit. New events from concurrent
//! requests are written in one event-log transaction per batch
//! ([`crate::batch`]), and their delivery rows go to this process's hand-off
//! lanes (`deliver::lanes`).
//!
//! Rule: the writer, not the claim state machine, knows about delivery
//! capacity. Per batch it reserves lane slots for the new rows, the event
//! log writes those rows leased, and once the batch committed the writer
//! hands them to their lanes, wakes the loops of the rows it could not
//! hand, and gives back every slot left unused (a duplicate, a failed
//! write), all before any request of the batch is answered.

use crate::batch::{BatchWrite, Batcher, PendingJob};
use crate::deliver::lanes::Lanes;
use crate::primitives::time::Millis;
use crate::store::{DueDelivery, EventLog, NewEvent, Recorded, StoreError, Written};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

/// Longest hold of a formed batch for announced events (`batch::linger`).
pub const LINGER: Duration = Duration::from_millis(1);

/// Handle to the event writer; cheap to clone.
#[derive(Clone)]
pub struct GroupCommit(Batcher<NewEvent, Recorded>);

impl GroupCommit {
    /// Starts the writer task over `log`, handing new rows to `lanes`; a
    /// request waits at most `deadline` (`storage.statement_timeout`) for
    /// its event's commit.
    pub fn start(
        log: Arc<dyn EventLog>,
        lanes: Lanes,
        max_batch: usize,
        deadline: Duration,
    ) -> Self {
        Self(
            Batcher::start(
                Arc::new(Events { log, lanes }),
                max_batch,
                "hookgate_ledger",
                LINGER,
            )
            .with_deadline(deadline),
        )
    }

    /// Records one event; returns once its transaction committed (or failed).
    /// `pending` (from [`GroupCommit::pending_job`]) stops counting once the
    /// event is queued.
    pub async fn record(
        &self,
        event: NewEvent,
        pending: PendingJob,
    ) -> Result<Recorded, StoreError> {
        self.0.submit(event, Some(pending)).await
    }

    /// Announces an event that will probably be recorded soon: the writer
    /// may wait for it to join the batch.
    pub fn pending_job(&self) -> PendingJob {
        self.0.pending_job()
    }
}

/// The batch sink: the event log and the lanes its rows are handed to.
struct Events {
    log: Arc<dyn EventLog>,
    lanes: Lanes,
}

#[async_trait]
impl BatchWrite<NewEvent, Recorded> for Events {
    async fn write(&self, jobs: &mut [NewEvent]) -> Result<Vec<Recorded>, StoreError> {
        let now = Millis::now();
        for e in jobs.iter_mut() {
            e.handoff = self.lanes.reserve(&e.targets, now);
        }
        let written = self.log.record(jobs).await;
        self.hand_off(jobs, written.as_ref().ok());
        written.map(|w| w.outcomes)
    }
}

impl Events {
    /// After the write (`written`: `None` when it failed): each leased row
    /// goes to its lane, each other row of a new event wakes its target's
    /// loop to claim it, and each slot without a row is given back.
    fn hand_off(&self, jobs: &mut [NewEvent], written: Option<&Written>) {
        // `Written::leased` lists the rows event by event, in batch order.
        let mut rest = written.map_or(&[][..], |w| w.leased.as_slice());
        for (at, e) in jobs.iter_mut().enumerate() {
            let mine = rest.iter().take_while(|r| r.event == at).count();
            let (handed, tail) = rest.split_at(mine);
            rest = tail;
            let new = written.is_some_and(|w| w.outcomes.get(at) == Some(&Recorded::New));
            let lease = e.handoff.take();
            for (i, target) in e.targets.iter().enumerate() {
                let row = handed.iter().find(|r| r.target == i);
                match (row, &lease) {
                    (Some(r), Some(l)) => self.lanes.hand(handed_row(e, i, r.delivery_id), l.taken),
                    _ => {
                        if lease.as_ref().is_some_and(|l| l.leased[i]) {
                            self.lanes.give_back(target);
                        }
                        if new {
                            self.lanes.wake(target).notify_one();
                        }
                    }
                }
            }
        }
    }
}

/// Target `i`'s new delivery row of `e`, as its loop sends it (ordered
/// targets have no lane, so no ordering key).
fn handed_row(e: &NewEvent, i: usize, id: i64) -> DueDelivery {
    DueDelivery {
        id,
        source: e.source.clone(),
        target: e.targets[i].clone(),
        event_id: e.event_id.clone(),
        body: e.body.clone(),
        headers: e.headers.clone(),
        received_at: e.received_at,
        attempts: 0,
        earlier_attempts: 0,
        event_type: e.facts.event_type.clone(),
        order_key: None,
    }
}
