//! Deliver: outbox workers that forward every committed event to its targets.
//!
//! One loop per target, so a slow or dead target only ever uses its own
//! `concurrency` slots (and never more of the global `max_in_flight`).
//! Rows are leased (`lease_until` + token): a worker that dies loses its
//! leases when they expire and another worker takes the rows. A commit wakes
//! the target's loop at once (local `Notify`, Postgres NOTIFY for other
//! replicas); `poll_interval` is only the fallback.

pub mod backoff;
pub mod request;

use crate::config::{self, Config, Target};
use crate::primitives::time::Millis;
use crate::stats::{Counters, DeliveryOutcome};
use crate::store::{AttemptRecord, DueDelivery, Ledger, NextState};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Wakes target loops; cheap to clone.
#[derive(Clone, Default)]
pub struct Wake(Arc<HashMap<String, Arc<Notify>>>);

impl Wake {
    pub fn new(config: &Config) -> Self {
        Self(Arc::new(
            config
                .targets
                .keys()
                .map(|t| (t.clone(), Arc::new(Notify::new())))
                .collect(),
        ))
    }

    /// Wakes the loops of `targets`. A wake with nobody waiting is kept
    /// (Notify stores one permit), so none is lost between poll and sleep.
    pub fn notify<S: AsRef<str>>(&self, targets: &[S]) {
        for t in targets {
            if let Some(n) = self.0.get(t.as_ref()) {
                n.notify_one();
            }
        }
    }

    pub fn notify_all(&self) {
        for n in self.0.values() {
            n.notify_one();
        }
    }

    fn get(&self, target: &str) -> Arc<Notify> {
        self.0.get(target).cloned().unwrap_or_default()
    }
}

/// Everything a target loop needs.
struct Ctx {
    ledger: Arc<dyn Ledger>,
    client: reqwest::Client,
    settings: config::Delivery,
    counters: Arc<Counters>,
    global: Arc<Semaphore>,
    /// This process's lease token: identifies our leases for release.
    token: String,
    grace: Duration,
}

/// Starts one loop per target; they stop claiming when `stop` is cancelled,
/// finish in-flight attempts within `grace`, and release their leases.
pub fn start(
    config: &Config,
    ledger: Arc<dyn Ledger>,
    counters: Arc<Counters>,
    wake: Wake,
    stop: CancellationToken,
) -> JoinSet<()> {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("hookgate/", env!("CARGO_PKG_VERSION")))
        .build()
        .expect("HTTP client with default TLS");
    let ctx = Arc::new(Ctx {
        ledger,
        client,
        settings: config.delivery.clone(),
        counters,
        global: Arc::new(Semaphore::new(config.delivery.max_in_flight)),
        token: uuid::Uuid::new_v4().simple().to_string(),
        grace: config.server.shutdown_grace,
    });
    let mut set = JoinSet::new();
    for target in config.targets.values() {
        set.spawn(target_loop(
            ctx.clone(),
            target.clone(),
            wake.get(&target.name),
            stop.clone(),
        ));
    }
    set
}

async fn target_loop(
    ctx: Arc<Ctx>,
    target: Arc<Target>,
    wake: Arc<Notify>,
    stop: CancellationToken,
) {
    let local = Arc::new(Semaphore::new(target.concurrency));
    let mut inflight: JoinSet<()> = JoinSet::new();
    let mut failing = false;
    while !stop.is_cancelled() {
        let free = local
            .available_permits()
            .min(ctx.global.available_permits());
        let mut full = false;
        if free > 0 {
            let now = Millis::now();
            let lease_until = now + ctx.settings.lease;
            match ctx
                .ledger
                .claim_due(&target.name, now, lease_until, &ctx.token, free as i64)
                .await
            {
                Ok(rows) => {
                    if failing {
                        failing = false;
                        tracing::info!(target = %target.name, "delivery claims work again");
                    }
                    full = rows.len() == free;
                    for row in rows {
                        let local = local.clone().acquire_owned().await;
                        let global = ctx.global.clone().acquire_owned().await;
                        let (ctx, target) = (ctx.clone(), target.clone());
                        inflight.spawn(async move {
                            let _permits = (local, global);
                            attempt(&ctx, &target, row).await;
                        });
                    }
                }
                Err(e) => {
                    if !failing {
                        failing = true;
                        tracing::warn!(target = %target.name, error = %e, "cannot claim deliveries");
                    }
                }
            }
        }
        if full {
            // More may be due: claim again as soon as a slot frees up.
            tokio::select! {
                _ = inflight.join_next(), if !inflight.is_empty() => {}
                _ = stop.cancelled() => {}
            }
            continue;
        }
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(ctx.settings.poll_interval) => {}
            _ = inflight.join_next(), if !inflight.is_empty() => {}
            _ = stop.cancelled() => {}
        }
    }
    // Graceful: finish what is in flight within the grace period; whatever
    // is cut off keeps its lease token and is released below.
    let drained = tokio::time::timeout(ctx.grace, async {
        while inflight.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        inflight.abort_all();
    }
    match ctx.ledger.release_leases(&ctx.token).await {
        Ok(n) if n > 0 => {
            tracing::info!(target = %target.name, released = n, "released delivery leases")
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "could not release leases; they expire by themselves"),
    }
}

/// What a target's answer means: (HTTP status, error text if it failed,
/// the `Retry-After` it asked for on 429/503).
fn classify(
    result: &Result<reqwest::Response, reqwest::Error>,
) -> (Option<i32>, Option<String>, Option<Duration>) {
    match result {
        Ok(res) => {
            let s = res.status();
            let ra = if s.as_u16() == 429 || s.as_u16() == 503 {
                res.headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| backoff::parse_retry_after(v, SystemTime::now()))
            } else {
                None
            };
            let err = (!s.is_success()).then(|| format!("HTTP {}", s.as_u16()));
            (Some(s.as_u16() as i32), err, ra)
        }
        Err(e) if e.is_timeout() => (None, Some("timeout".to_owned()), None),
        Err(e) if e.is_connect() => (None, Some("connection failed".to_owned()), None),
        Err(e) => (None, Some(request::error_text(e)), None),
    }
}

/// One attempt: POST, classify, record. Recording is retried briefly: if it
/// still fails, the lease expires and the event is sent again (at least once).
#[tracing::instrument(skip_all, fields(target = %target.name, source = %row.source, event.id = %row.event_id))]
async fn attempt(ctx: &Ctx, target: &Target, row: DueDelivery) {
    let number = row.attempts + 1;
    let started_at = Millis::now();
    let t0 = Instant::now();
    let req = request::build(&ctx.client, target, &row, number, started_at.as_secs());
    let result = req.send().await;
    let latency_ms = t0.elapsed().as_millis() as i64;

    let (status, error, retry_after) = classify(&result);
    let delivered = error.is_none();
    let next = if delivered {
        NextState::Delivered
    } else if number as u32 >= target.max_attempts {
        NextState::Dead
    } else {
        let d = backoff::delay(
            number as u32,
            ctx.settings.backoff_base,
            ctx.settings.backoff_max,
            retry_after,
            rand::random::<f64>(),
        );
        NextState::RetryAt(Millis::now() + d)
    };
    let outcome = match next {
        NextState::Delivered => "delivered",
        NextState::RetryAt(_) => "retry",
        NextState::Dead => "dead",
    };
    metrics::counter!("hookgate_delivery_attempts_total", "target" => target.name.clone(), "outcome" => outcome)
        .increment(1);
    metrics::histogram!("hookgate_delivery_duration_seconds", "target" => target.name.clone())
        .record(latency_ms as f64 / 1000.0);
    let rec = AttemptRecord {
        started_at,
        latency_ms,
        status,
        error: error.clone(),
        next,
    };

    let mut wait = Duration::from_millis(100);
    for _ in 0..5 {
        match ctx.ledger.finish_attempt(row.id, &ctx.token, &rec).await {
            Ok(true) => {
                let counted = match next {
                    NextState::Delivered => DeliveryOutcome::Delivered,
                    NextState::Dead => DeliveryOutcome::Dead,
                    NextState::RetryAt(_) => DeliveryOutcome::Failed,
                };
                ctx.counters.delivery(&row.source, &target.name, counted);
                if next == NextState::Dead {
                    tracing::warn!(
                        attempt = number,
                        error = error.as_deref().unwrap_or(""),
                        "delivery dead after max_attempts"
                    );
                } else {
                    tracing::debug!(attempt = number, outcome, latency_ms, "delivery attempt");
                }
                return;
            }
            Ok(false) => {
                tracing::warn!(
                    attempt = number,
                    "lease lost before the attempt was recorded"
                );
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "recording a delivery attempt failed; retrying");
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
        }
    }
}
