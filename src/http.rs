//! The router: every URL hookgate serves and the layers around them.
//!
//! Rule: routing only. Handlers live in `ingest` and `admin`; errors become
//! answers in `error`.

use crate::state::AppState;
use crate::{admin, ingest};
use axum::Router;
use axum::routing::{get, post};

pub fn router(state: AppState) -> Router {
    Router::new()
        .route(
            "/webhooks/{source}",
            post(ingest::receive).get(ingest::challenge::answer),
        )
        .route("/healthz", get(admin::health::healthz))
        .route("/readyz", get(admin::health::readyz))
        .route("/metrics", get(admin::metrics::render))
        .route("/stats", get(admin::stats_handler))
        .route("/admin/replay", post(admin::replay::handler))
        // Admin console and events API (issue #10).
        .route("/admin/events", get(admin::events::list))
        .route(
            "/admin/events/{source}/{event_id}",
            get(admin::events::show),
        )
        .route(
            "/admin/events/{source}/{event_id}/redeliver",
            post(admin::events::redeliver),
        )
        .route("/admin/stats/series", get(admin::series::handler))
        .merge(admin::console::routes())
        // Our own limit is enforced in ingest with a clear 413; axum's
        // default 2 MiB extractor limit must not cut in first.
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(state)
}
