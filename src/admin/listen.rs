//! `GET /admin/listen/{source}`: a source's stored events as a stream of
//! JSON lines (`application/x-ndjson`), from a cursor and then live, for
//! `hookgate listen`. Needs the `listen` scope.
//!
//! Rule: read-only. A listener is not a delivery target: nothing here
//! touches delivery rows, so any number of listeners may watch a source
//! and none changes what targets get.
//!
//! Order and cursor: the ledger id (`hookgate_events.id`), ascending. The
//! cursor is the last id the stream has passed, as decimal text. On
//! SQLite, ids are taken under the single writer lock, so a visible id is
//! never followed by a smaller one committing later. On PostgreSQL a
//! transaction may take an id and commit after a later-numbered one is
//! visible; the stream therefore only passes ids that were already the
//! ledger's newest at least `storage.statement_timeout` + 1 s ago (every
//! ledger call is bounded by the statement timeout, so by then the
//! transactions holding smaller ids have committed or rolled back).
//!
//! Lines (one JSON object each):
//! - `{"kind":"event","cursor":"…","event_id":…,"type":…,"received_at":…,
//!   "headers":[[name,value],…],"body":"<base64>"}` — the provider's
//!   stored headers unredacted (a local app may verify the provider's
//!   signature) and the exact body bytes;
//! - `{"kind":"progress","cursor":"…","at":…}` — everything up to the
//!   cursor has been passed (events of other sources or types, or none):
//!   sent when the cursor moved without an event, and every
//!   [`HEARTBEAT`] so the client can tell a dead connection.

use crate::config::Database;
use crate::error::ApiError;
use crate::primitives::time::Millis;
use crate::state::AppState;
use crate::store::console::StreamEvent;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame};
use serde_json::json;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// A line at least this often, events or not.
pub const HEARTBEAT: Duration = Duration::from_secs(10);
/// How often the ledger is asked for new events while the stream is idle.
const POLL: Duration = Duration::from_millis(250);
/// Events read per query.
const PAGE: i64 = 200;
/// Most `type` filters one request may name.
const MAX_TYPES: usize = 32;

/// Where a stream starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum From {
    /// After the ledger's newest event.
    Now,
    /// After this id.
    Cursor(i64),
    /// The source's events received in the last this long.
    Ago(Duration),
}

impl From {
    /// `now`, a cursor (decimal id) or a duration (`90s`, `15m`, `2h`).
    pub fn parse(text: &str) -> Option<Self> {
        let t = text.trim();
        if t.is_empty() || t == "now" {
            return Some(Self::Now);
        }
        if let Ok(id) = t.parse::<i64>() {
            return (id >= 0).then_some(Self::Cursor(id));
        }
        humantime::parse_duration(t).ok().map(Self::Ago)
    }
}

/// A parsed listen request.
#[derive(Debug)]
struct ListenRequest {
    from: From,
    types: Vec<String>,
}

fn parse(query: Option<String>) -> Result<ListenRequest, ApiError> {
    let mut r = ListenRequest {
        from: From::Now,
        types: Vec::new(),
    };
    for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match &*k {
            "from" => {
                r.from = From::parse(&v).ok_or_else(|| {
                    ApiError::BadRequest(
                        "`from` must be now, a cursor or a duration like 15m".into(),
                    )
                })?
            }
            "type" if v.len() <= 256 && r.types.len() < MAX_TYPES => r.types.push(v.into_owned()),
            "type" => {
                return Err(ApiError::BadRequest(format!(
                    "at most {MAX_TYPES} `type` values of up to 256 bytes"
                )));
            }
            other => return Err(ApiError::BadRequest(format!("unknown parameter `{other}`"))),
        }
    }
    Ok(r)
}

/// `GET /admin/listen/{source}` (behind `require_listen`).
pub async fn handler(
    State(state): State<AppState>,
    Path(source): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let config = state.config();
    if !config.sources.contains_key(&source) {
        return ApiError::UnknownSource.into_response();
    }
    let req = match parse(query) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let console = &state.store.console;
    let start = match &req.from {
        From::Cursor(id) => Ok(*id),
        From::Now => console.listen_horizon().await,
        From::Ago(d) => {
            let since = Millis(Millis::now().0.saturating_sub(d.as_millis() as i64));
            match console.listen_since(&source, since).await {
                Ok(Some(first)) => Ok(first - 1),
                Ok(None) => console.listen_horizon().await,
                Err(e) => Err(e),
            }
        }
    };
    let start = match start {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "listen: ledger unavailable");
            return ApiError::Unavailable.into_response();
        }
    };
    let settle = match config.storage.database {
        Database::Sqlite(_) => Duration::ZERO,
        _ => config.storage.statement_timeout + Duration::from_secs(1),
    };
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    tracing::info!(source, cursor = start, "listener connected");
    tokio::spawn(stream(state.clone(), source, req.types, start, settle, tx));
    Response::builder()
        .header("content-type", "application/x-ndjson")
        .header("cache-control", "no-store")
        .header("x-accel-buffering", "no")
        .body(axum::body::Body::new(ChannelBody(rx)))
        .unwrap_or_else(|_| ApiError::Unavailable.into_response())
}

/// The settled horizon on PostgreSQL: the newest id observed at least
/// `settle` ago (see the module doc).
struct Horizon {
    settle: Duration,
    seen: VecDeque<(Instant, i64)>,
}

impl Horizon {
    fn observe(&mut self, now: Instant, newest: i64) -> Option<i64> {
        if self.settle.is_zero() {
            return Some(newest);
        }
        self.seen.push_back((now, newest));
        let mut settled = None;
        while let Some(&(t, id)) = self.seen.front() {
            if now.duration_since(t) < self.settle {
                break;
            }
            settled = Some(id);
            self.seen.pop_front();
        }
        // Keep the last settled observation for the next call.
        if let Some(id) = settled {
            self.seen.push_front((now - self.settle, id));
        }
        settled
    }
}

async fn stream(
    state: AppState,
    source: String,
    types: Vec<String>,
    mut cursor: i64,
    settle: Duration,
    tx: mpsc::Sender<Bytes>,
) {
    let console = state.store.console.clone();
    let mut horizon = Horizon {
        settle,
        seen: VecDeque::new(),
    };
    let mut last_line = Instant::now();
    let mut reported = cursor;
    // The first line tells the client where the stream starts.
    if !say(&tx, progress(cursor), &mut last_line).await {
        return;
    }
    loop {
        if state.draining.is_cancelled() || tx.is_closed() {
            return;
        }
        let mut full = false;
        let read = async {
            let newest = console.listen_horizon().await?;
            let Some(upto) = horizon.observe(Instant::now(), newest) else {
                return Ok((Vec::new(), None));
            };
            let page = console.listen_page(&source, cursor, upto, PAGE).await?;
            Ok::<_, crate::store::StoreError>((page, Some(upto)))
        };
        match read.await {
            Ok((page, upto)) => {
                full = page.len() as i64 == PAGE;
                for e in &page {
                    cursor = e.pk;
                    let wanted = types.is_empty()
                        || e.event_type.as_ref().is_some_and(|t| types.contains(t));
                    if wanted {
                        if !say(&tx, event_line(e), &mut last_line).await {
                            return;
                        }
                        reported = cursor;
                    }
                }
                // A short page: every event of the source up to the
                // settled horizon has been passed.
                if let (false, Some(upto)) = (full, upto) {
                    cursor = cursor.max(upto);
                }
            }
            Err(e) => tracing::warn!(error = %e, source, "listen: ledger unavailable; retrying"),
        }
        let idle = last_line.elapsed();
        if (cursor != reported && idle >= Duration::from_secs(1)) || idle >= HEARTBEAT {
            if !say(&tx, progress(cursor), &mut last_line).await {
                return;
            }
            reported = cursor;
        }
        if !full {
            tokio::select! {
                _ = tokio::time::sleep(POLL) => {}
                _ = state.draining.cancelled() => return,
                _ = tx.closed() => return,
            }
        }
    }
}

/// Sends one line; false once the client is gone.
async fn say(tx: &mpsc::Sender<Bytes>, line: serde_json::Value, last_line: &mut Instant) -> bool {
    let mut text = serde_json::to_vec(&line).unwrap_or_default();
    text.push(b'\n');
    *last_line = Instant::now();
    tx.send(Bytes::from(text)).await.is_ok()
}

fn progress(cursor: i64) -> serde_json::Value {
    json!({
        "kind": "progress",
        "cursor": cursor.to_string(),
        "at": Millis::now().rfc3339(),
    })
}

fn event_line(e: &StreamEvent) -> serde_json::Value {
    let headers: Vec<(String, String)> = serde_json::from_str(&e.headers).unwrap_or_default();
    json!({
        "kind": "event",
        "cursor": e.pk.to_string(),
        "event_id": e.event_id,
        "type": e.event_type,
        "received_at": e.received_at.rfc3339(),
        "headers": headers,
        "body": base64::engine::general_purpose::STANDARD.encode(&e.body),
    })
}

/// The response body: the lines the stream task sends, as they come.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl HttpBody for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_parses_now_cursors_and_durations() {
        assert_eq!(From::parse("now"), Some(From::Now));
        assert_eq!(From::parse(""), Some(From::Now));
        assert_eq!(From::parse("42"), Some(From::Cursor(42)));
        assert_eq!(
            From::parse("15m"),
            Some(From::Ago(Duration::from_secs(900)))
        );
        assert_eq!(From::parse("-3"), None);
        assert_eq!(From::parse("yesterday"), None);
    }

    #[test]
    fn postgres_passes_only_ids_settled_for_the_window() {
        let mut h = Horizon {
            settle: Duration::from_secs(2),
            seen: VecDeque::new(),
        };
        let t0 = Instant::now();
        assert_eq!(h.observe(t0, 10), None);
        assert_eq!(h.observe(t0 + Duration::from_secs(1), 15), None);
        assert_eq!(h.observe(t0 + Duration::from_secs(2), 20), Some(10));
        assert_eq!(h.observe(t0 + Duration::from_millis(2500), 20), Some(10));
        assert_eq!(h.observe(t0 + Duration::from_secs(3), 25), Some(15));
        let mut sqlite = Horizon {
            settle: Duration::ZERO,
            seen: VecDeque::new(),
        };
        assert_eq!(sqlite.observe(t0, 7), Some(7));
    }
}
