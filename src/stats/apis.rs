//! Per-API counters of the Idempotency-Key proxy. They live in the same
//! [`Counters`] (so they flush with the rest into the counters table, under
//! the API's name and an `api.` counter name) and render as `/stats`'s
//! `apis` object.

use super::Counters;
use serde_json::{Map, Value, json};
use std::sync::atomic::{AtomicI64, Ordering};

/// What became of one request to `/api/{name}/…`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiOutcome {
    /// The key was new: the upstream was called once for it.
    FirstCall,
    /// A stored response was replayed; the upstream was not called.
    Replay,
    /// The key was reused for a different request (409/422).
    Conflict,
    /// The request waited for an in-flight first attempt (then replayed,
    /// ran, or gave up); counted besides its final outcome.
    InflightWait,
    /// Gave up waiting: 409 + Retry-After.
    InflightRejected,
    /// Upstream 5xx, timeout or connection error: nothing stored.
    UpstreamError,
    /// A method the key does not cover, or no key: forwarded as is.
    Passthrough,
    /// Durable storage unavailable: 503, upstream not called.
    Unavailable,
    /// Missing or malformed key or scope, body too large.
    BadRequest,
}

/// An API's outcome counters and its upstream latency histogram.
#[derive(Default)]
pub(super) struct ApiCells {
    outcomes: [AtomicI64; ApiOutcome::ALL.len()],
    latency: super::latency::Cells,
}

impl std::ops::Index<usize> for ApiCells {
    type Output = AtomicI64;
    fn index(&self, i: usize) -> &AtomicI64 {
        &self.outcomes[i]
    }
}

impl ApiOutcome {
    /// `ALL[o as usize] == o`.
    pub const ALL: [Self; 9] = [
        Self::FirstCall,
        Self::Replay,
        Self::Conflict,
        Self::InflightWait,
        Self::InflightRejected,
        Self::UpstreamError,
        Self::Passthrough,
        Self::Unavailable,
        Self::BadRequest,
    ];

    /// The `/stats` field and metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FirstCall => "first_calls",
            Self::Replay => "replays",
            Self::Conflict => "conflicts",
            Self::InflightWait => "inflight_waits",
            Self::InflightRejected => "inflight_rejected",
            Self::UpstreamError => "upstream_errors",
            Self::Passthrough => "passthrough",
            Self::Unavailable => "unavailable",
            Self::BadRequest => "bad_requests",
        }
    }

    fn counter_name(self) -> String {
        format!("api.{}", self.as_str())
    }
}

impl Counters {
    /// Adds counters for each proxied API.
    pub fn with_apis<'a>(self, names: impl IntoIterator<Item = &'a str>) -> Self {
        self.extend([], names);
        self
    }

    /// Counts one outcome of a request to API `api`.
    pub fn api(&self, api: &str, outcome: ApiOutcome) {
        if let Some(c) = self.apis.load().get(api) {
            c[outcome as usize].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records one upstream call of API `api` that took `ms` to answer.
    pub fn api_latency(&self, api: &str, ms: i64) {
        if let Some(c) = self.apis.load().get(api) {
            c.latency.observe(ms);
        }
    }

    pub(super) fn collect_apis(
        &self,
        read: &dyn Fn(&AtomicI64) -> i64,
        out: &mut Vec<super::Delta>,
    ) {
        for (api, cells) in self.apis.load().iter() {
            for o in ApiOutcome::ALL {
                let v = read(&cells[o as usize]);
                if v != 0 {
                    out.push((api.clone(), o.counter_name(), v));
                }
            }
            for (i, cell) in cells.latency.0.iter().enumerate() {
                let v = read(cell);
                if v != 0 {
                    out.push((
                        api.clone(),
                        format!("api.{}", super::latency::bucket_name(i)),
                        v,
                    ));
                }
            }
        }
    }
}

/// The cell of counter `name` of API `api` in `apis`.
pub(super) fn api_cell<'m>(
    apis: &'m std::collections::HashMap<String, std::sync::Arc<ApiCells>>,
    api: &str,
    name: &str,
) -> Option<&'m AtomicI64> {
    {
        let cells = apis.get(api)?;
        if let Some(i) = name
            .strip_prefix("api.")
            .and_then(super::latency::bucket_of_name)
        {
            return Some(&cells.latency.0[i]);
        }
        let o = ApiOutcome::ALL
            .into_iter()
            .find(|o| o.counter_name() == name)?;
        Some(&cells[o as usize])
    }
}

/// `/stats`'s `apis` object: one entry per API, from summed counters.
pub fn doc<'a>(names: impl IntoIterator<Item = &'a str>, get: &dyn Fn(&str, &str) -> i64) -> Value {
    let mut apis = Map::new();
    for name in names {
        let counts: Map<String, Value> = ApiOutcome::ALL
            .iter()
            .map(|o| (o.as_str().to_owned(), json!(get(name, &o.counter_name()))))
            .collect();
        apis.insert(name.to_owned(), Value::Object(counts));
    }
    Value::Object(apis)
}
