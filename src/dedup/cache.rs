//! The fast path of dedup: a claim cache keyed by source + event id.
//!
//! A key holds `pending:<token>` while one request owns the event, then
//! `done:<sha256 hex of the first body>` for `cache_ttl`. The cache is an
//! accelerator: losing it (flush, restart, outage) never changes an answer,
//! because the ledger decides whenever the cache cannot.

use async_trait::async_trait;
use std::time::Duration;

/// What a claim attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The key was free; this request now owns the event.
    Owned,
    /// The event is committed; the body hash recorded with it.
    Done { body_sha256: String },
    /// Another request owns the event and has not finished.
    InFlight,
}

/// One `finish` waiting to be sent with others (see [`ClaimCache::finish_many`]).
#[derive(Debug, Clone)]
pub struct Mark {
    pub key: String,
    pub body_sha256: String,
    pub ttl: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("cache timed out")]
    Timeout,
}

#[async_trait]
pub trait ClaimCache: Send + Sync + 'static {
    /// `SET key pending:<token> NX PX ttl`, returning what was there if not set.
    async fn claim(&self, key: &str, token: &str, ttl: Duration) -> Result<Claim, CacheError>;
    /// `SET key done:<hash> PX ttl` after the ledger committed (or found the id).
    async fn finish(&self, key: &str, body_sha256: &str, ttl: Duration) -> Result<(), CacheError>;
    /// Several `finish`es; a backend that can sends them in one round trip.
    /// Every mark is tried; the first error is returned.
    async fn finish_many(&self, marks: &[Mark]) -> Result<(), CacheError> {
        finish_each(self, marks).await
    }
    /// Whether `finish` costs a round trip, so that dedup should gather
    /// marks and send them with [`ClaimCache::finish_many`].
    fn batches_finishes(&self) -> bool {
        false
    }
    /// Deletes the key only if it still holds our claim (compare-and-delete).
    async fn release(&self, key: &str, token: &str) -> Result<(), CacheError>;
    /// One round trip proving the cache answers.
    async fn ping(&self) -> Result<(), CacheError>;
    /// `redis` or `memory`, for readiness and logs.
    fn kind(&self) -> &'static str;
}

/// `finish` for each mark in turn: every mark is tried, the first error is
/// returned.
pub async fn finish_each<C: ClaimCache + ?Sized>(
    cache: &C,
    marks: &[Mark],
) -> Result<(), CacheError> {
    let mut first = Ok(());
    for m in marks {
        let r = cache.finish(&m.key, &m.body_sha256, m.ttl).await;
        if first.is_ok() {
            first = r;
        }
    }
    first
}

/// Parses a stored value into a [`Claim`] seen by someone else.
pub fn parse_value(value: &str) -> Claim {
    match value.strip_prefix("done:") {
        Some(hash) => Claim::Done {
            body_sha256: hash.to_owned(),
        },
        None => Claim::InFlight,
    }
}
