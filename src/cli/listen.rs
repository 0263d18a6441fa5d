//! `hookgate listen`: a gateway's stored events for one source, streamed
//! (`GET /admin/listen/{source}`) and forwarded to a local URL, for the
//! developer's inner loop.
//!
//! Rule: nothing is skipped. An event is forwarded until the local URL
//! answers 2xx (retried with backoff otherwise); only then is its cursor
//! written to the state file (one per gateway + source), and a restart or
//! a reconnect after a network drop or a laptop's sleep resumes after it.
//! A process killed between the local 2xx and that write sends that one
//! event again on restart: the local app sees the same `Hookgate-Event-Id`.

use crate::primitives::secret::Secret;
use crate::primitives::time::Millis;
use crate::target::http::{message_id, standard_signature};
use anyhow::{Context, bail};
use base64::Engine;
use clap::Args;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, Args)]
pub struct ListenArgs {
    /// The gateway's admin base URL (`https://hooks.example.com`, or the
    /// `server.admin_listen` address).
    #[arg(long)]
    pub gateway: String,
    /// The source whose events to take.
    #[arg(long)]
    pub source: String,
    /// Where each event is POSTed (`http://localhost:3000/webhooks`).
    #[arg(long)]
    pub forward_to: String,
    /// A token with the `listen` scope: the value, `env:NAME` or `file:PATH`.
    #[arg(long, env = "HOOKGATE_TOKEN", hide_env_values = true)]
    pub token: String,
    /// `now`, a cursor printed by an earlier run, or a duration (`1h`) to
    /// replay history first. Default: resume from the state file, else now.
    #[arg(long)]
    pub from: Option<String>,
    /// Only events of this type (repeat for several).
    #[arg(long = "type")]
    pub types: Vec<String>,
    /// Re-sign each forward with this secret (Standard Webhooks:
    /// `webhook-id`, `webhook-timestamp`, `webhook-signature`; `whsec_…` or
    /// raw), for a local app that verifies. Value, `env:NAME` or `file:PATH`.
    #[arg(long)]
    pub resign: Option<String>,
    /// The state file (the last acknowledged cursor). Default: one per
    /// gateway and source under `$XDG_STATE_HOME/hookgate` (or
    /// `~/.local/state/hookgate`).
    #[arg(long)]
    pub state: Option<PathBuf>,
}

/// No line for this long: the connection is taken for dead (the server
/// sends one at least every `admin::listen::HEARTBEAT`).
const IDLE: Duration = Duration::from_secs(30);
/// Longest wait between two attempts (reconnect, or the local URL).
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// What the state file holds.
#[derive(Debug, Serialize, Deserialize)]
struct State {
    gateway: String,
    source: String,
    cursor: String,
}

/// One line of the stream.
#[derive(Debug, Deserialize)]
struct Line {
    kind: String,
    cursor: String,
    #[serde(default)]
    event_id: String,
    #[serde(default, rename = "type")]
    event_type: Option<String>,
    #[serde(default)]
    headers: Vec<(String, String)>,
    #[serde(default)]
    body: String,
}

/// Headers not copied to the local request: the connection's own, and
/// what reqwest sets from the body.
const HOP_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "connection",
    "transfer-encoding",
    "keep-alive",
    "te",
    "upgrade",
    "expect",
];

/// Headers a `--resign` replaces.
const SW_HEADERS: &[&str] = &["webhook-id", "webhook-timestamp", "webhook-signature"];

pub async fn run(args: ListenArgs) -> anyhow::Result<()> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let token = Secret::resolve(&args.token, &cwd).context("--token")?;
    let resign = match &args.resign {
        Some(r) => Some(crate::primitives::crypto::SigningKey::standard_webhooks(
            &Secret::resolve(r, &cwd).context("--resign")?,
        )),
        None => None,
    };
    let gateway = args.gateway.trim_end_matches('/').to_owned();
    let state_path = match &args.state {
        Some(p) => p.clone(),
        None => default_state_path(&gateway, &args.source)?,
    };
    let mut cursor = match &args.from {
        Some(f) => f.clone(),
        None => read_state(&state_path)?.map_or_else(|| "now".to_owned(), |s| s.cursor),
    };
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()?;
    let local = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    eprintln!(
        "listening to {} on {gateway}, forwarding to {} (state {})",
        args.source,
        args.forward_to,
        state_path.display()
    );
    println!(
        "{:<24} {:<28} {:<32} {:>7} {:>9}",
        "TIME", "TYPE", "ID", "STATUS", "LATENCY"
    );
    let mut backoff = Duration::from_millis(500);
    loop {
        let mut url = reqwest::Url::parse(&format!("{gateway}/admin/listen/"))
            .context("--gateway is not a URL")?;
        url.path_segments_mut()
            .map_err(|_| anyhow::anyhow!("--gateway cannot be a base URL"))?
            .pop_if_empty()
            .push(&args.source);
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("from", &cursor);
            for t in &args.types {
                q.append_pair("type", t);
            }
        }
        let res = client.get(url).bearer_auth(token.expose()).send().await;
        let mut res = match res {
            Ok(r) if r.status().is_success() => r,
            Ok(r) if matches!(r.status().as_u16(), 400 | 401 | 403 | 404) => {
                let status = r.status();
                let text = r.text().await.unwrap_or_default();
                bail!("the gateway refused: {status}: {}", text.trim());
            }
            Ok(r) => {
                eprintln!("gateway answered {}; retrying in {backoff:?}", r.status());
                wait(&mut backoff).await;
                continue;
            }
            Err(e) => {
                eprintln!(
                    "gateway unreachable ({}); retrying in {backoff:?}",
                    short(&e)
                );
                wait(&mut backoff).await;
                continue;
            }
        };
        let mut buf: Vec<u8> = Vec::new();
        loop {
            let chunk = match tokio::time::timeout(IDLE, res.chunk()).await {
                Ok(Ok(Some(c))) => c,
                Ok(Ok(None)) => {
                    eprintln!("stream ended; reconnecting");
                    break;
                }
                Ok(Err(e)) => {
                    eprintln!("stream broken ({}); reconnecting", short(&e));
                    break;
                }
                Err(_) => {
                    eprintln!("no word from the gateway for {IDLE:?}; reconnecting");
                    break;
                }
            };
            backoff = Duration::from_millis(500);
            buf.extend_from_slice(&chunk);
            while let Some(end) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=end).collect();
                let line: Line = serde_json::from_slice(&line)
                    .context("the gateway sent a line that is not a listen event")?;
                if line.kind == "event" {
                    forward(&local, &args, resign.as_ref(), &line).await;
                }
                if line.cursor != cursor {
                    cursor = line.cursor;
                    write_state(&state_path, &gateway, &args.source, &cursor)?;
                }
            }
        }
        wait(&mut backoff).await;
    }
}

/// POSTs one event to the local URL until it answers 2xx, printing a row
/// per attempt.
async fn forward(
    local: &reqwest::Client,
    args: &ListenArgs,
    resign: Option<&crate::primitives::crypto::SigningKey>,
    e: &Line,
) {
    let body = base64::engine::general_purpose::STANDARD
        .decode(&e.body)
        .unwrap_or_default();
    let mut backoff = Duration::from_millis(500);
    loop {
        let mut req = local.post(&args.forward_to);
        for (n, v) in &e.headers {
            let lower = n.to_ascii_lowercase();
            if HOP_HEADERS.contains(&lower.as_str())
                || (resign.is_some() && SW_HEADERS.contains(&lower.as_str()))
            {
                continue;
            }
            req = req.header(n, v);
        }
        req = req
            .header("hookgate-event-id", &e.event_id)
            .header("hookgate-source", &args.source)
            .header("hookgate-cursor", &e.cursor);
        if let Some(t) = &e.event_type {
            req = req.header("hookgate-event-type", t);
        }
        if let Some(key) = resign {
            let id = message_id(&args.source, &e.event_id);
            let now = Millis::now().as_secs();
            let sig = standard_signature(key.bytes(), &id, now, &body);
            req = req
                .header("webhook-id", id)
                .header("webhook-timestamp", now.to_string())
                .header("webhook-signature", sig);
        }
        let started = Instant::now();
        let outcome = req.body(body.clone()).send().await;
        let latency = started.elapsed();
        let (status, ok) = match &outcome {
            Ok(r) => (r.status().as_u16().to_string(), r.status().is_success()),
            Err(err) => (short(err), false),
        };
        row(e, &status, latency);
        if ok {
            return;
        }
        eprintln!(
            "  local URL did not take {}; retrying in {backoff:?}",
            e.event_id
        );
        wait(&mut backoff).await;
    }
}

fn row(e: &Line, status: &str, latency: Duration) {
    let now = Millis::now().rfc3339();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{:<24} {:<28} {:<32} {:>7} {:>7}ms",
        &now[..now.len().min(23)],
        e.event_type.as_deref().unwrap_or("-"),
        e.event_id,
        status,
        latency.as_millis()
    );
    let _ = out.flush();
}

/// An error's kind, without the URL (it may hold a token in its query).
fn short(e: &reqwest::Error) -> String {
    if e.is_connect() {
        "connect".into()
    } else if e.is_timeout() {
        "timeout".into()
    } else {
        "error".into()
    }
}

async fn wait(backoff: &mut Duration) {
    tokio::time::sleep(*backoff).await;
    *backoff = (*backoff * 2).min(MAX_BACKOFF);
}

fn default_state_path(gateway: &str, source: &str) -> anyhow::Result<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".local/state")))
        .context("set --state (no $XDG_STATE_HOME or $HOME)")?;
    let mut h = Sha256::new();
    h.update(gateway.as_bytes());
    h.update([0]);
    h.update(source.as_bytes());
    let name = format!(
        "listen-{}-{}.json",
        source
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .collect::<String>(),
        &hex::encode(h.finalize())[..16]
    );
    Ok(base.join("hookgate").join(name))
}

fn read_state(path: &Path) -> anyhow::Result<Option<State>> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(serde_json::from_slice(&b).with_context(|| {
            format!("{} is not a listen state file", path.display())
        })?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Writes the state beside and renames it over the old one, so a kill
/// leaves either the old or the new cursor, never a torn file.
fn write_state(path: &Path, gateway: &str, source: &str, cursor: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let tmp = path.with_extension("tmp");
    let text = serde_json::to_vec(&State {
        gateway: gateway.to_owned(),
        source: source.to_owned(),
        cursor: cursor.to_owned(),
    })?;
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
