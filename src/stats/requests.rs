//! Prometheus handles of the webhook path, made once per configured source.
//!
//! `metrics::counter!(name, "source" => s.to_owned(), …)` builds its labels
//! and looks the series up in the registry on every call; on the webhook
//! path that was three lookups and three label copies per request. The
//! handles here are looked up once, at start-up, for the outcomes that make
//! up almost all traffic (`new`, `duplicate_cache`), for `unrouted` (every
//! new event of a source without targets) and for the two duration
//! histograms. Rarer outcomes and unknown sources still go
//! through the macro. The rejection counters and the last-received gauge
//! are handles too: a rejection is one more relaxed add, a request one
//! atomic store of the time.

use super::{Layer, Outcome, RejectReason};
use foldhash::HashMap;
use metrics::{Counter, Gauge, Histogram};
use std::time::{Duration, SystemTime};

/// The handles of one source.
pub struct SourceMetrics {
    source: String,
    new: Counter,
    duplicate_cache: Counter,
    request_duration: Histogram,
    verify_duration: Histogram,
    unrouted: Counter,
    /// `hookgate_source_last_received_timestamp_seconds{source}`.
    last_received: Gauge,
    /// `hookgate_rejections_total{source, reason}`, indexed by
    /// `RejectReason as usize`; made at start-up so every reason's series
    /// exists at 0 before the first rejection (a rate over a series that
    /// appears at its first increment misses that increment).
    rejections: [Counter; RejectReason::ALL.len()],
}

impl SourceMetrics {
    fn new(source: &str) -> Self {
        let requests = |outcome: &'static str| metrics::counter!("hookgate_requests_total", "source" => source.to_owned(), "outcome" => outcome);
        Self {
            source: source.to_owned(),
            new: requests("new"),
            duplicate_cache: requests("duplicate_cache"),
            request_duration: metrics::histogram!("hookgate_request_duration_seconds", "source" => source.to_owned()),
            verify_duration: metrics::histogram!("hookgate_verify_duration_seconds", "source" => source.to_owned()),
            unrouted: metrics::counter!("hookgate_unrouted_total", "source" => source.to_owned()),
            last_received: metrics::gauge!("hookgate_source_last_received_timestamp_seconds", "source" => source.to_owned()),
            rejections: RejectReason::ALL.map(|r| metrics::counter!("hookgate_rejections_total", "source" => source.to_owned(), "reason" => r.as_str())),
        }
    }

    /// `hookgate_requests_total{source, outcome}`,
    /// `hookgate_request_duration_seconds{source}`, the source's last
    /// received time and, for a rejection, `hookgate_rejections_total` for
    /// one answered request.
    pub fn request(&self, outcome: Outcome, took: Duration) {
        if let Ok(now) = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH) {
            self.last_received.set(now.as_secs_f64());
        }
        if let Outcome::Rejected(r) = outcome {
            self.rejections[r as usize].increment(1);
        }
        match outcome {
            Outcome::New => self.new.increment(1),
            Outcome::Duplicate {
                layer: Layer::Cache,
                conflict: false,
            } => self.duplicate_cache.increment(1),
            other => {
                metrics::counter!("hookgate_requests_total", "source" => self.source.clone(), "outcome" => other.label())
                    .increment(1)
            }
        }
        self.request_duration.record(took.as_secs_f64());
    }

    /// `hookgate_unrouted_total{source}`: a new event no target's route wanted.
    pub fn unrouted(&self) {
        self.unrouted.increment(1);
    }

    /// `hookgate_verify_duration_seconds{source}`.
    pub fn verified(&self, took: Duration) {
        self.verify_duration.record(took.as_secs_f64());
    }
}

/// Every configured source's handles. Built from the config and only read
/// after (a request's path names the source looked up): foldhash
/// (Cargo.toml).
pub struct RequestMetrics(HashMap<String, SourceMetrics>);

impl RequestMetrics {
    /// Call after the metrics recorder is installed: handles made before
    /// belong to no recorder.
    pub fn new<'a>(sources: impl IntoIterator<Item = &'a str>) -> Self {
        Self(
            sources
                .into_iter()
                .map(|s| (s.to_owned(), SourceMetrics::new(s)))
                .collect(),
        )
    }

    pub fn source(&self, name: &str) -> Option<&SourceMetrics> {
        self.0.get(name)
    }

    /// A request to no configured source: counted under `_unknown`.
    pub fn unknown_source(outcome: Outcome, took: Duration) {
        metrics::counter!("hookgate_requests_total", "source" => "_unknown", "outcome" => outcome.label())
            .increment(1);
        metrics::histogram!("hookgate_request_duration_seconds", "source" => "_unknown")
            .record(took.as_secs_f64());
    }
}
