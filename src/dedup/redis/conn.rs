//! One connection type per topology, behind one `query`.
//!
//! - Standalone: a `ConnectionManager`, which reconnects by itself after an
//!   error that says the connection is gone, and is replaced by a new one
//!   after a timeout (a connection gone silent gives no such error).
//! - Sentinel: a multiplexed connection to the master the sentinels name. A
//!   connection error, a timeout or `READONLY` (the old master came back as a
//!   replica) drops it, and the next call asks the sentinels again, so claims
//!   follow a failover without a restart.
//! - Cluster: the crate's async cluster client, which routes each one-key
//!   command and script to the key's slot and follows `MOVED`/`ASK`; dropped
//!   and rebuilt on the same errors.
//!
//! Sentinel and Cluster connect lazily, like the standalone manager: the
//! gateway starts (degraded) while Redis is down.

use crate::config::redis_url::{Auth, RedisTopology};
use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{AsyncConnectionConfig, Cmd, FromRedisValue, Pipeline, RedisResult, ScriptInvocation};
use std::time::Duration;

/// What one call sends: a plain command or a script (EVALSHA, loaded on NOSCRIPT).
pub(super) enum Op<'a> {
    Cmd(Cmd),
    Script(ScriptInvocation<'a>),
    /// Several commands in one round trip (not on Cluster: its keys may
    /// live on several nodes).
    Pipe(Pipeline),
}

pub(super) enum Conn {
    Standalone(
        Cached<redis::Client, ConnectionManager>,
        ConnectionManagerConfig,
    ),
    Sentinel(
        Cached<SentinelClient, MultiplexedConnection>,
        AsyncConnectionConfig,
    ),
    Cluster(Cached<ClusterClient, ClusterConnection>),
}

impl Conn {
    pub(super) fn new(topology: RedisTopology, timeout: Duration) -> RedisResult<Self> {
        Ok(match topology {
            RedisTopology::Standalone(url) => {
                // No response timeout of the client's own: every call is
                // already bounded by `redis_timeout` (`RedisCache::bounded`),
                // and a second timer per command would only duplicate it on
                // every request's round trip. The
                // manager itself never reconnected after its own timeout
                // (redis 1.8 retries a timed-out call on the same
                // connection); `bounded`'s timeout replaces it (`reset`).
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(None)
                    .set_number_of_retries(1)
                    .set_max_delay(Duration::from_secs(1));
                let client = redis::Client::open(url)?;
                Self::Standalone(Cached::new(client), config)
            }
            RedisTopology::Sentinel {
                sentinels,
                master,
                db,
                auth,
            } => {
                let sentinels: Vec<String> = sentinels
                    .iter()
                    .map(|(h, p)| format!("redis://{h}:{p}"))
                    .collect();
                let mut node = redis::RedisConnectionInfo::default().set_db(db);
                if let Some(u) = &auth.username {
                    node = node.set_username(u);
                }
                if let Some(p) = &auth.password {
                    node = node.set_password(p);
                }
                let node = SentinelNodeConnectionInfo::default().set_redis_connection_info(node);
                let client = SentinelClient::build(
                    sentinels,
                    master,
                    Some(node),
                    SentinelServerType::Master,
                )?;
                // As for Standalone: `bounded` is the one deadline.
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(None);
                Self::Sentinel(Cached::new(client), config)
            }
            RedisTopology::Cluster { nodes, auth } => {
                let nodes: Vec<String> = nodes
                    .iter()
                    .map(|(h, p)| format!("redis://{h}:{p}"))
                    .collect();
                let Auth { username, password } = auth;
                let mut b = ClusterClient::builder(nodes)
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .retries(1);
                if let Some(u) = username {
                    b = b.username(u);
                }
                if let Some(p) = password {
                    b = b.password(p);
                }
                Self::Cluster(Cached::new(b.build()?))
            }
        })
    }

    pub(super) async fn query<T: FromRedisValue>(&self, op: &Op<'_>) -> RedisResult<T> {
        let result = match self {
            // The manager reconnects by itself after an error that says the
            // connection is gone: only a timeout (`bounded`) replaces it.
            Self::Standalone(cached, config) => {
                let mut m = cached
                    .get_or_connect(async |client| {
                        ConnectionManager::new_lazy_with_config(client.clone(), config.clone())
                    })
                    .await?;
                return exec(op, &mut m).await;
            }
            Self::Sentinel(cached, config) => {
                let mut conn = cached
                    .get_or_connect(async |client| {
                        let master = client.async_get_client().await?;
                        master
                            .get_multiplexed_async_connection_with_config(config)
                            .await
                    })
                    .await?;
                exec(op, &mut conn).await
            }
            Self::Cluster(cached) => {
                let mut conn = cached
                    .get_or_connect(async |client| client.get_async_connection().await)
                    .await?;
                exec(op, &mut conn).await
            }
        };
        if let Err(e) = &result
            && stale(e)
        {
            self.reset();
        }
        result
    }

    /// Redis Cluster: a pipeline cannot span the nodes its keys live on.
    pub(super) fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }

    /// Forgets the connection (after an error or a timeout); the next call reconnects.
    pub(super) fn reset(&self) {
        match self {
            Self::Standalone(c, _) => c.reset(),
            Self::Sentinel(c, _) => c.reset(),
            Self::Cluster(c) => c.reset(),
        }
    }
}

/// Errors after which the connection may point at the wrong or a dead server.
fn stale(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
        || e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
}

async fn exec<T: FromRedisValue>(op: &Op<'_>, conn: &mut impl ConnectionLike) -> RedisResult<T> {
    match op {
        Op::Cmd(cmd) => cmd.query_async(conn).await,
        Op::Script(inv) => inv.invoke_async(conn).await,
        Op::Pipe(p) => p.query_async(conn).await,
    }
}

/// A connection made on first use and shared until reset; `state` (the
/// client) is locked only while connecting, so one caller connects at a time.
pub(super) struct Cached<S, C> {
    state: tokio::sync::Mutex<S>,
    current: std::sync::Mutex<Option<C>>,
}

impl<S, C: Clone> Cached<S, C> {
    fn new(state: S) -> Self {
        Self {
            state: tokio::sync::Mutex::new(state),
            current: std::sync::Mutex::new(None),
        }
    }

    /// The shared connection, or one made now by `connect` (one caller at a
    /// time; the others then find it made).
    async fn get_or_connect(
        &self,
        connect: impl AsyncFnOnce(&mut S) -> RedisResult<C>,
    ) -> RedisResult<C> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let mut state = self.state.lock().await;
        if let Some(c) = self.current() {
            return Ok(c);
        }
        // Boxed: a Sentinel connect's future is kilobytes, and inline it
        // would size the box every claim allocates and fills, for a path
        // taken once per connection.
        Ok(self.store(Box::pin(connect(&mut state)).await?))
    }

    fn current(&self) -> Option<C> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn store(&self, conn: C) -> C {
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(conn.clone());
        conn
    }

    fn reset(&self) {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
    }
}
