//! Redis claim cache: production, shared by every replica.
//!
//! Standalone, Sentinel or Cluster, picked by the URL scheme (see
//! `config::redis_url` and `conn`). Every operation touches one key, so the
//! scripts run on the key's slot node on Redis Cluster.
//! Each call has a deadline: past it, dedup falls back to the ledger instead
//! of making the provider wait on a sick cache.

mod conn;

use super::cache::{CacheError, Claim, ClaimCache, parse_value};
use crate::config::redis_url::RedisTopology;
use crate::primitives::secret::Secret;
use async_trait::async_trait;
use conn::{Conn, Op};
use redis::FromRedisValue;
use std::time::Duration;

/// GET, and SET NX PX only if absent, in one round trip. Returns the
/// previous value, or nil when this call took the claim. (Lua rather than
/// `SET … NX GET` so Redis 6 works too.)
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

#[async_trait]
impl ClaimCache for RedisCache {
    async fn claim(&self, key: &str, token: &str, ttl: Duration) -> Result<Claim, CacheError> {
        let value = format!("pending:{token}");
        let mut inv = self.claim.key(key);
        inv.arg(&value).arg(ttl.as_millis() as u64);
        let prev: Option<String> = self.bounded(Op::Script(inv)).await?;
        Ok(match prev {
            None => Claim::Owned,
            Some(v) => parse_value(&v),
        })
    }

    async fn finish(&self, key: &str, body_sha256: &str, ttl: Duration) -> Result<(), CacheError> {
        let value = format!("done:{body_sha256}");
        let cmd = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .to_owned();
        self.bounded::<()>(Op::Cmd(cmd)).await
    }

    async fn release(&self, key: &str, token: &str) -> Result<(), CacheError> {
        let value = format!("pending:{token}");
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
}
