//! Slows down guesses at the admin token: an address that sent
//! [`MAX_BAD_TOKENS`] wrong tokens within [`WINDOW`] is answered 429 +
//! `Retry-After` without its token being compared, until the window ends.
//!
//! Rule: the address is the client as `trusted_proxies` resolve it (behind
//! a proxy the TCP peer is the proxy), grouped as the body budget groups it
//! (an IPv4 address, an IPv6 /64). The table is bounded: when it is full of
//! live entries, addresses not in it share one overflow entry, so a guesser
//! with many addresses is throttled as one. Used by the admin token check.

use super::budget::client_group;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// Wrong tokens an address may send per [`WINDOW`].
pub const MAX_BAD_TOKENS: u32 = 10;
pub const WINDOW: Duration = Duration::from_secs(60);
/// Addresses tracked at once.
const MAX_TRACKED: usize = 4096;

/// Wrong-token counts per client address.
#[derive(Default)]
pub struct Throttle {
    /// (window start, wrong tokens in it); `None` is the overflow entry.
    /// A mutex: each update is a map lookup, never across an await.
    seen: Mutex<HashMap<Option<IpAddr>, (Instant, u32)>>,
}

impl Throttle {
    /// `Some(seconds to wait)` when `client` is throttled now.
    pub fn blocked(&self, client: Option<IpAddr>) -> Option<u64> {
        let now = Instant::now();
        let seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = Self::key(&seen, client);
        let (start, n) = *seen.get(&key)?;
        let ends = start + WINDOW;
        (n >= MAX_BAD_TOKENS && ends > now).then(|| (ends - now).as_secs().max(1))
    }

    /// Counts a wrong token from `client`.
    pub fn failed(&self, client: Option<IpAddr>) {
        let now = Instant::now();
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut key = Self::key(&seen, client);
        if !seen.contains_key(&key) && seen.len() >= MAX_TRACKED {
            seen.retain(|_, (start, _)| *start + WINDOW > now);
            if seen.len() >= MAX_TRACKED {
                key = None;
            }
        }
        let entry = seen.entry(key).or_insert((now, 0));
        if entry.0 + WINDOW <= now {
            *entry = (now, 0);
        }
        entry.1 = entry.1.saturating_add(1);
    }

    fn key(
        seen: &HashMap<Option<IpAddr>, (Instant, u32)>,
        client: Option<IpAddr>,
    ) -> Option<IpAddr> {
        let group = client.map(client_group);
        if seen.contains_key(&group) || seen.len() < MAX_TRACKED {
            group
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_address_is_held_off_after_its_wrong_tokens_until_the_window_ends() {
        let t = Throttle::default();
        let a = Some("192.0.2.1".parse().unwrap());
        let b = Some("192.0.2.2".parse().unwrap());
        for _ in 0..MAX_BAD_TOKENS {
            assert_eq!(t.blocked(a), None);
            t.failed(a);
        }
        assert_eq!(t.blocked(a), Some(60));
        assert_eq!(t.blocked(b), None, "other addresses are not affected");
        tokio::time::advance(WINDOW).await;
        assert_eq!(t.blocked(a), None);
    }
}
