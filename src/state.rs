//! `AppState`: the handles every request handler shares.
//!
//! Rule: handles only (config, ledger, dedup, counters, wake-up, metrics),
//! cheap to clone; no globals. Built by `app`, read by `ingest` and `admin`.

use crate::config::Config;
use crate::dedup::Dedup;
use crate::deliver::Wake;
use crate::stats::Counters;
use crate::stats::requests::RequestMetrics;
use crate::store::Ledger;
use crate::store::arrivals::Arrivals;
use crate::store::idempotency::IdempotencyStore;
use metrics_exporter_prometheus::PrometheusHandle;
use std::ops::Deref;
use std::sync::Arc;

/// Handles shared by every request; cheap to clone.
#[derive(Clone)]
pub struct AppState(Arc<Handles>);

/// What an [`AppState`] points to.
pub struct Handles {
    pub config: Arc<Config>,
    pub ledger: Arc<dyn Ledger>,
    pub dedup: Arc<Dedup>,
    pub counters: Arc<Counters>,
    pub wake: Wake,
    /// Duplicate arrivals, recorded in the background (best effort).
    pub arrivals: Arrivals,
    pub metrics: PrometheusHandle,
    /// The webhook path's metric handles, one set per source.
    pub request_metrics: RequestMetrics,
    /// The Idempotency-Key proxy's rows (the ledger's own pool).
    pub idempotency: Arc<dyn IdempotencyStore>,
    /// Client for `[apis.*]` upstreams (no redirects followed).
    pub upstream: reqwest::Client,
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
