//! `AppState`: the handles every request handler shares.
//!
//! Rule: handles only (config, the store's capabilities, dedup, counters,
//! wake-up, metrics), cheap to clone; no globals. Built by `app`, read by
//! `ingest`, `proxy` and `admin`.

use crate::config::Config;
use crate::dedup::Dedup;
use crate::dedup::arrivals::Arrivals;
use crate::deliver::Wake;
use crate::primitives::budget::ByteBudget;
use crate::primitives::throttle::Throttle;
use crate::stats::Counters;
use crate::stats::requests::RequestMetrics;
use crate::store::Store;
use metrics_exporter_prometheus::PrometheusHandle;
use std::ops::Deref;
use std::sync::Arc;

/// Handles shared by every request; cheap to clone.
#[derive(Clone)]
pub struct AppState(Arc<Handles>);

/// What an [`AppState`] points to.
pub struct Handles {
    pub config: Arc<Config>,
    /// The ledger, one handle per capability; a handler uses the one it
    /// needs (the console, the tallies, the idempotency rows…).
    pub store: Store,
    pub dedup: Arc<Dedup>,
    pub counters: Arc<Counters>,
    pub wake: Wake,
    /// Duplicate arrivals, recorded in the background (best effort).
    pub arrivals: Arrivals,
    pub metrics: PrometheusHandle,
    /// The webhook path's metric handles, one set per source.
    pub request_metrics: RequestMetrics,
    /// Client for `[apis.*]` upstreams (no redirects followed).
    pub upstream: reqwest::Client,
    /// Request bodies held before verification (or forwarding), all
    /// requests together (`server.max_buffered_body_bytes`).
    pub body_budget: ByteBudget,
    /// Upstream answers the proxy buffers to store them
    /// (`server.max_buffered_answer_bytes`).
    pub answer_budget: ByteBudget,
    /// Wrong admin tokens per client address.
    pub admin_throttle: Arc<Throttle>,
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
