//! Load generator: N keep-alive HTTP/1.1 connections posting signed
//! Stripe-shaped events, a share of them provider retries. Prints JSON.

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::Parser;
use hookgate_bench::{quantile, stripe_event, stripe_signature, unix_now};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

#[derive(Debug, Parser)]
#[command(about = "Post signed Stripe-shaped webhooks over keep-alive connections")]
struct Args {
    /// Target URL, e.g. http://127.0.0.1:8080/webhooks/stripe (http only).
    #[arg(long)]
    url: String,
    /// Stripe endpoint secret.
    #[arg(long, default_value = "whsec_bench")]
    secret: String,
    /// Concurrent connections, one request in flight on each.
    #[arg(long, default_value_t = 64)]
    conns: usize,
    /// Stop after this many requests (0 = no count bound).
    #[arg(long, default_value_t = 0)]
    count: u64,
    /// Stop after this many seconds (0 = no time bound).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Share (0.0-1.0) of requests that re-send an earlier acked event with a
    /// new timestamp and signature (a provider retry).
    #[arg(long, default_value_t = 0.0)]
    dup_share: f64,
    /// Body size in bytes.
    #[arg(long, default_value_t = 1536)]
    body_size: usize,
    /// Prefix making this run's event ids unique.
    #[arg(long, default_value = "run")]
    id_prefix: String,
    /// Write the ids of acked unique events here, one per line.
    #[arg(long)]
    acked_ids: Option<std::path::PathBuf>,
    /// Requests per second over all connections (0 = as fast as answers
    /// come): each connection sends one request every `conns / rate` s.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
}

#[derive(Default)]
struct TaskResult {
    latencies_us: Vec<u32>,
    statuses: BTreeMap<u16, u64>,
    errors: u64,
    acked_unique: Vec<u64>,
    acked_dup: u64,
}

struct Shared {
    host: String,
    path: String,
    secret: Vec<u8>,
    prefix: String,
    created: i64,
    body_size: usize,
    dup_share: f64,
    count: u64,
    deadline: Option<Instant>,
    /// Pause between two requests of one connection (`--rate`).
    gap: Option<Duration>,
    issued: AtomicU64,
    next_id: AtomicU64,
}

fn parse_url(url: &str) -> anyhow::Result<(String, String)> {
    let Some(rest) = url.strip_prefix("http://") else {
        bail!("only http:// URLs are supported: {url}");
    };
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    Ok((host.to_string(), path.to_string()))
}

/// xorshift64*: cheap per-task randomness for the dup choice.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

async fn connect(host: &str) -> anyhow::Result<http1::SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(host)
        .await
        .with_context(|| format!("connect {host}"))?;
    stream.set_nodelay(true)?;
    let (sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

async fn worker(s: Arc<Shared>, seed: u64) -> TaskResult {
    let mut r = TaskResult::default();
    let mut rng = Rng(seed | 1);
    let mut sender: Option<http1::SendRequest<Full<Bytes>>> = None;
    let mut pace = s.gap.map(|gap| {
        // Connections start spread over one gap, not all at once.
        let offset = gap.mul_f64((seed % 1000) as f64 / 1000.0);
        let mut i = tokio::time::interval_at(tokio::time::Instant::now() + offset, gap);
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        i
    });
    loop {
        if let Some(p) = pace.as_mut() {
            p.tick().await;
        }
        if s.deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        if s.count > 0 && s.issued.fetch_add(1, Ordering::Relaxed) >= s.count {
            break;
        }
        let dup = !r.acked_unique.is_empty() && s.dup_share > 0.0 && rng.unit() < s.dup_share;
        let n = if dup {
            r.acked_unique[(rng.next() % r.acked_unique.len() as u64) as usize]
        } else {
            s.next_id.fetch_add(1, Ordering::Relaxed)
        };
        let id = format!("evt_{}_{n:010}", s.prefix);
        let body = stripe_event(&id, n, s.created, s.body_size);
        let sig = stripe_signature(&s.secret, unix_now(), &body);
        let req = hyper::Request::post(s.path.as_str())
            .header("host", s.host.as_str())
            .header("content-type", "application/json")
            .header(
                "user-agent",
                "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
            )
            .header("stripe-signature", sig)
            .body(Full::new(Bytes::from(body)))
            .expect("valid request");
        if sender.as_ref().is_none_or(|c| c.is_closed()) {
            match connect(&s.host).await {
                Ok(c) => sender = Some(c),
                Err(_) => {
                    r.errors += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            }
        }
        let c = sender.as_mut().expect("connected");
        let start = Instant::now();
        let res = match c.ready().await {
            Ok(()) => c.send_request(req).await,
            Err(e) => Err(e),
        };
        let status = match res {
            Ok(resp) => {
                let status = resp.status().as_u16();
                if resp.into_body().collect().await.is_err() {
                    r.errors += 1;
                    sender = None;
                    continue;
                }
                status
            }
            Err(_) => {
                r.errors += 1;
                sender = None;
                continue;
            }
        };
        r.latencies_us
            .push(start.elapsed().as_micros().min(u32::MAX as u128) as u32);
        *r.statuses.entry(status).or_default() += 1;
        if (200..300).contains(&status) {
            if dup {
                r.acked_dup += 1;
            } else {
                r.acked_unique.push(n);
            }
        }
    }
    r
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    if a.count == 0 && a.duration <= 0.0 {
        bail!("give --count or --duration: an unbounded run is refused");
    }
    if !(0.0..=1.0).contains(&a.dup_share) {
        bail!("--dup-share must be within 0.0..=1.0");
    }
    if a.rate < 0.0 || !a.rate.is_finite() {
        bail!("--rate must be 0 (unpaced) or a positive number of requests per second");
    }
    let (host, path) = parse_url(&a.url)?;
    // Fail early and clearly when nothing listens.
    connect(&host).await?;
    let shared = Arc::new(Shared {
        host,
        path,
        secret: a.secret.into_bytes(),
        prefix: a.id_prefix.clone(),
        created: unix_now(),
        body_size: a.body_size,
        dup_share: a.dup_share,
        count: a.count,
        deadline: (a.duration > 0.0).then(|| Instant::now() + Duration::from_secs_f64(a.duration)),
        gap: (a.rate > 0.0).then(|| Duration::from_secs_f64(a.conns.max(1) as f64 / a.rate)),
        issued: AtomicU64::new(0),
        next_id: AtomicU64::new(0),
    });
    let start = Instant::now();
    let tasks: Vec<_> = (0..a.conns.max(1))
        .map(|i| {
            let s = shared.clone();
            tokio::spawn(worker(
                s,
                0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i as u64 + 1),
            ))
        })
        .collect();
    let mut all = TaskResult::default();
    for t in tasks {
        let r = t.await?;
        all.latencies_us.extend(r.latencies_us);
        for (k, v) in r.statuses {
            *all.statuses.entry(k).or_default() += v;
        }
        all.errors += r.errors;
        all.acked_unique.extend(r.acked_unique);
        all.acked_dup += r.acked_dup;
    }
    let elapsed = start.elapsed().as_secs_f64();
    all.latencies_us.sort_unstable();
    let ok: u64 = all
        .statuses
        .iter()
        .filter(|(k, _)| (200..300).contains(*k))
        .map(|(_, v)| v)
        .sum();
    let non_2xx: serde_json::Map<String, serde_json::Value> = all
        .statuses
        .iter()
        .filter(|(k, _)| !(200..300).contains(*k))
        .map(|(k, v)| (k.to_string(), (*v).into()))
        .collect();
    let sent = all.latencies_us.len() as u64;
    if let Some(path) = &a.acked_ids {
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        for n in &all.acked_unique {
            writeln!(f, "evt_{}_{n:010}", a.id_prefix)?;
        }
        f.flush()?;
    }
    let ms = |q: f64| quantile(&all.latencies_us, q) as f64 / 1000.0;
    let out = serde_json::json!({
        "sent": sent,
        "ok": ok,
        "non_2xx": non_2xx,
        "errors": all.errors,
        "acked_unique": all.acked_unique.len(),
        "acked_dup": all.acked_dup,
        "elapsed_s": elapsed,
        "rps": ok as f64 / elapsed,
        "p50_ms": ms(0.50),
        "p99_ms": ms(0.99),
        "max_ms": all.latencies_us.last().copied().unwrap_or(0) as f64 / 1000.0,
    });
    println!("{out}");
    Ok(())
}
