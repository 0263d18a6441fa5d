//! Replay of dead deliveries: `POST /admin/replay` (bearer) and `hookgate replay`.
//!
//! The body takes the filters of `GET /admin/events` (`source`, `target`,
//! `type`, `since`, `until`, `q`, `event_id`; `state` may only be `dead`);
//! `{}` replays every dead delivery. The answer says how many were queued;
//! the audit log records it (`admin/bulk.rs`). For a plan to confirm,
//! progress and cancel, use `POST /admin/bulk/plan` with `kind` = replay.

use crate::error::ApiError;
use crate::primitives::time::Millis;
use crate::state::AppState;
use crate::store::console::{DeliveryState, EventFilter};
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// Parses a replay body (a JSON object of string filters) into a filter.
pub fn parse_request(body: &[u8]) -> Result<EventFilter, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(EventFilter::default());
    }
    let bad = |m: String| ApiError::BadRequest(format!("invalid replay request: {m}"));
    let doc: serde_json::Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
    let mut pairs = Vec::with_capacity(doc.len());
    for (k, v) in &doc {
        match v {
            Value::String(s) => pairs.push((k.as_str(), s.as_str())),
            Value::Null => {}
            _ => return Err(bad(format!("`{k}` must be a string"))),
        }
    }
    let filter = super::events::parse_filter(pairs, false)?.filter;
    if filter.state.is_some_and(|s| s != DeliveryState::Dead) {
        return Err(bad(
            "only dead deliveries are replayed (`state` = dead)".into()
        ));
    }
    Ok(filter)
}

pub async fn handler(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let who = match super::authorize_scope(&state, &headers, crate::config::Scope::Admin) {
        Ok(w) => w,
        Err(e) => return e.into_response(),
    };
    let audited: Value = serde_json::from_slice(&body).unwrap_or_else(|_| json!({}));
    let filter = match parse_request(&body) {
        Ok(f) => f,
        Err(e) => return e.into_response(),
    };
    match state
        .store
        .console
        .replay_matching(&filter, Millis::now())
        .await
    {
        Ok(n) => {
            state.wake.notify_all();
            tracing::info!(replayed = n, by = who, "dead deliveries replayed");
            super::bulk::record(&state, &who, "replay", audited, n).await;
            Json(json!({ "replayed": n })).into_response()
        }
        Err(e) => {
            tracing::warn!(error = %e, "replay failed");
            ApiError::Unavailable.into_response()
        }
    }
}
