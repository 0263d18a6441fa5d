//! Wiring: `App::build(config)` connects the backends and starts background
//! work; `run_until_stopped(listener, stop)` serves until `stop` and then
//! shuts down in order (HTTP drains, deliveries finish or release their
//! leases, counters flush). While it serves, the reload task (`reload`)
//! applies SIGHUP and `POST /admin/reload`.

use crate::config::Config;
use crate::dedup::arrivals::Arrivals;
use crate::dedup::cache::ClaimCache;
use crate::dedup::writer::GroupCommit;
use crate::dedup::{Dedup, memory::MemoryCache, redis::RedisCache};
use crate::deliver::fleet::Fleet;
use crate::deliver::lanes::Lanes;
use crate::deliver::{self, Wake};
use crate::primitives::time::Millis;
use crate::reload::{Hangup, Reconcilers, Reloader};
use crate::state::{AppState, Handles, Live, Reload, ReloadOutcome};
use crate::stats::Counters;
use crate::store::{self, EventLog, IdempotencyStore, Store, Tallies};
use crate::{http, serve, telemetry, tls};
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
    /// The target loops (shared with the reload task).
    fleet: Arc<tokio::sync::Mutex<Fleet>>,
    reconcilers: Arc<tokio::sync::Mutex<Reconcilers>>,
    /// The certificate of the TLS listeners; `None`: plain HTTP.
    certs: Option<tls::Certs>,
    /// Reload requests from `POST /admin/reload`, until the reload task runs.
    reloads: Option<tokio::sync::mpsc::Receiver<tokio::sync::oneshot::Sender<ReloadOutcome>>>,
    hangup: Option<Hangup>,
}

impl App {
    // Longer than most: the start-up order (ledger, cache, group commit,
    // dedup, loops) reads best in one place.
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        // The recorder first: a metric handle made before it is installed
        // (the delivery loops', the batchers', dedup's claim timer) records
        // nothing, ever.
        let metrics = telemetry::metrics_handle();
        // Before anything slow: from here on a SIGHUP reloads, never kills.
        let hangup = Hangup::register();
        let certs = match &config.server.tls {
            Some(t) => Some(tls::Certs::load(t).map_err(anyhow::Error::msg)?),
            None => None,
        };
        let config = Arc::new(config);
        let traces = match &config.traces {
            Some(t) => Some(crate::traces::Traces::start(t).await?),
            None => None,
        };
        let store = open_ledger(&config).await?;
        let clock_apart = take_ledger_clock(&store).await;
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
        let dedup = Arc::new(
            Dedup::new(
                cache,
                group,
                store.event_log.clone(),
                config.dedup.clone(),
                config.storage.key_prefix.clone(),
            )
            // Only with Redis: the in-process cache is near already.
            .with_near_cache(if config.storage.redis_url.is_some() {
                config.storage.near_cache_capacity
            } else {
                0
            }),
        );
        let counters = Arc::new(
            Counters::new(
                config
                    .sources
                    .values()
                    .map(|s| (s.name.as_str(), s.targets.as_slice())),
            )
            .with_apis(config.apis.keys().map(String::as_str)),
        );
        // The type names already counted: the cap on new ones holds over
        // restarts (stats::MAX_TYPES). Best effort: the ledger was just
        // migrated, and a failure only lets this process admit its own.
        match store.tallies.counters().await {
            Ok(rows) => counters.seed_types(&rows),
            Err(e) => tracing::warn!(error = %e, "could not read the counted event types"),
        }
        let wake = Wake::new(&lanes);
        let stop = CancellationToken::new();

        let mut background = JoinSet::new();
        let (arrivals, arrivals_writer) = Arrivals::start(store.event_log.clone(), stop.clone());
        background.spawn(arrivals_writer);
        background.spawn(store::clock::follow(
            store.backend.clone(),
            clock_apart,
            stop.clone(),
        ));
        // The writer prunes by the loaded `[refused]` section: a reload
        // applies to the next prune.
        let loaded: Arc<std::sync::OnceLock<AppState>> = Default::default();
        let (refused, refused_writer) = {
            let (loaded, first) = (loaded.clone(), config.refused.clone());
            crate::ingest::refused::Refused::start(
                store.refused.clone(),
                move || match loaded.get() {
                    Some(s) => s.config().refused.clone(),
                    None => first.clone(),
                },
                stop.clone(),
            )
        };
        background.spawn(refused_writer);
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
            store.tallies.clone(),
            config.dedup.purge_interval,
            stop.clone(),
        ));
        warm_provider_keys(&config, &store.provider_keys, &mut background, &stop).await;
        let health = deliver::health::Health::default();
        let fleet = if config.delivery.enabled {
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
                health.clone(),
                traces.clone(),
                stop.clone(),
            )
        } else {
            Fleet::disabled(lanes, stop.clone())
        };

        let (reload, reloads) = Reload::channel();
        let state = AppState::new(
            Handles::new(
                Live::new(config.clone()),
                store,
                dedup,
                counters,
                (wake, health),
                (arrivals, refused),
                metrics,
                reqwest::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .context("building the upstream HTTP client")?,
                reload,
            )
            .with_traces(traces),
        );
        let _ = loaded.set(state.clone());
        let reconcilers = Reconcilers::start(&state, &config, stop.clone());
        background.spawn(crate::alerts::run(state.clone(), stop.clone()));
        Ok(Self {
            state,
            stop,
            background,
            fleet: Arc::new(tokio::sync::Mutex::new(fleet)),
            reconcilers: Arc::new(tokio::sync::Mutex::new(reconcilers)),
            certs,
            reloads: Some(reloads),
            hangup: Some(hangup),
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
        let admin = match self.state.config().server.admin_listen {
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
        let config = self.state.config();
        let server = &config.server;
        let grace = server.shutdown_grace;
        let limits = serve::Limits {
            max_connections: server.max_connections,
            max_connections_per_client: server.max_connections_per_client,
            header_read_timeout: server.header_read_timeout,
            keep_alive_timeout: server.keep_alive_timeout,
            idle_timeout: server.idle_timeout,
            trusted_proxies: server.trusted_proxies.clone(),
        };
        let addr = listener.local_addr()?;
        let scheme = if self.certs.is_some() {
            "https"
        } else {
            "http"
        };
        let admin = admin.filter(|_| server.admin_listen.is_some());
        let admin_addr = match &admin {
            Some(a) => a.local_addr()?,
            None => addr,
        };
        startup_line(&config, scheme, addr, admin_addr);
        let mut servers = JoinSet::new();
        let draining = self.state.draining.clone();
        let stopping = shutdown.clone();
        tokio::spawn(async move {
            stopping.cancelled().await;
            draining.cancel();
        });
        let public = http::router(self.state.clone());
        let certs = self.certs.clone();
        servers.spawn(serve::serve(
            listener,
            public,
            limits.clone(),
            certs.clone(),
            shutdown.clone(),
        ));
        if let Some(admin) = admin {
            tracing::info!(addr = %admin_addr, scheme, "admin endpoints listening");
            let routes = http::admin_router(self.state.clone());
            servers.spawn(serve::serve(admin, routes, limits, certs, shutdown.clone()));
        }
        // Reloads are taken while serving; the task ends with `shutdown`.
        let reloader = Reloader {
            state: self.state.clone(),
            fleet: self.fleet.clone(),
            reconcilers: self.reconcilers.clone(),
            certs: self.certs.clone(),
        };
        let requests = self.reloads.take().expect("run once");
        let hangup = self.hangup.take().expect("run once");
        let reloading = tokio::spawn(crate::reload::run(
            reloader,
            requests,
            hangup,
            shutdown.clone(),
        ));
        tokio::select! {
            _ = async { while servers.join_next().await.is_some() {} } => {}
            _ = async { shutdown.cancelled().await; tokio::time::sleep(grace).await } => {
                tracing::warn!("shutdown grace period over; dropping open connections");
                servers.abort_all();
            }
        }
        // A reload in progress finishes first (its loops stop with the rest).
        let _ = reloading.await;
        self.stop.cancel();
        self.fleet.lock().await.join().await;
        self.reconcilers.lock().await.join().await;
        while self.background.join_next().await.is_some() {}
        // After the loops: their last attempts' spans are queued by now.
        crate::traces::stop(self.state.traces.clone()).await;
        tracing::info!("hookgate stopped");
        Ok(())
    }
}

/// Puts back the keys each PayPal / Plaid source fetched before (so a
/// restart does not start cold, spending its fetch budget), and writes the
/// ones found from now on. A ledger that cannot be read or written costs
/// only the warm start: the key is fetched again.
async fn warm_provider_keys(
    config: &Config,
    keys: &Arc<dyn store::ProviderKeys>,
    background: &mut JoinSet<()>,
    stop: &CancellationToken,
) {
    let now = Millis::now().as_secs();
    for (name, source) in &config.sources {
        let Some(remote) = source.settings.as_ref().and_then(|s| s.remote_keys()) else {
            continue;
        };
        match keys.load_keys(name, now).await {
            Ok(found) => {
                let mut warmed = 0;
                for k in found {
                    let learned = crate::verify::key_cache::LearnedKey {
                        name: k.name,
                        material: k.material,
                        until: k.valid_until,
                    };
                    if remote.warm(&learned, now).await {
                        warmed += 1;
                    }
                }
                if warmed > 0 {
                    tracing::info!(
                        source = name,
                        keys = warmed,
                        "provider keys restored from the ledger"
                    );
                }
            }
            Err(e) => {
                tracing::warn!(source = name, error = %e, "could not read stored provider keys")
            }
        }
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        remote.report_to(tx);
        let (keys, source, stop) = (keys.clone(), name.clone(), stop.clone());
        background.spawn(async move {
            loop {
                let k = tokio::select! {
                    k = rx.recv() => match k { Some(k) => k, None => return },
                    _ = stop.cancelled() => return,
                };
                let key = store::provider_keys::ProviderKey {
                    name: k.name,
                    material: k.material,
                    valid_until: k.until,
                };
                if let Err(e) = keys.save_key(&source, &key, Millis::now().as_secs()).await {
                    tracing::warn!(source, error = %e, "could not store a provider key; it is fetched again after a restart");
                }
            }
        });
    }
}

/// The one line that says what this process serves: where it listens, the
/// ledger it opened (a SQLite path as resolved; a URL without
/// credentials), the cache, the sources and targets, and the console.
fn startup_line(
    config: &Config,
    scheme: &str,
    addr: std::net::SocketAddr,
    admin: std::net::SocketAddr,
) {
    let names = |m: Vec<&String>| {
        if m.is_empty() {
            "none".to_owned()
        } else {
            m.into_iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(",")
        }
    };
    tracing::info!(
        %addr,
        ledger = %config.storage.database.display(),
        cache = %config.storage.cache_display(),
        sources = %names(config.sources.keys().collect()),
        targets = %names(config.targets.keys().collect()),
        console = %format!("{scheme}://{admin}/console/"),
        digest = %config.digest,
        "hookgate listening"
    );
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

/// Takes the shared ledger's clock before anything is timed by it (see
/// `primitives::time::follow_ledger_clock`); returns whether the first
/// sample was logged as far from this machine's clock.
async fn take_ledger_clock(store: &Store) -> bool {
    let mut apart = false;
    if let Err(e) = store::clock::sample(store.backend.as_ref(), &mut apart).await {
        tracing::warn!(error = %e, "could not read the ledger's clock: using this machine's until it answers");
    }
    apart
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
    tallies: Arc<dyn Tallies>,
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
        fold_excess_types(tallies.as_ref()).await;
    }
}

/// Folds per-type counter rows beyond the cap into `types.other`
/// (`stats::excess_types`), one bounded batch per source and pass.
async fn fold_excess_types(tallies: &dyn Tallies) {
    let rows = match tallies.counters().await {
        Ok(rows) => rows,
        Err(e) => return tracing::warn!(error = %e, "type purge failed; will retry"),
    };
    let other = format!("{}{}", crate::stats::TYPE_PREFIX, crate::stats::OTHER_TYPES);
    let batch = crate::store::PURGE_BATCH as usize;
    for (source, names) in crate::stats::excess_types(&rows, batch) {
        match tallies.fold_counters(&source, &names, &other).await {
            Ok(n) => tracing::info!(
                source,
                folded = n,
                "folded event types beyond the cap into `other`"
            ),
            Err(e) => tracing::warn!(source, error = %e, "type purge failed; will retry"),
        }
    }
}
