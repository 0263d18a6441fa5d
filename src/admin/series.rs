//! `GET /admin/stats/series?window=1h` (bearer): per source and minute,
//! received, unique, duplicates, rejected, delivered and dead, from the
//! ledger's per-minute counters (every instance flushes into them, so the
//! series is cluster-wide); plus each target's outbox backlog.
//!
//! Rule: rendering only; rows come from `store::tallies` and `store::console`.

use super::events::format_time;
use crate::error::ApiError;
use crate::primitives::time::Millis;
use crate::state::AppState;
use crate::store::console::Backlog;
use crate::store::tallies::{MINUTES_KEPT, MinuteCount};
use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// The series' measures, in output order.
pub const MEASURES: [&str; 6] = [
    "received",
    "unique",
    "duplicates",
    "rejected",
    "delivered",
    "dead",
];

/// Which measure a counter name adds to, if any.
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

/// `window=<duration>`: 1 minute to 48 hours, default 1h.
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
                    return Err(ApiError::BadRequest("`window` must be 1m..48h".into()));
                }
            }
            other => return Err(ApiError::BadRequest(format!("unknown parameter `{other}`"))),
        }
    }
    Ok(minutes)
}

/// The series document: `sources.<name>.<measure>` is one number per
/// minute, oldest first, ending with the current minute.
pub fn render(
    rows: &[MinuteCount],
    backlog: &[Backlog],
    first: i64,
    minutes: i64,
    now: Millis,
) -> Value {
    let mut per: BTreeMap<&str, Vec<[i64; 6]>> = BTreeMap::new();
    for r in rows {
        let (Some(m), Ok(at)) = (measure(&r.name), usize::try_from(r.minute - first)) else {
            continue;
        };
        if at >= minutes as usize {
            continue;
        }
        let slots = per
            .entry(r.source.as_str())
            .or_insert_with(|| vec![[0; 6]; minutes as usize]);
        slots[at][m] += r.value;
    }
    let mut sources = Map::new();
    for (src, slots) in per {
        let mut doc = Map::new();
        for (i, name) in MEASURES.iter().enumerate() {
            doc.insert((*name).into(), slots.iter().map(|s| s[i]).collect());
        }
        sources.insert(src.to_owned(), Value::Object(doc));
    }
    let targets: Map<String, Value> = backlog
        .iter()
        .map(|b| {
            let age = b
                .oldest_pending
                .map(|t| now.0.saturating_sub(t.0).max(0) / 1000);
            (
                b.target.clone(),
                json!({ "backlog": b.pending, "oldest_pending_age_s": age, "dead": b.dead }),
            )
        })
        .collect();
    json!({
        "window_minutes": minutes,
        "start": format_time(Millis(first * 60_000)),
        "step_seconds": 60,
        "sources": sources,
        "targets": targets,
    })
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
    let first = now.0.div_euclid(60_000) - minutes + 1;
    let (rows, backlog) = tokio::join!(
        state.store.tallies.minute_counters(first),
        state.store.console.backlog()
    );
    match (rows, backlog) {
        (Ok(rows), Ok(backlog)) => {
            Json(render(&rows, &backlog, first, minutes, now)).into_response()
        }
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!(error = %e, "series unavailable");
            ApiError::Unavailable.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_land_in_their_minute_and_measure() {
        let row = |minute, name: &str, value| MinuteCount {
            minute,
            source: "stripe".into(),
            name: name.into(),
            value,
        };
        let rows = [
            row(100, "received", 3),
            row(101, "rejected.invalid_signature", 1),
            row(101, "rejected.bad_body", 1),
            row(102, "duplicates.cache", 2),
            row(102, "targets.billing.dead", 1),
            row(102, "targets.billing.failed_attempts", 9),
            row(99, "received", 100),
        ];
        let doc = render(&rows, &[], 100, 3, Millis(102 * 60_000));
        let s = &doc["sources"]["stripe"];
        assert_eq!(s["received"], json!([3, 0, 0]));
        assert_eq!(s["rejected"], json!([0, 2, 0]));
        assert_eq!(s["duplicates"], json!([0, 0, 2]));
        assert_eq!(s["dead"], json!([0, 0, 1]));
        assert!(window_minutes(Some("window=3d")).is_err());
        assert_eq!(window_minutes(Some("window=15m")).unwrap(), 15);
    }
}
