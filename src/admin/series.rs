//! `GET /admin/stats/series?window=1h` (bearer): what the console's overview
//! shows over a window of 1 minute to 7 days, from the ledger's per-minute
//! counters (every instance flushes into them, so it is cluster-wide):
//! - per source, per bucket: received, unique, duplicates, rejected,
//!   delivered and dead; its window totals, rejections by reason, last
//!   received (to the minute) and last accepted (the newest stored event);
//! - every configured target: delivered and failed attempts per bucket,
//!   delivered per minute, attempt success rate and p50/p99 attempt latency
//!   over the window, its health, last success and last failure (this
//!   process's view, as in `/stats`), backlog, oldest pending and dead
//!   letters;
//! - per proxied API: first calls, replays, conflicts and p50/p99 upstream
//!   latency over the window.
//!
//! Buckets are `step_seconds` wide (1 minute up to 1 hour, at most
//! [`MAX_POINTS`] of them), oldest first, ending with the current one.
//!
//! Rule: rendering only; rows come from `store::tallies` and `store::console`.

use super::events::format_time;
use crate::config::Config;
use crate::error::ApiError;
use crate::primitives::time::Millis;
use crate::state::AppState;
use crate::stats::RejectReason;
use crate::stats::latency::{self, BUCKETS};
use crate::store::console::Backlog;
use crate::store::tallies::{MINUTES_KEPT, MinuteCount};
use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap};

/// The series' source measures, in output order.
pub const MEASURES: [&str; 6] = [
    "received",
    "unique",
    "duplicates",
    "rejected",
    "delivered",
    "dead",
];

/// Most buckets in a series.
pub const MAX_POINTS: i64 = 180;
/// Bucket widths, in minutes, the smallest that keeps a window within
/// [`MAX_POINTS`] is taken.
const STEPS: [i64; 8] = [1, 2, 5, 10, 15, 30, 60, 120];

/// Which source measure a counter name adds to, if any.
fn measure(name: &str) -> Option<usize> {
    Some(match name {
        "received" => 0,
        "unique" => 1,
        n if n.starts_with("duplicates.") => 2,
        n if n.starts_with("rejected.") => 3,
        n if n.starts_with("targets.") && n.ends_with(".delivered") => 4,
        n if n.starts_with("targets.") && n.ends_with(".dead") => 5,
        _ => return None,
    })
}

/// `window=<duration>`: 1 minute to 7 days, default 1h.
fn window_minutes(query: Option<&str>) -> Result<i64, ApiError> {
    let mut minutes = 60;
    for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match k.as_ref() {
            "window" => {
                let d = humantime::parse_duration(&v).map_err(|_| {
                    ApiError::BadRequest("`window` must be a duration, e.g. 1h".into())
                })?;
                minutes = (d.as_secs() / 60) as i64;
                if !(1..=MINUTES_KEPT).contains(&minutes) {
                    return Err(ApiError::BadRequest("`window` must be 1m..7d".into()));
                }
            }
            other => return Err(ApiError::BadRequest(format!("unknown parameter `{other}`"))),
        }
    }
    Ok(minutes)
}

/// The bucket width for a window of `minutes`.
pub fn step_minutes(minutes: i64) -> i64 {
    STEPS
        .into_iter()
        .find(|s| ceil_div(minutes, *s) <= MAX_POINTS)
        .unwrap_or(STEPS[STEPS.len() - 1])
}

/// Live facts the series adds to what the counters say.
#[derive(Default)]
pub struct Live {
    pub backlog: Vec<Backlog>,
    /// Per target: `/stats`'s health document.
    pub health: HashMap<String, Value>,
    /// Per source: its newest stored event.
    pub last_accepted: HashMap<String, Option<Millis>>,
}

/// A target's window sums.
#[derive(Default)]
struct TargetSums {
    delivered: Vec<i64>,
    failed: Vec<i64>,
    latency: [i64; BUCKETS],
}

/// The series document; `first` is the first bucket's first minute.
pub fn render(
    config: &Config,
    rows: &[MinuteCount],
    live: &Live,
    first: i64,
    minutes: i64,
    now: Millis,
) -> Value {
    let step = step_minutes(minutes);
    let points = ceil_div(minutes, step) as usize;
    let slot = |minute: i64| -> Option<usize> {
        let at = usize::try_from(minute - first).ok()? / step as usize;
        (at < points).then_some(at)
    };
    let mut per: BTreeMap<&str, Vec<[i64; 6]>> = BTreeMap::new();
    let mut reasons: HashMap<(&str, &str), i64> = HashMap::new();
    let mut last_received: HashMap<&str, i64> = HashMap::new();
    let mut targets: HashMap<&str, TargetSums> = HashMap::new();
    let mut apis: HashMap<(&str, &str), i64> = HashMap::new();
    let mut api_latency: HashMap<&str, [i64; BUCKETS]> = HashMap::new();
    for r in rows {
        let Some(at) = slot(r.minute) else { continue };
        if let Some(name) = r.name.strip_prefix("api.") {
            match latency::bucket_of_name(name) {
                Some(b) => api_latency.entry(&r.source).or_default()[b] += r.value,
                None => *apis.entry((&r.source, name)).or_default() += r.value,
            }
            continue;
        }
        if r.name == "received" && r.value > 0 {
            let e = last_received.entry(&r.source).or_default();
            *e = (*e).max(r.minute);
        }
        if let Some(reason) = r.name.strip_prefix("rejected.") {
            *reasons.entry((&r.source, reason)).or_default() += r.value;
        }
        if let Some((target, what)) = r
            .name
            .strip_prefix("targets.")
            .and_then(|n| n.rsplit_once('.'))
        {
            let t = targets.entry(target).or_insert_with(|| TargetSums {
                delivered: vec![0; points],
                failed: vec![0; points],
                latency: [0; BUCKETS],
            });
            match what {
                "delivered" => t.delivered[at] += r.value,
                "failed_attempts" => t.failed[at] += r.value,
                w => {
                    if let Some(b) = latency::bucket_of_name(w) {
                        t.latency[b] += r.value;
                    }
                }
            }
        }
        if let Some(m) = measure(&r.name) {
            per.entry(r.source.as_str())
                .or_insert_with(|| vec![[0; 6]; points])[at][m] += r.value;
        }
    }
    let window_minutes = minutes as f64;
    let mut sources = Map::new();
    for name in config.sources.keys() {
        let slots = per
            .get(name.as_str())
            .cloned()
            .unwrap_or_else(|| vec![[0; 6]; points]);
        let mut doc = Map::new();
        let mut totals = Map::new();
        for (i, m) in MEASURES.iter().enumerate() {
            let values: Vec<i64> = slots.iter().map(|s| s[i]).collect();
            totals.insert((*m).into(), json!(values.iter().sum::<i64>()));
            doc.insert((*m).into(), json!(values));
        }
        let per_minute: Map<String, Value> = ["received", "unique", "duplicates", "rejected"]
            .iter()
            .map(|m| {
                let n = totals[*m].as_i64().unwrap_or(0) as f64;
                ((*m).to_owned(), json!(round2(n / window_minutes)))
            })
            .collect();
        let by_reason: Map<String, Value> = RejectReason::ALL
            .iter()
            .filter_map(|r| {
                let n = reasons.get(&(name.as_str(), r.as_str())).copied()?;
                (n > 0).then(|| (r.as_str().to_owned(), json!(n)))
            })
            .collect();
        doc.insert("totals".into(), Value::Object(totals));
        doc.insert("per_minute".into(), Value::Object(per_minute));
        doc.insert("rejected_by_reason".into(), Value::Object(by_reason));
        doc.insert(
            "last_received".into(),
            json!(
                last_received
                    .get(name.as_str())
                    .map(|m| format_time(Millis(m * 60_000)))
            ),
        );
        doc.insert(
            "last_accepted".into(),
            json!(
                live.last_accepted
                    .get(name)
                    .copied()
                    .flatten()
                    .map(format_time)
            ),
        );
        sources.insert(name.clone(), Value::Object(doc));
    }
    let mut target_docs = Map::new();
    for name in config.targets.keys() {
        let t = targets.remove(name.as_str()).unwrap_or_else(|| TargetSums {
            delivered: vec![0; points],
            failed: vec![0; points],
            latency: [0; BUCKETS],
        });
        let delivered: i64 = t.delivered.iter().sum();
        let failed: i64 = t.failed.iter().sum();
        let attempts = delivered + failed;
        let b = live.backlog.iter().find(|b| &b.target == name);
        let oldest = b.and_then(|b| b.oldest_pending);
        target_docs.insert(
            name.clone(),
            json!({
                "health": live.health.get(name).cloned().unwrap_or(json!({"state": "healthy"})),
                "delivered": t.delivered,
                "failed_attempts": t.failed,
                "delivered_total": delivered,
                "attempts_total": attempts,
                "delivered_per_minute": round2(delivered as f64 / window_minutes),
                "success_rate": (attempts > 0).then(|| round2(delivered as f64 / attempts as f64)),
                "latency_ms": {
                    "p50": latency::quantile(&t.latency, 0.5),
                    "p99": latency::quantile(&t.latency, 0.99),
                },
                "backlog": b.map_or(0, |b| b.pending),
                "oldest_pending": oldest.map(format_time),
                "oldest_pending_age_s": oldest.map(|t| now.0.saturating_sub(t.0).max(0) / 1000),
                "dead": b.map_or(0, |b| b.dead),
            }),
        );
    }
    let mut api_docs = Map::new();
    for name in config.apis.keys() {
        let get = |o: &str| apis.get(&(name.as_str(), o)).copied().unwrap_or(0);
        let lat = api_latency
            .get(name.as_str())
            .copied()
            .unwrap_or([0; BUCKETS]);
        api_docs.insert(
            name.clone(),
            json!({
                "first_calls": get("first_calls"),
                "replays": get("replays"),
                "conflicts": get("conflicts"),
                "upstream_errors": get("upstream_errors"),
                "upstream_latency_ms": {
                    "p50": latency::quantile(&lat, 0.5),
                    "p99": latency::quantile(&lat, 0.99),
                },
            }),
        );
    }
    json!({
        "window_minutes": minutes,
        "start": format_time(Millis(first * 60_000)),
        "step_seconds": step * 60,
        "points": points,
        "sources": sources,
        "targets": target_docs,
        "apis": api_docs,
    })
}

fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

pub async fn handler(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    if let Err(e) = super::authorize(&state, &headers) {
        return e.into_response();
    }
    let minutes = match window_minutes(query.as_deref()) {
        Ok(m) => m,
        Err(e) => return e.into_response(),
    };
    let now = Millis::now();
    let step = step_minutes(minutes);
    // Whole buckets, the last one holding the current minute.
    let points = ceil_div(minutes, step);
    let first = (now.0.div_euclid(60_000).div_euclid(step) - points + 1) * step;
    let config = state.config();
    let (rows, backlog, ledger) = tokio::join!(
        state.store.tallies.minute_counters(first),
        state.store.console.backlog(),
        // Each source's newest event: the read /metrics shares (one
        // statement for every source, reused for 2 s).
        state.store.backlog.backlog()
    );
    let ledger = match ledger {
        Ok(l) => l,
        Err(e) => return unavailable(&e),
    };
    let mut live = Live::default();
    for name in config.sources.keys() {
        let at = ledger
            .last_accepted
            .iter()
            .find(|(s, _)| s == name)
            .map(|(_, at)| *at);
        live.last_accepted.insert(name.clone(), at);
    }
    for name in config.targets.keys() {
        live.health
            .insert(name.clone(), state.health.doc(name, now));
    }
    match (rows, backlog) {
        (Ok(rows), Ok(backlog)) => {
            live.backlog = backlog;
            Json(render(&config, &rows, &live, first, points * step, now)).into_response()
        }
        (Err(e), _) | (_, Err(e)) => unavailable(&e),
    }
}

fn unavailable(e: &crate::store::StoreError) -> Response {
    tracing::warn!(error = %e, "series unavailable");
    ApiError::Unavailable.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_take_the_smallest_step_within_the_point_limit() {
        assert_eq!(step_minutes(60), 1);
        assert_eq!(step_minutes(6 * 60), 2);
        assert_eq!(step_minutes(24 * 60), 10);
        assert_eq!(step_minutes(7 * 24 * 60), 60);
        assert!(window_minutes(Some("window=8d")).is_err());
        assert_eq!(window_minutes(Some("window=7d")).unwrap(), 7 * 24 * 60);
        assert_eq!(window_minutes(Some("window=15m")).unwrap(), 15);
    }
}
