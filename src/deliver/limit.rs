//! A target's in-flight limit: fixed (`concurrency = N`) or adaptive.
//!
//! Adaptive is additive increase, multiplicative decrease (AIMD), the
//! scheme TCP congestion control uses (RFC 5681) and the one the well-known
//! concurrency-limit libraries offer as their simplest limit: the limit
//! starts at [`START`], grows while attempts succeed with latency within
//! bound and the limit is actually used, and halves when the target shows
//! it is overloaded: a timeout, a connection failure, a 5xx or a 429, or
//! recent latency far above the target's usual latency. It never exceeds
//! the target's `max_concurrency` nor falls below one.
//!
//! Growth: one slot per success until the first decrease (a slow start:
//! the limit doubles every round trip, so a fast target reaches its
//! ceiling within a few hundred attempts), then one slot per quarter of a
//! limit's worth of successes. A success only counts when at least half the
//! limit was in flight: an idle target's limit does not drift up on no
//! evidence.
//!
//! Decrease: at most once per round trip: only an attempt that started
//! after the last decrease can cause the next one, so the failures of the
//! round that was already in flight when the target got into trouble count
//! once, as TCP counts one loss per window.
//!
//! The limit is enforced by a semaphore: a decrease takes free permits away
//! at once and swallows the rest as attempts hand them back ([`Permit`]),
//! so the target never has more in flight than the limit once the
//! attempts sent under the old one have answered.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Where an adaptive limit starts: enough for a healthy target to be busy
/// from the first round, few enough that a fragile one is not flooded
/// before the first failures arrive.
pub const START: usize = 8;

/// Latency blows up when the recent average exceeds the usual one
/// ([`LATENCY_FACTOR`] ×) by more than this: on loopback a few
/// milliseconds of scheduling noise must not halve the limit.
const LATENCY_MARGIN: Duration = Duration::from_millis(10);
/// How far the recent latency may rise over the usual one.
const LATENCY_FACTOR: f64 = 2.0;
/// Weight of one sample in the recent latency (about the last ten).
const RECENT_WEIGHT: f64 = 0.1;
/// Weight of one sample in the usual latency (about the last five hundred).
const USUAL_WEIGHT: f64 = 0.002;

/// What an attempt says about the target's load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Delivered.
    Success,
    /// Timeout, connection failure, 5xx, 429: the target is struggling.
    Overload,
    /// Anything else (a 4xx, a message that cannot be built): no signal.
    Neutral,
}

/// The adaptive controller alone (no semaphore): new limit per sample.
#[derive(Debug)]
pub struct Aimd {
    limit: usize,
    max: usize,
    /// Successes counted toward the next additive step.
    credit: usize,
    /// No decrease yet: one slot per success.
    slow_start: bool,
    /// Moving averages of latency in milliseconds; `None` before a sample.
    recent: Option<f64>,
    usual: Option<f64>,
    /// When the last decrease happened.
    cut_at: Option<Instant>,
}

impl Aimd {
    pub fn new(max: usize) -> Self {
        let max = max.max(1);
        Self {
            limit: START.min(max),
            max,
            credit: 0,
            slow_start: true,
            recent: None,
            usual: None,
            cut_at: None,
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// One finished attempt: it started at `started`, took `latency`, and
    /// `in_flight` attempts (itself included) were out when it finished.
    /// Returns the new limit.
    pub fn sample(
        &mut self,
        signal: Signal,
        started: Instant,
        latency: Duration,
        in_flight: usize,
    ) -> usize {
        let ms = latency.as_secs_f64() * 1000.0;
        let blown = signal == Signal::Success && self.latency_blown(ms);
        // Before the first decrease any attempt may cause one; after it,
        // only one that started after it (once per round trip).
        let fresh = self.cut_at.is_none_or(|at| started > at);
        if (signal == Signal::Overload || blown) && fresh {
            self.limit = (self.limit / 2).max(1);
            self.credit = 0;
            self.slow_start = false;
            self.cut_at = Some(Instant::now());
            // The new round is judged against the usual latency afresh.
            self.recent = self.usual;
            return self.limit;
        }
        if signal == Signal::Success && !blown && in_flight * 2 >= self.limit {
            self.credit += 1;
            let step = if self.slow_start {
                1
            } else {
                self.limit.div_ceil(4)
            };
            if self.credit >= step {
                self.credit = 0;
                self.limit = (self.limit + 1).min(self.max);
            }
        }
        self.limit
    }

    /// Folds a successful attempt's latency into both averages; whether the
    /// recent one is now beyond bound.
    fn latency_blown(&mut self, ms: f64) -> bool {
        let recent = self.recent.map_or(ms, |r| r + RECENT_WEIGHT * (ms - r));
        let usual = self.usual.map_or(ms, |u| u + USUAL_WEIGHT * (ms - u));
        self.recent = Some(recent);
        self.usual = Some(usual);
        recent > usual * LATENCY_FACTOR + LATENCY_MARGIN.as_secs_f64() * 1000.0
    }
}

/// A target's slots: the semaphore its attempts hold while they send, and
/// the adaptive controller that sizes it (none for a fixed limit).
pub struct Limit {
    sem: Arc<Semaphore>,
    state: Mutex<State>,
    gauge: metrics::Gauge,
}

struct State {
    aimd: Option<Aimd>,
    /// The limit now (fixed: `concurrency`).
    limit: usize,
    /// Permits out (held by attempts).
    out: usize,
    /// Permits to swallow as they come back (a decrease below `out`).
    debt: usize,
}

impl Limit {
    /// `adaptive`: start at [`START`] and adapt up to `max`; otherwise a
    /// fixed `max`. `gauge` shows the limit.
    pub fn new(max: usize, adaptive: bool, gauge: metrics::Gauge) -> Arc<Self> {
        let aimd = adaptive.then(|| Aimd::new(max));
        let limit = aimd.as_ref().map_or(max.max(1), Aimd::limit);
        gauge.set(limit as f64);
        Arc::new(Self {
            sem: Arc::new(Semaphore::new(limit)),
            state: Mutex::new(State {
                aimd,
                limit,
                out: 0,
                debt: 0,
            }),
            gauge,
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The limit now.
    pub fn current(&self) -> usize {
        self.state().limit
    }

    /// Slots free now.
    pub fn available(&self) -> usize {
        self.sem.available_permits()
    }

    /// Waits for a slot.
    pub async fn acquire(self: &Arc<Self>) -> Permit {
        // The semaphore is never closed.
        let permit = self.sem.clone().acquire_owned().await.ok();
        self.state().out += 1;
        Permit {
            limit: self.clone(),
            permit,
        }
    }

    /// One finished attempt (see [`Aimd::sample`]); nothing for a fixed limit.
    pub fn sample(&self, signal: Signal, started: Instant, latency: Duration) {
        let mut s = self.state();
        let in_flight = s.out;
        let Some(aimd) = s.aimd.as_mut() else {
            return;
        };
        let new = aimd.sample(signal, started, latency, in_flight);
        let old = s.limit;
        if new > old {
            let grow = new - old;
            let paid = grow.min(s.debt);
            s.debt -= paid;
            self.sem.add_permits(grow - paid);
        } else if new < old {
            let cut = old - new;
            let taken = self.sem.forget_permits(cut);
            s.debt += cut - taken;
        }
        s.limit = new;
        if new != old {
            self.gauge.set(new as f64);
        }
    }
}

/// A held slot; back to the target (or swallowed by a decrease) on drop.
pub struct Permit {
    limit: Arc<Limit>,
    permit: Option<OwnedSemaphorePermit>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut s = self.limit.state();
        s.out -= 1;
        if s.debt > 0 {
            s.debt -= 1;
            if let Some(p) = self.permit.take() {
                p.forget();
            }
        }
    }
}

/// What an attempt's outcome says about the target's load.
pub fn signal(sent: &crate::target::Sent) -> Signal {
    use crate::target::Sent;
    match sent {
        Sent::Delivered { .. } => Signal::Success,
        Sent::Retry { status, .. } => match status {
            // No answer: a timeout, a failed connection, a broker error.
            None => Signal::Overload,
            Some(s) if *s == 429 || *s >= 500 => Signal::Overload,
            Some(_) => Signal::Neutral,
        },
        Sent::Permanent { .. } => Signal::Neutral,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAST: Duration = Duration::from_millis(1);

    /// Feeds `n` samples with the limit fully used; the last limit.
    fn feed(a: &mut Aimd, n: usize, signal: Signal, latency: Duration) -> usize {
        for _ in 0..n {
            let used = a.limit();
            a.sample(signal, Instant::now(), latency, used);
        }
        a.limit()
    }

    #[test]
    fn starts_at_the_floor_and_grows_to_the_ceiling_on_a_fast_target() {
        let mut a = Aimd::new(256);
        assert_eq!(a.limit(), START);
        // Slow start: one slot per success.
        assert_eq!(feed(&mut a, 100, Signal::Success, FAST), START + 100);
        assert_eq!(feed(&mut a, 1000, Signal::Success, FAST), 256);
        assert_eq!(Aimd::new(3).limit(), 3, "never above the ceiling");
    }

    #[test]
    fn an_unused_limit_does_not_grow() {
        let mut a = Aimd::new(256);
        for _ in 0..1000 {
            a.sample(Signal::Success, Instant::now(), FAST, 1);
        }
        assert_eq!(a.limit(), START);
    }

    #[test]
    fn overload_halves_once_per_round_trip() {
        let mut a = Aimd::new(256);
        feed(&mut a, 56, Signal::Success, FAST);
        assert_eq!(a.limit(), 64);
        let round = Instant::now();
        std::thread::sleep(Duration::from_millis(2));
        // A whole round of failures that started before the cut: one halving.
        for _ in 0..64 {
            a.sample(Signal::Overload, round, FAST, 64);
        }
        assert_eq!(a.limit(), 32);
        // The next round's failures halve again, down to one at least.
        std::thread::sleep(Duration::from_millis(2));
        for _ in 0..10 {
            std::thread::sleep(Duration::from_millis(1));
            a.sample(Signal::Overload, Instant::now(), FAST, 1);
        }
        assert_eq!(a.limit(), 1);
    }

    #[test]
    fn after_a_decrease_growth_is_additive() {
        let mut a = Aimd::new(256);
        feed(&mut a, 56, Signal::Success, FAST);
        a.sample(Signal::Overload, Instant::now(), FAST, 64);
        assert_eq!(a.limit(), 32);
        // One slot per quarter limit of successes, no longer one per success.
        assert_eq!(feed(&mut a, 8, Signal::Success, FAST), 33);
        assert_eq!(feed(&mut a, 32, Signal::Success, FAST), 36);
    }

    #[test]
    fn neutral_answers_change_nothing() {
        let mut a = Aimd::new(256);
        assert_eq!(feed(&mut a, 100, Signal::Neutral, FAST), START);
    }

    #[test]
    fn latency_blow_up_halves_but_noise_does_not() {
        let mut a = Aimd::new(256);
        feed(&mut a, 40, Signal::Success, FAST);
        assert_eq!(a.limit(), 48);
        // Jitter of a few milliseconds on a fast target: within the margin.
        assert_eq!(
            feed(&mut a, 300, Signal::Success, Duration::from_millis(6)),
            256
        );
        // The target slows to 200 ms per answer: the recent average leaves
        // the usual one far behind within a few samples, and the limit halves.
        let mut cut = false;
        for _ in 0..20 {
            let before = a.limit();
            a.sample(
                Signal::Success,
                Instant::now(),
                Duration::from_millis(200),
                before,
            );
            cut |= a.limit() < before;
        }
        assert!(cut, "halved on latency ({})", a.limit());
        assert!(a.limit() <= 128);
    }

    #[tokio::test]
    async fn permits_follow_the_limit_and_a_cut_waits_for_held_ones() {
        let l = Limit::new(64, true, metrics::Gauge::noop());
        assert_eq!(l.available(), START);
        let mut held = Vec::new();
        for _ in 0..START {
            held.push(l.acquire().await);
        }
        assert_eq!(l.available(), 0);
        // A cut while every slot is held: the slots are swallowed as they
        // come back, so no new attempt starts until the limit allows it.
        l.sample(Signal::Overload, Instant::now(), FAST);
        assert_eq!(l.current(), START / 2);
        for _ in 0..START / 2 {
            held.pop();
        }
        assert_eq!(l.available(), 0, "the cut's slots were swallowed");
        held.pop();
        assert_eq!(l.available(), 1);
        drop(held);
        assert_eq!(l.available(), START / 2);
    }

    #[tokio::test]
    async fn a_fixed_limit_never_moves() {
        let l = Limit::new(5, false, metrics::Gauge::noop());
        l.sample(Signal::Overload, Instant::now(), FAST);
        let p = l.acquire().await;
        l.sample(Signal::Success, Instant::now(), FAST);
        assert_eq!((l.current(), l.available()), (5, 4));
        drop(p);
        assert_eq!(l.available(), 5);
    }
}
