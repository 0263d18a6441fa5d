//! Hand-off lanes: a committed event's deliveries go straight to this
//! process's target loops, already leased, without a claim query.
//!
//! Before a batch of events is written, the event writer (`dedup::writer`)
//! reserves a slot on each new delivery row's lane (never waits: a lane holds
//! at most [`LANE_DEPTH`] × `concurrency` rows handed and not yet answered by
//! the target). Reserved rows are inserted already leased to this process
//! (`lease_token`, `lease_until`) in the event's own statement, and after
//! COMMIT the writer hands them to their lanes ([`Lanes::hand`]); the target
//! loop sends them like claimed rows and records the attempt under the same
//! lease token. A slot whose row was not written (a duplicate, a failed
//! write) goes back at once ([`Lanes::give_back`]). A row without a slot
//! (lane full, delivery off in this process) is inserted unleased, its loop
//! is woken, and it is claimed as before.
//!
//! Crash safety is the lease's: a handed row is held ([`Leases`]) from the
//! moment it is handed, so the heartbeat renews it while it waits for a
//! target slot; rows handed to a process that dies are due again when
//! `lease_until` passes unrenewed, like any leased row. At shutdown a loop
//! closes its lane before it releases its leases.
//!
//! A reload that adds a target adds its lane; one that changes a target
//! gives it a fresh lane once the old loop has stopped ([`Lanes::renew`]).
//! A slot reserved on the old lane and handed after the renewal goes back
//! to the new one: the only way a lane's count can drift, by one row per
//! such race, and only on a reload that changed that target.
//!
//! Rule: every slot reserved goes back exactly once, with its handed row
//! when the attempt is recorded, or by `give_back`; so a lane never holds
//! more than its capacity and a hand-off never waits.

use super::lease::{LeaseGuard, Leases};
use crate::primitives::time::Millis;
use crate::store::{DueDelivery, HandoffLease};
use crate::target::Target;
use arc_swap::ArcSwap;
use foldhash::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc};

/// Every target's lane in this process; cheap to clone.
#[derive(Clone)]
pub struct Lanes(Arc<Inner>);

struct Inner {
    /// Replaced whole (copy on write) when a reload adds or renews a lane.
    /// Looked up by target name for every new delivery row: foldhash
    /// (Cargo.toml).
    lanes: ArcSwap<HashMap<String, Arc<Lane>>>,
    /// Serialises [`Lanes::renew`].
    renewing: Mutex<()>,
    /// This process's lease token (the delivery loops' token).
    token: Arc<str>,
    /// Every lease this process holds (handed rows and claimed ones).
    leases: Leases,
    /// False when this process does not deliver: nothing is reserved.
    enabled: bool,
}

struct Lane {
    /// Slots left: rows that may still be reserved before one finishes.
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
    /// The row's lease, renewed by the heartbeat while it is held.
    pub lease: LeaseGuard,
    pub slot: Slot,
}

/// A reserved place on a lane; returned to the lane when dropped.
pub struct Slot(Arc<Lane>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.free.fetch_add(1, Ordering::Release);
    }
}

/// A lane's slots, in rounds of the target's `concurrency`: the rows being
/// sent plus the next round, waiting in the lane for a free target slot.
/// With one round, every row committed while the target was busy with a
/// full round went to the outbox unleased and paid a claim; the target
/// slots still bound what is sent at once.
pub const LANE_DEPTH: usize = 2;

impl Lanes {
    /// Lanes for every target of `config`, with a new lease token. A lane
    /// holds [`LANE_DEPTH`] × the target's `concurrency`; a rate-capped
    /// target gets none (its loop claims only what the cap allows), nor does
    /// an ordered one (only the claim query knows whether a row's key is
    /// free). `enabled`: whether this process runs delivery loops.
    pub fn from_config(config: &crate::config::Config, enabled: bool) -> Self {
        Self::new(
            config
                .targets
                .values()
                .map(|t| (t.name.as_str(), capacity(t))),
            &crate::primitives::token::random_hex(),
            Leases::new(config.delivery.lease, config.delivery.heartbeat),
            enabled,
        )
    }

    /// A fresh lane for `target` (added by a reload, or changed and its old
    /// loop stopped), replacing any lane of that name.
    pub fn renew(&self, target: &Target) {
        let _one_at_a_time = self.0.renewing.lock().unwrap_or_else(|p| p.into_inner());
        let mut map = (**self.0.lanes.load()).clone();
        map.insert(
            target.name.clone(),
            Arc::new(Lane::new(capacity(target), self.0.enabled)),
        );
        self.0.lanes.store(Arc::new(map));
    }

    /// `targets`: name and lane capacity of every target. `enabled` is
    /// whether this process runs delivery loops.
    pub fn new<'a>(
        targets: impl IntoIterator<Item = (&'a str, usize)>,
        token: &str,
        leases: Leases,
        enabled: bool,
    ) -> Self {
        let lanes = targets
            .into_iter()
            .map(|(name, capacity)| (name.to_owned(), Arc::new(Lane::new(capacity, enabled))))
            .collect();
        Self(Arc::new(Inner {
            lanes: ArcSwap::from_pointee(lanes),
            renewing: Mutex::new(()),
            token: token.into(),
            leases,
            enabled,
        }))
    }

    /// This process's lease token.
    pub fn token(&self) -> &str {
        &self.0.token
    }

    /// The leases this process holds.
    pub fn leases(&self) -> &Leases {
        &self.0.leases
    }

    /// The wake-up of `target`'s loop (a default one for an unknown name).
    pub fn wake(&self, target: &str) -> Arc<Notify> {
        self.0
            .lanes
            .load()
            .get(target)
            .map(|l| l.wake.clone())
            .unwrap_or_default()
    }

    /// Wakes the loops of `targets` (unknown names are skipped).
    pub fn notify<S: AsRef<str>>(&self, targets: &[S]) {
        let lanes = self.0.lanes.load();
        for t in targets {
            if let Some(l) = lanes.get(t.as_ref()) {
                l.wake.notify_one();
            }
        }
    }

    /// Wakes every loop.
    pub fn notify_all(&self) {
        for l in self.0.lanes.load().values() {
            l.wake.notify_one();
        }
    }

    /// The receiving end of `target`'s lane, once (for its loop).
    pub fn receiver(&self, target: &str) -> Option<mpsc::Receiver<Handed>> {
        self.0.lanes.load().get(target)?.rx.lock().ok()?.take()
    }

    /// Stops handing rows to `target` (its loop is stopping).
    pub fn close(&self, target: &str) {
        if let Some(l) = self.0.lanes.load().get(target) {
            l.open.store(false, Ordering::Release);
        }
    }

    /// Reserves a slot on each of `targets`' lanes where one is free, never
    /// waiting: the lease to write on those rows. `None` when no lane had
    /// room. Every slot reserved here is either handed with its row
    /// ([`Lanes::hand`]) or given back ([`Lanes::give_back`]).
    pub fn reserve(&self, targets: &[String], now: Millis) -> Option<HandoffLease> {
        if !self.0.enabled || targets.is_empty() {
            return None;
        }
        let lanes = self.0.lanes.load();
        let leased: Vec<bool> = targets
            .iter()
            .map(|t| {
                lanes
                    .get(t)
                    .is_some_and(|lane| lane.open.load(Ordering::Acquire) && take_slot(&lane.free))
            })
            .collect();
        // When the lease was taken on the monotonic clock: no later than
        // the wall-clock `now` it is counted from.
        let behind = Millis::now().0.saturating_sub(now.0).max(0) as u64;
        let taken = Instant::now()
            .checked_sub(Duration::from_millis(behind))
            .unwrap_or_else(Instant::now);
        leased.contains(&true).then(|| HandoffLease {
            token: self.0.token.clone(),
            until: now + self.0.leases.lease(),
            taken,
            leased,
        })
    }

    /// Hands a committed row, leased at `taken` (held from now on) under a
    /// slot reserved for it, to its target's loop.
    pub fn hand(&self, row: DueDelivery, taken: Instant) {
        let lanes = self.0.lanes.load();
        let Some(lane) = lanes.get(&row.target) else {
            return;
        };
        let lease = self.0.leases.hold(row.id, taken);
        let slot = Slot(lane.clone());
        // Cannot be full (at most `capacity` slots exist); closed means the
        // loop stopped: the lease then expires or is released, and the row
        // is claimed again.
        let _ = lane.tx.try_send(Handed { row, lease, slot });
    }

    /// Returns a slot reserved on `target`'s lane whose row was not handed.
    pub fn give_back(&self, target: &str) {
        if let Some(lane) = self.0.lanes.load().get(target) {
            lane.free.fetch_add(1, Ordering::Release);
        }
    }
}

/// A target's lane size: [`LANE_DEPTH`] × its `concurrency`; none for a
/// rate-capped or ordered target (see [`Lanes::from_config`]).
fn capacity(t: &Target) -> usize {
    if t.rate.is_some() || t.order_by.is_some() {
        0
    } else {
        LANE_DEPTH * t.concurrency
    }
}

impl Lane {
    fn new(capacity: usize, open: bool) -> Self {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        Self {
            free: AtomicUsize::new(capacity),
            open: AtomicBool::new(open),
            tx,
            rx: Mutex::new(Some(rx)),
            wake: Arc::new(Notify::new()),
        }
    }
}

fn take_slot(free: &AtomicUsize) -> bool {
    free.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
        .is_ok()
}
