//! `AppState`: the handles every request handler shares.
//!
//! Rule: handles only (the live config, the store's capabilities, dedup,
//! counters, wake-up, metrics), cheap to clone; no globals. Built by `app`,
//! read by `ingest`, `proxy` and `admin`. A handler takes the config once
//! ([`Handles::live`]) and keeps that snapshot to its end, so a reload never
//! changes the settings under a request in flight.

use crate::config::Config;
use crate::dedup::Dedup;
use crate::dedup::arrivals::Arrivals;
use crate::deliver::Wake;
use crate::deliver::health::Health;
use crate::primitives::budget::ByteBudget;
use crate::primitives::throttle::Throttle;
use crate::primitives::time::Millis;
use crate::stats::Counters;
use crate::stats::requests::RequestMetrics;
use crate::store::Store;
use arc_swap::ArcSwap;
use metrics_exporter_prometheus::PrometheusHandle;
use std::ops::Deref;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};

/// Handles shared by every request; cheap to clone.
#[derive(Clone)]
pub struct AppState(Arc<Handles>);

/// What an [`AppState`] points to.
pub struct Handles {
    /// The loaded config and what is built from it per request; swapped
    /// whole by a reload.
    live: ArcSwap<Live>,
    /// The ledger, one handle per capability; a handler uses the one it
    /// needs (the console, the tallies, the idempotency rows…).
    pub store: Store,
    pub dedup: Arc<Dedup>,
    pub counters: Arc<Counters>,
    pub wake: Wake,
    /// Per-target delivery health in this process (`/stats`).
    pub health: Health,
    /// Duplicate arrivals, recorded in the background (best effort).
    pub arrivals: Arrivals,
    /// Requests that failed verification, recorded in the background
    /// (best effort; `ingest::refused`).
    pub refused: crate::ingest::refused::Refused,
    pub metrics: PrometheusHandle,
    /// Client for `[apis.*]` upstreams (no redirects followed).
    pub upstream: reqwest::Client,
    /// The outcome of the last reloads (`/readyz`, `/stats`).
    pub reloads: ReloadStatus,
    /// Asks `app`'s reload task to reload (`POST /admin/reload`).
    pub reload: Reload,
    /// Request bodies held before verification (or forwarding), all
    /// requests together (`server.max_buffered_body_bytes`).
    pub body_budget: ByteBudget,
    /// Upstream answers the proxy buffers to store them
    /// (`server.max_buffered_answer_bytes`).
    pub answer_budget: ByteBudget,
    /// Wrong admin tokens per client address.
    pub admin_throttle: Arc<Throttle>,
    /// Keys handshakes handed over, per source (`verify::learned`).
    pub learned: Arc<crate::verify::learned::Learned>,
    /// The trace exporter; `None`: tracing is off and costs nothing.
    pub traces: Option<Arc<crate::traces::Traces>>,
    /// Cancelled when the servers start draining: long-lived answers (the
    /// `hookgate listen` stream) end so the drain does not wait for them.
    pub draining: tokio_util::sync::CancellationToken,
}

/// One loaded config with the handles built from it.
pub struct Live {
    pub config: Arc<Config>,
    /// The webhook path's metric handles, one set per source.
    pub request_metrics: RequestMetrics,
}

impl Live {
    pub fn new(config: Arc<Config>) -> Self {
        let request_metrics = RequestMetrics::new(config.sources.keys().map(String::as_str));
        Self {
            config,
            request_metrics,
        }
    }
}

impl Handles {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        live: Live,
        store: Store,
        dedup: Arc<Dedup>,
        counters: Arc<Counters>,
        (wake, health): (Wake, Health),
        (arrivals, refused): (Arrivals, crate::ingest::refused::Refused),
        metrics: PrometheusHandle,
        upstream: reqwest::Client,
        reload: Reload,
    ) -> Self {
        // Restart-only settings (`reload`): built once from the first config.
        let server = &live.config.server;
        let body_budget = ByteBudget::new(
            server.max_buffered_body_bytes,
            server.max_buffered_body_bytes_per_client,
        );
        let answer_budget = ByteBudget::new(
            server.max_buffered_answer_bytes,
            server.max_buffered_answer_bytes,
        );
        Self {
            body_budget,
            answer_budget,
            admin_throttle: Default::default(),
            learned: Default::default(),
            draining: Default::default(),
            live: ArcSwap::from_pointee(live),
            store,
            dedup,
            counters,
            wake,
            health,
            arrivals,
            refused,
            metrics,
            upstream,
            reloads: ReloadStatus::default(),
            reload,
            traces: None,
        }
    }

    /// With spans exported through `traces`.
    pub fn with_traces(mut self, traces: Option<Arc<crate::traces::Traces>>) -> Self {
        self.traces = traces;
        self
    }

    /// The loaded config and its handles, held by the caller for as long as
    /// it works with them.
    pub fn live(&self) -> Arc<Live> {
        self.live.load_full()
    }

    /// The loaded config.
    pub fn config(&self) -> Arc<Config> {
        self.live.load().config.clone()
    }

    /// Makes `live` the config every request from now on starts with.
    pub fn swap(&self, live: Live) {
        self.live.store(Arc::new(live));
    }
}

impl Deref for AppState {
    type Target = Handles;
    fn deref(&self) -> &Handles {
        &self.0
    }
}

impl AppState {
    pub fn new(handles: Handles) -> Self {
        Self(Arc::new(handles))
    }
}

/// What the reloads so far came to.
#[derive(Default)]
pub struct ReloadStatus(Mutex<ReloadInfo>);

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ReloadInfo {
    /// Reloads applied since start.
    pub applied: u64,
    /// Reloads refused (invalid config, unreadable certificate) since start.
    pub failed: u64,
    /// When the last reload was tried (unix ms).
    pub last_at: Option<i64>,
    /// Why the last reload was refused; `None` once one is applied.
    pub last_error: Option<String>,
}

impl ReloadStatus {
    pub fn get(&self) -> ReloadInfo {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records one reload's outcome.
    pub fn record(&self, outcome: &Result<(), String>) {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        s.last_at = Some(Millis::now().0);
        match outcome {
            Ok(()) => {
                s.applied += 1;
                s.last_error = None;
            }
            Err(e) => {
                s.failed += 1;
                s.last_error = Some(e.clone());
            }
        }
    }
}

/// What a reload did: the new digest and the settings it left for a
/// restart; or why it was refused.
pub type ReloadOutcome = Result<Reloaded, String>;

#[derive(Debug, Clone, serde::Serialize)]
pub struct Reloaded {
    pub digest: String,
    /// Keys that changed in the file but need a restart to take effect.
    pub needs_restart: Vec<String>,
}

/// Requests a reload from the task that owns it (`app`): requests and SIGHUP
/// are applied one at a time, in order.
#[derive(Clone)]
pub struct Reload(mpsc::Sender<oneshot::Sender<ReloadOutcome>>);

impl Reload {
    pub fn channel() -> (Self, mpsc::Receiver<oneshot::Sender<ReloadOutcome>>) {
        let (tx, rx) = mpsc::channel(8);
        (Self(tx), rx)
    }

    /// Reloads and waits for the outcome.
    pub async fn request(&self) -> ReloadOutcome {
        let (tx, rx) = oneshot::channel();
        self.0
            .send(tx)
            .await
            .map_err(|_| "reloading is not available (shutting down)".to_owned())?;
        rx.await
            .map_err(|_| "the reload was cut off (shutting down)".to_owned())?
    }
}
