//! The near cache: `done` ids this process marked itself, kept in process in
//! front of a remote claim cache (Redis), so a copy of an event this replica
//! committed is answered without a round trip.
//!
//! Only `done` is kept, and only from this process's own marks, because
//! only then is its expiry known: an entry is written just before the mark
//! it stands for, with the same TTL (`cache_ttl`, cut to the row's window;
//! `dedup::within`), so it ends no later than the mark and never calls an
//! id a duplicate after the ledger would have called it new. `done` is the last state of a key
//! until it expires, so no other replica can make the entry wrong. Entries
//! beyond the capacity are evicted; a miss asks the remote cache as before.

use super::memory::{WrittenTtl, ttl_cache};
use moka::sync::Cache;
use std::time::Duration;

/// The body hash a key was marked `done` with, and that mark's TTL.
#[derive(Clone, Copy)]
struct Done {
    sha: [u8; 32],
    ttl: Duration,
}

impl WrittenTtl for Done {
    fn ttl(&self) -> Duration {
        self.ttl
    }
}

pub struct NearCache {
    done: Cache<String, Done, foldhash::fast::RandomState>,
}

impl NearCache {
    /// Holds at most `capacity` ids.
    pub fn new(capacity: u64) -> Self {
        Self {
            done: ttl_cache(capacity),
        }
    }

    /// Remembers that `key` was marked `done` with `sha` for `ttl`.
    pub fn remember(&self, key: String, sha: [u8; 32], ttl: Duration) {
        if !ttl.is_zero() {
            self.done.insert(key, Done { sha, ttl });
        }
    }

    /// The body hash `key` was marked `done` with, while that mark lives.
    pub fn done(&self, key: &str) -> Option<[u8; 32]> {
        self.done.get(key).map(|d| d.sha)
    }

    #[cfg(test)]
    fn settle(&self) -> u64 {
        self.done.run_pending_tasks();
        self.done.entry_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_lives_as_long_as_its_mark() {
        let near = NearCache::new(100);
        near.remember("k".into(), [7; 32], Duration::from_millis(60));
        near.remember("gone".into(), [1; 32], Duration::ZERO);
        assert_eq!(near.done("k"), Some([7; 32]));
        assert_eq!(
            near.done("gone"),
            None,
            "a mark without a window is not kept"
        );
        assert_eq!(near.done("other"), None);
        std::thread::sleep(Duration::from_millis(120));
        assert_eq!(near.done("k"), None, "expired with its mark");
    }

    #[test]
    fn it_holds_no_more_than_its_capacity() {
        let near = NearCache::new(50);
        for i in 0..500 {
            near.remember(format!("k{i}"), [0; 32], Duration::from_secs(60));
        }
        assert!(near.settle() <= 50, "{}", near.settle());
    }
}
