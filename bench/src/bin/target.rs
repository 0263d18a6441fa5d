//! Counting delivery target: 200 to every POST, counts deliveries per
//! `Hookgate-Event-Id`. `GET /report[?acked=FILE]` returns the counts (and the
//! acked ids never delivered); `POST /reset` clears them. `POST /down` makes it
//! answer 503 to every delivery (not counted) until `POST /up`: an outage.

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use bytes::Bytes;
use clap::Parser;
use hookgate_bench::unix_millis;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

#[derive(Debug, Parser)]
#[command(about = "Counting HTTP target for hookgate deliveries")]
struct Args {
    /// Address to listen on (loopback).
    #[arg(long, default_value = "127.0.0.1:9000")]
    listen: String,
}

#[derive(Default)]
struct Counts {
    seen: HashMap<String, u32>,
    total: u64,
    no_id: u64,
    first_ms: u64,
    last_ms: u64,
    /// An outage: deliveries are answered 503 and not counted.
    down: bool,
}

type Shared = Arc<Mutex<Counts>>;

async fn deliver(State(s): State<Shared>, headers: HeaderMap, _body: Bytes) -> StatusCode {
    let now = unix_millis();
    let mut c = s.lock().expect("counts lock");
    if c.down {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    c.total += 1;
    if c.first_ms == 0 {
        c.first_ms = now;
    }
    c.last_ms = now;
    match headers
        .get("hookgate-event-id")
        .and_then(|v| v.to_str().ok())
    {
        Some(id) => {
            if let Some(n) = c.seen.get_mut(id) {
                *n += 1;
            } else {
                c.seen.insert(id.to_string(), 1);
            }
        }
        None => c.no_id += 1,
    }
    StatusCode::OK
}

async fn report(
    State(s): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<axum::Json<serde_json::Value>, (StatusCode, String)> {
    let acked: Option<Vec<String>> = match q.get("acked") {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| (StatusCode::BAD_REQUEST, format!("{path}: {e}")))?;
            Some(
                text.lines()
                    .filter(|l| !l.is_empty())
                    .map(str::to_string)
                    .collect(),
            )
        }
        None => None,
    };
    let c = s.lock().expect("counts lock");
    let duplicates = c.seen.values().filter(|&&n| n > 1).count();
    let mut out = serde_json::json!({
        "total": c.total,
        "distinct": c.seen.len(),
        "duplicates": duplicates,
        "no_id": c.no_id,
        "first_ms": c.first_ms,
        "last_ms": c.last_ms,
    });
    if let Some(acked) = acked {
        let set: HashSet<&str> = acked.iter().map(String::as_str).collect();
        let missing = acked
            .iter()
            .filter(|id| !c.seen.contains_key(id.as_str()))
            .count();
        let unexpected = c
            .seen
            .keys()
            .filter(|id| !set.contains(id.as_str()))
            .count();
        out["acked"] = set.len().into();
        out["missing"] = missing.into();
        out["unexpected"] = unexpected.into();
    }
    Ok(axum::Json(out))
}

async fn reset(State(s): State<Shared>) -> StatusCode {
    *s.lock().expect("counts lock") = Counts::default();
    StatusCode::NO_CONTENT
}

async fn down(State(s): State<Shared>) -> StatusCode {
    s.lock().expect("counts lock").down = true;
    StatusCode::NO_CONTENT
}

async fn up(State(s): State<Shared>) -> StatusCode {
    s.lock().expect("counts lock").down = false;
    StatusCode::NO_CONTENT
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let state: Shared = Arc::default();
    let app = Router::new()
        .route("/report", get(report))
        .route("/reset", post(reset))
        .route("/down", post(down))
        .route("/up", post(up))
        .route("/healthz", get(|| async { "ok" }))
        .fallback(deliver)
        .with_state(state);
    let listener = tokio::net::TcpListener::bind(&a.listen).await?;
    axum::serve(listener, app).await?;
    Ok(())
}
