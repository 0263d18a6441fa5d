//! Per-source budgets for outbound fetches that an unauthenticated request
//! can trigger (PayPal's certificate URL, Plaid's `kid`, SNS's
//! `SigningCertURL`). Over budget, the
//! request is answered "temporarily unavailable" (503 + Retry-After): a
//! genuine provider retries, a forger gains nothing.
//!
//! Rule: a fetch that finds a key and one that fails draw from separate
//! budgets, so names that fail (anyone can make them up) cannot use up the
//! fetches of names that work. Failures are limited per client address
//! ([`FAILURES_PER_CLIENT`]) and per source ([`FAILURES_PER_WINDOW`]);
//! successes per source ([`FETCHES_PER_WINDOW`]). Before a fetch its outcome
//! is unknown, so it holds a place in all three until it is settled.

use crate::primitives::budget::client_group;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// Fetches that found a key, per source per [`WINDOW_SECS`].
pub const FETCHES_PER_WINDOW: u32 = 10;
/// Fetches that failed, per source per window (protects the provider's
/// key host, and our standing there, from forged names).
pub const FAILURES_PER_WINDOW: u32 = 30;
/// Fetches that failed, per client address (IPv6: /64) per window.
pub const FAILURES_PER_CLIENT: u32 = 3;
pub const WINDOW_SECS: i64 = 60;

/// Fixed-window counters.
#[derive(Debug, Default)]
pub struct FetchBudget {
    /// A mutex: a few counter updates per fetch, never across an await.
    window: Mutex<Window>,
}

#[derive(Debug, Default)]
struct Window {
    start: i64,
    found: u32,
    failed: u32,
    /// Failures (and fetches not yet settled) per client group; at most
    /// [`FAILURES_PER_WINDOW`] + [`FETCHES_PER_WINDOW`] entries.
    clients: HashMap<Option<IpAddr>, u32>,
}

/// A place held in the budgets by a fetch in progress.
#[derive(Debug)]
pub struct Ticket {
    window: i64,
    client: Option<IpAddr>,
}

impl FetchBudget {
    fn lock(&self, now: i64) -> std::sync::MutexGuard<'_, Window> {
        let mut w = self
            .window
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if now >= w.start + WINDOW_SECS || now < w.start {
            *w = Window {
                start: now,
                ..Window::default()
            };
        }
        w
    }

    /// A place for one fetch by `client` at `now` (unix seconds); `None`
    /// when a success or a failure would not fit.
    pub fn take(&self, now: i64, client: Option<IpAddr>) -> Option<Ticket> {
        let client = client.map(client_group);
        let mut w = self.lock(now);
        let mine = w.clients.get(&client).copied().unwrap_or(0);
        if w.found >= FETCHES_PER_WINDOW
            || w.failed >= FAILURES_PER_WINDOW
            || mine >= FAILURES_PER_CLIENT
        {
            return None;
        }
        w.found += 1;
        w.failed += 1;
        *w.clients.entry(client).or_insert(0) += 1;
        Some(Ticket {
            window: w.start,
            client,
        })
    }

    /// Keeps the fetch in the budget it belongs to: `found` a key (or a
    /// lasting answer that the name exists) or failed.
    pub fn settle(&self, ticket: Ticket, found: bool, now: i64) {
        let mut w = self.lock(now);
        if w.start != ticket.window {
            return; // a new window: nothing of the old one is counted
        }
        if found {
            w.failed = w.failed.saturating_sub(1);
            if let Some(n) = w.clients.get_mut(&ticket.client) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    w.clients.remove(&ticket.client);
                }
            }
        } else {
            w.found = w.found.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn the_budgets_refill_each_window() {
        let b = FetchBudget::default();
        for _ in 0..FETCHES_PER_WINDOW {
            let t = b.take(1000, ip("192.0.2.1")).unwrap();
            b.settle(t, true, 1000);
        }
        assert!(b.take(1000, ip("192.0.2.1")).is_none());
        assert!(b.take(1000 + WINDOW_SECS - 1, ip("192.0.2.1")).is_none());
        assert!(b.take(1000 + WINDOW_SECS, ip("192.0.2.1")).is_some());
    }

    #[test]
    fn failures_from_one_client_leave_the_others_their_fetches() {
        let b = FetchBudget::default();
        let forger = ip("192.0.2.66");
        for _ in 0..FAILURES_PER_CLIENT {
            let t = b.take(1000, forger).unwrap();
            b.settle(t, false, 1000);
        }
        assert!(b.take(1000, forger).is_none(), "the forger is held off");
        let t = b
            .take(1000, ip("192.0.2.7"))
            .expect("another client still fetches");
        b.settle(t, true, 1000);
        // Failures from many clients stop at the source's failure budget,
        // and successes still count only against their own.
        for i in 0..FAILURES_PER_WINDOW {
            if let Some(t) = b.take(1000, ip(&format!("198.51.100.{i}"))) {
                b.settle(t, false, 1000);
            }
        }
        assert!(b.take(1000, ip("203.0.113.1")).is_none());
        let w = b.lock(1000);
        assert_eq!((w.found, w.failed), (1, FAILURES_PER_WINDOW));
    }
}
