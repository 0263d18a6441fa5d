//! The router: every URL hookgate serves and the layers around them.
//!
//! Rule: routing only. Handlers live in `ingest`, `proxy` and `admin`; errors become
//! answers in `error`.
//!
//! Layers: `POST /webhooks/*` reads its own body under `max_body_bytes` and
//! its own `request_timeout` (ingest); every other route reads at most
//! [`SMALL_BODY_LIMIT`] bytes and is cut off after `request_timeout`. Routes
//! that reveal or change state check the bearer token in a route layer,
//! before their handler (and so any body extractor) runs.

use crate::state::AppState;
use crate::{admin, ingest, proxy};
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::middleware;
use axum::routing::{any, get, post};
use tower_http::timeout::TimeoutLayer;

/// Largest body a route other than `POST /webhooks/*` reads (a replay
/// filter is a few hundred bytes).
pub const SMALL_BODY_LIMIT: usize = 64 * 1024;

/// The public listener: webhooks and `/healthz`, plus the admin routes when
/// `server.admin_listen` is unset.
pub fn router(state: AppState) -> Router {
    let webhooks = Router::new()
        .route(
            "/webhooks/{source}",
            post(ingest::receive).get(ingest::challenge::answer),
        )
        // The proxy reads its body under the API's own `max_body_bytes`
        // and applies its own upstream timeout.
        .route("/api/{api}/{*rest}", any(proxy::handle))
        // Our own limit is enforced in ingest with a clear 413; axum's
        // default 2 MiB extractor limit must not cut in first.
        .layer(DefaultBodyLimit::disable());
    let mut small = Router::new().route("/healthz", get(admin::health::healthz));
    if state.config().server.admin_listen.is_none() {
        small = small.merge(admin_routes(&state));
    }
    webhooks
        .merge(small_limits(small, &state))
        .with_state(state)
}

/// The admin listener (`server.admin_listen`): `/stats`, `/admin/*`,
/// `/metrics`, `/readyz` and `/healthz`.
pub fn admin_router(state: AppState) -> Router {
    let routes = Router::new()
        .route("/healthz", get(admin::health::healthz))
        .merge(admin_routes(&state));
    small_limits(routes, &state).with_state(state)
}

/// Routes for operators. Those behind the token are checked before their
/// handler runs, so an anonymous body is never read.
fn admin_routes(state: &AppState) -> Router<AppState> {
    let protected = Router::new()
        .route("/stats", get(admin::stats_handler))
        .route("/admin/replay", post(admin::replay::handler))
        .route("/admin/reload", post(admin::reload_handler))
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
        .route("/admin/bulk", get(admin::bulk::recent))
        .route("/admin/bulk/plan", post(admin::bulk::plan))
        .route("/admin/bulk/{id}", get(admin::bulk::show))
        .route("/admin/bulk/{id}/start", post(admin::bulk::start))
        .route("/admin/bulk/{id}/cancel", post(admin::bulk::cancel))
        .route("/admin/audit", get(admin::bulk::audit))
        .route("/admin/refused", get(admin::refused::list))
        .route(
            "/admin/refused/reverify",
            post(admin::refused::reverify_all),
        )
        .route("/admin/refused/{id}", get(admin::refused::show))
        .route(
            "/admin/refused/{id}/reverify",
            post(admin::refused::reverify),
        )
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            admin::require_token,
        ));
    // `hookgate listen`'s stream: the `listen` scope is enough.
    let listen = Router::new()
        .route("/admin/listen/{source}", get(admin::listen::handler))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            admin::require_listen,
        ));
    // `server.protect_metrics` puts these two behind the token as well.
    let mut probes = Router::new()
        .route("/readyz", get(admin::health::readyz))
        .route("/metrics", get(admin::metrics::render));
    if state.config().server.protect_metrics {
        probes = probes.route_layer(middleware::from_fn_with_state(
            state.clone(),
            admin::require_token,
        ));
    }
    // The console's assets are public (it shows only a login without a
    // token); everything it reads goes through the protected API above.
    Router::new()
        .merge(probes)
        .merge(admin::console::routes())
        .merge(protected)
        .merge(listen)
}

fn small_limits(routes: Router<AppState>, state: &AppState) -> Router<AppState> {
    routes
        .layer(DefaultBodyLimit::max(SMALL_BODY_LIMIT))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            state.config().server.request_timeout,
        ))
}
