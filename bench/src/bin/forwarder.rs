//! Stateless verify-and-forward server: verify the Stripe signature, POST the
//! body to one target, answer after the target answered. No dedup, no
//! storage: the ceiling of forwarding without durability, as `reference` is
//! the ceiling of durability without forwarding. The event id goes along in
//! `Hookgate-Event-Id` so the bench target counts it like hookgate's.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use clap::Parser;
use hookgate_bench::{stripe_verify, unix_now};
use http_body_util::Full;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use std::sync::{Arc, Mutex};
use tokio::net::TcpStream;

#[derive(Debug, Parser)]
#[command(about = "Stateless verify-and-forward webhook server for comparison")]
struct Args {
    #[arg(long, default_value = "127.0.0.1:18098")]
    listen: String,
    #[arg(long, default_value = "whsec_bench")]
    secret: String,
    /// Where to POST each verified body: `http://host:port/path`.
    #[arg(long)]
    target: String,
}

struct App {
    secret: Vec<u8>,
    host: String,
    path: String,
    /// Idle keep-alive connections to the target; one request per connection.
    idle: Mutex<Vec<http1::SendRequest<Full<Bytes>>>>,
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(borrow)]
    id: std::borrow::Cow<'a, str>,
}

async fn connect(host: &str) -> anyhow::Result<http1::SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(host).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// One POST to the target over an idle connection (or a new one); the
/// connection goes back to the pool only after a complete answer.
async fn forward(app: &App, id: &str, body: Bytes) -> anyhow::Result<StatusCode> {
    let idle = app.idle.lock().expect("pool lock").pop();
    let mut sender = match idle {
        Some(s) if !s.is_closed() => s,
        _ => connect(&app.host).await?,
    };
    sender.ready().await?;
    let req = hyper::Request::post(app.path.as_str())
        .header("host", app.host.as_str())
        .header("content-type", "application/json")
        .header("hookgate-event-id", id)
        .body(Full::new(body))?;
    let resp = sender.send_request(req).await?;
    let status = resp.status();
    http_body_util::BodyExt::collect(resp.into_body()).await?;
    app.idle.lock().expect("pool lock").push(sender);
    Ok(status)
}

async fn webhook(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, &'static str) {
    let sig = headers
        .get("stripe-signature")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !stripe_verify(&app.secret, sig, &body, unix_now(), 300) {
        return (StatusCode::UNAUTHORIZED, "invalid signature");
    }
    let id = match serde_json::from_slice::<Event>(&body) {
        Ok(e) => e.id.into_owned(),
        Err(_) => return (StatusCode::BAD_REQUEST, "no event id"),
    };
    match forward(&app, &id, body).await {
        Ok(s) if s.is_success() => (StatusCode::OK, "forwarded"),
        // The provider retries on a non-2xx: the target's failure is passed on.
        Ok(_) => (StatusCode::BAD_GATEWAY, "target refused"),
        Err(_) => (StatusCode::BAD_GATEWAY, "target unreachable"),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let rest = a
        .target
        .strip_prefix("http://")
        .ok_or_else(|| anyhow::anyhow!("--target must start with http://"))?;
    let (host, path) = match rest.find('/') {
        Some(i) => (rest[..i].to_string(), rest[i..].to_string()),
        None => (rest.to_string(), "/".to_string()),
    };
    let app = Arc::new(App {
        secret: a.secret.into_bytes(),
        host,
        path,
        idle: Mutex::new(Vec::new()),
    });
    let router = Router::new()
        .route("/webhooks/{source}", post(webhook))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(app);
    let listener = tokio::net::TcpListener::bind(&a.listen).await?;
    axum::serve(listener, router).await?;
    Ok(())
}
