//! The router: every URL hookgate serves and the layers around them.
//!
//! Rule: routing only. Handlers live in `ingest`, `proxy` and `admin`; errors become
//! answers in `error`.

use crate::state::AppState;
use crate::{admin, ingest, proxy};
use axum::Router;
use axum::routing::{any, get, post};

pub fn router(state: AppState) -> Router {
    Router::new()
        .route(
            "/webhooks/{source}",
            post(ingest::receive).get(ingest::challenge::answer),
        )
        .route("/api/{api}/{*rest}", any(proxy::handle))
        .route("/healthz", get(admin::health::healthz))
        .route("/readyz", get(admin::health::readyz))
        .route("/metrics", get(admin::metrics::render))
        .route("/stats", get(admin::stats_handler))
        .route("/admin/replay", post(admin::replay::handler))
        // Our own limit is enforced in ingest with a clear 413; axum's
        // default 2 MiB extractor limit must not cut in first.
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(state)
}
