//! A loopback Stripe API with the subset reconciliation uses:
//! `GET /v1/events` with `Authorization: Bearer <key>`, `created[gte]`
//! (only events created at or after it: the list filters on it server
//! side), `starting_after`, `limit` (default 10, at most 100), newest first,
//! and `has_more` (<https://docs.stripe.com/api/events/list>); `401` with Stripe's
//! error shape for a wrong key (<https://docs.stripe.com/api/errors>) and
//! `429` + `Retry-After` on request (<https://docs.stripe.com/rate-limits>).
//! Event objects are shaped from <https://docs.stripe.com/api/events/object>.

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// One event the fake holds: its id, creation time and exact JSON text.
#[derive(Debug, Clone)]
pub struct FakeEvent {
    pub id: String,
    pub created: i64,
    pub json: String,
}

/// A list request as the fake saw it.
#[derive(Debug, Clone)]
pub struct ListCall {
    pub starting_after: Option<String>,
    pub created_gte: Option<i64>,
    pub status: u16,
    pub at: std::time::Instant,
}

#[derive(Default)]
struct Inner {
    key: String,
    /// Newest first.
    events: Mutex<Vec<FakeEvent>>,
    calls: Mutex<Vec<ListCall>>,
    /// Answer list request number n (0-based) with 429 + `Retry-After: 1`.
    rate_limit: Mutex<Vec<usize>>,
    /// Answer every list request from number n on with 400.
    fail_from: Mutex<Option<usize>>,
    /// Hold list request number n (0-based) this long before answering.
    delay: Mutex<Option<(usize, std::time::Duration)>>,
    /// The held request has arrived.
    held: std::sync::atomic::AtomicBool,
}

#[derive(Clone)]
pub struct FakeStripe {
    pub url: String,
    inner: Arc<Inner>,
}

/// A Stripe event object (pretty-printed, as the API returns it) for
/// `charge.succeeded`.
pub fn event_json(id: &str, created: i64) -> String {
    format!(
        r#"{{
  "id": "{id}",
  "object": "event",
  "api_version": "2024-06-20",
  "created": {created},
  "data": {{
    "object": {{
      "id": "ch_{id}",
      "object": "charge",
      "amount": 2000,
      "currency": "usd",
      "paid": true,
      "status": "succeeded"
    }}
  }},
  "livemode": false,
  "pending_webhooks": 1,
  "request": {{
    "id": "req_{id}",
    "idempotency_key": null
  }},
  "type": "charge.succeeded"
}}"#
    )
}

impl FakeStripe {
    /// `n` events `evt_<tag>_<i>`, created one second apart, the newest a
    /// quarter of an hour ago (older than reconciliation's default grace).
    pub async fn start(key: &str, tag: &str, n: usize) -> Self {
        let now = super::now();
        let events = (0..n)
            .map(|i| FakeEvent::new(&format!("evt_{tag}_{i:05}"), now - 900 - i as i64))
            .collect();
        Self::with_events(key, events).await
    }

    /// A fake holding `events` (newest first).
    pub async fn with_events(key: &str, events: Vec<FakeEvent>) -> Self {
        let inner = Arc::new(Inner {
            key: key.to_owned(),
            events: Mutex::new(events),
            ..Default::default()
        });
        let app = Router::new()
            .route("/v1/events", get(list))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, inner }
    }

    pub fn events(&self) -> Vec<FakeEvent> {
        self.inner.events.lock().unwrap().clone()
    }

    /// Replaces the events the fake holds (newest first).
    pub fn set_events(&self, events: Vec<FakeEvent>) {
        *self.inner.events.lock().unwrap() = events;
    }

    pub fn calls(&self) -> Vec<ListCall> {
        self.inner.calls.lock().unwrap().clone()
    }

    pub fn rate_limit_call(&self, n: usize) {
        self.inner.rate_limit.lock().unwrap().push(n);
    }

    pub fn fail_from(&self, n: Option<usize>) {
        *self.inner.fail_from.lock().unwrap() = n;
    }

    /// Holds list request number `n` (0-based) for `wait` before answering.
    pub fn delay_call(&self, n: usize, wait: std::time::Duration) {
        *self.inner.delay.lock().unwrap() = Some((n, wait));
    }

    /// Whether the request held by [`FakeStripe::delay_call`] has arrived.
    pub fn holding(&self) -> bool {
        self.inner.held.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl FakeEvent {
    /// A `charge.succeeded` event created at `created` (unix seconds).
    pub fn new(id: &str, created: i64) -> Self {
        Self {
            id: id.to_owned(),
            created,
            json: event_json(id, created),
        }
    }
}

fn json(status: StatusCode, body: String) -> Response {
    (status, [("content-type", "application/json")], body).into_response()
}

async fn list(
    State(inner): State<Arc<Inner>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let starting_after = q.get("starting_after").cloned();
    let created_gte = q.get("created[gte]").and_then(|v| v.parse().ok());
    let record = |status: u16| {
        let mut calls = inner.calls.lock().unwrap();
        calls.push(ListCall {
            starting_after: starting_after.clone(),
            created_gte,
            status,
            at: std::time::Instant::now(),
        });
        calls.len() - 1
    };
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if auth != format!("Bearer {}", inner.key) {
        record(401);
        // Worse than Stripe (which masks all but the last four
        // characters): the whole key is echoed, so a test can see that
        // hookgate never prints an API answer.
        let given = auth.trim_start_matches("Bearer ");
        return json(
            StatusCode::UNAUTHORIZED,
            format!(
                r#"{{"error": {{"message": "Invalid API Key provided: {given}", "type": "invalid_request_error"}}}}"#
            ),
        );
    }
    let n = inner.calls.lock().unwrap().len();
    let delay = *inner.delay.lock().unwrap();
    if let Some((_, wait)) = delay.filter(|(at, _)| *at == n) {
        inner.held.store(true, std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(wait).await;
    }
    if inner.rate_limit.lock().unwrap().contains(&n) {
        record(429);
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", "1"), ("content-type", "application/json")],
            r#"{"error": {"message": "Too many requests", "type": "rate_limit_error"}}"#,
        )
            .into_response();
    }
    if inner
        .fail_from
        .lock()
        .unwrap()
        .is_some_and(|from| n >= from)
    {
        record(400);
        return json(
            StatusCode::BAD_REQUEST,
            r#"{"error": {"message": "bad request", "type": "invalid_request_error"}}"#.into(),
        );
    }
    let limit: usize = q
        .get("limit")
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
        .clamp(1, 100);
    let events = inner.events.lock().unwrap().clone();
    let all: Vec<&FakeEvent> = events
        .iter()
        .filter(|e| created_gte.is_none_or(|gte| e.created >= gte))
        .collect();
    // `starting_after`: everything after that id, in list order.
    let rest: &[&FakeEvent] = match &starting_after {
        None => &all,
        Some(after) => match all.iter().position(|e| &e.id == after) {
            Some(i) => &all[i + 1..],
            None => {
                record(400);
                return json(
                    StatusCode::BAD_REQUEST,
                    r#"{"error": {"message": "No such event", "type": "invalid_request_error"}}"#
                        .into(),
                );
            }
        },
    };
    record(200);
    let page: Vec<&str> = rest.iter().take(limit).map(|e| e.json.as_str()).collect();
    let has_more = rest.len() > limit;
    json(
        StatusCode::OK,
        format!(
            "{{\n  \"object\": \"list\",\n  \"data\": [\n{}\n  ],\n  \"has_more\": {has_more},\n  \"url\": \"/v1/events\"\n}}",
            page.join(",\n")
        ),
    )
}
