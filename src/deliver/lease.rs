//! The leases this process holds, kept alive by a heartbeat.
//!
//! A delivery row is leased for `delivery.lease` (short: 10 s by default)
//! and renewed every `delivery.heartbeat` while this process holds it, by
//! ONE statement for every row held ([`Outbox::renew_leases`]). A process
//! that dies stops renewing, so its rows are due again at most one lease
//! after the crash, whether or not it comes back.
//!
//! Rule: this process sends a row only while it can vouch for the row's
//! lease. Each held row has a local deadline on the monotonic clock: the
//! start of the statement that last leased or renewed it, plus the lease,
//! minus one heartbeat. The row's `lease_until` was written at or after
//! that start, so the deadline falls a heartbeat before anyone else may take
//! the row (that heartbeat is also the margin for clock skew between
//! replicas, which compare `lease_until` with their own clocks). An attempt
//! starts only before its row's deadline, and is abandoned (its request
//! dropped) when the deadline passes unrenewed: a paused, partitioned or
//! starved process stops sending before its rows can be taken, and a slow
//! target keeps its row as long as the heartbeat renews it.

use crate::primitives::time::Millis;
use crate::store::Outbox;
use foldhash::HashMap;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Every row this process holds leased, by delivery id; cheap to clone.
#[derive(Clone)]
pub struct Leases(Arc<Inner>);

struct Inner {
    /// Held rows. `std` mutex: every critical section is a map operation,
    /// never held across an `.await`. Keyed by row id: foldhash
    /// (Cargo.toml).
    held: Mutex<HashMap<i64, Arc<Held>>>,
    lease: Duration,
    heartbeat: Duration,
    /// The origin of every [`Held::deadline`].
    base: Instant,
}

/// One held row: the local deadline of its lease.
struct Held {
    /// Nanoseconds after [`Inner::base`]; only ever moves forward, except
    /// to 0 when a renewal found the row no longer ours.
    deadline: AtomicU64,
}

impl Leases {
    pub fn new(lease: Duration, heartbeat: Duration) -> Self {
        Self(Arc::new(Inner {
            held: Mutex::new(HashMap::default()),
            lease,
            heartbeat,
            base: Instant::now(),
        }))
    }

    /// How long a lease runs unrenewed (what claims write).
    pub fn lease(&self) -> Duration {
        self.0.lease
    }

    /// Holds row `id`, leased by a statement that started at `taken`, until
    /// the guard is dropped (once the attempt is recorded, or given up).
    pub fn hold(&self, id: i64, taken: Instant) -> LeaseGuard {
        let held = Arc::new(Held {
            deadline: AtomicU64::new(self.deadline_after(taken)),
        });
        // A row held again (claimed anew after its lease was lost) replaces
        // the old entry; the old guard's deadline is then never renewed.
        self.map().insert(id, held.clone());
        LeaseGuard {
            id,
            held,
            leases: self.clone(),
        }
    }

    /// How many rows are held now.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Arc<Held>>> {
        self.0.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The deadline (as stored) of a lease written by a statement started at
    /// `taken`: a heartbeat before the lease could end.
    fn deadline_after(&self, taken: Instant) -> u64 {
        let at = taken + self.0.lease.saturating_sub(self.0.heartbeat);
        at.saturating_duration_since(self.0.base).as_nanos() as u64
    }

    fn now(&self) -> u64 {
        self.0.base.elapsed().as_nanos() as u64
    }

    /// Renews every held row's lease: one statement. Rows the ledger did not
    /// renew (recorded meanwhile, or no longer ours) lose their deadline at
    /// once, so an attempt still sending one is abandoned.
    pub async fn renew(&self, outbox: &dyn Outbox, token: &str) -> Result<usize, RenewError> {
        let held: Vec<(i64, Arc<Held>)> =
            self.map().iter().map(|(id, h)| (*id, h.clone())).collect();
        if held.is_empty() {
            return Ok(0);
        }
        let ids: Vec<i64> = held.iter().map(|(id, _)| *id).collect();
        let taken = Instant::now();
        let now = Millis::now();
        // A renewal that answers after a heartbeat is of no use to the next
        // one; the rows' deadlines still stand, so nothing is lost by
        // abandoning it (it may have committed: the rows then stay leased a
        // little longer than needed).
        let renewed = tokio::time::timeout(
            self.0.heartbeat,
            outbox.renew_leases(token, &ids, now, now + self.0.lease),
        )
        .await
        .map_err(|_| RenewError::TimedOut)?
        .map_err(RenewError::Store)?;
        let renewed: foldhash::HashSet<i64> = renewed.into_iter().collect();
        let deadline = self.deadline_after(taken);
        for (id, h) in &held {
            if renewed.contains(id) {
                h.deadline.fetch_max(deadline, Ordering::AcqRel);
            } else {
                h.deadline.store(0, Ordering::Release);
            }
        }
        Ok(renewed.len())
    }
}

/// Why a renewal did not happen.
#[derive(Debug, thiserror::Error)]
pub enum RenewError {
    #[error("the ledger did not answer within a heartbeat")]
    TimedOut,
    #[error(transparent)]
    Store(crate::store::StoreError),
}

/// A held row; dropping it stops the renewals of the row.
pub struct LeaseGuard {
    id: i64,
    held: Arc<Held>,
    leases: Leases,
}

impl LeaseGuard {
    /// Whether this process may still send the row.
    pub fn valid(&self) -> bool {
        self.leases.now() < self.held.deadline.load(Ordering::Acquire)
    }

    /// Resolves once the row's lease can no longer be vouched for. Checked
    /// synchronously at every poll, not only when a timer fires: a process
    /// resumed after a pause (SIGSTOP, a starved VM) must see the passed
    /// deadline before it polls a send again, whatever order its timers and
    /// sockets are woken in. Poll it first (`biased`) next to the send.
    pub async fn lost(&self) {
        let base = self.leases.0.base;
        let mut sleep = pin!(tokio::time::sleep(Duration::ZERO));
        let mut armed = None;
        std::future::poll_fn(|cx| {
            let deadline = self.held.deadline.load(Ordering::Acquire);
            if self.leases.now() >= deadline {
                return Poll::Ready(());
            }
            if armed != Some(deadline) {
                let at = base + Duration::from_nanos(deadline);
                sleep.as_mut().reset(tokio::time::Instant::from_std(at));
                armed = Some(deadline);
            }
            // The timer wakes us at the deadline; a renewal moved it, so the
            // next poll re-arms it later.
            if sleep.as_mut().poll(cx).is_ready() {
                armed = None;
                cx.waker().wake_by_ref();
            }
            Poll::Pending
        })
        .await
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        let mut map = self.leases.map();
        if map
            .get(&self.id)
            .is_some_and(|h| Arc::ptr_eq(h, &self.held))
        {
            map.remove(&self.id);
        }
    }
}

/// Renews this process's leases every heartbeat until `stop`. Runs until
/// every target loop has finished (its last attempts included), so no lease
/// runs out under an attempt still being recorded at shutdown.
pub async fn heartbeat(
    leases: Leases,
    outbox: Arc<dyn Outbox>,
    token: String,
    stop: CancellationToken,
) {
    let mut failing = false;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(leases.0.heartbeat) => {}
            _ = stop.cancelled() => return,
        }
        match leases.renew(&*outbox, &token).await {
            Ok(_) if failing => {
                failing = false;
                tracing::info!("delivery leases are renewed again");
            }
            Ok(_) => {}
            Err(e) => {
                if !failing {
                    failing = true;
                    tracing::warn!(
                        error = %e,
                        held = leases.len(),
                        "cannot renew delivery leases; their attempts stop before the leases run out"
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_lease_is_lost_a_heartbeat_before_it_runs_out() {
        let leases = Leases::new(Duration::from_millis(300), Duration::from_millis(100));
        let taken = Instant::now();
        let g = leases.hold(7, taken);
        assert!(g.valid());
        tokio::time::timeout(Duration::from_secs(2), g.lost())
            .await
            .expect("lost by its deadline");
        let lost_after = taken.elapsed();
        assert!(!g.valid());
        assert!(
            lost_after >= Duration::from_millis(200) && lost_after < Duration::from_millis(300),
            "{lost_after:?}"
        );
    }

    #[test]
    fn a_dropped_guard_leaves_a_newer_hold_of_the_same_row() {
        let leases = Leases::new(Duration::from_secs(3), Duration::from_secs(1));
        let old = leases.hold(1, Instant::now());
        let new = leases.hold(1, Instant::now());
        drop(old);
        assert_eq!(leases.len(), 1);
        drop(new);
        assert!(leases.is_empty());
    }

    #[test]
    fn a_lease_taken_long_ago_is_not_valid() {
        let leases = Leases::new(Duration::from_secs(3), Duration::from_secs(1));
        let Some(long_ago) = Instant::now().checked_sub(Duration::from_secs(3)) else {
            return;
        };
        assert!(!leases.hold(1, long_ago).valid());
    }
}
