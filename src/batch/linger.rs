//! Linger: with "no artificial delay" alone, a loaded batcher oscillates.
//! Every caller of a big batch is answered at once, sends its next request,
//! and is still verifying it or waiting for its cache claim when the writer
//! looks again: the next batch is the one or two jobs that happened to be
//! queued, and pays a whole statement and commit for them.
//!
//! So a caller announces a job when it starts the work that leads to it:
//! announcing is taking a [`PendingJob`] from
//! [`Batcher::pending_job`](super::Batcher::pending_job), which counts the
//! job as on its way until it is submitted or dropped (ingest announces
//! before its cache round trip). The writer holds a formed batch while
//! announced jobs are still on their way, at most `linger` (a 1 ms tokio
//! timer: up to 2 ms) and only while the announced jobs, times the recent
//! share of announcements that became jobs, add up to at least one (a retry
//! answered from the cache never becomes a job: under provider retries the
//! share is small and the writer does not wait). A lone request is never
//! held: it is no longer counted once it is queued.
//!
//! Rule: an announcement only ever delays a batch; it never holds one past
//! `linger`, and a job that is not announced is written as before.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use tokio::sync::Notify;

/// Jobs on their way to a batcher: callers that announced one
/// ([`Batcher::pending_job`](super::Batcher::pending_job)) and have not submitted it or given up yet.
#[derive(Default)]
pub(super) struct PendingJobs {
    count: AtomicUsize,
    /// Announcements ever made: with the jobs received, the share of
    /// announced jobs that are submitted at all.
    announced: AtomicU64,
    /// Signalled when `count` drops to zero.
    pub(super) none_left: Notify,
}

/// One announced job; dropping it (at submit, or when the caller decides it
/// has nothing to write) takes it off the count.
pub struct PendingJob(Arc<PendingJobs>);

impl Drop for PendingJob {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.none_left.notify_one();
        }
    }
}

impl PendingJob {
    pub(super) fn new(a: &Arc<PendingJobs>) -> Self {
        a.count.fetch_add(1, Ordering::AcqRel);
        a.announced.fetch_add(1, Ordering::Relaxed);
        Self(a.clone())
    }
}

/// What the writer expects of the announced jobs: the share of finished
/// announcements (queued or not) that became jobs, over windows of at least
/// 256 of them; 1 until the first window closes.
pub(super) struct Expected {
    pub(super) received: u64,
    seen_finished: u64,
    seen_jobs: u64,
    share: f64,
}

impl Default for Expected {
    fn default() -> Self {
        Self {
            received: 0,
            seen_finished: 0,
            seen_jobs: 0,
            share: 1.0,
        }
    }
}

impl Expected {
    /// Closes a window if enough announcements finished; `in_hand` jobs are
    /// taken but not yet counted in `received`.
    pub(super) fn update(&mut self, a: &PendingJobs, in_hand: usize) {
        // The two loads are not one snapshot: a window is off by a job or
        // two at most.
        let count = a.count.load(Ordering::Acquire) as u64;
        let finished = a.announced.load(Ordering::Acquire).saturating_sub(count);
        let queued = self.received + in_hand as u64;
        if finished.saturating_sub(self.seen_finished) >= 256 {
            self.share = ((queued - self.seen_jobs) as f64
                / (finished - self.seen_finished) as f64)
                .min(1.0);
            (self.seen_finished, self.seen_jobs) = (finished, queued);
        }
    }

    /// At least one more job is expected from the announced ones.
    pub(super) fn more(&self, a: &PendingJobs) -> bool {
        a.count.load(Ordering::Acquire) as f64 * self.share >= 1.0
    }
}
