//! Wiring: `App::build(config)` connects the backends and starts background
//! work; `run_until_stopped(listener, stop)` serves until `stop` and then
//! shuts down in order (HTTP drains, deliveries finish or release their
//! leases, counters flush).

use crate::config::Config;
use crate::dedup::arrivals::Arrivals;
use crate::dedup::cache::ClaimCache;
use crate::dedup::writer::GroupCommit;
use crate::dedup::{Dedup, memory::MemoryCache, redis::RedisCache};
use crate::deliver::lanes::Lanes;
use crate::deliver::{self, Wake};
use crate::primitives::time::Millis;
use crate::state::{AppState, Handles};
use crate::stats::Counters;
use crate::stats::requests::RequestMetrics;
use crate::store::{self, EventLog, IdempotencyStore, Store, Tallies};
use crate::{http, serve, telemetry};
use anyhow::Context;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Largest group-commit batch.
const MAX_BATCH: usize = 128;

pub struct App {
    state: AppState,
    /// Cancelled after the HTTP server drained: stops workers and loops.
    stop: CancellationToken,
    background: JoinSet<()>,
    delivery: JoinSet<()>,
}

impl App {
    // Longer than most: the start-up order (ledger, cache, group commit,
    // dedup, loops) reads best in one place.
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        // The recorder first: a metric handle made before it is installed
        // (the delivery loops', the batchers', dedup's claim timer) records
        // nothing, ever.
        let metrics = telemetry::metrics_handle();
        let config = Arc::new(config);
        let store = open_ledger(&config).await?;
        let cache: Arc<dyn ClaimCache> = match &config.storage.redis_url {
            Some(url) => Arc::new(
                RedisCache::connect(url, config.storage.redis_timeout)
                    .context("configuring the Redis client")?,
            ),
            None => Arc::new(MemoryCache::new(config.storage.cache_capacity)),
        };
        // One writer (`batch`): several writers each take whatever is queued
        // the moment one is free, so batches are smaller and every event pays
        // more statement and commit overhead.
        let lanes = Lanes::from_config(&config, config.delivery.enabled);
        let group = GroupCommit::start(
            store.event_log.clone(),
            lanes.clone(),
            MAX_BATCH,
            config.storage.statement_timeout,
        );
        let dedup = Arc::new(Dedup::new(
            cache,
            group,
            store.event_log.clone(),
            config.dedup.clone(),
            config.storage.key_prefix.clone(),
        ));
        let counters = Arc::new(
            Counters::new(
                config
                    .sources
                    .values()
                    .map(|s| (s.name.as_str(), s.targets.as_slice())),
            )
            .with_apis(config.apis.keys().map(String::as_str)),
        );
        let wake = Wake::new(&lanes);
        let stop = CancellationToken::new();

        let mut background = JoinSet::new();
        let (arrivals, arrivals_writer) = Arrivals::start(store.event_log.clone(), stop.clone());
        background.spawn(arrivals_writer);
        background.spawn(flush_loop(
            counters.clone(),
            store.tallies.clone(),
            config.dedup.stats_flush_interval,
            config.storage.statement_timeout,
            stop.clone(),
        ));
        background.spawn(purge_loop(
            store.event_log.clone(),
            store.idempotency.clone(),
            config.dedup.purge_interval,
            stop.clone(),
        ));
        for source in config.reconcile.keys() {
            let r = crate::reconcile::Reconciler {
                config: config.clone(),
                dedup: dedup.clone(),
                store: store.reconcile.clone(),
                wake: wake.clone(),
                client: crate::reconcile::Reconciler::http_client(),
                retry: Default::default(),
                stop: stop.clone(),
            };
            background.spawn(crate::reconcile::runner::run(
                r,
                source.clone(),
                stop.clone(),
            ));
        }
        let delivery = if config.delivery.enabled {
            let w = wake.clone();
            let outbox = store.outbox.clone();
            let s = stop.clone();
            background.spawn(async move {
                outbox
                    .listen(Arc::new(move |t: &str| w.notify(&[t])), s)
                    .await;
            });
            deliver::start(
                &config,
                store.outbox.clone(),
                counters.clone(),
                lanes,
                stop.clone(),
            )
        } else {
            JoinSet::new()
        };

        let request_metrics = RequestMetrics::new(config.sources.keys().map(String::as_str));
        let state = AppState::new(Handles {
            request_metrics,
            config,
            store,
            dedup,
            counters,
            wake,
            arrivals,
            metrics,
            learned: Default::default(),
            upstream: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .context("building the upstream HTTP client")?,
        });
        Ok(Self {
            state,
            stop,
            background,
            delivery,
        })
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves on `listener` (and on `server.admin_listen`, when set) until
    /// `shutdown` is cancelled, then stops in order.
    pub async fn run_until_stopped(
        self,
        listener: TcpListener,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        let admin = match self.state.config.server.admin_listen {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("binding server.admin_listen {addr}"))?,
            ),
            None => None,
        };
        self.run_with_admin(listener, admin, shutdown).await
    }

    /// [`Self::run_until_stopped`] with the admin listener already bound
    /// (tests bind port 0). `admin` is only used when the config sets
    /// `server.admin_listen`; otherwise the public listener serves the
    /// admin routes.
    pub async fn run_with_admin(
        mut self,
        listener: TcpListener,
        admin: Option<TcpListener>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        let server = &self.state.config.server;
        let grace = server.shutdown_grace;
        let limits = serve::Limits {
            max_connections: server.max_connections,
            header_read_timeout: server.header_read_timeout,
            idle_timeout: server.idle_timeout,
        };
        let addr = listener.local_addr()?;
        tracing::info!(%addr, sources = self.state.config.sources.len(), "hookgate listening");
        let mut servers = JoinSet::new();
        let public = http::router(self.state.clone());
        servers.spawn(serve::serve(listener, public, limits, shutdown.clone()));
        if let Some(admin) = admin.filter(|_| server.admin_listen.is_some()) {
            let addr = admin.local_addr()?;
            tracing::info!(%addr, "admin endpoints listening");
            let routes = http::admin_router(self.state.clone());
            servers.spawn(serve::serve(admin, routes, limits, shutdown.clone()));
        }
        tokio::select! {
            _ = async { while servers.join_next().await.is_some() {} } => {}
            _ = async { shutdown.cancelled().await; tokio::time::sleep(grace).await } => {
                tracing::warn!("shutdown grace period over; dropping open connections");
                servers.abort_all();
            }
        }
        self.stop.cancel();
        while self.delivery.join_next().await.is_some() {}
        while self.background.join_next().await.is_some() {}
        tracing::info!("hookgate stopped");
        Ok(())
    }
}

/// Connects the ledger and, unless told not to, migrates it.
async fn open_ledger(config: &Config) -> anyhow::Result<Store> {
    let db = &config.storage.database;
    let store = store::connect(
        db,
        config.storage.max_connections,
        config.storage.statement_timeout,
    )
    .await
    .with_context(|| format!("opening ledger {}", db.display()))?;
    if config.storage.migrate {
        store
            .backend
            .migrate()
            .await
            .with_context(|| format!("migrating {}", db.display()))?;
    }
    Ok(store)
}

/// Adds this instance's counter deltas to the ledger every `every` until
/// cancelled, then once more. The per-minute write is cut off after `bound`
/// (`storage.statement_timeout`): a silent database must not hold the flush
/// (and the `/stats` reads waiting on it) forever.
async fn flush_loop(
    counters: Arc<Counters>,
    tallies: Arc<dyn Tallies>,
    every: Duration,
    bound: Duration,
    stop: CancellationToken,
) {
    let flush = async || {
        counters
            .flush(async |deltas| {
                tallies.add_counters(deltas).await?;
                // The per-minute series is best effort: never re-sent.
                let minute = Millis::now().0.div_euclid(60_000);
                let series = tallies.add_minute_counters(minute, deltas);
                match tokio::time::timeout(bound, series).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::debug!(error = %e, "per-minute counters not recorded"),
                    Err(_) => tracing::debug!("per-minute counters not recorded: timed out"),
                }
                Ok::<(), store::StoreError>(())
            })
            .await
    };
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => break,
        }
        if let Err(e) = flush().await {
            tracing::debug!(error = %e, "stats flush failed; will retry");
        }
    }
    if let Err(e) = flush().await {
        tracing::warn!(error = %e, "final stats flush failed; those counts are lost");
    }
}

async fn purge_loop(
    event_log: Arc<dyn EventLog>,
    idempotency: Arc<dyn IdempotencyStore>,
    every: Duration,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => return,
        }
        match event_log.purge(Millis::now()).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(purged = n, "purged events past their dedup window"),
            Err(e) => tracing::warn!(error = %e, "purge failed; will retry"),
        }
        match idempotency.purge_idempotency(Millis::now()).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(purged = n, "purged idempotency keys past their ttl"),
            Err(e) => tracing::warn!(error = %e, "idempotency purge failed; will retry"),
        }
    }
}
