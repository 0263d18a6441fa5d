//! The chaos harness's Rust half (scripts/chaos.sh drives it; see
//! docs/reliability.md):
//!
//!   chaos schedule --seed N --profile short|long --secs S --replicas R
//!       prints the fault schedule, one `at_ms kind arg dur_ms` line per fault
//!   chaos target --listen ADDR --log FILE
//!       an HTTP target that logs every arrival (its own record, not
//!       hookgate's); `POST /mode/{ok|flap|slow|hang}` switches its behaviour
//!   chaos load --urls U1,U2,.. --out FILE --secs S --rate R
//!       a paced mixed load (unique events, provider retries with fresh
//!       signatures, concurrent copies to two replicas) recording every
//!       request's outcome
//!   chaos audit --dir DIR ...
//!       the independent audit: load records, target logs, the Redis stream,
//!       the JetStream stream, fault and resource samples → one verdict table
//!
//! Everything is bounded in time and talks to loopback only.

use anyhow::{Context, Result, bail};
use async_nats::jetstream::{self, consumer::pull::OrderedConfig};
use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use bytes::Bytes;
use clap::{Parser, Subcommand};
use futures_util::StreamExt;
use hookgate_bench::{stripe_signature, unix_millis, unix_now};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print the fault schedule for a seed.
    Schedule {
        #[arg(long)]
        seed: u64,
        #[arg(long, default_value = "short")]
        profile: String,
        /// Seconds of load the faults are spread over.
        #[arg(long)]
        secs: u64,
        #[arg(long, default_value_t = 3)]
        replicas: u32,
        /// Comma-separated fault kinds to leave out (e.g. unavailable tools).
        #[arg(long, default_value = "")]
        skip: String,
        /// Comma-separated fault kinds to draw from (all when empty); in the
        /// short profile, the plan itself, in this order.
        #[arg(long, default_value = "")]
        only: String,
    },
    /// Run a logging HTTP target.
    Target {
        #[arg(long)]
        listen: String,
        #[arg(long)]
        log: PathBuf,
    },
    /// Run the mixed load.
    Load {
        /// Replica base URLs, comma-separated (http://127.0.0.1:P).
        #[arg(long)]
        urls: String,
        #[arg(long)]
        out: PathBuf,
        #[arg(long)]
        secs: f64,
        /// Requests per second over all workers.
        #[arg(long, default_value_t = 40.0)]
        rate: f64,
        #[arg(long, default_value_t = 8)]
        workers: usize,
        #[arg(long)]
        secret: String,
        #[arg(long)]
        seed: u64,
        #[arg(long)]
        prefix: String,
        /// After the load, retry the unacknowledged events for this long,
        /// as a provider keeps retrying.
        #[arg(long, default_value_t = 60.0)]
        settle_secs: f64,
    },
    /// The independent audit.
    Audit(AuditArgs),
}

#[derive(Parser)]
struct AuditArgs {
    /// The run's directory (load.jsonl, faults.jsonl, samples.jsonl, t-*.jsonl).
    #[arg(long)]
    dir: PathBuf,
    /// The Redis stream target; left out (with --nats-url) to audit a
    /// finished run's saved records again, HTTP targets only.
    #[arg(long, requires = "redis_stream")]
    redis_url: Option<String>,
    #[arg(long)]
    redis_stream: Option<String>,
    #[arg(long, requires = "nats_stream")]
    nats_url: Option<String>,
    #[arg(long)]
    nats_stream: Option<String>,
    /// HTTP targets, `name` (log at DIR/t-<name>.jsonl); the ordered one is
    /// named by --ordered.
    #[arg(long, value_delimiter = ',')]
    http: Vec<String>,
    #[arg(long)]
    ordered: String,
    /// Wait up to this many seconds for every acknowledged event to arrive.
    #[arg(long, default_value_t = 0)]
    wait: u64,
    /// Longest allowed time from a kill -9 to the delivery of the last event
    /// the dead process held: its leases run out `delivery.lease` (10 s by
    /// default) after its last renewal, then another process claims them.
    #[arg(long, default_value_t = 15)]
    resume_max_s: u64,
    /// Write the verdict (markdown) here as well.
    #[arg(long)]
    verdict: Option<PathBuf>,
    /// The PostgreSQL standby is asynchronous: an event acknowledged in a
    /// `pg-failover` window (before the old primary stopped) may be lost
    /// with the commits the standby never got, and then acknowledged `new`
    /// again by a provider retry. Those are counted and reported as the
    /// expected cost of that deployment, not as failures.
    #[arg(long)]
    async_failover: bool,
}

// ---------------------------------------------------------------- schedule

/// xorshift64*: a small seeded generator, so a seed replays the same run.
struct Rng(u64);
impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

/// Fault kinds with their weight in a long run.
/// The ones after `clock-step` need a deployment the harness builds only on
/// request (a standby, a sentinel, the embedded backend): the script skips
/// them otherwise, which leaves the schedule of a seed as it was before
/// they existed.
const KINDS: [(&str, u64); 12] = [
    ("kill9", 5),
    ("rolling", 1),
    ("redis-restart", 3),
    ("target-flap", 3),
    ("target-slow", 2),
    ("target-hang", 2),
    ("pg-restart", 2),
    ("clock-step", 2),
    ("pg-failover", 2),
    ("sentinel-failover", 2),
    ("disk-full", 3),
    ("partition", 3),
];

fn schedule(
    seed: u64,
    profile: &str,
    secs: u64,
    replicas: u32,
    skip: &str,
    only: &str,
) -> Result<Vec<String>> {
    let skip: HashSet<&str> = skip.split(',').filter(|s| !s.is_empty()).collect();
    let only: Vec<&str> = only.split(',').filter(|s| !s.is_empty()).collect();
    for k in &only {
        if !KINDS.iter().any(|(n, _)| n == k) {
            bail!("unknown fault kind {k:?}");
        }
    }
    let kinds: Vec<(&str, u64)> = KINDS
        .iter()
        .copied()
        .filter(|(k, _)| !skip.contains(k) && (only.is_empty() || only.contains(k)))
        .collect();
    if kinds.is_empty() {
        bail!("no fault kind left to draw (--only / --skip)");
    }
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    let arg = |rng: &mut Rng, kind: &str| -> String {
        match kind {
            "kill9" | "clock-step" => format!("r{}", rng.range(1, replicas as u64)),
            k if k.starts_with("target-") => ["plain", "ordered"][rng.below(2) as usize].into(),
            "partition" => ["pg", "redis", "target"][rng.below(3) as usize].into(),
            _ => "-".into(),
        }
    };
    match profile {
        // A few faults, one of each main kind, spread over the load, the
        // kill early so the held deliveries' lease runs out within the drain.
        "short" => {
            // (sentinel-failover only with --redis sentinel: skipped otherwise)
            let mut plan = vec![
                "kill9",
                "target-flap",
                "redis-restart",
                "sentinel-failover",
                "pg-restart",
                "rolling",
            ];
            if !only.is_empty() {
                plan = only.clone();
            }
            let plan: Vec<&str> = plan.into_iter().filter(|k| !skip.contains(k)).collect();
            let slot = secs * 1000 / (plan.len() as u64 + 1);
            for (i, kind) in plan.iter().enumerate() {
                let at = slot / 2 + i as u64 * slot + rng.below(slot / 2);
                let dur = rng.range(3_000, 8_000);
                out.push(format!("{at} {kind} {} {dur}", arg(&mut rng, kind)));
            }
        }
        // Exponential gaps with a mean that gives ~4 faults a minute;
        // faults overlap whenever a gap is shorter than the previous one's
        // duration.
        "long" => {
            let total: u64 = kinds.iter().map(|(_, w)| w).sum();
            let mut at = 5_000.0;
            let end = secs as f64 * 1000.0 - 10_000.0;
            loop {
                at += -(1.0 - rng.unit()).ln() * 14_000.0;
                if at >= end {
                    break;
                }
                let mut pick = rng.below(total);
                let mut kind = kinds[0].0;
                for (k, w) in &kinds {
                    if pick < *w {
                        kind = k;
                        break;
                    }
                    pick -= w;
                }
                let dur = rng.range(2_000, 30_000);
                out.push(format!(
                    "{} {kind} {} {dur}",
                    at as u64,
                    arg(&mut rng, kind)
                ));
            }
        }
        other => bail!("unknown profile {other:?}: short or long"),
    }
    Ok(out)
}

// ---------------------------------------------------------------- target

const OK: u8 = 0;
const FLAP: u8 = 1;
const SLOW: u8 = 2;
const HANG: u8 = 3;

struct TargetState {
    mode: AtomicU8,
    log: Mutex<std::fs::File>,
}

#[derive(Serialize, Deserialize)]
struct Arrival {
    t: u64,
    id: String,
    attempt: u32,
    key: String,
    /// What the target did with it: `ok` (taken), `slow` (taken, answered
    /// late), `refused` (503), `hung` (never answered, not taken).
    did: String,
}

async fn arrive(State(s): State<Arc<TargetState>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let t = unix_millis();
    let mode = s.mode.load(Ordering::Relaxed);
    let did = match mode {
        FLAP if (t / 1000).is_multiple_of(2) => "refused",
        SLOW => "slow",
        HANG => "hung",
        _ => "ok",
    };
    let h = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let key = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["data"]["object"]["key"].as_str().map(str::to_owned))
        .unwrap_or_default();
    let a = Arrival {
        t,
        id: h("hookgate-event-id"),
        attempt: h("hookgate-attempt").parse().unwrap_or(0),
        key,
        did: did.into(),
    };
    {
        let mut f = s.log.lock().expect("log lock");
        let _ = writeln!(f, "{}", serde_json::to_string(&a).expect("json"));
    }
    match did {
        "refused" => StatusCode::SERVICE_UNAVAILABLE,
        // Longer than the targets' `timeout` in the harness's config.
        "slow" => {
            tokio::time::sleep(Duration::from_secs(6)).await;
            StatusCode::OK
        }
        "hung" => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StatusCode::OK
        }
        _ => StatusCode::OK,
    }
}

async fn set_mode(State(s): State<Arc<TargetState>>, UrlPath(m): UrlPath<String>) -> StatusCode {
    let v = match m.as_str() {
        "ok" => OK,
        "flap" => FLAP,
        "slow" => SLOW,
        "hang" => HANG,
        _ => return StatusCode::NOT_FOUND,
    };
    s.mode.store(v, Ordering::Relaxed);
    StatusCode::NO_CONTENT
}

async fn target(listen: &str, log: &Path) -> Result<()> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("open {}", log.display()))?;
    let state = Arc::new(TargetState {
        mode: AtomicU8::new(OK),
        log: Mutex::new(file),
    });
    let app = Router::new()
        .route("/mode/{m}", post(set_mode))
        .route("/healthz", get(|| async { "ok" }))
        .fallback(arrive)
        .with_state(state);
    let listener = tokio::net::TcpListener::bind(listen).await?;
    axum::serve(listener, app).await?;
    Ok(())
}

// ---------------------------------------------------------------- load

/// One request's outcome, as the provider saw it.
#[derive(Serialize, Deserialize, Clone)]
struct Sent {
    /// Send and answer times (ms since the epoch).
    t0: u64,
    t1: u64,
    id: String,
    key: String,
    /// `unique` (first send), `retry` (a provider retry, fresh signature),
    /// `copy` (one of two concurrent copies).
    kind: String,
    replica: usize,
    /// HTTP status, 0 when no answer came.
    status: u16,
    /// `Hookgate-Dedup`: `new`, `duplicate` or empty.
    dedup: String,
    /// The answer carried `Retry-After`.
    #[serde(default)]
    retry_after: bool,
}

fn event_body(id: &str, key: &str, seq: u64, created: i64) -> Vec<u8> {
    format!(
        concat!(
            r#"{{"id":"{id}","object":"event","created":{created},"type":"invoice.paid","#,
            r#""livemode":false,"data":{{"object":{{"id":"in_{id}","key":"{key}","seq":{seq}}}}}}}"#
        ),
        id = id,
        created = created,
        key = key,
        seq = seq
    )
    .into_bytes()
}

struct LoadShared {
    hosts: Vec<String>,
    secret: Vec<u8>,
    prefix: String,
    created: i64,
    next: AtomicU64,
    out: Mutex<std::io::BufWriter<std::fs::File>>,
}

async fn post_once(s: &LoadShared, replica: usize, id: &str, body: &[u8]) -> (u16, String, bool) {
    let host = &s.hosts[replica];
    let attempt = async {
        let stream = TcpStream::connect(host).await?;
        let (mut sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let sig = stripe_signature(&s.secret, unix_now(), body);
        let req = hyper::Request::post("/webhooks/stripe")
            .header("host", host.as_str())
            .header("content-type", "application/json")
            .header("stripe-signature", sig)
            .body(Full::new(Bytes::copy_from_slice(body)))?;
        let resp = sender.send_request(req).await?;
        let status = resp.status().as_u16();
        let dedup = resp
            .headers()
            .get("hookgate-dedup")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let retry_after = resp.headers().contains_key("retry-after");
        resp.into_body().collect().await?;
        anyhow::Ok((status, dedup, retry_after))
    };
    let _ = id;
    match tokio::time::timeout(Duration::from_secs(10), attempt).await {
        Ok(Ok(r)) => r,
        _ => (0, String::new(), false),
    }
}

fn record(s: &LoadShared, r: &Sent) {
    let mut f = s.out.lock().expect("out lock");
    let _ = writeln!(f, "{}", serde_json::to_string(r).expect("json"));
}

struct Pending {
    id: String,
    key: String,
    seq: u64,
}

async fn send(s: &LoadShared, p: &Pending, kind: &str, replica: usize) -> bool {
    let body = event_body(&p.id, &p.key, p.seq, s.created);
    let t0 = unix_millis();
    let (status, dedup, retry_after) = post_once(s, replica, &p.id, &body).await;
    record(
        s,
        &Sent {
            t0,
            t1: unix_millis(),
            id: p.id.clone(),
            key: p.key.clone(),
            kind: kind.into(),
            replica,
            status,
            dedup,
            retry_after,
        },
    );
    (200..300).contains(&status)
}

/// One worker: owns its ordering keys, so two events of one key are never in
/// flight at once and "received order" is well defined.
async fn load_worker(
    s: Arc<LoadShared>,
    w: usize,
    seed: u64,
    gap: Duration,
    end: Instant,
    settle: Instant,
) {
    let mut rng = Rng::new(seed);
    let mut seqs = [0u64; 4];
    let mut unacked: Vec<Pending> = Vec::new();
    let mut acked: Vec<Pending> = Vec::new();
    let n_rep = s.hosts.len();
    let mut tick = tokio::time::interval(gap);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = Instant::now();
        if now >= settle || (now >= end && unacked.is_empty()) {
            break;
        }
        let replica = rng.below(n_rep as u64) as usize;
        // A provider retries what was not acknowledged, with a new signature.
        if !unacked.is_empty() && (now >= end || rng.unit() < 0.5) {
            let p = unacked.remove(0);
            if send(&s, &p, "retry", replica).await {
                acked.push(p);
            } else {
                unacked.push(p);
            }
            continue;
        }
        if now >= end {
            continue;
        }
        let roll = rng.unit();
        if roll < 0.12 && !acked.is_empty() {
            // A provider retry of an acknowledged event.
            let i = rng.below(acked.len() as u64) as usize;
            let p = Pending {
                id: acked[i].id.clone(),
                key: acked[i].key.clone(),
                seq: acked[i].seq,
            };
            send(&s, &p, "retry", replica).await;
            continue;
        }
        let n = s.next.fetch_add(1, Ordering::Relaxed);
        let k = (n % 4) as usize;
        seqs[k] += 1;
        let p = Pending {
            id: format!("evt_{}_{n:09}", s.prefix),
            key: format!("k{w}_{k}"),
            seq: seqs[k],
        };
        let ok = if roll < 0.22 && n_rep > 1 {
            // Two concurrent copies to two replicas.
            let other = (replica + 1 + rng.below(n_rep as u64 - 1) as usize) % n_rep;
            let (a, b) = tokio::join!(send(&s, &p, "copy", replica), send(&s, &p, "copy", other));
            a || b
        } else {
            send(&s, &p, "unique", replica).await
        };
        if ok {
            acked.push(p);
        } else {
            unacked.push(p);
        }
    }
}

async fn load(a: LoadArgs) -> Result<()> {
    let hosts: Vec<String> = a
        .urls
        .split(',')
        .map(|u| {
            u.strip_prefix("http://")
                .map(|h| h.trim_end_matches('/').to_owned())
                .with_context(|| format!("only http:// replica URLs: {u}"))
        })
        .collect::<Result<_>>()?;
    if a.rate <= 0.0 || a.secs <= 0.0 {
        bail!("--rate and --secs must be positive: an unbounded load is refused");
    }
    let out = std::io::BufWriter::new(std::fs::File::create(&a.out)?);
    let s = Arc::new(LoadShared {
        hosts,
        secret: a.secret.into_bytes(),
        prefix: a.prefix,
        created: unix_now(),
        next: AtomicU64::new(0),
        out: Mutex::new(out),
    });
    let gap = Duration::from_secs_f64(a.workers as f64 / a.rate);
    let end = Instant::now() + Duration::from_secs_f64(a.secs);
    let settle = end + Duration::from_secs_f64(a.settle_secs);
    let mut seeds = Rng::new(a.seed);
    let tasks: Vec<_> = (0..a.workers)
        .map(|w| tokio::spawn(load_worker(s.clone(), w, seeds.next(), gap, end, settle)))
        .collect();
    for t in tasks {
        t.await?;
    }
    s.out.lock().expect("out lock").flush()?;
    Ok(())
}

struct LoadArgs {
    urls: String,
    out: PathBuf,
    secs: f64,
    rate: f64,
    workers: usize,
    secret: String,
    seed: u64,
    prefix: String,
    settle_secs: f64,
}

// ---------------------------------------------------------------- audit

#[derive(Deserialize, Clone)]
struct Fault {
    kind: String,
    #[serde(default)]
    arg: String,
    start: u64,
    end: u64,
}

#[derive(Deserialize)]
struct Sample {
    t: u64,
    what: String,
    #[serde(default)]
    pid: u64,
    #[serde(default)]
    rss_kb: u64,
    #[serde(default)]
    fds: u64,
    #[serde(default)]
    conns: u64,
}

fn read_jsonl<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>> {
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| path.display().to_string()),
    };
    let mut out = Vec::new();
    for line in std::io::BufReader::new(f).lines() {
        let line = line?;
        // A line cut by a killed writer is skipped.
        if let Ok(v) = serde_json::from_str(&line) {
            out.push(v);
        }
    }
    Ok(out)
}

/// Arrivals at a queue target: (event id, stored time ms).
async fn redis_arrivals(url: &str, stream: &str) -> Result<Vec<(String, u64)>> {
    let client = redis::Client::open(url)?;
    let mut c = client.get_multiplexed_async_connection().await?;
    // The crate's default response timeout is too short for a page of
    // entries on a loaded machine (the long run's audit failed on it).
    c.set_response_timeout(Duration::from_secs(30));
    let mut out = Vec::new();
    let mut start = "-".to_owned();
    loop {
        let page: Vec<(String, HashMap<String, Vec<u8>>)> = redis::cmd("XRANGE")
            .arg(stream)
            .arg(&start)
            .arg("+")
            .arg("COUNT")
            .arg(500)
            .query_async(&mut c)
            .await?;
        let Some((last, _)) = page.last() else { break };
        start = format!("({last}");
        for (entry, fields) in &page {
            let ms: u64 = entry.split('-').next().unwrap_or("0").parse()?;
            let id = fields
                .get("event_id")
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default();
            out.push((id, ms));
        }
    }
    Ok(out)
}

async fn nats_arrivals(url: &str, stream: &str) -> Result<Vec<(String, u64)>> {
    let client = tokio::time::timeout(Duration::from_secs(5), async_nats::connect(url))
        .await
        .context("NATS connect timed out")??;
    let js = jetstream::new(client);
    let mut s = js.get_stream(stream).await?;
    let n = s.info().await?.state.messages;
    let mut out = Vec::with_capacity(n as usize);
    if n == 0 {
        return Ok(out);
    }
    let consumer = s
        .create_consumer(OrderedConfig {
            headers_only: true,
            ..Default::default()
        })
        .await?;
    let mut msgs = consumer.messages().await?;
    while (out.len() as u64) < n {
        let m = tokio::time::timeout(Duration::from_secs(10), msgs.next())
            .await
            .context("reading the JetStream stream timed out")?
            .context("stream ended early")??;
        let id = m
            .headers
            .as_ref()
            .and_then(|h| h.get("hookgate-event-id"))
            .map(|v| v.as_str().to_owned())
            .unwrap_or_default();
        let t = m
            .info()
            .map(|i| (i.published.unix_timestamp_nanos() / 1_000_000) as u64)
            .unwrap_or(0);
        out.push((id, t));
    }
    Ok(out)
}

fn quantile_ms(v: &mut [u64], q: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[(((v.len() - 1) as f64) * q).round() as usize]
}

/// Fault kinds during which a target may see an event twice: the sender
/// died (or lost its database, or could not write to it: a full disk)
/// between the target's answer and the attempt's record, or the target took
/// it but answered too late. Not a clock step: replicas keep the ledger's
/// clock, so a stepped wall clock must not make one take another's row.
fn explains_duplicate(kind: &str) -> bool {
    matches!(
        kind,
        "kill9"
            | "rolling"
            | "pg-restart"
            | "pg-failover"
            | "disk-full"
            | "target-slow"
            | "target-hang"
            | "partition"
    )
}

struct Row {
    check: String,
    result: String,
    ok: bool,
}

async fn audit(a: &AuditArgs) -> Result<bool> {
    let started = Instant::now();
    loop {
        // A read that fails (a stream server slow to answer) is tried
        // again until the wait is over.
        let (rows, missing) = match audit_once(a).await {
            Ok(r) => r,
            Err(e) if started.elapsed().as_secs() < a.wait => {
                eprintln!("audit: {e:#}; trying again");
                tokio::time::sleep(Duration::from_secs(5)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let done = missing == 0 || started.elapsed().as_secs() >= a.wait;
        if done {
            let mut table = String::from("| check | result | verdict |\n|---|---|---|\n");
            let mut all_ok = true;
            for r in &rows {
                all_ok &= r.ok;
                table += &format!(
                    "| {} | {} | {} |\n",
                    r.check,
                    r.result,
                    if r.ok { "PASS" } else { "**FAIL**" }
                );
            }
            table += &format!(
                "| **overall** | | {} |\n",
                if all_ok { "PASS" } else { "**FAIL**" }
            );
            println!("{table}");
            if let Some(p) = &a.verdict {
                std::fs::write(p, &table)?;
            }
            return Ok(all_ok);
        }
        eprintln!("audit: {missing} acknowledged deliveries not arrived yet; waiting");
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

async fn audit_once(a: &AuditArgs) -> Result<(Vec<Row>, usize)> {
    let sent: Vec<Sent> = read_jsonl(&a.dir.join("load.jsonl"))?;
    let faults: Vec<Fault> = read_jsonl(&a.dir.join("faults.jsonl"))?;
    let samples: Vec<Sample> = read_jsonl(&a.dir.join("samples.jsonl"))?;
    let mut rows = Vec::new();
    // Acknowledgements an asynchronous failover may lose: made from the
    // fault's start (the standby stops receiving WAL) to its end.
    let in_async_failover = |t: u64| {
        a.async_failover
            && faults
                .iter()
                .any(|f| f.kind == "pg-failover" && t + 1_000 >= f.start && t <= f.end)
    };
    let in_fault = |t: u64, pre: u64, post: u64| {
        faults
            .iter()
            .any(|f| t + pre >= f.start && t <= f.end + post)
    };

    // Acknowledgements.
    let mut acked: BTreeMap<&str, &Sent> = BTreeMap::new(); // first ack
    let mut new_acks: HashMap<&str, Vec<&Sent>> = HashMap::new();
    let (mut lat_out, mut lat_in) = (Vec::new(), Vec::new());
    let mut statuses: BTreeMap<u16, u64> = BTreeMap::new();
    for s in &sent {
        *statuses.entry(s.status).or_default() += 1;
        if (200..300).contains(&s.status) {
            acked.entry(&s.id).or_insert(s);
            if s.dedup == "new" {
                new_acks.entry(&s.id).or_default().push(s);
            }
            let l = s.t1 - s.t0;
            if in_fault(s.t0, 1_000, 5_000) {
                lat_in.push(l);
            } else {
                lat_out.push(l);
            }
        }
    }
    let (twice, twice_async): (Vec<&&str>, Vec<&&str>) = new_acks
        .iter()
        .filter(|(_, v)| v.len() > 1)
        .map(|(k, _)| k)
        .partition(|k| !in_async_failover(new_acks[**k][0].t1));
    let kinds = sent.iter().fold(BTreeMap::<&str, u64>::new(), |mut m, s| {
        *m.entry(s.kind.as_str()).or_default() += 1;
        m
    });
    rows.push(Row {
        check: "requests sent (by kind; by status, 0 = no answer)".into(),
        result: format!("{} {kinds:?}; {statuses:?}", sent.len()),
        ok: !sent.is_empty(),
    });
    rows.push(Row {
        check: "events acknowledged".into(),
        result: acked.len().to_string(),
        ok: !acked.is_empty(),
    });
    rows.push(Row {
        check: "acknowledged `new` twice".into(),
        result: format!(
            "{}{}",
            twice.len(),
            twice
                .first()
                .map(|id| format!(" (e.g. {id})"))
                .unwrap_or_default()
        ),
        ok: twice.is_empty(),
    });
    if a.async_failover {
        rows.push(Row {
            check:
                "acknowledged `new` twice after an asynchronous failover lost the first (expected)"
                    .into(),
            result: twice_async.len().to_string(),
            ok: true,
        });
    }
    // A partition cuts replica r1 (the load's replica 0) off from one
    // dependency: what it answered meanwhile. A refusal must say when to
    // come back; a 2xx for an event it could not store would show as lost
    // below.
    let parts: Vec<&Fault> = faults.iter().filter(|f| f.kind == "partition").collect();
    if !parts.is_empty() {
        let mut by_status: BTreeMap<u16, u64> = BTreeMap::new();
        let mut no_retry_after = 0;
        for s in &sent {
            if s.replica == 0 && parts.iter().any(|f| s.t0 >= f.start && s.t0 <= f.end) {
                *by_status.entry(s.status).or_default() += 1;
                if s.status == 503 && !s.retry_after {
                    no_retry_after += 1;
                }
            }
        }
        rows.push(Row {
            check: "partitioned replica's answers during partitions (by status; 503 without Retry-After)"
                .into(),
            result: format!("{by_status:?}; {no_retry_after}"),
            ok: no_retry_after == 0,
        });
    }
    let mut fault_kinds: BTreeMap<&str, u64> = BTreeMap::new();
    for f in &faults {
        *fault_kinds.entry(&f.kind).or_default() += 1;
    }
    rows.push(Row {
        check: "faults by kind".into(),
        result: format!("{} {fault_kinds:?}", faults.len()),
        ok: true,
    });

    // Arrivals per target: (id → arrival times of takes), file order.
    let mut targets: Vec<(String, Vec<(String, u64)>)> = Vec::new();
    let mut ordered_log: Vec<Arrival> = Vec::new();
    for name in &a.http {
        let log: Vec<Arrival> = read_jsonl(&a.dir.join(format!("t-{name}.jsonl")))?;
        let takes = log
            .iter()
            .filter(|x| x.did == "ok" || x.did == "slow")
            .map(|x| (x.id.clone(), x.t))
            .collect();
        targets.push((format!("http:{name}"), takes));
        if *name == a.ordered {
            ordered_log = log;
        }
    }
    if let (Some(url), Some(stream)) = (&a.redis_url, &a.redis_stream) {
        targets.push((
            "redis-stream".into(),
            redis_arrivals(url, stream)
                .await
                .context("reading the Redis stream")?,
        ));
    }
    if let (Some(url), Some(stream)) = (&a.nats_url, &a.nats_stream) {
        targets.push((
            "nats".into(),
            nats_arrivals(url, stream)
                .await
                .context("reading the JetStream stream")?,
        ));
    }

    let mut missing_total = 0;
    let mut first_arrival: Vec<HashMap<&str, u64>> = Vec::new();
    for (name, arr) in &targets {
        let mut seen: HashMap<&str, Vec<u64>> = HashMap::new();
        for (id, t) in arr {
            seen.entry(id.as_str()).or_default().push(*t);
        }
        let (missing, lost_async): (Vec<&&str>, Vec<&&str>) = acked
            .iter()
            .filter(|(id, _)| !seen.contains_key(**id))
            .map(|(id, _)| id)
            .partition(|id| !in_async_failover(acked[**id].t1));
        missing_total += missing.len();
        if a.async_failover {
            rows.push(Row {
                check: format!(
                    "{name}: acknowledged, lost in an asynchronous failover (expected for that deployment)"
                ),
                result: format!(
                    "{}{}",
                    lost_async.len(),
                    lost_async
                        .first()
                        .map(|id| format!(" (e.g. {id})"))
                        .unwrap_or_default()
                ),
                ok: true,
            });
        }
        rows.push(Row {
            check: format!("{name}: acknowledged events that never arrived (lost)"),
            result: format!(
                "{} of {}{}",
                missing.len(),
                acked.len(),
                missing
                    .first()
                    .map(|id| format!(" (e.g. {id})"))
                    .unwrap_or_default()
            ),
            ok: missing.is_empty(),
        });
        let known: HashSet<&str> = sent.iter().map(|s| s.id.as_str()).collect();
        let unknown = seen.keys().filter(|id| !known.contains(**id)).count();
        let unacked = seen
            .keys()
            .filter(|id| known.contains(**id) && !acked.contains_key(**id))
            .count();
        rows.push(Row {
            check: format!("{name}: arrivals never sent / sent but never acknowledged"),
            result: format!("{unknown} / {unacked} (the latter: stored, answer lost)"),
            ok: unknown == 0,
        });
        // Duplicates: each must fall in a window of a fault that explains it.
        let mut dups = 0;
        let mut unexplained = Vec::new();
        let mut by_kind: BTreeMap<String, u64> = BTreeMap::new();
        for (id, ts) in &seen {
            if ts.len() < 2 {
                continue;
            }
            dups += ts.len() - 1;
            let (first, last) = (ts[0], *ts.last().unwrap_or(&ts[0]));
            // The window: from the first take to the resend, with a lease's
            // worth of slack before (the record may be lost just after).
            let cause = faults
                .iter()
                .find(|f| explains_duplicate(&f.kind) && f.start <= last && f.end + 5_000 >= first);
            match cause {
                Some(f) => *by_kind.entry(f.kind.clone()).or_default() += 1,
                None => unexplained.push(*id),
            }
        }
        rows.push(Row {
            check: format!("{name}: duplicate arrivals (explained by)"),
            result: format!(
                "{dups} {by_kind:?}; unexplained {}{}",
                unexplained.len(),
                unexplained
                    .first()
                    .map(|id| format!(" (e.g. {id})"))
                    .unwrap_or_default()
            ),
            ok: unexplained.is_empty(),
        });
        first_arrival.push(seen.iter().map(|(k, v)| (*k, v[0])).collect());
    }

    // Per-key order on the ordered target: events whose `new` answer came
    // before the next event of the key was sent must first arrive in order.
    {
        let mut first_pos: HashMap<&str, usize> = HashMap::new();
        for (i, x) in ordered_log.iter().enumerate() {
            if x.did == "ok" || x.did == "slow" || x.did == "refused" || x.did == "hung" {
                first_pos.entry(x.id.as_str()).or_insert(i);
            }
        }
        let mut by_key: HashMap<&str, Vec<&Sent>> = HashMap::new();
        for (_, v) in new_acks.iter() {
            by_key.entry(v[0].key.as_str()).or_default().push(v[0]);
        }
        let mut pairs = 0u64;
        let mut bad = Vec::new();
        for v in by_key.values_mut() {
            v.sort_by_key(|s| s.t1);
            for w in v.windows(2) {
                let (x, y) = (w[0], w[1]);
                if x.t1 > y.t0 {
                    continue;
                }
                if let (Some(px), Some(py)) =
                    (first_pos.get(x.id.as_str()), first_pos.get(y.id.as_str()))
                {
                    pairs += 1;
                    if px > py {
                        bad.push(format!("{} after {}", x.id, y.id));
                    }
                }
            }
        }
        rows.push(Row {
            check: format!("http:{}: per-key order (pairs checked)", a.ordered),
            result: format!(
                "{} out of order of {pairs}{}",
                bad.len(),
                bad.first()
                    .map(|b| format!(" (e.g. {b})"))
                    .unwrap_or_default()
            ),
            ok: bad.is_empty() && pairs > 0,
        });
    }

    // Crash to resume: for each kill -9 at T, see `crash_resume`.
    let kills: Vec<&Fault> = faults.iter().filter(|f| f.kind == "kill9").collect();
    let kill_at: Vec<Kill> = kills
        .iter()
        .map(|f| Kill {
            at: f.start,
            replica: replica_index(&f.arg),
        })
        .collect();
    let acks: Vec<Ack> = new_acks
        .values()
        .map(|v| Ack {
            t1: v[0].t1,
            id: v[0].id.as_str(),
            replica: v[0].replica,
        })
        .collect();
    for (i, f) in kills.iter().enumerate() {
        let (worst, late) = crash_resume(i, &kill_at, &acks, &first_arrival);
        let overlapping: Vec<&str> = faults
            .iter()
            .filter(|g| {
                // A target that refuses, or a ledger that cannot commit
                // (another replica takes a lease with a write), delays the
                // resume for reasons of its own.
                (g.kind.starts_with("target-") || g.kind == "pg-restart" || g.kind == "pg-failover")
                    && g.start <= f.start + worst
                    && g.end >= f.start
            })
            .map(|g| g.kind.as_str())
            .collect();
        rows.push(Row {
            check: format!(
                "kill -9 of {} at +{} s: crash to resume",
                f.arg,
                f.start.saturating_sub(first_t(&sent)) / 1000
            ),
            result: format!(
                "{:.1} s; {late} deliveries more than 10 s late (limit {} s){}",
                worst as f64 / 1000.0,
                a.resume_max_s,
                if overlapping.is_empty() {
                    String::new()
                } else {
                    format!("; overlapping {overlapping:?}")
                }
            ),
            ok: worst <= a.resume_max_s * 1000 || !overlapping.is_empty(),
        });
    }

    // Ack latency outside / inside fault windows.
    let (n_out, n_in) = (lat_out.len(), lat_in.len());
    rows.push(Row {
        check: "ack latency outside faults p50 / p99 / max (ms)".into(),
        result: format!(
            "{} / {} / {} (n={n_out})",
            quantile_ms(&mut lat_out, 0.5),
            quantile_ms(&mut lat_out, 0.99),
            quantile_ms(&mut lat_out, 1.0)
        ),
        ok: true,
    });
    rows.push(Row {
        check: "ack latency in faults p50 / p99 / max (ms)".into(),
        result: format!(
            "{} / {} / {} (n={n_in})",
            quantile_ms(&mut lat_in, 0.5),
            quantile_ms(&mut lat_in, 0.99),
            quantile_ms(&mut lat_in, 1.0)
        ),
        ok: true,
    });

    // Resources: per replica process, the second quarter of its life
    // against the last; database connections over the whole run.
    let mut by_pid: BTreeMap<(String, u64), Vec<&Sample>> = BTreeMap::new();
    let mut conns = Vec::new();
    for s in &samples {
        if s.what == "db" {
            conns.push((s.t, s.conns));
        } else {
            by_pid.entry((s.what.clone(), s.pid)).or_default().push(s);
        }
    }
    let mut growth = Vec::new();
    let mut bad = Vec::new();
    let (mut rss_max, mut fds_max) = (0u64, 0u64);
    for ((what, pid), v) in &by_pid {
        rss_max = rss_max.max(v.iter().map(|s| s.rss_kb).max().unwrap_or(0));
        fds_max = fds_max.max(v.iter().map(|s| s.fds).max().unwrap_or(0));
        if v.len() < 12 {
            continue;
        }
        let q = v.len() / 4;
        let med = |xs: &[&Sample], f: fn(&Sample) -> u64| {
            let mut m: Vec<u64> = xs.iter().map(|s| f(s)).collect();
            quantile_ms(&mut m, 0.5)
        };
        let (r0, r1) = (
            med(&v[q..2 * q], |s| s.rss_kb),
            med(&v[3 * q..], |s| s.rss_kb),
        );
        let (f0, f1) = (med(&v[q..2 * q], |s| s.fds), med(&v[3 * q..], |s| s.fds));
        growth.push(format!(
            "{what}/{pid}: rss {}→{} MB, fds {f0}→{f1}",
            r0 / 1024,
            r1 / 1024
        ));
        if r1 > r0 + r0 / 2 + 32 * 1024 || f1 > f0 * 2 + 32 {
            bad.push(format!("{what}/{pid}"));
        }
    }
    rows.push(Row {
        check: "RSS and fds per replica process (2nd quarter → last quarter of its life)".into(),
        result: format!(
            "{}; max RSS {} MB, max fds {fds_max}{}",
            if growth.is_empty() {
                "no process lived 12 samples".into()
            } else {
                growth.join("; ")
            },
            rss_max / 1024,
            if bad.is_empty() {
                String::new()
            } else {
                format!("; growing: {bad:?}")
            }
        ),
        ok: bad.is_empty(),
    });
    {
        let n = conns.len();
        let third = n / 3;
        let mut early: Vec<u64> = conns[..third].iter().map(|c| c.1).collect();
        let mut late: Vec<u64> = conns[n - third..].iter().map(|c| c.1).collect();
        let max = conns.iter().map(|c| c.1).max().unwrap_or(0);
        let (e, l) = (quantile_ms(&mut early, 0.5), quantile_ms(&mut late, 0.5));
        rows.push(Row {
            check: "database connections (median first third → last third, max)".into(),
            result: format!("{e} → {l}, max {max} (n={n})"),
            ok: n < 6 || l <= e * 2 + 8,
        });
    }
    Ok((rows, missing_total))
}

/// A `kill -9`: when, and which replica (the load's index).
struct Kill {
    at: u64,
    replica: Option<usize>,
}

/// An event's first `new` acknowledgement: answer time, id, replica.
struct Ack<'a> {
    t1: u64,
    id: &'a str,
    replica: usize,
}

/// `r3` → the load's replica 2.
fn replica_index(arg: &str) -> Option<usize> {
    arg.strip_prefix('r')?.parse::<usize>().ok()?.checked_sub(1)
}

/// How long after the kill `kills[k]` the deliveries it held up resumed.
///
/// An arrival at a target was held up by a crash when it came after the
/// kill and either its event was acknowledged before the kill (a lease of
/// the dead process) or it waited more than 2 s from its acknowledgement
/// (an ordered key queued behind a held head). Events acknowledged after
/// the kill and delivered at once are not counted: the load goes on, so
/// counting them would measure the window, not the crash.
///
/// When kills fall close together, each held-up arrival is counted against
/// one kill only: the first kill of the replica that acknowledged it, after
/// that acknowledgement and before the arrival (its hand-off lane leased the
/// row at insert); otherwise (acknowledged by a replica that survived, so
/// any process's claim may have held it) the latest kill before the
/// arrival, at most 30 s from the acknowledgement. Returns (ms from the
/// kill to the latest such arrival, those of them that arrived more than
/// 10 s after their acknowledgement).
fn crash_resume(
    k: usize,
    kills: &[Kill],
    acks: &[Ack],
    arrivals: &[HashMap<&str, u64>],
) -> (u64, u64) {
    let kill = kills[k].at;
    let (mut worst, mut late) = (0u64, 0u64);
    for a in acks {
        if a.t1 + 30_000 < kill || a.t1 > kill + 30_000 {
            continue;
        }
        for fa in arrivals {
            let Some(&t) = fa.get(a.id) else { continue };
            let held = t > kill && (a.t1 <= kill || t > a.t1 + 2_000);
            if !held || blamed_kill(kills, a, t) != Some(k) {
                continue;
            }
            worst = worst.max(t - kill);
            if t > a.t1 + 10_000 {
                late += 1;
            }
        }
    }
    (worst, late)
}

/// Which kill held up `a`'s arrival at `t` (see [`crash_resume`]).
fn blamed_kill(kills: &[Kill], a: &Ack, t: u64) -> Option<usize> {
    let own = kills
        .iter()
        .enumerate()
        .filter(|(_, x)| x.replica == Some(a.replica) && x.at >= a.t1 && x.at < t)
        .min_by_key(|(_, x)| x.at);
    if let Some((i, _)) = own {
        return Some(i);
    }
    kills
        .iter()
        .enumerate()
        .filter(|(_, x)| x.at < t && x.at + 30_000 >= a.t1)
        .max_by_key(|(_, x)| x.at)
        .map(|(i, _)| i)
}

fn first_t(sent: &[Sent]) -> u64 {
    sent.iter().map(|s| s.t0).min().unwrap_or(0)
}

#[tokio::main]
async fn main() -> Result<()> {
    match Args::parse().cmd {
        Cmd::Schedule {
            seed,
            profile,
            secs,
            replicas,
            skip,
            only,
        } => {
            for line in schedule(seed, &profile, secs, replicas, &skip, &only)? {
                println!("{line}");
            }
        }
        Cmd::Target { listen, log } => target(&listen, &log).await?,
        Cmd::Load {
            urls,
            out,
            secs,
            rate,
            workers,
            secret,
            seed,
            prefix,
            settle_secs,
        } => {
            load(LoadArgs {
                urls,
                out,
                secs,
                rate,
                workers,
                secret,
                seed,
                prefix,
                settle_secs,
            })
            .await?
        }
        Cmd::Audit(a) => {
            if !audit(&a).await? {
                eprintln!("chaos audit: FAILED (table above)");
                std::process::exit(1);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_the_same_schedule() {
        let a = schedule(7, "long", 1800, 3, "", "").unwrap();
        assert_eq!(a, schedule(7, "long", 1800, 3, "", "").unwrap());
        assert_ne!(a, schedule(8, "long", 1800, 3, "", "").unwrap());
        assert!(a.len() >= 100, "{} faults in 30 min", a.len());
    }

    #[test]
    fn skipped_kinds_are_left_out() {
        let a = schedule(7, "long", 1800, 3, "clock-step,pg-restart", "").unwrap();
        assert!(
            a.iter()
                .all(|l| !l.contains("clock-step") && !l.contains("pg-restart"))
        );
        assert_eq!(schedule(1, "short", 120, 2, "", "").unwrap().len(), 6);
        assert_eq!(
            schedule(1, "short", 120, 2, "sentinel-failover", "")
                .unwrap()
                .len(),
            5
        );
    }

    fn ack(t1: u64, id: &str, replica: usize) -> Ack<'_> {
        Ack { t1, id, replica }
    }

    fn kill(at: u64, replica: usize) -> Kill {
        Kill {
            at,
            replica: Some(replica),
        }
    }

    #[test]
    fn crash_resume_counts_held_deliveries_not_the_load_after_the_kill() {
        let at = 100_000;
        let kills = [kill(at, 0)];
        // Acknowledged after the kill and delivered at once: not held up.
        let acks = [ack(at + 29_000, "after", 1), ack(at - 1_000, "held", 0)];
        let arrivals = vec![HashMap::from([
            ("after", at + 29_100),
            ("held", at + 11_000),
        ])];
        assert_eq!(crash_resume(0, &kills, &acks, &arrivals), (11_000, 1));
        // One acknowledged after the kill that waited (queued behind a held
        // key) counts.
        let acks = [ack(at + 1_000, "queued", 1)];
        let arrivals = vec![HashMap::from([("queued", at + 12_000)])];
        assert_eq!(crash_resume(0, &kills, &acks, &arrivals), (12_000, 1));
        // Delivered before the kill: nothing to resume.
        let acks = [ack(at - 5_000, "done", 0)];
        let arrivals = vec![HashMap::from([("done", at - 4_900)])];
        assert_eq!(crash_resume(0, &kills, &acks, &arrivals), (0, 0));
    }

    #[test]
    fn kills_close_together_each_count_what_their_own_replica_held() {
        // r3 killed at +100 s, r1 at +104 s.
        let kills = [kill(100_000, 2), kill(104_000, 0)];
        let acks = [
            ack(99_900, "r3-held", 2),
            ack(103_000, "r1-held", 0),
            ack(99_000, "r2-acked", 1),
        ];
        let arrivals = vec![HashMap::from([
            ("r3-held", 109_000),
            ("r1-held", 117_700),
            ("r2-acked", 115_000),
        ])];
        // r1's lease ran out 13.7 s after its own kill: not r3's 17.7 s.
        assert_eq!(crash_resume(0, &kills, &acks, &arrivals), (9_000, 0));
        // An event a survivor acknowledged goes to the latest kill before
        // its arrival.
        assert_eq!(crash_resume(1, &kills, &acks, &arrivals), (13_700, 2));
        assert_eq!(replica_index("r3"), Some(2));
        assert_eq!(replica_index("r0"), None);
    }

    #[test]
    fn only_draws_the_named_kinds_and_names_unknown_ones() {
        let a = schedule(7, "long", 600, 3, "", "pg-failover,kill9").unwrap();
        assert!(!a.is_empty());
        assert!(
            a.iter()
                .all(|l| l.contains(" pg-failover ") || l.contains(" kill9 "))
        );
        let s = schedule(7, "short", 60, 3, "", "disk-full").unwrap();
        assert_eq!(s.len(), 1);
        assert!(s[0].contains(" disk-full "));
        assert!(schedule(7, "long", 600, 3, "", "nope").is_err());
        assert!(schedule(7, "long", 600, 3, "kill9", "kill9").is_err());
    }
}
