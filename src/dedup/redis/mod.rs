//! Redis claim cache: production, shared by every replica.
//!
//! Standalone, Sentinel or Cluster, picked by the URL scheme (see
//! `config::redis_url` and `conn`). Every operation touches one key, so the
//! scripts run on the key's slot node on Redis Cluster.
//! Each call has a deadline: past it, dedup falls back to the ledger instead
//! of making the provider wait on a sick cache.

mod conn;

use super::cache::{CacheError, Claim, ClaimCache, Mark, finish_each, parse_value};
use crate::config::redis_url::RedisTopology;
use crate::primitives::secret::Secret;
use async_trait::async_trait;
use conn::{Conn, Op};
use redis::FromRedisValue;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// GET, and SET NX PX only if absent, in one round trip. Returns the
/// previous value, or nil when this call took the claim. Used only where
/// `SET … NX GET` is refused (Redis before 7.0, see [`RedisCache::claim`]).
const CLAIM: &str = r"
local v = redis.call('GET', KEYS[1])
if v then return v end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
";

/// Deletes the key only while it holds our own claim token.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

pub struct RedisCache {
    conn: Conn,
    claim: redis::Script,
    release: redis::Script,
    timeout: Duration,
    /// The server refused `SET … NX GET` (before Redis 7.0): claim by script.
    claim_by_script: AtomicBool,
}

impl RedisCache {
    /// Connects lazily: the gateway starts (degraded) while Redis is down.
    pub fn connect(url: &Secret, timeout: Duration) -> Result<Self, CacheError> {
        let topology = RedisTopology::parse(url.expose()).map_err(|e| {
            redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "redis_url", e))
        })?;
        Ok(Self {
            conn: Conn::new(topology, timeout)?,
            claim: redis::Script::new(CLAIM),
            release: redis::Script::new(RELEASE),
            timeout,
            claim_by_script: AtomicBool::new(false),
        })
    }

    /// One call, bounded by `redis_timeout` (connecting or re-resolving the
    /// master included). A timeout drops the connection so the next call
    /// starts afresh.
    async fn bounded<T: FromRedisValue>(&self, op: Op<'_>) -> Result<T, CacheError> {
        match tokio::time::timeout(self.timeout, self.conn.query(&op)).await {
            Ok(r) => Ok(r?),
            Err(_) => {
                self.conn.reset();
                Err(CacheError::Timeout)
            }
        }
    }
}

impl RedisCache {
    async fn claim_script(
        &self,
        key: &str,
        value: &str,
        ttl_ms: u64,
    ) -> Result<Option<String>, CacheError> {
        let mut inv = self.claim.key(key);
        inv.arg(value).arg(ttl_ms);
        self.bounded(Op::Script(inv)).await
    }
}

/// Redis before 7.0 answers `SET … NX … GET` with "ERR syntax error".
fn refused_syntax(e: &redis::RedisError) -> bool {
    !e.is_io_error() && e.to_string().to_ascii_lowercase().contains("syntax error")
}

#[async_trait]
impl ClaimCache for RedisCache {
    /// `SET key pending:<token> NX PX ttl GET`: one plain command (Redis
    /// 7.0 allows NX with GET, <https://redis.io/docs/latest/commands/set/>),
    /// cheaper for the server than the script it replaces. A server that
    /// answers it with a syntax error gets the script from then on.
    async fn claim(&self, key: &str, token: &str, ttl: Duration) -> Result<Claim, CacheError> {
        let value = ["pending:", token].concat();
        let ttl_ms = ttl.as_millis() as u64;
        let prev: Option<String> = if self.claim_by_script.load(Ordering::Relaxed) {
            self.claim_script(key, &value, ttl_ms).await?
        } else {
            // Built in place: `cmd(..).arg(..).to_owned()` copies the
            // command once more, on every request. Sized up front: grown
            // argument by argument it was reallocated four times.
            let mut cmd = redis::Cmd::with_capacity(7, 32 + key.len() + value.len());
            cmd.arg("SET")
                .arg(key)
                .arg(&value)
                .arg("NX")
                .arg("PX")
                .arg(ttl_ms)
                .arg("GET");
            match self.bounded(Op::Cmd(cmd)).await {
                Err(CacheError::Redis(e)) if refused_syntax(&e) => {
                    self.claim_by_script.store(true, Ordering::Relaxed);
                    tracing::info!("Redis before 7.0: claims use a script");
                    self.claim_script(key, &value, ttl_ms).await?
                }
                r => r?,
            }
        };
        Ok(match prev {
            None => Claim::Owned,
            Some(v) => parse_value(&v),
        })
    }

    async fn finish(&self, key: &str, body_sha256: &str, ttl: Duration) -> Result<(), CacheError> {
        let value = format!("done:{body_sha256}");
        let mut cmd = redis::cmd("SET");
        cmd.arg(key)
            .arg(value)
            .arg("PX")
            .arg(ttl.as_millis() as u64);
        self.bounded::<()>(Op::Cmd(cmd)).await
    }

    /// One pipeline of `SET key done:<hash> PX ttl`: one write and one read
    /// for the whole batch instead of a round trip each. On Cluster the keys
    /// may live on several nodes, so each is sent on its own.
    async fn finish_many(&self, marks: &[Mark]) -> Result<(), CacheError> {
        if self.conn.is_cluster() {
            return finish_each(self, marks).await;
        }
        let mut pipe = redis::pipe();
        for m in marks {
            pipe.cmd("SET")
                .arg(&m.key)
                .arg(["done:", m.body_sha256.as_str()].concat())
                .arg("PX")
                .arg(m.ttl.as_millis() as u64)
                .ignore();
        }
        self.bounded::<()>(Op::Pipe(pipe)).await
    }

    async fn release(&self, key: &str, token: &str) -> Result<(), CacheError> {
        let value = ["pending:", token].concat();
        let mut inv = self.release.key(key);
        inv.arg(value);
        self.bounded::<i64>(Op::Script(inv)).await?;
        Ok(())
    }

    async fn ping(&self) -> Result<(), CacheError> {
        self.bounded::<String>(Op::Cmd(redis::cmd("PING"))).await?;
        Ok(())
    }

    fn kind(&self) -> &'static str {
        "redis"
    }

    fn batches_finishes(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache on the Redis the tests use (`HOOKGATE_TEST_REDIS`, default
    /// 127.0.0.1:6379).
    fn test_cache() -> RedisCache {
        let url = std::env::var("HOOKGATE_TEST_REDIS")
            .unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
        RedisCache::connect(&Secret::new(url), Duration::from_secs(2)).unwrap()
    }

    /// Both claim forms (the plain command and the script kept for Redis
    /// before 7.0) against the Redis the tests use (`HOOKGATE_TEST_REDIS`, default
    /// 127.0.0.1:6379), under keys of their own that expire in 30 s.
    #[tokio::test]
    async fn set_nx_get_and_the_script_claim_alike() {
        let cache = test_cache();
        let ttl = Duration::from_secs(30);
        for by_script in [false, true] {
            cache.claim_by_script.store(by_script, Ordering::Relaxed);
            let key = format!(
                "hg_unit_{}:{by_script}",
                crate::primitives::token::random_hex()
            );
            assert!(matches!(
                cache.claim(&key, "a", ttl).await.unwrap(),
                Claim::Owned
            ));
            assert!(matches!(
                cache.claim(&key, "b", ttl).await.unwrap(),
                Claim::InFlight
            ));
            cache.finish(&key, "abc", ttl).await.unwrap();
            match cache.claim(&key, "c", ttl).await.unwrap() {
                Claim::Done { body_sha256 } => assert_eq!(body_sha256, "abc"),
                other => panic!("expected done, got {other:?}"),
            }
            // Not ours any more (done): release leaves it; the TTL cleans up.
            cache.release(&key, "a").await.unwrap();
            assert!(matches!(
                cache.claim(&key, "d", ttl).await.unwrap(),
                Claim::Done { .. }
            ));
        }
    }

    /// `finish_many` marks every key of a batch `done` with its own hash
    /// and TTL (one pipeline on standalone Redis), on the Redis the tests use.
    #[tokio::test]
    async fn finish_many_marks_every_key_of_the_batch() {
        let cache = test_cache();
        let ttl = Duration::from_secs(30);
        let run = crate::primitives::token::random_hex();
        let marks: Vec<Mark> = (0..5)
            .map(|i| Mark {
                key: format!("hg_unit_{run}:{i}"),
                body_sha256: format!("hash{i}"),
                ttl: ttl + Duration::from_secs(i),
            })
            .collect();
        for m in &marks {
            assert!(matches!(
                cache.claim(&m.key, "a", ttl).await.unwrap(),
                Claim::Owned
            ));
        }
        cache.finish_many(&marks).await.unwrap();
        for m in &marks {
            match cache.claim(&m.key, "b", ttl).await.unwrap() {
                Claim::Done { body_sha256 } => assert_eq!(body_sha256, m.body_sha256),
                other => panic!("{}: expected done, got {other:?}", m.key),
            }
            let pttl: i64 = cache
                .bounded(Op::Cmd(redis::cmd("PTTL").arg(&m.key).to_owned()))
                .await
                .unwrap();
            assert!(
                pttl > (m.ttl - Duration::from_secs(5)).as_millis() as i64,
                "{pttl}"
            );
        }
    }
}
