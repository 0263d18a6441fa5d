//! Ingest: `POST /webhooks/{source}`. Orchestrates only, in the order the
//! product fixes (docs/design.md): source → body (bounded) → verify →
//! dedup + store → wake delivery → respond. One outcome is counted and one
//! log line written per request.

pub mod challenge;

use crate::dedup::{self, DedupError};
use crate::error::ApiError;
use crate::primitives::time::Millis;
use crate::serve;
use crate::state::AppState;
use crate::stats::requests::RequestMetrics;
use crate::stats::{Layer, Outcome};
use crate::verify::{self, Checked, Incoming, Reply, VerifyError, client_ip};
use axum::body::Body;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;
use std::time::Instant;

/// Response header telling the caller what dedup decided. A header name
/// built once: inserted by `&str`, a non-standard name is copied into a new
/// allocation on every answer.
const DEDUP_HEADER: header::HeaderName = header::HeaderName::from_static("hookgate-dedup");

pub async fn receive(
    State(state): State<AppState>,
    Path(source): Path<String>,
    // The whole request rather than the `HeaderMap` extractor, which
    // copies the headers: a verified event keeps them (verify::Facts).
    request: axum::extract::Request,
) -> Response {
    let started = Instant::now();
    // This request's config, kept to its end whatever a reload swaps in.
    let live = state.live();
    let config = &live.config;
    let deadline = config.server.request_timeout;
    let mut event_id = None;
    let (parts, body) = request.into_parts();
    let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>();
    let client = client_ip::client_ip(
        peer.map(|ConnectInfo(a)| a.ip()),
        &parts.headers,
        &config.server.trusted_proxies,
    );
    // Looked up once: the handler and the accounting below share them.
    let configured = config.sources.get(&source);
    let metrics = live.request_metrics.source(&source);
    let request = Request {
        config,
        source: &source,
        configured,
        metrics,
        headers: parts.headers,
        query: parts.uri.query(),
        client,
    };
    let result = tokio::time::timeout(deadline, handle(&state, request, body, &mut event_id))
        .await
        .unwrap_or(Err(ApiError::Timeout));
    let label_source = match configured {
        Some(_) => source.as_str(),
        None => "_unknown",
    };
    let (outcome, response) = match result {
        Ok(answered) => answered,
        Err(e) => (e.outcome(), e.into_response()),
    };
    state.counters.record(&source, outcome);
    let latency = started.elapsed();
    match metrics {
        Some(m) => m.request(outcome, latency),
        None => RequestMetrics::unknown_source(outcome, latency),
    }
    let outcome = outcome.label();
    tracing::info!(
        source = label_source,
        event.id = event_id.as_deref().unwrap_or(""),
        outcome,
        status = response.status().as_u16(),
        latency_ms = crate::telemetry::log_millis(latency),
        "webhook"
    );
    response
}

/// What the handler knows about a request before reading its body.
struct Request<'a> {
    config: &'a crate::config::Config,
    source: &'a str,
    /// The source's settings and metrics; `None`: no such source.
    configured: Option<&'a std::sync::Arc<verify::source::Source>>,
    metrics: Option<&'a crate::stats::requests::SourceMetrics>,
    headers: HeaderMap,
    query: Option<&'a str>,
    client: Option<std::net::IpAddr>,
}

async fn handle(
    state: &AppState,
    request: Request<'_>,
    body: Body,
    event_id: &mut Option<String>,
) -> Result<(Outcome, Response), ApiError> {
    let source_name = request.source;
    let headers = &request.headers;
    let source = request.configured.ok_or(ApiError::UnknownSource)?;

    let config = request.config;
    // The body's share of the body budget, held until this request is
    // answered.
    let mut lease = state.body_budget.lease(request.client);
    let bytes = serve::read_body(body, headers, config.server.max_body_bytes, &mut lease).await?;

    let now = Millis::now();
    let verify_started = Instant::now();
    let incoming = Incoming {
        headers: request.headers,
        body: bytes,
        query: request.query,
        client_ip: request.client,
    };
    let checked = verify::check(source, incoming, now.as_secs()).await;
    let metrics = request.metrics;
    if let Some(m) = metrics {
        m.verified(verify_started.elapsed());
    }
    let reject_status = source.provider.response.reject_status;
    let checked = checked.map_err(|e: VerifyError| ApiError::rejected(e, reject_status))?;
    let mut verified = match checked {
        Checked::Event(v) => v,
        // A challenge or ping: authentic, answered, nothing stored.
        Checked::Answer(reply) => return Ok((Outcome::Answered, reply_response(reply, None))),
    };
    *event_id = Some(verified.event_id().as_str().to_owned());
    let reply = verified.take_reply();

    let cache_ttl = config.cache_ttl(source);
    let (outcome, dedup) = match state.dedup.admit(verified, cache_ttl, now).await {
        // The writer handed the new event's deliveries to their loops, or
        // woke them (dedup::writer).
        Ok(dedup::Outcome::New {
            unrouted,
            event_type,
        }) => {
            state.counters.typed(source_name, event_type.as_deref());
            // Routing (target/route.rs) chose no target: stored, counted `unrouted`.
            if unrouted {
                state.counters.unrouted(source_name);
                if let Some(m) = metrics {
                    m.unrouted();
                }
            }
            (Outcome::New, "new")
        }
        Ok(dedup::Outcome::Duplicate { layer, conflict }) => {
            // A body duplicate's id has no row to count an arrival on.
            if layer != Layer::Body {
                // Queued in memory only; see `dedup::arrivals`.
                let id = event_id.as_deref().unwrap_or_default();
                state.arrivals.push(source_name, id, now, conflict);
            }
            (Outcome::Duplicate { layer, conflict }, "duplicate")
        }
        Err(DedupError::InFlight) => return Err(ApiError::InFlight),
        Err(DedupError::Unavailable(_)) => return Err(ApiError::Unavailable),
    };
    Ok((outcome, reply_response(reply, Some(dedup))))
}

/// The provider's required answer; identical for new events and duplicates
/// (only `Hookgate-Dedup` differs).
fn reply_response(r: Reply, dedup: Option<&'static str>) -> Response {
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::OK);
    let mut res = (status, r.body).into_response();
    let h = res.headers_mut();
    if let Some(d) = dedup {
        h.insert(DEDUP_HEADER, HeaderValue::from_static(d));
    }
    if let Some(ct) = r
        .content_type
        .as_deref()
        .and_then(|c| HeaderValue::from_str(c).ok())
    {
        h.insert(header::CONTENT_TYPE, ct);
    }
    res
}
