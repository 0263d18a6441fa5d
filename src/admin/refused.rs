//! The refused-request API (bearer `admin_token`, JSON):
//! - `GET /admin/refused` — newest first; filters `source`, `reason`,
//!   `state` (`refused`, `re-verified`), `since`, `until`; `cursor`, `limit`;
//! - `GET /admin/refused/{id}` — one request: headers redacted, the body
//!   when it was captured;
//! - `POST /admin/refused/{id}/reverify` — verify it again with the loaded
//!   config's secrets;
//! - `POST /admin/refused/reverify` — the same for every refused request
//!   matching a JSON filter (`source`, `reason`, `since`, `until`).
//!
//! Re-verification checks the stored headers and body with the secrets
//! loaded now, at the time the request was received (a timestamp
//! tolerance applies to when it arrived, not to when the operator fixed
//! the secret). A request that now verifies is admitted exactly like a
//! fresh webhook (`ingest::admit`: dedup, store, delivery; its duplicates
//! are duplicates), counted, and marked `re-verified`; one that still
//! fails stays, with its new reason. Only a request whose whole body was
//! captured (`[refused] capture_body`, within `body_cap`) can be
//! re-verified: a signature covers the exact bytes.

use crate::error::ApiError;
use crate::primitives::time::Millis;
use crate::state::AppState;
use crate::stats::Outcome;
use crate::store::refused::{MAX_LIMIT, REFUSED, REVERIFIED, RefusedFilter, RefusedRow};
use crate::verify::{self, Checked, Incoming, VerifyError};
use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, Ordering};

use super::events::{format_time, parse_time, redact};

/// Default page size.
const DEFAULT_LIMIT: i64 = 50;
/// Longest accepted filter value, in bytes.
const MAX_VALUE: usize = 256;

/// What re-verifying one refused request did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reverified {
    /// It verified and was admitted: its events' ids, and whether any was
    /// new (`false`: all duplicates of events already stored).
    Admitted { event_ids: Vec<String>, new: bool },
    /// It still fails, for this reason.
    StillRefused(VerifyError),
    /// It cannot be re-verified (no body, a cut body, no such source).
    Impossible(&'static str),
    /// It was re-verified before; nothing is done twice.
    Already,
}

impl Reverified {
    fn json(&self) -> Value {
        match self {
            Self::Admitted { event_ids, new } => json!({
                "result": REVERIFIED,
                "event_ids": event_ids,
                "dedup": if *new { "new" } else { "duplicate" },
            }),
            Self::StillRefused(e) => json!({
                "result": REFUSED,
                "reason": crate::error::reject_reason(*e).as_str(),
                "detail": e.to_string(),
            }),
            Self::Impossible(why) => json!({ "result": "not_reverifiable", "detail": why }),
            Self::Already => json!({ "result": "already_reverified" }),
        }
    }
}

const NO_BODY: &str = "its body was not captured ([refused] capture_body was off); a signature covers the body, so it cannot be re-verified";
const CUT_BODY: &str = "its body was cut at [refused] body_cap; a signature covers the whole body, so it cannot be re-verified";
const NO_SOURCE: &str = "its source is no longer configured";

/// Verifies `row` again with the loaded config's secrets and, when it
/// passes, admits it through dedup and the store like a fresh webhook.
/// Errors only when admission itself failed (ledger unavailable, the same
/// event in flight): the row is left as it was.
pub async fn reverify_one(state: &AppState, row: &RefusedRow) -> Result<Reverified, ApiError> {
    if row.state == REVERIFIED {
        return Ok(Reverified::Already);
    }
    let Some(body) = &row.body else {
        return Ok(Reverified::Impossible(NO_BODY));
    };
    if (body.len() as i64) < row.body_size {
        return Ok(Reverified::Impossible(CUT_BODY));
    }
    let live = state.live();
    let config = &live.config;
    let Some(source) = config.sources.get(&row.source) else {
        return Ok(Reverified::Impossible(NO_SOURCE));
    };
    let verifying = match source.provider.learns() {
        true => crate::ingest::learned_source(state, source).await?,
        false => source.clone(),
    };
    let incoming = Incoming {
        headers: header_map(&row.headers),
        body: bytes::Bytes::copy_from_slice(body),
        query: row.query.as_deref(),
        client_ip: row.peer.as_deref().and_then(|p| p.parse().ok()),
    };
    // At the time it was received: the tolerance judges its arrival.
    let checked = verify::check(&verifying, incoming, row.received_at.as_secs()).await;
    let now = Millis::now();
    let refused = &state.store.refused;
    let checked = match checked {
        Ok(c) => c,
        Err(e) => {
            let reason = crate::error::reject_reason(e).as_str();
            refused
                .mark(row.id, REFUSED, reason, &e.to_string(), None, now)
                .await
                .map_err(|_| ApiError::Unavailable)?;
            return Ok(Reverified::StillRefused(e));
        }
    };
    let events = match checked {
        Checked::Event(v) => vec![v],
        Checked::Split { events, .. } => events,
        Checked::Answer(_) => Vec::new(),
    };
    let metrics = live.request_metrics.source(&row.source);
    let cache_ttl = config.cache_ttl(source);
    let mut event_ids = Vec::with_capacity(events.len());
    let mut new = false;
    let mut first = None;
    for v in events {
        event_ids.push(v.event_id().as_str().to_owned());
        let outcome =
            crate::ingest::admit(state, &row.source, metrics, v, cache_ttl, now, None).await?;
        new |= outcome == Outcome::New;
        // Counted as the webhook it now is: the first event as the
        // request, the others beside it (as a split batch is).
        match first {
            None => {
                state.counters.record(&row.source, outcome);
                first = Some(outcome);
            }
            Some(_) => state.counters.tally(&row.source, outcome),
        }
    }
    refused
        .mark(
            row.id,
            REVERIFIED,
            &row.reason,
            &row.detail,
            event_ids.first().map(String::as_str),
            now,
        )
        .await
        .map_err(|_| ApiError::Unavailable)?;
    state.refused.reverified(&row.source);
    tracing::info!(
        id = row.id,
        source = %row.source,
        events = event_ids.len(),
        "refused request re-verified and admitted"
    );
    Ok(Reverified::Admitted { event_ids, new })
}

/// The stored `[[name, value], …]` as a header map (names or values that
/// no longer parse are skipped; they were valid when received).
fn header_map(stored: &str) -> HeaderMap {
    let pairs: Vec<(String, String)> = serde_json::from_str(stored).unwrap_or_default();
    let mut map = HeaderMap::with_capacity(pairs.len());
    for (n, v) in pairs {
        if let (Ok(n), Ok(v)) = (HeaderName::try_from(n), HeaderValue::try_from(v)) {
            map.append(n, v);
        }
    }
    map
}

/// How far a re-verification of many is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Progress {
    /// Refused requests looked at.
    pub checked: u64,
    /// Admitted now.
    pub reverified: u64,
    /// Still failing.
    pub still_refused: u64,
    /// Not re-verifiable (no body, a cut body, no such source).
    pub skipped: u64,
    /// Whether it stopped early because `cancel` was set.
    pub cancelled: bool,
}

/// Re-verifies every refused request matching `filter` (rows already
/// re-verified are not touched), newest first, page by page. Stops before
/// the next request once `cancel` is set; `progress` is called after each
/// one. Ready for a bulk-action runner: the caller owns the flag and the
/// reporting. An admission error ends it with that error (rows already
/// handled keep their result).
pub async fn reverify_matching(
    state: &AppState,
    filter: &RefusedFilter,
    cancel: &AtomicBool,
    mut progress: impl FnMut(&Progress),
) -> Result<Progress, ApiError> {
    let mut filter = filter.clone();
    filter.state = Some(REFUSED.to_owned());
    let log = &state.store.refused;
    let mut p = Progress::default();
    let mut before = None;
    loop {
        let page = log
            .list(&filter, before, MAX_LIMIT)
            .await
            .map_err(|_| ApiError::Unavailable)?;
        let Some(last) = page.last() else {
            return Ok(p);
        };
        before = Some(last.id);
        for listed in &page {
            if cancel.load(Ordering::Relaxed) {
                p.cancelled = true;
                return Ok(p);
            }
            let Some(row) = log
                .get(listed.id)
                .await
                .map_err(|_| ApiError::Unavailable)?
            else {
                continue; // pruned meanwhile
            };
            match reverify_one(state, &row).await? {
                Reverified::Admitted { .. } => p.reverified += 1,
                Reverified::StillRefused(_) => p.still_refused += 1,
                Reverified::Impossible(_) | Reverified::Already => p.skipped += 1,
            }
            p.checked += 1;
            progress(&p);
        }
        if (page.len() as i64) < MAX_LIMIT {
            return Ok(p);
        }
    }
}

/// Parses list or re-verify filters. `paging`: `cursor` and `limit` too.
pub(super) fn parse_filter<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    paging: bool,
) -> Result<(RefusedFilter, Option<i64>, i64), ApiError> {
    let bad = |m: String| ApiError::BadRequest(m);
    let mut f = RefusedFilter::default();
    let (mut cursor, mut limit) = (None, DEFAULT_LIMIT);
    for (k, v) in pairs {
        if v.len() > MAX_VALUE {
            return Err(bad(format!("`{k}` is longer than {MAX_VALUE} bytes")));
        }
        let text = || Some(v.to_owned()).filter(|v| !v.is_empty());
        match k {
            "source" => f.source = text(),
            "reason" => f.reason = text(),
            "state" if v.is_empty() => f.state = None,
            "state" if paging && (v == REFUSED || v == REVERIFIED) => f.state = text(),
            "state" if paging => return Err(bad("`state` must be refused or re-verified".into())),
            "since" | "until" if v.is_empty() => {}
            "since" | "until" => {
                let at = parse_time(v).ok_or_else(|| {
                    bad(format!(
                        "`{k}` must be an RFC 3339 time, e.g. 2026-01-31T12:00:00Z"
                    ))
                })?;
                if k == "since" {
                    f.since = Some(at);
                } else {
                    f.until = Some(at);
                }
            }
            "cursor" if paging && v.is_empty() => {}
            "cursor" if paging => {
                cursor = Some(
                    v.parse::<i64>()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| bad("malformed cursor".into()))?,
                )
            }
            "limit" if paging => {
                limit = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| bad(format!("`limit` must be 1..={MAX_LIMIT}")))?
            }
            other => return Err(bad(format!("unknown parameter `{other}`"))),
        }
    }
    Ok((f, cursor, limit))
}

fn summary_json(r: &RefusedRow) -> Value {
    json!({
        "id": r.id,
        "received_at": format_time(r.received_at),
        "received_at_ms": r.received_at.0,
        "source": r.source,
        "reason": r.reason,
        "detail": r.detail,
        "peer": r.peer,
        "body_size": r.body_size,
        "state": r.state,
        "checked_at": r.checked_at.map(format_time),
        "event_id": r.event_id,
    })
}

fn record_json(r: &RefusedRow) -> Value {
    let mut doc = summary_json(r);
    let stored: Vec<(String, String)> = serde_json::from_str(&r.headers).unwrap_or_default();
    let headers: Vec<Value> = stored
        .iter()
        .map(|(n, v)| json!([n, redact(n, v)]))
        .collect();
    let body = match &r.body {
        None => Value::Null,
        Some(b) => match std::str::from_utf8(b) {
            Ok(text) => json!({ "encoding": "utf-8", "data": text }),
            Err(_) => json!({
                "encoding": "base64",
                "data": base64::engine::general_purpose::STANDARD.encode(b),
            }),
        },
    };
    let why_not = match &r.body {
        None => Some(NO_BODY),
        Some(b) if (b.len() as i64) < r.body_size => Some(CUT_BODY),
        Some(_) => None,
    };
    if let Value::Object(d) = &mut doc {
        d.insert("query".into(), json!(r.query));
        d.insert("headers".into(), json!(headers));
        d.insert("body".into(), body);
        d.insert("reverifiable".into(), json!(why_not.is_none()));
        d.insert("not_reverifiable_because".into(), json!(why_not));
    }
    doc
}

fn unavailable(e: &crate::store::StoreError) -> Response {
    tracing::warn!(error = %e, "refused API: ledger unavailable");
    ApiError::Unavailable.into_response()
}

fn not_found() -> Response {
    (
        axum::http::StatusCode::NOT_FOUND,
        Json(json!({ "error": "no such refused request" })),
    )
        .into_response()
}

/// `GET /admin/refused`.
pub async fn list(State(state): State<AppState>, RawQuery(query): RawQuery) -> Response {
    let pairs: Vec<(String, String)> = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .into_owned()
        .collect();
    let (filter, cursor, limit) =
        match parse_filter(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())), true) {
            Ok(r) => r,
            Err(e) => return e.into_response(),
        };
    match state.store.refused.list(&filter, cursor, limit + 1).await {
        Ok(mut rows) => {
            let more = rows.len() as i64 > limit;
            rows.truncate(limit as usize);
            let next = more
                .then(|| rows.last().map(|r| r.id.to_string()))
                .flatten();
            Json(json!({
                "items": rows.iter().map(summary_json).collect::<Vec<_>>(),
                "next_cursor": next,
            }))
            .into_response()
        }
        Err(e) => unavailable(&e),
    }
}

/// `GET /admin/refused/{id}`.
pub async fn show(State(state): State<AppState>, Path(id): Path<i64>) -> Response {
    match state.store.refused.get(id).await {
        Ok(Some(r)) => Json(record_json(&r)).into_response(),
        Ok(None) => not_found(),
        Err(e) => unavailable(&e),
    }
}

/// `POST /admin/refused/{id}/reverify`: 200 with the result, whatever it
/// is (`re-verified`, `refused` with the new reason, `not_reverifiable`
/// with why).
pub async fn reverify(State(state): State<AppState>, Path(id): Path<i64>) -> Response {
    let row = match state.store.refused.get(id).await {
        Ok(Some(r)) => r,
        Ok(None) => return not_found(),
        Err(e) => return unavailable(&e),
    };
    match reverify_one(&state, &row).await {
        Ok(r) => {
            let mut doc = r.json();
            doc["id"] = json!(id);
            Json(doc).into_response()
        }
        Err(e) => e.into_response(),
    }
}

/// `POST /admin/refused/reverify`: every refused request matching the body's
/// filter (a JSON object of strings; `{}` matches all).
pub async fn reverify_all(State(state): State<AppState>, body: axum::body::Bytes) -> Response {
    let mut pairs = Vec::new();
    if !body.iter().all(u8::is_ascii_whitespace) {
        let doc: serde_json::Map<String, Value> = match serde_json::from_slice(&body) {
            Ok(d) => d,
            Err(e) => {
                return ApiError::BadRequest(format!("invalid re-verify request: {e}"))
                    .into_response();
            }
        };
        for (k, v) in doc {
            match v {
                Value::String(s) => pairs.push((k, s)),
                Value::Null => {}
                _ => {
                    return ApiError::BadRequest(format!("`{k}` must be a string")).into_response();
                }
            }
        }
    }
    let filter = match parse_filter(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())), false) {
        Ok((f, _, _)) => f,
        Err(e) => return e.into_response(),
    };
    let never = AtomicBool::new(false);
    match reverify_matching(&state, &filter, &never, |_| {}).await {
        Ok(p) => Json(json!(p)).into_response(),
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_parse_and_name_what_is_wrong() {
        let (f, c, l) = parse_filter(
            [
                ("source", "stripe"),
                ("reason", "invalid_signature"),
                ("since", "2026-01-31T12:00:00Z"),
                ("cursor", "42"),
                ("limit", "10"),
            ],
            true,
        )
        .unwrap();
        assert_eq!(f.source.as_deref(), Some("stripe"));
        assert_eq!(f.reason.as_deref(), Some("invalid_signature"));
        assert!(f.since.is_some());
        assert_eq!((c, l), (Some(42), 10));
        for bad in [
            ("cursor", "x"),
            ("limit", "0"),
            ("since", "yesterday"),
            ("state", "gone"),
            ("nope", "1"),
        ] {
            assert!(parse_filter([bad], true).is_err(), "{bad:?}");
        }
        // A re-verify body takes no paging and no state.
        assert!(parse_filter([("cursor", "1")], false).is_err());
        assert!(parse_filter([("state", "refused")], false).is_err());
    }

    #[test]
    fn stored_headers_come_back_as_a_map() {
        let m = header_map(r#"[["stripe-signature","t=1,v1=ab"],["x-a","1"],["x-a","2"]]"#);
        assert_eq!(m.get("stripe-signature").unwrap(), "t=1,v1=ab");
        assert_eq!(m.get_all("x-a").iter().count(), 2);
    }
}
