//! Hand-off: a committed event's deliveries go straight to this process's
//! target loops, already leased, without a claim query.
//!
//! Before an event is written, ingest reserves a slot on each of its targets'
//! lanes (never waits: a lane holds at most [`LANE_DEPTH`] × `concurrency`
//! rows handed and not yet answered by the target). Reserved delivery rows
//! are inserted already leased to this process (`lease_token`,
//! `lease_until`) in the event's own statement, and
//! after COMMIT the store pushes them to the lane; the target loop sends them
//! like claimed rows and records the attempt under the same lease token. A
//! row without a slot (lane full, delivery off in this process) is inserted
//! unleased, its lane is woken, and it is claimed as before.
//!
//! Crash safety is the lease's: rows handed to a process that dies are due
//! again when `lease_until` passes, like any leased row. At shutdown a loop
//! closes its lane before it releases its leases.

use super::DueDelivery;
use crate::primitives::time::Millis;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, mpsc};

/// Every target's lane in this process; cheap to clone.
#[derive(Clone)]
pub struct Handoff(Arc<Inner>);

struct Inner {
    lanes: HashMap<String, Arc<Lane>>,
    /// This process's lease token (the delivery loops' token).
    token: Arc<str>,
    lease: Duration,
    /// False when this process does not deliver: nothing is reserved.
    enabled: bool,
}

struct Lane {
    /// Slots left: rows that may still be handed before one finishes.
    free: AtomicUsize,
    open: AtomicBool,
    tx: mpsc::Sender<Handed>,
    rx: Mutex<Option<mpsc::Receiver<Handed>>>,
    /// Wakes the loop for rows inserted unleased (and for replay, NOTIFY).
    wake: Arc<Notify>,
}

/// A leased delivery handed to its target loop. The slot returns to the
/// lane when this is dropped (after the attempt was recorded).
pub struct Handed {
    pub row: DueDelivery,
    /// The row's lease ends then: an attempt must not start too close to it.
    pub lease_until: Millis,
    pub slot: Slot,
}

/// A lane slot; returned to the lane when dropped.
pub struct Slot(Arc<Lane>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.free.fetch_add(1, Ordering::Release);
    }
}

/// A lane's slots, in rounds of the target's `concurrency`: the rows being
/// sent plus the next round, waiting in the lane for a free target slot. With
/// one round, every row committed while the target was busy with a full
/// round went to the outbox unleased and paid a claim (a quarter of the rows
/// of the benchmark's figure 3); the target slots still bound what is sent at
/// once (docs/design.md "Seventh pass").
pub const LANE_DEPTH: usize = 2;

impl Handoff {
    /// Lanes for every target of `config`, with a new lease token. A lane
    /// holds [`LANE_DEPTH`] × the target's `concurrency`; a rate-capped
    /// target gets none (its loop claims only what the cap allows), nor does
    /// an ordered one (only the claim query knows whether a row's key is
    /// free). `enabled`: whether this process runs delivery loops.
    pub fn from_config(config: &crate::config::Config, enabled: bool) -> Self {
        Self::new(
            config.targets.values().map(|t| {
                let lane = if t.rate.is_some() || t.order_by.is_some() {
                    0
                } else {
                    LANE_DEPTH * t.concurrency
                };
                (t.name.as_str(), lane)
            }),
            &crate::primitives::token::random_hex(),
            config.delivery.lease,
            enabled,
        )
    }

    /// `targets`: name and lane capacity of every target. `enabled` is
    /// whether this process runs delivery loops.
    pub fn new<'a>(
        targets: impl IntoIterator<Item = (&'a str, usize)>,
        token: &str,
        lease: Duration,
        enabled: bool,
    ) -> Self {
        let lanes = targets
            .into_iter()
            .map(|(name, capacity)| {
                let (tx, rx) = mpsc::channel(capacity.max(1));
                let lane = Lane {
                    free: AtomicUsize::new(capacity),
                    open: AtomicBool::new(enabled),
                    tx,
                    rx: Mutex::new(Some(rx)),
                    wake: Arc::new(Notify::new()),
                };
                (name.to_owned(), Arc::new(lane))
            })
            .collect();
        Self(Arc::new(Inner {
            lanes,
            token: token.into(),
            lease,
            enabled,
        }))
    }

    /// This process's lease token.
    pub fn token(&self) -> &str {
        &self.0.token
    }

    /// The wake-up of `target`'s loop (a default one for an unknown name).
    pub fn wake(&self, target: &str) -> Arc<Notify> {
        self.0
            .lanes
            .get(target)
            .map(|l| l.wake.clone())
            .unwrap_or_default()
    }

    /// Every target's wake-up.
    pub fn wakes(&self) -> impl Iterator<Item = (&str, &Arc<Notify>)> {
        self.0.lanes.iter().map(|(n, l)| (n.as_str(), &l.wake))
    }

    /// The receiving end of `target`'s lane, once (for its loop).
    pub fn receiver(&self, target: &str) -> Option<mpsc::Receiver<Handed>> {
        self.0.lanes.get(target)?.rx.lock().ok()?.take()
    }

    /// Stops handing rows to `target` (its loop is stopping).
    pub fn close(&self, target: &str) {
        if let Some(l) = self.0.lanes.get(target) {
            l.open.store(false, Ordering::Release);
        }
    }

    /// Reserves a slot per target where one is free, never waiting.
    pub fn reserve(&self, targets: &[String], now: Millis) -> Reservation {
        let slots = targets
            .iter()
            .map(|t| {
                let lane = self.0.lanes.get(t)?;
                (self.0.enabled && lane.open.load(Ordering::Acquire) && take_slot(&lane.free))
                    .then(|| Slot(lane.clone()))
            })
            .collect();
        Reservation {
            token: self.0.token.clone(),
            lease_until: now + self.0.lease,
            slots: Mutex::new(slots),
            handoff: self.clone(),
        }
    }
}

fn take_slot(free: &AtomicUsize) -> bool {
    free.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
        .is_ok()
}

/// One event's slots, parallel to its targets. Unused slots return to their
/// lanes when this is dropped (e.g. the write failed or was a duplicate).
pub struct Reservation {
    token: Arc<str>,
    lease_until: Millis,
    slots: Mutex<Vec<Option<Slot>>>,
    handoff: Handoff,
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("lease_until", &self.lease_until)
            .finish_non_exhaustive()
    }
}

impl Reservation {
    /// The lease to write on target `i`'s new delivery row, if it has a slot.
    pub fn lease(&self, i: usize) -> Option<(&str, Millis)> {
        let slots = self.slots.lock().ok()?;
        slots
            .get(i)?
            .as_ref()
            .map(|_| (&*self.token, self.lease_until))
    }

    /// After COMMIT of a new event with these `targets` (the ones it was
    /// reserved for): every leased row goes to its loop (`row(i, delivery
    /// id)` builds it); every other target is woken to claim its row.
    pub fn committed(
        &self,
        targets: &[String],
        leased_ids: &[(usize, i64)],
        row: impl Fn(usize, i64) -> DueDelivery,
    ) {
        let Ok(mut slots) = self.slots.lock() else {
            return;
        };
        for &(i, id) in leased_ids {
            if let Some(slot) = slots.get_mut(i).and_then(Option::take) {
                let lane = slot.0.clone();
                // Cannot be full (at most `capacity` slots exist); closed
                // means the loop stopped: the lease then expires or is
                // released, and the row is claimed again.
                let _ = lane.tx.try_send(Handed {
                    row: row(i, id),
                    lease_until: self.lease_until,
                    slot,
                });
            }
        }
        for (i, t) in targets.iter().enumerate() {
            let handed = leased_ids.iter().any(|&(j, _)| j == i);
            if !handed {
                self.handoff.wake(t).notify_one();
            }
        }
    }
}
