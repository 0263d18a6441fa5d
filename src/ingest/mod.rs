//! Ingest: `POST /webhooks/{source}`. Orchestrates only, in the order the
//! product fixes (docs/design.md): source → body (bounded) → verify →
//! dedup + store → wake delivery → respond. One outcome is counted and one
//! log line written per request.

pub mod challenge;
pub mod refused;

use crate::dedup::{self, DedupError};
use crate::error::ApiError;
use crate::primitives::secret::Secret;
use crate::primitives::time::Millis;
use crate::serve;
use crate::state::AppState;
use crate::stats::requests::RequestMetrics;
use crate::stats::{Layer, Outcome};
use crate::store::handshake_secrets::Learned;
use crate::traces::webhook::{Answer, Decision, Webhook};
use crate::verify::{self, Checked, Incoming, Reply, client_ip};
use axum::body::Body;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;
use std::sync::Arc;
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
    // With tracing on, the request's instants for its spans (`traces`).
    let mut trace = state.traces.as_ref().map(|t| t.webhook(started));
    let handled = handle(&state, request, body, &mut event_id, trace.as_mut());
    let result = tokio::time::timeout(deadline, handled)
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
    if let Some(t) = trace {
        t.finish(Answer {
            source: label_source,
            event_id: event_id.as_deref(),
            status: response.status().as_u16(),
            outcome,
        });
    }
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
    mut trace: Option<&mut Webhook>,
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
    // A source that learns keys in handshakes verifies with them too.
    let learns = source.provider.learns();
    let verifying = match learns {
        true => learned_source(state, source).await?,
        false => source.clone(),
    };
    // A refused request comes back from `check`: nothing is copied for
    // the refused-request log or a retry with fresh keys.
    let incoming = Incoming {
        headers: request.headers,
        body: bytes,
        query: request.query,
        client_ip: request.client,
    };
    let mut checked = verify::check_returning(&verifying, incoming, now.as_secs()).await;
    // Another replica may have learned the key this request is signed with.
    if learns
        && let Err(denied) = &mut checked
        && denied.error.is_authenticity()
        && state.learned.due(source_name)
        && let Ok(secrets) = state.store.handshake_secrets.secrets(source_name).await
        && let (fresh, true) = state.learned.set(source, secrets)
    {
        let incoming = Incoming {
            headers: std::mem::take(&mut denied.headers),
            body: std::mem::take(&mut denied.body),
            query: request.query,
            client_ip: request.client,
        };
        checked = verify::check_returning(&fresh, incoming, now.as_secs()).await;
    }
    let metrics = request.metrics;
    if let Some(m) = metrics {
        m.verified(verify_started.elapsed());
    }
    if let Some(t) = trace.as_deref_mut() {
        t.verified(verify_started);
    }
    let reject_status = source.provider.response.reject_status;
    if let Err(denied) = &checked
        && config.refused.enabled
    {
        state.refused.push(
            &config.refused,
            refused::Request {
                source: source_name,
                error: denied.error,
                peer: request.client,
                query: request.query,
                headers: &denied.headers,
                body: &denied.body,
                at: now,
            },
        );
    }
    let checked = checked.map_err(|denied| ApiError::rejected(denied.error, reject_status))?;
    let cache_ttl = config.cache_ttl(source);
    let (events, reply) = match checked {
        Checked::Event(mut v) => {
            *event_id = Some(v.event_id().as_str().to_owned());
            let reply = v.take_reply();
            let outcome = admit(state, source_name, metrics, v, cache_ttl, now, trace).await?;
            return Ok((outcome, reply_response(reply, Some(dedup_label(outcome)))));
        }
        // A challenge or ping: authentic, answered, nothing stored.
        Checked::Answer(mut reply) => {
            if let Some(secret) = reply.learn.take() {
                learn(state, source, &secret, now).await?;
            }
            return Ok((Outcome::Answered, reply_response(reply, None)));
        }
        Checked::Split { events, reply } => (events, reply),
    };
    // A split batch: every item admitted at once (they share group
    // commits); the request is answered after all of them. The first
    // item's outcome is the request's, the others are tallied beside it.
    if events.is_empty() {
        return Ok((Outcome::Answered, reply_response(reply, None)));
    }
    *event_id = Some(format!("{} items", events.len()));
    let mut admitting = tokio::task::JoinSet::new();
    // The items' ids, for their spans when tracing is on.
    let mut item_ids = Vec::new();
    for (i, v) in events.into_iter().enumerate() {
        if trace.is_some() {
            item_ids.push(v.event_id().as_str().to_owned());
        }
        let (state, name) = (state.clone(), source_name.to_owned());
        admitting.spawn(async move {
            let live = state.live();
            let metrics = live.request_metrics.source(&name);
            (
                i,
                admit(&state, &name, metrics, v, cache_ttl, now, None).await,
            )
        });
    }
    let mut outcomes = Vec::new();
    let mut failed = None;
    while let Some(joined) = admitting.join_next().await {
        match joined {
            Ok((i, Ok(o))) => outcomes.push((i, o)),
            // Unavailable outranks in flight: the retry must wait either way.
            Ok((_, Err(e))) => {
                if !matches!(failed, Some(ApiError::Unavailable)) {
                    failed = Some(e);
                }
            }
            Err(_) => failed = Some(ApiError::Unavailable),
        }
    }
    outcomes.sort_by_key(|(i, _)| *i);
    if let Some(t) = trace {
        for (i, _) in outcomes.iter().filter(|(_, o)| *o == Outcome::New) {
            if let Some(id) = item_ids.get(*i) {
                t.stored_item(id);
            }
        }
    }
    let (_, first) = *outcomes.first().unwrap_or(&(0, Outcome::Answered));
    for (_, o) in outcomes.iter().skip(1) {
        state.counters.tally(source_name, *o);
    }
    // Items stored before a failure stay stored: the provider's retry finds
    // them duplicates and stores the rest.
    if let Some(e) = failed {
        return Err(e);
    }
    let any_new = outcomes.iter().any(|(_, o)| *o == Outcome::New);
    let label = if any_new { "new" } else { "duplicate" };
    Ok((first, reply_response(reply, Some(label))))
}

/// `Hookgate-Dedup` for one event's outcome.
fn dedup_label(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::New => "new",
        _ => "duplicate",
    }
}

/// Dedupes and stores one verified event; counts its type, routing and
/// arrival.
pub(crate) async fn admit(
    state: &AppState,
    source_name: &str,
    metrics: Option<&crate::stats::requests::SourceMetrics>,
    verified: verify::Verified,
    cache_ttl: std::time::Duration,
    now: Millis,
    trace: Option<&mut Webhook>,
) -> Result<Outcome, ApiError> {
    let id = verified.event_id().as_str().to_owned();
    let asked = trace.is_some().then(Instant::now);
    let admitted = state.dedup.admit(verified, cache_ttl, now).await;
    if let (Some(t), Some(asked), Ok(o)) = (trace, asked, &admitted) {
        match o {
            dedup::Outcome::New {
                committing,
                event_type,
                ..
            } => t.decided(
                asked,
                Decision::New {
                    committing: *committing,
                },
                event_type.as_deref(),
            ),
            dedup::Outcome::Duplicate { layer, .. } => {
                let layer = match layer {
                    Layer::Cache => "cache",
                    Layer::Ledger => "ledger",
                    Layer::Body => "body",
                };
                t.decided(asked, Decision::Duplicate { layer }, None)
            }
        }
    }
    match admitted {
        // The writer handed the new event's deliveries to their loops, or
        // woke them (dedup::writer).
        Ok(dedup::Outcome::New {
            unrouted,
            event_type,
            ..
        }) => {
            state.counters.typed(source_name, event_type.as_deref());
            // Routing (target/route.rs) chose no target: stored, counted `unrouted`.
            if unrouted {
                state.counters.unrouted(source_name);
                if let Some(m) = metrics {
                    m.unrouted();
                }
            }
            Ok(Outcome::New)
        }
        Ok(dedup::Outcome::Duplicate { layer, conflict }) => {
            // A body duplicate's id has no row to count an arrival on.
            if layer != Layer::Body {
                // Queued in memory only; see `dedup::arrivals`.
                state.arrivals.push(source_name, &id, now, conflict);
            }
            Ok(Outcome::Duplicate { layer, conflict })
        }
        Err(DedupError::InFlight) => Err(ApiError::InFlight),
        Err(DedupError::Unavailable(_)) => Err(ApiError::Unavailable),
    }
}

/// `source` with the keys its handshakes handed over, read from the ledger
/// the first time (`verify::learned`).
pub(crate) async fn learned_source(
    state: &AppState,
    source: &Arc<verify::source::Source>,
) -> Result<Arc<verify::source::Source>, ApiError> {
    if let Some(s) = state.learned.get(source) {
        return Ok(s);
    }
    let secrets = state
        .store
        .handshake_secrets
        .secrets(&source.name)
        .await
        .map_err(|_| ApiError::Unavailable)?;
    Ok(state.learned.set(source, secrets).0)
}

/// Stores a secret a handshake handed over (Asana's `X-Hook-Secret`) before
/// the handshake is answered, so no event signed with it can come first.
async fn learn(
    state: &AppState,
    source: &Arc<verify::source::Source>,
    secret: &Secret,
    now: Millis,
) -> Result<(), ApiError> {
    let secrets = &state.store.handshake_secrets;
    match secrets.learn(&source.name, secret.expose(), now).await {
        Ok(Learned::Stored) => {}
        Ok(Learned::Full) => {
            return Err(ApiError::BadRequest(
                "this source keeps no more handshake secrets".into(),
            ));
        }
        Err(_) => return Err(ApiError::Unavailable),
    }
    let all = secrets
        .secrets(&source.name)
        .await
        .map_err(|_| ApiError::Unavailable)?;
    state.learned.set(source, all);
    Ok(())
}

/// The provider's required answer; identical for new events and duplicates
/// (only `Hookgate-Dedup` differs).
pub(crate) fn reply_response(r: Reply, dedup: Option<&'static str>) -> Response {
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
    for (name, value) in r.headers {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    }
    res
}
