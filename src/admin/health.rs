//! `/healthz` (the process answers) and `/readyz` (the backends answer).
//! A lost cache is `degraded` (still 200: dedup stays exact through the
//! ledger); a lost ledger is 503, since nothing can be acknowledged.

use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::json;

pub async fn healthz() -> &'static str {
    "ok\n"
}

pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let (ledger, cache) = tokio::join!(state.store.backend.ping(), state.dedup.cache().ping());
    let ledger_up = ledger.is_ok();
    let cache_up = cache.is_ok();
    let status = match (ledger_up, cache_up) {
        (true, true) => "ready",
        (true, false) => "degraded",
        (false, _) => "unavailable",
    };
    let code = if ledger_up {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = json!({
        "status": status,
        "ledger": if ledger_up { "up" } else { "down" },
        "cache": if cache_up { "up" } else { "down" },
        "cache_kind": state.dedup.cache().kind(),
        // Which config serves, and whether the last reload was refused:
        // a refused reload does not make the process unready (the loaded
        // config still serves), but a probe can see it.
        "config": super::config_doc(&state, &state.config()),
    });
    (code, Json(body))
}
