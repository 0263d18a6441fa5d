//! `GET /metrics`: Prometheus text format, this process only (labels are
//! bounded: source, target, outcome).

use crate::state::AppState;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

pub async fn render(State(state): State<AppState>) -> impl IntoResponse {
    state.metrics.run_upkeep();
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
}
