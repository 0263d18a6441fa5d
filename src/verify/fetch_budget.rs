//! A per-source budget for outbound fetches that an unauthenticated request
//! can trigger (PayPal's certificate URL, Plaid's `kid`, SNS's `SigningCertURL`). Over budget, the
//! request is answered "temporarily unavailable" (503 + Retry-After): a
//! genuine provider retries, a forger gains nothing.

use std::sync::Mutex;

/// Fetches allowed per source per [`WINDOW_SECS`].
pub const FETCHES_PER_WINDOW: u32 = 10;
pub const WINDOW_SECS: i64 = 60;

/// A fixed-window counter.
#[derive(Debug, Default)]
pub struct FetchBudget {
    /// (window start, fetches in it).
    window: Mutex<(i64, u32)>,
}

impl FetchBudget {
    /// Takes one fetch from the budget at `now` (unix seconds); `false` when
    /// this window's fetches are spent.
    pub fn take(&self, now: i64) -> bool {
        let mut w = self
            .window
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if now >= w.0 + WINDOW_SECS || now < w.0 {
            *w = (now, 0);
        }
        if w.1 >= FETCHES_PER_WINDOW {
            return false;
        }
        w.1 += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_refills_each_window() {
        let b = FetchBudget::default();
        for _ in 0..FETCHES_PER_WINDOW {
            assert!(b.take(1000));
        }
        assert!(!b.take(1000));
        assert!(!b.take(1000 + WINDOW_SECS - 1));
        assert!(b.take(1000 + WINDOW_SECS));
    }
}
