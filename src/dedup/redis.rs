//! Redis claim cache: production, shared by every replica.
//!
//! Every operation touches one key, so the keys are safe on Redis Cluster.
//! Each call has a deadline: past it, dedup falls back to the ledger instead
//! of making the provider wait on a sick cache.

use super::cache::{CacheError, Claim, ClaimCache, parse_value};
use crate::config::secret::Secret;
use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::future::Future;
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
    conn: ConnectionManager,
    claim: redis::Script,
    release: redis::Script,
    timeout: Duration,
}

impl RedisCache {
    /// Connects lazily: the gateway starts (degraded) while Redis is down.
    pub fn connect(url: &Secret, timeout: Duration) -> Result<Self, CacheError> {
        let client = redis::Client::open(url.expose())?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_secs(1));
        let conn = ConnectionManager::new_lazy_with_config(client, config)?;
        Ok(Self {
            conn,
            claim: redis::Script::new(CLAIM),
            release: redis::Script::new(RELEASE),
            timeout,
        })
    }

    async fn bounded<T>(
        &self,
        f: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, CacheError> {
        match tokio::time::timeout(self.timeout, f).await {
            Ok(r) => Ok(r?),
            Err(_) => Err(CacheError::Timeout),
        }
    }
}

#[async_trait]
impl ClaimCache for RedisCache {
    async fn claim(&self, key: &str, token: &str, ttl: Duration) -> Result<Claim, CacheError> {
        let mut conn = self.conn.clone();
        let value = format!("pending:{token}");
        let mut inv = self.claim.key(key);
        inv.arg(&value).arg(ttl.as_millis() as u64);
        let prev: Option<String> = self.bounded(inv.invoke_async(&mut conn)).await?;
        Ok(match prev {
            None => Claim::Owned,
            Some(v) => parse_value(&v),
        })
    }

    async fn finish(&self, key: &str, body_sha256: &str, ttl: Duration) -> Result<(), CacheError> {
        let mut conn = self.conn.clone();
        let value = format!("done:{body_sha256}");
        let cmd = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .to_owned();
        self.bounded(cmd.query_async::<()>(&mut conn)).await
    }

    async fn release(&self, key: &str, token: &str) -> Result<(), CacheError> {
        let mut conn = self.conn.clone();
        let value = format!("pending:{token}");
        let mut inv = self.release.key(key);
        inv.arg(value);
        self.bounded(inv.invoke_async::<i64>(&mut conn)).await?;
        Ok(())
    }

    async fn ping(&self) -> Result<(), CacheError> {
        let mut conn = self.conn.clone();
        let cmd = redis::cmd("PING");
        self.bounded(cmd.query_async::<String>(&mut conn)).await?;
        Ok(())
    }

    fn kind(&self) -> &'static str {
        "redis"
    }
}
