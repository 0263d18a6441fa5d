//! Replay of dead deliveries: `POST /admin/replay` (bearer) and `hookgate replay`.

use crate::error::ApiError;
use crate::primitives::time::Millis;
use crate::state::AppState;
use crate::store::ReplayFilter;
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

/// Body of `POST /admin/replay`: all fields optional; `{}` replays every dead delivery.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    pub source: Option<String>,
    pub event_id: Option<String>,
    pub target: Option<String>,
}

pub async fn handler(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if let Err(e) = super::authorize(&state, &headers) {
        return e.into_response();
    }
    let req: ReplayRequest = if body.is_empty() {
        ReplayRequest::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(r) => r,
            Err(e) => {
                return ApiError::BadRequest(format!("invalid replay request: {e}"))
                    .into_response();
            }
        }
    };
    let filter = ReplayFilter {
        source: req.source,
        event_id: req.event_id,
        target: req.target,
    };
    match state.ledger.replay(&filter, Millis::now()).await {
        Ok(n) => {
            state.wake.notify_all();
            tracing::info!(replayed = n, "dead deliveries replayed");
            Json(json!({ "replayed": n })).into_response()
        }
        Err(e) => {
            tracing::warn!(error = %e, "replay failed");
            ApiError::Unavailable.into_response()
        }
    }
}
