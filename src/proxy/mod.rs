//! The Idempotency-Key proxy (docs/idempotency.md):
//! `/api/{name}/{rest}` → `<upstream>/{rest}`, with the claim + ledger of
//! webhook dedup applied to the client's `Idempotency-Key`.
//!
//! Orchestrates only: body (bounded) → method covered? → key and scope →
//! [`claim::decide`] → replay, refuse, or (as owner) forward and store. One
//! outcome is counted and one log line written per request.
//!
//! Rule: sits beside `ingest`; uses the claim cache, the idempotency store,
//! config and stats. Nothing below imports it.

pub mod claim;
pub mod forward;
pub mod key;
pub mod path;

use crate::config::apis::Api;
use crate::error::ProxyError;
use crate::primitives::budget::Lease;
use crate::primitives::time::Millis;
use crate::primitives::token;
use crate::serve;
use crate::state::AppState;
use crate::stats::apis::ApiOutcome;
use crate::store::idempotency::StoredResponse;
use crate::verify::client_ip;
use axum::body::Body;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use claim::{Decision, Keyed};
use forward::{Answer, ForwardError, Upstream};
use reqwest::Url;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

/// Set on every replayed answer.
pub const REPLAYED_HEADER: &str = "idempotency-replayed";

/// Every method on `/api/{name}/{*rest}`.
pub async fn handle(
    State(state): State<AppState>,
    Path((name, _rest)): Path<(String, String)>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let config = state.config();
    let Some(api) = config.apis.get(&name).cloned() else {
        // Not counted: there is no API to count it under.
        return ProxyError::UnknownApi.into_response();
    };
    let (url, path_and_query) = match target(&api, &uri) {
        Ok(t) => t,
        Err(e) => {
            let (outcome, response) = refused(e);
            state.counters.api(&name, outcome);
            metrics::counter!("hookgate_api_requests_total", "api" => name.clone(), "outcome" => outcome.as_str())
                .increment(1);
            return response;
        }
    };
    let client = client_ip::client_ip(Some(peer.ip()), &headers, &config.server.trusted_proxies);
    let headers =
        forward::forwarding_headers(headers, Some(peer.ip()), &config.server.trusted_proxies);
    // The whole request until the answer's head: the body within
    // `request_timeout` (checked in `proxy`), the rest within the API's
    // `timeout`. A streamed answer's body has its own deadline (forward).
    let deadline = config.server.request_timeout + api.timeout;
    let upstream_timeout = api.timeout;
    let request = Incoming {
        method,
        url,
        path_and_query,
        headers,
    };
    let call = proxy(&state, api, client, request, body);
    let (outcome, response) = tokio::time::timeout(deadline, call)
        .await
        .unwrap_or_else(|_| refused(ProxyError::UpstreamTimeout(upstream_timeout)));
    state.counters.api(&name, outcome);
    metrics::counter!("hookgate_api_requests_total", "api" => name.clone(), "outcome" => outcome.as_str())
        .increment(1);
    tracing::info!(
        api = name,
        outcome = outcome.as_str(),
        status = response.status().as_u16(),
        latency_ms = crate::telemetry::log_millis(started.elapsed()),
        "proxy"
    );
    response
}

/// The upstream URL and the path + query the fingerprint covers, from the
/// raw (still percent-encoded) request target. Refuses paths that could
/// leave the API's base path (`path`).
fn target(api: &Api, uri: &Uri) -> Result<(Url, String), ProxyError> {
    // `/api/<name>/<rest>`: the name as sent must be the API's name (a
    // percent-encoded name would make the split below disagree with the
    // router's).
    let rest = uri
        .path()
        .strip_prefix("/api/")
        .and_then(|p| p.strip_prefix(api.name.as_str()))
        .filter(|r| r.starts_with('/'))
        .ok_or(ProxyError::UnknownApi)?;
    let url = path::join(&api.upstream, rest, uri.query())
        .map_err(|e| ProxyError::BadPath(e.to_string()))?;
    let path_and_query = match uri.query() {
        Some(q) => format!("{rest}?{q}"),
        None => rest.to_owned(),
    };
    Ok((url, path_and_query))
}

/// A proxied request before its body is read.
struct Incoming {
    method: Method,
    url: Url,
    path_and_query: String,
    headers: HeaderMap,
}

async fn proxy(
    state: &AppState,
    api: Arc<Api>,
    client: Option<IpAddr>,
    req: Incoming,
    body: Body,
) -> (ApiOutcome, Response) {
    let Incoming {
        method,
        url,
        path_and_query,
        headers,
    } = req;
    // Held until the body has gone upstream (or the request ended).
    let mut lease = state.body_budget.lease(client);
    let read = serve::read_body(body, &headers, api.max_body_bytes, &mut lease);
    let body = match tokio::time::timeout(state.config().server.request_timeout, read).await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => return refused(e.into()),
        Err(_) => return refused(ProxyError::RequestTimeout),
    };
    if !api.methods.contains(&method) {
        return pass_through(state, &api, method, url, &headers, body, lease).await;
    }
    let id = match key::client_key(&api, &headers) {
        Ok(None) => {
            return pass_through(state, &api, method, url, &headers, body, lease).await;
        }
        Ok(Some(k)) => key::namespaced(&api, &headers, k),
        Err(e) => Err(e),
    };
    let id = match id {
        Ok(id) => id,
        Err(e) => return refused(ProxyError::InvalidKey(e.to_string())),
    };
    let keyed = Keyed {
        cache_key: key::cache_key(&state.config().storage.key_prefix, &id),
        fingerprint: key::fingerprint(&method, &path_and_query, &body, api.canonical_json),
        token: token::random_hex(),
        key: id,
        api: api.clone(),
    };
    let cache = state.dedup.cache().as_ref();
    let mut waited = false;
    let decision =
        claim::decide(&keyed, cache, state.store.idempotency.as_ref(), &mut waited).await;
    if waited {
        state.counters.api(&api.name, ApiOutcome::InflightWait);
    }
    match decision {
        Ok(Decision::Owner { .. }) => {
            let request = Forward {
                method,
                url,
                headers,
                body,
                _lease: lease,
            };
            owner(state.clone(), keyed, request).await
        }
        Ok(Decision::Replay(stored)) => (ApiOutcome::Replay, replay(&api, stored)),
        Ok(Decision::Conflict) => {
            let status = StatusCode::from_u16(api.mismatch_status).unwrap_or(StatusCode::CONFLICT);
            refused(ProxyError::KeyReused { status })
        }
        Ok(Decision::InFlight) => refused(ProxyError::InFlight),
        Err(e) => {
            tracing::warn!(api = api.name, error = %e, "idempotency store unavailable; answering 503");
            refused(ProxyError::Unavailable)
        }
    }
}

/// The request as it goes upstream.
struct Forward {
    method: Method,
    url: Url,
    headers: HeaderMap,
    body: Bytes,
    /// The body's share of the body budget, held as long as the body.
    _lease: Lease,
}

/// The owner's section: forward, then store (or release). Runs in its own
/// task, so a client hanging up cannot cut it between the upstream answer
/// and the row update. Only an answer that is stored is read whole (under
/// the answer budget); any other is streamed once the key is released.
async fn owner(state: AppState, k: Keyed, req: Forward) -> (ApiOutcome, Response) {
    let task = tokio::spawn(async move {
        let result = call(&state, &k.api, &req).await;
        drop(req);
        match result {
            Ok(answer) if k.api.replay_statuses.stores(answer.status.as_u16()) => {
                let mut lease = state.answer_budget.lease(None);
                let up = match answer.read_whole(&mut lease).await {
                    Ok(up) => up,
                    Err(e) => {
                        release(&state, &k).await;
                        return refused(upstream_failed(&k.api, &e));
                    }
                };
                let stored = StoredResponse {
                    status: up.status.as_u16(),
                    headers: forward::replayable_headers(&k.api, &up.headers),
                    body: up.body.clone(),
                };
                store_response(&state, &k, &stored).await;
                (ApiOutcome::FirstCall, upstream_response(&k.api, up))
            }
            Ok(answer) => {
                release(&state, &k).await;
                let outcome = if answer.status.is_server_error() {
                    ApiOutcome::UpstreamError
                } else {
                    ApiOutcome::FirstCall
                };
                (outcome, streamed_response(&k.api, answer))
            }
            Err(e) => {
                release(&state, &k).await;
                refused(upstream_failed(&k.api, &e))
            }
        }
    });
    task.await
        .unwrap_or_else(|_| refused(ProxyError::TaskFailed))
}

/// Completes the row, then marks the cache done. If the row cannot be
/// written the claim is released: the client still gets this answer, and a
/// retry runs again (docs/idempotency.md, "Failure modes").
async fn store_response(state: &AppState, k: &Keyed, stored: &StoredResponse) {
    let expires_at = Millis::now() + k.api.ttl;
    match state
        .store
        .idempotency
        .complete(&k.key, &k.token, stored, expires_at)
        .await
    {
        Ok(true) => {
            let _ = state
                .dedup
                .cache()
                .finish(&k.cache_key, &k.hash(), k.api.ttl)
                .await;
        }
        Ok(false) => tracing::warn!(
            api = k.api.name,
            "claim lost before the response was stored (the call outlived lock_ttl)"
        ),
        Err(e) => {
            tracing::warn!(api = k.api.name, error = %e, "could not store the response; releasing the key");
            release(state, k).await;
        }
    }
}

/// Frees the row and the cache claim (both only while they hold our token).
async fn release(state: &AppState, k: &Keyed) {
    if let Err(e) = state.store.idempotency.release(&k.key, &k.token).await {
        tracing::warn!(api = k.api.name, error = %e, "could not release the key; it frees after lock_ttl");
    }
    let _ = state.dedup.cache().release(&k.cache_key, &k.token).await;
}

/// Forwards and records the upstream latency (until the answer's head).
async fn call(state: &AppState, api: &Api, req: &Forward) -> Result<Answer, ForwardError> {
    let started = Instant::now();
    let result = forward::forward(
        &state.upstream,
        api,
        req.method.clone(),
        req.url.clone(),
        &req.headers,
        req.body.clone(),
    )
    .await;
    metrics::histogram!("hookgate_api_upstream_duration_seconds", "api" => api.name.clone())
        .record(started.elapsed().as_secs_f64());
    state
        .counters
        .api_latency(&api.name, started.elapsed().as_millis() as i64);
    if let Err(e) = &result {
        tracing::warn!(api = api.name, error = %e, "upstream call failed");
    }
    result
}

/// A request the proxy does not key: forwarded, and its answer streamed.
async fn pass_through(
    state: &AppState,
    api: &Api,
    method: Method,
    url: Url,
    headers: &HeaderMap,
    body: Bytes,
    lease: Lease,
) -> (ApiOutcome, Response) {
    let req = Forward {
        method,
        url,
        headers: headers.clone(),
        body,
        _lease: lease,
    };
    let result = call(state, api, &req).await;
    drop(req);
    match result {
        Ok(answer) => (ApiOutcome::Passthrough, streamed_response(api, answer)),
        Err(e) => refused(upstream_failed(api, &e)),
    }
}

fn upstream_response(api: &Api, up: Upstream) -> Response {
    let mut r = (up.status, up.body).into_response();
    *r.headers_mut() = up.headers;
    forward::harden_answer(api, r.headers_mut());
    r
}

/// The answer passed on as it arrives (see [`Answer::into_stream`]).
fn streamed_response(api: &Api, answer: Answer) -> Response {
    let (status, headers, body) = answer.into_stream();
    let mut r = Response::new(body);
    *r.status_mut() = status;
    *r.headers_mut() = headers;
    forward::harden_answer(api, r.headers_mut());
    r
}

fn replay(api: &Api, stored: StoredResponse) -> Response {
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    let mut r = (status, stored.body).into_response();
    *r.headers_mut() = forward::header_map(&stored.headers);
    forward::harden_answer(api, r.headers_mut());
    r.headers_mut()
        .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    r
}

/// The answer (and how it is counted) for a request the proxy refuses.
fn refused(e: ProxyError) -> (ApiOutcome, Response) {
    (e.outcome(), e.into_response())
}

fn upstream_failed(api: &Api, e: &ForwardError) -> ProxyError {
    match e {
        ForwardError::Timeout => ProxyError::UpstreamTimeout(api.timeout),
        ForwardError::Connect(_) => ProxyError::UpstreamUnreachable,
        ForwardError::TooLarge => ProxyError::UpstreamTooLarge,
        ForwardError::Busy => ProxyError::Busy,
    }
}
