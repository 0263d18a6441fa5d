//! In-process claim cache (moka) for the embedded default: one process only.

use super::cache::{CacheError, Claim, ClaimCache, parse_value};
use async_trait::async_trait;
use moka::ops::compute::Op;
use moka::sync::Cache;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A stored value and the TTL it was written with.
#[derive(Clone)]
struct Slot {
    value: Arc<str>,
    ttl: Duration,
}

/// A cached value that carries the TTL it was written with.
pub(super) trait WrittenTtl {
    fn ttl(&self) -> Duration;
}

impl WrittenTtl for Slot {
    fn ttl(&self) -> Duration {
        self.ttl
    }
}

/// Expires each entry after the TTL it was written (or rewritten) with,
/// as Redis's `PX` does.
struct PerEntryTtl;

impl<V: WrittenTtl> moka::Expiry<String, V> for PerEntryTtl {
    fn expire_after_create(&self, _: &String, v: &V, _: Instant) -> Option<Duration> {
        Some(v.ttl())
    }
    fn expire_after_update(
        &self,
        _: &String,
        v: &V,
        _: Instant,
        _: Option<Duration>,
    ) -> Option<Duration> {
        Some(v.ttl())
    }
}

/// A cache of at most `capacity` entries, each expiring after its own TTL.
/// Its keys are ids of verified events, so it hashes with foldhash, not
/// SipHash (Cargo.toml, `foldhash`).
pub(super) fn ttl_cache<V>(capacity: u64) -> Cache<String, V, foldhash::fast::RandomState>
where
    V: WrittenTtl + Clone + Send + Sync + 'static,
{
    Cache::builder()
        .max_capacity(capacity)
        .expire_after(PerEntryTtl)
        .build_with_hasher(foldhash::fast::RandomState::default())
}

pub struct MemoryCache {
    cache: Cache<String, Slot, foldhash::fast::RandomState>,
}

impl MemoryCache {
    pub fn new(capacity: u64) -> Self {
        Self {
            cache: ttl_cache(capacity),
        }
    }
}

#[async_trait]
impl ClaimCache for MemoryCache {
    async fn claim(&self, key: &str, token: &str, ttl: Duration) -> Result<Claim, CacheError> {
        let mut seen = None;
        // and_compute_with runs atomically per key: the SET NX of this cache.
        self.cache
            .entry(key.to_owned())
            .and_compute_with(|e| match e {
                Some(e) => {
                    seen = Some(parse_value(&e.into_value().value));
                    Op::Nop
                }
                None => Op::Put(Slot {
                    value: format!("pending:{token}").into(),
                    ttl,
                }),
            });
        Ok(seen.unwrap_or(Claim::Owned))
    }

    async fn finish(&self, key: &str, body_sha256: &str, ttl: Duration) -> Result<(), CacheError> {
        self.cache.insert(
            key.to_owned(),
            Slot {
                value: format!("done:{body_sha256}").into(),
                ttl,
            },
        );
        Ok(())
    }

    async fn release(&self, key: &str, token: &str) -> Result<(), CacheError> {
        let mine = format!("pending:{token}");
        self.cache
            .entry(key.to_owned())
            .and_compute_with(|e| match e {
                Some(e) if *e.value().value == *mine => Op::Remove,
                _ => Op::Nop,
            });
        Ok(())
    }

    async fn ping(&self) -> Result<(), CacheError> {
        Ok(())
    }

    fn kind(&self) -> &'static str {
        "memory"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn claim_done_release_cycle() {
        let c = MemoryCache::new(100);
        let ttl = Duration::from_secs(5);
        assert_eq!(c.claim("k", "a", ttl).await.unwrap(), Claim::Owned);
        assert_eq!(c.claim("k", "b", ttl).await.unwrap(), Claim::InFlight);
        c.release("k", "b").await.unwrap(); // not ours: stays
        assert_eq!(c.claim("k", "b", ttl).await.unwrap(), Claim::InFlight);
        c.release("k", "a").await.unwrap();
        assert_eq!(c.claim("k", "b", ttl).await.unwrap(), Claim::Owned);
        c.finish("k", "abc", ttl).await.unwrap();
        assert_eq!(
            c.claim("k", "c", ttl).await.unwrap(),
            Claim::Done {
                body_sha256: "abc".into()
            }
        );
    }

    #[tokio::test]
    async fn an_expired_claim_frees_the_key() {
        let c = MemoryCache::new(100);
        c.claim("k", "a", Duration::from_millis(50)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(120)).await;
        assert_eq!(
            c.claim("k", "b", Duration::from_secs(1)).await.unwrap(),
            Claim::Owned
        );
    }
}
