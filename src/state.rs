//! `AppState`: the handles every request handler shares.
//!
//! Rule: handles only (config, the store's capabilities, dedup, counters,
//! wake-up, metrics), cheap to clone; no globals. Built by `app`, read by
//! `ingest`, `proxy` and `admin`.

use crate::config::Config;
use crate::dedup::Dedup;
use crate::dedup::arrivals::Arrivals;
use crate::deliver::Wake;
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
    /// Keys handshakes handed over, per source (`verify::learned`).
    pub learned: Arc<crate::verify::learned::Learned>,
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
