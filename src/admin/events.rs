//! The events API (bearer `admin_token`, JSON):
//! - `GET /admin/events` — newest first, filtered, cursor-paginated;
//! - `GET /admin/events/{source}/{event_id}` — one event's full record,
//!   credentials redacted;
//! - `POST /admin/events/{source}/{event_id}/redeliver` — send it again.
//!
//! Rule: parsing, rendering and redaction only; the queries live in
//! `store::console`. The filter parser is shared with `POST /admin/replay`.

use crate::error::ApiError;
use crate::primitives::time::Millis;
use crate::state::AppState;
use crate::store::console::{
    AttemptInfo, Cursor, DeliveryState, EventFilter, EventRecord, EventSummary, MAX_LIMIT,
};
use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// Default page size.
pub const DEFAULT_LIMIT: i64 = 50;
/// Longest accepted filter value, in bytes.
const MAX_VALUE: usize = 256;

/// A parsed list request.
#[derive(Debug, Default)]
pub struct ListRequest {
    pub filter: EventFilter,
    pub cursor: Option<Cursor>,
    pub limit: i64,
}

/// Parses filter fields (`source`, `target`, `state`, `type`, `since`,
/// `until`, `q`, `event_id`, `object`) and, when `paging`, `field`,
/// `cursor` and `limit`.
/// Unknown fields and malformed values are a 400 that names them.
pub fn parse_filter<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    paging: bool,
) -> Result<ListRequest, ApiError> {
    let bad = |m: String| ApiError::BadRequest(m);
    let mut r = ListRequest {
        limit: DEFAULT_LIMIT,
        ..Default::default()
    };
    for (k, v) in pairs {
        if v.len() > MAX_VALUE {
            return Err(bad(format!("`{k}` is longer than {MAX_VALUE} bytes")));
        }
        let text = || Some(v.to_owned()).filter(|v| !v.is_empty());
        let f = &mut r.filter;
        match k {
            "source" => f.source = text(),
            "target" => f.target = text(),
            "type" => f.event_type = text(),
            "q" => f.q = text(),
            "object" => f.object = crate::verify::facts::stored_object_id(v.trim()),
            "field" if v.is_empty() => f.field = None,
            "field" if !paging => {
                return Err(bad(
                    "`field` only lists events (GET /admin/events); replay by `object` or `event_id`"
                        .into(),
                ));
            }
            "field" => f.field = Some(parse_field(v).ok_or_else(|| bad(FIELD_SYNTAX.into()))?),
            "event_id" => f.event_id = text(),
            "recovered" if v.is_empty() => f.recovered = None,
            "recovered" => {
                f.recovered = Some(match v {
                    "true" => true,
                    "false" => false,
                    _ => return Err(bad("`recovered` must be true or false".into())),
                })
            }
            "state" if v.is_empty() => f.state = None,
            "state" => {
                f.state = Some(DeliveryState::parse(v).ok_or_else(|| {
                    bad("`state` must be pending, retrying, delivered or dead".into())
                })?)
            }
            "since" | "until" if v.is_empty() => {}
            "since" => f.since = Some(parse_time(v).ok_or_else(|| bad(time_error(k)))?),
            "until" => f.until = Some(parse_time(v).ok_or_else(|| bad(time_error(k)))?),
            "cursor" if paging && !v.is_empty() => {
                r.cursor = Some(Cursor::decode(v).ok_or_else(|| bad("malformed cursor".into()))?)
            }
            "cursor" if paging => {}
            "limit" if paging => {
                r.limit = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| bad(format!("`limit` must be 1..={MAX_LIMIT}")))?
            }
            other => return Err(bad(format!("unknown parameter `{other}`"))),
        }
    }
    if r.filter.field.is_some() {
        bound_field_range(&mut r.filter, Millis::now())?;
    }
    Ok(r)
}

const FIELD_SYNTAX: &str =
    "`field` must be <JSON pointer>:<value>, e.g. /data/object/customer:cus_123";

/// Longest time range a `field` filter searches.
pub const MAX_FIELD_RANGE: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// `/data/object/customer:cus_123`: the pointer ends at the first `:`
/// (a JSON pointer segment holding `:` is written `~1`-free but cannot be
/// searched; keys with a colon are rare in webhook bodies).
fn parse_field(v: &str) -> Option<crate::store::console::FieldFilter> {
    let (pointer, value) = v.split_once(':')?;
    (pointer.starts_with('/') && pointer.len() > 1 && !value.is_empty()).then(|| {
        crate::store::console::FieldFilter {
            pointer: pointer.to_owned(),
            value: value.to_owned(),
        }
    })
}

/// A body field is read from each event, so its search needs a bounded
/// range: `since` is required, `until` defaults to now, and the range is
/// at most [`MAX_FIELD_RANGE`].
fn bound_field_range(f: &mut EventFilter, now: Millis) -> Result<(), ApiError> {
    let Some(since) = f.since else {
        return Err(ApiError::BadRequest(
            "`field` needs a time range: give `since` (and optionally `until`), at most 7 days apart"
                .into(),
        ));
    };
    let until = *f.until.get_or_insert(now);
    if until.0 - since.0 > MAX_FIELD_RANGE.as_millis() as i64 {
        return Err(ApiError::BadRequest(
            "`field` searches at most 7 days: narrow `since` / `until`".into(),
        ));
    }
    Ok(())
}

fn time_error(k: &str) -> String {
    format!("`{k}` must be an RFC 3339 time, e.g. 2026-01-31T12:00:00Z")
}

/// RFC 3339 to milliseconds ([`Millis::parse_rfc3339`]).
pub fn parse_time(text: &str) -> Option<Millis> {
    Millis::parse_rfc3339(text)
}

/// RFC 3339 in UTC with milliseconds ([`Millis::rfc3339`]).
pub fn format_time(t: Millis) -> String {
    t.rfc3339()
}

/// `GET /admin/events`.
pub async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    if let Err(e) = super::authorize(&state, &headers) {
        return e.into_response();
    }
    let pairs: Vec<(String, String)> = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .into_owned()
        .collect();
    let req = match parse_filter(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())), true) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let page = state
        .store
        .console
        .list_events(&req.filter, req.cursor, req.limit)
        .await;
    match page {
        Ok(p) => Json(json!({
            "items": p.items.iter().map(summary_json).collect::<Vec<_>>(),
            "next_cursor": p.next.map(Cursor::encode),
        }))
        .into_response(),
        Err(e) => unavailable(&e),
    }
}

/// `GET /admin/events/{source}/{event_id}`.
pub async fn show(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((source, event_id)): Path<(String, String)>,
) -> Response {
    if let Err(e) = super::authorize(&state, &headers) {
        return e.into_response();
    }
    match state.store.console.event(&source, &event_id).await {
        Ok(Some(rec)) => Json(record_json(&rec)).into_response(),
        Ok(None) => not_found(),
        Err(e) => unavailable(&e),
    }
}

/// Body of a redeliver request: one target, or every target of the event.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedeliverRequest {
    pub target: Option<String>,
}

/// `POST /admin/events/{source}/{event_id}/redeliver`.
pub async fn redeliver(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((source, event_id)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    let who = match super::authorize_scope(&state, &headers, crate::config::Scope::Admin) {
        Ok(w) => w,
        Err(e) => return e.into_response(),
    };
    let req: RedeliverRequest = if body.iter().all(u8::is_ascii_whitespace) {
        RedeliverRequest::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(r) => r,
            Err(e) => {
                return ApiError::BadRequest(format!("invalid redeliver request: {e}"))
                    .into_response();
            }
        }
    };
    if let Some(t) = &req.target
        && !state.config().targets.contains_key(t)
    {
        return ApiError::BadRequest(format!("unknown target `{t}`")).into_response();
    }
    let console = &state.store.console;
    let rec = match console.event(&source, &event_id).await {
        Ok(Some(r)) => r,
        Ok(None) => return not_found(),
        Err(e) => return unavailable(&e),
    };
    let pk = rec.summary.pk;
    match console
        .redeliver(pk, &source, req.target.as_deref(), Millis::now())
        .await
    {
        Ok(n) => {
            match &req.target {
                Some(t) => state.wake.notify(&[t]),
                None => state.wake.notify_all(),
            }
            tracing::info!(source, event.id = event_id, target = ?req.target, queued = n, by = who, "operator redelivery");
            let what = json!({"source": source, "event_id": event_id, "target": req.target});
            super::bulk::record(&state, &who, "redeliver", what, n).await;
            Json(json!({ "queued": n })).into_response()
        }
        Err(e) => unavailable(&e),
    }
}

fn not_found() -> Response {
    ApiError::UnknownEvent.into_response()
}

fn unavailable(e: &crate::store::StoreError) -> Response {
    tracing::warn!(error = %e, "events API: ledger unavailable");
    ApiError::Unavailable.into_response()
}

/// One listed event.
pub fn summary_json(e: &EventSummary) -> Value {
    let deliveries: Vec<Value> = e
        .deliveries
        .iter()
        .map(|d| {
            let waiting = d.state == "pending" || d.state == "retrying";
            json!({
                "target": d.target,
                "state": d.state,
                "attempts": d.attempts,
                "last_status": d.last_status,
                "last_error": d.last_error,
                "next_attempt_at": waiting.then(|| format_time(d.next_attempt_at)),
                "updated_at": format_time(d.updated_at),
                "order_key": d.order_key,
                "order_seq": d.order_seq,
                "overtaken_by": d.overtaken_by,
            })
        })
        .collect();
    json!({
        "source": e.source,
        "event_id": e.event_id,
        "type": e.event_type,
        "received_at": format_time(e.received_at),
        "received_at_ms": e.received_at.0,
        "body_size": e.body_size,
        "duplicates": e.duplicates,
        "conflicts": e.conflicts,
        "recovered": e.recovered,
        "object_id": e.object_id,
        "deliveries": deliveries,
    })
}

/// One event's full record: headers redacted, body as text or base64.
pub fn record_json(r: &EventRecord) -> Value {
    let mut doc = summary_json(&r.summary);
    let stored: Vec<(String, String)> = serde_json::from_str(&r.headers).unwrap_or_default();
    let headers: Vec<Value> = stored
        .iter()
        .map(|(n, v)| json!([n, redact(n, v)]))
        .collect();
    let body = match std::str::from_utf8(&r.body) {
        Ok(text) => json!({ "encoding": "utf-8", "data": text }),
        Err(_) => json!({
            "encoding": "base64",
            "data": base64::engine::general_purpose::STANDARD.encode(&r.body),
        }),
    };
    let mut attempts: Map<String, Value> = Map::new();
    for d in &r.summary.deliveries {
        attempts.insert(d.target.clone(), json!([]));
    }
    for a in &r.attempts {
        if let Value::Array(list) = attempts
            .entry(a.target.clone())
            .or_insert_with(|| json!([]))
        {
            list.push(attempt_json(a));
        }
    }
    let arrivals: Vec<Value> = r
        .arrivals
        .iter()
        .map(|a| {
            json!({
                "at": format_time(a.arrived_at),
                "last_at": format_time(a.last_at),
                "copies": a.copies,
                "conflict": a.conflict,
            })
        })
        .collect();
    let extra = json!({
        "headers": headers,
        "body": body,
        "verification": {
            "key_index": r.key_index,
            "provider_timestamp": r.provider_ts,
            "provider_time": r.provider_ts.map(|s| format_time(Millis(s.saturating_mul(1000)))),
        },
        "arrivals": arrivals,
        "attempts": attempts,
    });
    if let (Value::Object(d), Value::Object(x)) = (&mut doc, extra) {
        d.extend(x);
    }
    doc
}

fn attempt_json(a: &AttemptInfo) -> Value {
    json!({
        "attempt": a.attempt,
        "at": format_time(a.started_at),
        "status": a.status,
        "latency_ms": a.latency_ms,
        "error": a.error,
    })
}

pub use crate::primitives::headers::redact;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_with_zone_or_offset() {
        let z = parse_time("2026-01-31T12:00:00Z").unwrap();
        assert_eq!(parse_time("2026-01-31T13:00:00+01:00"), Some(z));
        assert_eq!(parse_time("2026-01-31T11:30:00-00:30"), Some(z));
        assert_eq!(
            parse_time("2026-01-31T12:00:00.250Z"),
            Some(Millis(z.0 + 250))
        );
        assert_eq!(format_time(z), "2026-01-31T12:00:00.000Z");
        for bad in ["yesterday", "2026-01-31", "2026-13-01T00:00:00Z", ""] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }

    #[test]
    fn credentials_are_redacted() {
        for n in [
            "Authorization",
            "stripe-signature",
            "X-Hub-Signature-256",
            "x-shopify-hmac-sha256",
            "cookie",
            "x-api-key",
            "x-auth-token",
            "webhook-signature",
        ] {
            assert_eq!(redact(n, "s3cret"), "[redacted]", "{n}");
        }
        assert_eq!(redact("x-github-event", "push"), "push");
    }

    #[test]
    fn filters_parse_and_refuse_garbage() {
        let r = parse_filter([("state", "dead"), ("limit", "10"), ("q", "evt_")], true).unwrap();
        assert_eq!(r.filter.state, Some(DeliveryState::Dead));
        assert_eq!(r.limit, 10);
        for bad in [
            ("state", "lost"),
            ("limit", "501"),
            ("cursor", "xx"),
            ("since", "now"),
            ("nope", "1"),
        ] {
            assert!(parse_filter([bad], true).is_err(), "{bad:?}");
        }
        assert!(parse_filter([("cursor", "x")], false).is_err());
    }

    #[test]
    fn a_field_filter_needs_a_bounded_range() {
        let field = ("field", "/data/object/customer:cus_1");
        let err = parse_filter([field], true).unwrap_err().to_string();
        assert!(err.contains("since"), "{err}");
        let r = parse_filter([field, ("since", "2026-01-01T00:00:00Z")], true);
        assert!(r.is_err(), "more than 7 days to now");
        let r = parse_filter(
            [
                field,
                ("since", "2026-01-01T00:00:00Z"),
                ("until", "2026-01-02T00:00:00Z"),
            ],
            true,
        )
        .unwrap();
        let f = r.filter.field.unwrap();
        assert_eq!(
            (f.pointer.as_str(), f.value.as_str()),
            ("/data/object/customer", "cus_1")
        );
        for bad in ["customer:cus_1", "/a:", "/a", ":x"] {
            assert!(parse_filter([("field", bad)], true).is_err(), "{bad}");
        }
        // Replay takes no field.
        assert!(parse_filter([field], false).is_err());
    }
}
