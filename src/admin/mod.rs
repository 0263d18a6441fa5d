//! Admin endpoints: stats, metrics, health, replay, bulk actions and the audit log. Everything that reveals
//! or changes state sits behind the bearer `admin_token`.

pub mod bulk;
pub mod console;
pub mod events;
pub mod health;
pub mod listen;
pub mod metrics;
pub mod refused;
pub mod replay;
pub mod series;
pub mod stats;

use crate::config::Scope;
use crate::error::ApiError;
use crate::state::AppState;
use crate::verify::client_ip;
use axum::Json;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::net::SocketAddr;

/// Route layer for everything behind the token (`admin` scope): refuses
/// before the handler runs, so an anonymous request's body is never read.
/// An address that sent too many wrong tokens is refused without a
/// comparison (`primitives::throttle`).
pub async fn require_token(state: State<AppState>, req: Request, next: Next) -> Response {
    require_scope(state, req, next, Scope::Admin).await
}

/// Route layer of `GET /admin/listen/*`: the `listen` scope.
pub async fn require_listen(state: State<AppState>, req: Request, next: Next) -> Response {
    require_scope(state, req, next, Scope::Listen).await
}

async fn require_scope(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
    scope: Scope,
) -> Response {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(a)| a.ip());
    let client =
        client_ip::client_ip(peer, req.headers(), &state.config().server.trusted_proxies).or(peer);
    if let Some(wait) = state.admin_throttle.blocked(client) {
        return ApiError::Throttled(wait).into_response();
    }
    match authorize_scope(&state, req.headers(), scope) {
        Ok(name) => {
            req.extensions_mut().insert(TokenName(name));
            next.run(req).await
        }
        // A known token without the scope is no guess: not throttled.
        Err(e @ ApiError::Forbidden(_)) => e.into_response(),
        Err(e) => {
            state.admin_throttle.failed(client);
            e.into_response()
        }
    }
}

/// The name of the token a request was authorized with (a request
/// extension set by the route layer; the audit log's "who").
#[derive(Debug, Clone)]
pub struct TokenName(pub String);

/// Check of `Authorization: Bearer <token>` for the `admin` scope.
pub fn authorize(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    authorize_scope(state, headers, Scope::Admin).map(drop)
}

/// Check of `Authorization: Bearer <token>` against every configured token
/// (`admin_token` and `[server.tokens.*]`); returns the matching token's
/// name. The SHA-256 digests are compared in constant time, against every
/// token (no early exit), so neither a token's content, its length nor
/// which one matched shows in the timing. No token matching: 401; a token
/// without `scope`: 403. With no token configured, nobody is authorized.
pub fn authorize_scope(
    state: &AppState,
    headers: &HeaderMap,
    scope: Scope,
) -> Result<String, ApiError> {
    let config = state.config();
    let tokens = config.server.all_tokens();
    let given = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or(ApiError::Unauthorized)?;
    let given = Sha256::digest(given.trim().as_bytes());
    let mut found = None;
    for t in &tokens {
        let expected = Sha256::digest(t.secret.expose().as_bytes());
        if crate::primitives::crypto::mac_eq(&expected, &given) && found.is_none() {
            found = Some(t);
        }
    }
    match found {
        Some(t) if t.allows(scope) => Ok(t.name.clone()),
        Some(_) => Err(ApiError::Forbidden(scope.as_str())),
        None => Err(ApiError::Unauthorized),
    }
}

/// `POST /admin/reload`: re-reads the config file and the environment, as
/// SIGHUP does, and answers with the outcome: 200 with the new digest and
/// the settings left for a restart, or 422 with why the config was refused
/// (the loaded one keeps serving).
pub async fn reload_handler(State(state): State<AppState>) -> Response {
    match state.reload.request().await {
        Ok(done) => Json(serde_json::json!({
            "status": "reloaded",
            "digest": done.digest,
            "needs_restart": done.needs_restart,
        }))
        .into_response(),
        Err(e) => (
            axum::http::StatusCode::UNPROCESSABLE_ENTITY,
            Json(serde_json::json!({
                "status": "refused",
                "error": e,
                "digest": state.config().digest,
            })),
        )
            .into_response(),
    }
}

/// The loaded config and the reloads so far (`/stats`, `/readyz`).
pub fn config_doc(state: &AppState, config: &crate::config::Config) -> serde_json::Value {
    let r = state.reloads.get();
    serde_json::json!({
        "digest": config.digest,
        "reloads": r.applied,
        "reload_failures": r.failed,
        "last_reload_at": r.last_at.map(|t| events::format_time(crate::primitives::time::Millis(t))),
        "last_reload_error": r.last_error,
    })
}

/// `GET /stats`.
pub async fn stats_handler(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&state, &headers) {
        return e.into_response();
    }
    let store = &state.store;
    let config = state.config();
    match stats::snapshot(&config, &state.counters, &*store.tallies, &*store.reconcile).await {
        Ok(mut doc) => {
            doc["config"] = config_doc(&state, &config);
            // This process's refused-request log (`ingest::refused`).
            let c = state.refused.counts();
            let load =
                |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
            doc["refused"] = serde_json::json!({
                "logged": load(&c.logged),
                "dropped": load(&c.dropped),
                "reverified": load(&c.reverified),
            });
            // This process's view: each replica judges the attempts it made.
            let now = crate::primitives::time::Millis::now();
            doc["targets"] = config
                .targets
                .keys()
                .map(|t| {
                    (
                        t.clone(),
                        serde_json::json!({"health": state.health.doc(t, now)}),
                    )
                })
                .collect::<serde_json::Map<_, _>>()
                .into();
            Json(doc).into_response()
        }
        Err(e) => {
            tracing::warn!(error = %e, "stats unavailable");
            ApiError::Unavailable.into_response()
        }
    }
}
