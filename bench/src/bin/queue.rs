//! Queue-target helper for bench/run.sh (figure 7): creates and deletes the
//! bench's JetStream stream, waits until a stream (JetStream or Redis) holds
//! N messages, and checks what it holds against the load generator's acked
//! ids (count, distinct event ids, missing, duplicates, unknown) together
//! with the time from the first stored message to the last.
//!
//!   queue create --url nats://127.0.0.1:4222 --stream S --subject 'p.>'
//!   queue delete --url nats://127.0.0.1:4222 --stream S
//!   queue wait   --kind nats|redis --url U --stream S --n N --timeout SECS
//!   queue check  --kind nats|redis --url U --stream S [--acked FILE]
//!
//! Only the named stream is touched; every wait is bounded.

use anyhow::{Context, Result, bail};
use async_nats::jetstream::{self, consumer::pull::OrderedConfig, stream::StorageType};
use clap::{Parser, Subcommand, ValueEnum};
use futures_util::StreamExt;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
enum Kind {
    Nats,
    Redis,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a JetStream stream (memory storage, 10 min duplicate window).
    Create {
        #[arg(long)]
        url: String,
        #[arg(long)]
        stream: String,
        #[arg(long)]
        subject: String,
    },
    /// Delete a JetStream stream (absent is fine).
    Delete {
        #[arg(long)]
        url: String,
        #[arg(long)]
        stream: String,
    },
    /// Wait until the stream holds at least N messages; exit 1 after TIMEOUT.
    Wait {
        #[arg(long, value_enum)]
        kind: Kind,
        #[arg(long)]
        url: String,
        #[arg(long)]
        stream: String,
        #[arg(long)]
        n: u64,
        #[arg(long, default_value_t = 120)]
        timeout: u64,
    },
    /// Print a JSON report of what the stream holds.
    Check {
        #[arg(long, value_enum)]
        kind: Kind,
        #[arg(long)]
        url: String,
        #[arg(long)]
        stream: String,
        /// The load generator's acked ids, one per line.
        #[arg(long)]
        acked: Option<std::path::PathBuf>,
    },
}

async fn js(url: &str) -> Result<jetstream::Context> {
    let client = tokio::time::timeout(Duration::from_secs(5), async_nats::connect(url))
        .await
        .context("NATS connect timed out")?
        .with_context(|| format!("NATS not reachable at {url}"))?;
    Ok(jetstream::new(client))
}

async fn redis_conn(url: &str) -> Result<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(url)?;
    Ok(client.get_multiplexed_async_connection().await?)
}

/// Messages stored now.
async fn count(kind: Kind, url: &str, stream: &str) -> Result<u64> {
    match kind {
        Kind::Nats => {
            let mut s = js(url).await?.get_stream(stream).await?;
            Ok(s.info().await?.state.messages)
        }
        Kind::Redis => {
            let mut c = redis_conn(url).await?;
            Ok(redis::cmd("XLEN").arg(stream).query_async(&mut c).await?)
        }
    }
}

/// Every stored message's event id, and ms from the first stored to the last.
async fn contents(kind: Kind, url: &str, stream: &str) -> Result<(Vec<String>, f64)> {
    match kind {
        Kind::Nats => {
            let mut s = js(url).await?.get_stream(stream).await?;
            let state = s.info().await?.state.clone();
            let span_ms =
                (state.last_timestamp - state.first_timestamp).whole_microseconds() as f64 / 1000.0;
            let mut ids = Vec::with_capacity(state.messages as usize);
            if state.messages > 0 {
                let consumer = s
                    .create_consumer(OrderedConfig {
                        headers_only: true,
                        ..Default::default()
                    })
                    .await?;
                let mut msgs = consumer.messages().await?;
                while (ids.len() as u64) < state.messages {
                    let m = tokio::time::timeout(Duration::from_secs(10), msgs.next())
                        .await
                        .context("reading the stream timed out")?
                        .context("stream ended early")??;
                    let h = m.headers.as_ref();
                    let id = h
                        .and_then(|h| h.get("hookgate-event-id"))
                        .map(|v| v.as_str().to_owned())
                        .unwrap_or_default();
                    let msg_id = h
                        .and_then(|h| h.get("Nats-Msg-Id"))
                        .map(|v| v.as_str().to_owned())
                        .unwrap_or_default();
                    if !msg_id.ends_with(&format!(":{id}")) {
                        bail!("Nats-Msg-Id {msg_id:?} does not name event {id:?}");
                    }
                    ids.push(id);
                }
            }
            Ok((ids, span_ms))
        }
        Kind::Redis => {
            let mut c = redis_conn(url).await?;
            let mut ids = Vec::new();
            let (mut first, mut last) = (None::<u64>, 0u64);
            let mut start = "-".to_owned();
            loop {
                let page: Vec<(String, HashMap<String, Vec<u8>>)> = redis::cmd("XRANGE")
                    .arg(stream)
                    .arg(&start)
                    .arg("+")
                    .arg("COUNT")
                    .arg(1000)
                    .query_async(&mut c)
                    .await?;
                let Some((last_id, _)) = page.last() else {
                    break;
                };
                start = format!("({last_id}");
                for (entry, fields) in &page {
                    let ms: u64 = entry.split('-').next().unwrap_or("0").parse()?;
                    first.get_or_insert(ms);
                    last = ms;
                    let id = fields.get("event_id").map(|v| String::from_utf8_lossy(v));
                    ids.push(id.unwrap_or_default().into_owned());
                }
            }
            Ok((ids, last.saturating_sub(first.unwrap_or(last)) as f64))
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    match Args::parse().cmd {
        Cmd::Create {
            url,
            stream,
            subject,
        } => {
            js(&url)
                .await?
                .create_stream(jetstream::stream::Config {
                    name: stream,
                    subjects: vec![subject],
                    storage: StorageType::Memory,
                    // Longer than delivery.lease (2m): a resend is dropped.
                    duplicate_window: Duration::from_secs(600),
                    // A run killed before its cleanup leaves nothing for long.
                    max_age: Duration::from_secs(3600),
                    ..Default::default()
                })
                .await
                .context("creating the JetStream stream (is JetStream enabled?)")?;
        }
        Cmd::Delete { url, stream } => {
            let _ = js(&url).await?.delete_stream(&stream).await;
        }
        Cmd::Wait {
            kind,
            url,
            stream,
            n,
            timeout,
        } => {
            let end = Instant::now() + Duration::from_secs(timeout);
            loop {
                let got = count(kind, &url, &stream).await.unwrap_or(0);
                if got >= n {
                    println!("{got}");
                    return Ok(());
                }
                if Instant::now() >= end {
                    println!("{got}");
                    std::process::exit(1);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Cmd::Check {
            kind,
            url,
            stream,
            acked,
        } => {
            let (ids, span_ms) = contents(kind, &url, &stream).await?;
            let mut seen: HashMap<&str, u64> = HashMap::new();
            for id in &ids {
                *seen.entry(id).or_default() += 1;
            }
            let duplicates: u64 = seen.values().map(|n| n - 1).sum();
            let mut out = serde_json::json!({
                "messages": ids.len(),
                "distinct": seen.len(),
                "duplicates": duplicates,
                "span_ms": span_ms,
            });
            if let Some(path) = acked {
                let text = std::fs::read_to_string(&path)?;
                let set: HashSet<&str> = text.lines().filter(|l| !l.is_empty()).collect();
                out["acked"] = set.len().into();
                out["missing"] = set
                    .iter()
                    .filter(|id| !seen.contains_key(*id))
                    .count()
                    .into();
                out["unexpected"] = seen.keys().filter(|id| !set.contains(*id)).count().into();
            }
            println!("{out}");
        }
    }
    Ok(())
}
