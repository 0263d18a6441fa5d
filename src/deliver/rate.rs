//! A target's `rate` cap: a token bucket its loop consults before each
//! claim, and an ordered target's key before leasing its next row
//! (`deliver::successor`), so only rows it may send now are leased. The
//! backlog waits in the outbox (pending, unleased: another replica or a
//! restart can take it), and nothing is dropped.
//!
//! The cap holds for the whole cluster: on PostgreSQL the bucket is a row
//! every replica takes tokens from (`Outbox::take_rate_tokens`), a batch of
//! at most a tenth of a second's worth at a time, kept in a small local
//! reserve until spent. The embedded backend serves one process, whose
//! in-memory bucket is the cap; so is a replica whose ledger cannot be
//! reached (it cannot claim rows then either).
//!
//! Rule: a row is leased only with a token in hand; tokens not used for a
//! row are given back.

use crate::store::Outbox;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// A target's bucket, shared by its loop's claims and its ordered keys'
/// next-row leases (each takes its tokens under a short lock, never held
/// across an await).
pub struct TargetBucket {
    /// The process's own bucket: the cap itself when `cluster` is off; the
    /// reserve of tokens taken from the cluster's bucket when it is on
    /// (then it never refills by itself).
    local: Mutex<Bucket>,
    /// Whether the ledger keeps a bucket for the cluster; learnt on the
    /// first take.
    cluster: AtomicBool,
}

impl TargetBucket {
    pub fn new(per_sec: f64) -> Self {
        // Empty: in the cluster's case every token comes from its bucket;
        // in a lone process's the bucket refills from its creation.
        let mut local = Bucket::new(per_sec);
        local.tokens = 0.0;
        Self {
            local: Mutex::new(local),
            cluster: AtomicBool::new(true),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Bucket> {
        // A panic cannot leave a bucket half-updated in a way that matters.
        self.local.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes up to `want` tokens now: how many it took and, when none,
    /// how long until one is there.
    pub async fn take(
        &self,
        want: usize,
        outbox: &dyn Outbox,
        target: &str,
    ) -> (usize, Option<Duration>) {
        if want == 0 {
            return (0, None);
        }
        if !self.cluster.load(Ordering::Relaxed) {
            return self.take_local(want);
        }
        let (n, per_sec, capacity) = {
            let mut b = self.lock();
            (b.spend(want), b.per_sec, b.capacity)
        };
        if n > 0 {
            return (n, None);
        }
        let ask = u32::try_from(want)
            .unwrap_or(u32::MAX)
            .min(capacity.ceil() as u32);
        match outbox
            .take_rate_tokens(target, ask, per_sec, capacity)
            .await
        {
            Ok(Some(grant)) if grant.granted == 0 => (0, Some(grant.wait)),
            Ok(Some(grant)) => {
                let mut b = self.lock();
                b.give_back(grant.granted as usize);
                (b.spend(want), None)
            }
            Ok(None) => {
                self.cluster.store(false, Ordering::Relaxed);
                self.take_local(want)
            }
            Err(e) => {
                tracing::debug!(error = %e, "rate: the shared bucket is unreachable; this process's own bucket caps meanwhile");
                self.take_local(want)
            }
        }
    }

    fn take_local(&self, want: usize) -> (usize, Option<Duration>) {
        let mut b = self.lock();
        let n = b.take(want, Instant::now());
        (n, (n == 0).then(|| b.wait()))
    }

    /// Returns tokens taken for rows that were not there to lease (to the
    /// local reserve when the bucket is the cluster's).
    pub fn give_back(&self, n: usize) {
        self.lock().give_back(n);
    }
}

pub struct Bucket {
    per_sec: f64,
    /// Largest burst: a tenth of a second's worth, at least one.
    capacity: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    pub fn new(per_sec: f64) -> Self {
        let capacity = (per_sec / 10.0).max(1.0);
        Self {
            per_sec,
            capacity,
            tokens: capacity,
            last: Instant::now(),
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_sec).min(self.capacity);
        self.last = now;
    }

    /// Takes up to `want` whole tokens; returns how many it took.
    pub fn take(&mut self, want: usize, now: Instant) -> usize {
        self.refill(now);
        let n = (self.tokens.floor() as usize).min(want);
        self.tokens -= n as f64;
        n
    }

    /// Spends up to `want` whole tokens already there, without refilling
    /// (the reserve of tokens taken from the cluster's bucket).
    fn spend(&mut self, want: usize) -> usize {
        let n = (self.tokens.floor() as usize).min(want);
        self.tokens -= n as f64;
        n
    }

    /// Returns tokens taken for rows that were not there to claim.
    pub fn give_back(&mut self, n: usize) {
        self.tokens = (self.tokens + n as f64).min(self.capacity);
    }

    /// How long until one whole token is there.
    pub fn wait(&self) -> Duration {
        let missing = (1.0 - self.tokens).max(0.0);
        Duration::from_secs_f64(missing / self.per_sec).max(Duration::from_millis(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_grants_the_rate_with_a_small_burst() {
        let t0 = Instant::now();
        let mut b = Bucket::new(100.0);
        b.last = t0;
        assert_eq!(b.take(50, t0), 10, "a tenth of a second's burst");
        assert_eq!(b.take(50, t0), 0);
        assert!(b.wait() <= Duration::from_millis(10));
        // One second later: capped at the burst again, not 100.
        assert_eq!(b.take(500, t0 + Duration::from_secs(1)), 10);
        let mut granted = 0;
        for ms in 1..=1000 {
            granted += b.take(1, t0 + Duration::from_secs(1) + Duration::from_millis(ms));
        }
        assert!((99..=101).contains(&granted), "{granted} in one second");
        // Tokens taken for rows that were not there come back (on top of
        // a fraction of a token left from the loop above).
        b.give_back(3);
        assert!((3..=4).contains(&b.take(5, t0 + Duration::from_secs(2))));
    }
}
