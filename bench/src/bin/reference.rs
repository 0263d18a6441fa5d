//! Minimal reference receiver: verify the Stripe signature, `SET NX` the id in
//! Redis, and for a new id insert `(source, event_id)` into PostgreSQL with
//! micro-batched commits; answer 200 after the commit (or after the one Redis
//! round trip for a duplicate).

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use clap::Parser;
use hookgate_bench::{stripe_verify, unix_now};
use redis::aio::ConnectionManager;
use serde::Deserialize;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

#[derive(Debug, Parser)]
#[command(about = "Minimal durable webhook receiver for comparison")]
struct Args {
    #[arg(long, default_value = "127.0.0.1:18099")]
    listen: String,
    #[arg(long, default_value = "whsec_bench")]
    secret: String,
    #[arg(long)]
    database_url: String,
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    /// Redis keys are `<key_prefix>:<source>:<event id>`.
    #[arg(long, default_value = "hgref")]
    key_prefix: String,
    /// Most requests one commit carries.
    #[arg(long, default_value_t = 128)]
    batch: usize,
}

struct App {
    secret: Vec<u8>,
    prefix: String,
    redis: ConnectionManager,
    queue: mpsc::Sender<(String, String, oneshot::Sender<bool>)>,
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(borrow)]
    id: std::borrow::Cow<'a, str>,
}

async fn webhook(
    State(app): State<Arc<App>>,
    Path(source): Path<String>,
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
    let Ok(event) = serde_json::from_slice::<Event>(&body) else {
        return (StatusCode::BAD_REQUEST, "no event id");
    };
    let key = format!("{}:{source}:{}", app.prefix, event.id);
    let mut redis = app.redis.clone();
    let set: redis::RedisResult<Option<String>> = redis::cmd("SET")
        .arg(&key)
        .arg(1)
        .arg("NX")
        .arg("EX")
        .arg(604_800)
        .query_async(&mut redis)
        .await;
    match set {
        Ok(None) => return (StatusCode::OK, "duplicate"),
        Ok(Some(_)) => {}
        Err(_) => return (StatusCode::SERVICE_UNAVAILABLE, "redis unavailable"),
    }
    let (tx, rx) = oneshot::channel();
    let queued = app
        .queue
        .send((source, event.id.into_owned(), tx))
        .await
        .is_ok();
    if queued && rx.await.unwrap_or(false) {
        return (StatusCode::OK, "new");
    }
    // Not stored: forget the claim so the provider's retry can succeed.
    let _: redis::RedisResult<i64> = redis::cmd("DEL").arg(&key).query_async(&mut redis).await;
    (StatusCode::SERVICE_UNAVAILABLE, "storage unavailable")
}

/// Takes whatever is queued (up to `batch`), commits it in one statement,
/// then answers every request of the batch.
async fn writer(
    pool: sqlx::PgPool,
    mut rx: mpsc::Receiver<(String, String, oneshot::Sender<bool>)>,
    batch: usize,
) {
    let mut items = Vec::with_capacity(batch);
    while rx.recv_many(&mut items, batch).await > 0 {
        let (sources, ids): (Vec<&str>, Vec<&str>) = items
            .iter()
            .map(|(s, id, _)| (s.as_str(), id.as_str()))
            .unzip();
        let ok = sqlx::query(
            "INSERT INTO hgref_events (source, event_id) \
             SELECT * FROM UNNEST($1::text[], $2::text[]) ON CONFLICT DO NOTHING",
        )
        .bind(&sources)
        .bind(&ids)
        .execute(&pool)
        .await
        .is_ok();
        for (_, _, tx) in items.drain(..) {
            let _ = tx.send(ok);
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&a.database_url)
        .await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS hgref_events (\
         source TEXT NOT NULL, event_id TEXT NOT NULL, PRIMARY KEY (source, event_id))",
    )
    .execute(&pool)
    .await?;
    let redis = ConnectionManager::new(redis::Client::open(a.redis_url.as_str())?).await?;
    let (tx, rx) = mpsc::channel(a.batch * 8);
    tokio::spawn(writer(pool, rx, a.batch.max(1)));
    let app = Arc::new(App {
        secret: a.secret.into_bytes(),
        prefix: a.key_prefix,
        redis,
        queue: tx,
    });
    let router = Router::new()
        .route("/webhooks/{source}", post(webhook))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(app);
    let listener = tokio::net::TcpListener::bind(&a.listen).await?;
    axum::serve(listener, router).await?;
    Ok(())
}
