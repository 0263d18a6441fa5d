//! `/stats`: cluster-wide counters that survive restarts.
//!
//! Rule: counting costs no database round trip per request. Each instance
//! counts in atomics and adds its deltas to the ledger's counters table every
//! `stats_flush_interval` (and at shutdown); `/stats` reads that table, adds
//! this instance's not-yet-flushed deltas, and reads live delivery states.
//! Another replica's last unflushed second is the only thing not shown.

use crate::config::Config;
use crate::store::{Ledger, StoreError};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Per-source counters; the names are the keys in the counters table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    Received,
    Unique,
    DuplicateCache,
    DuplicateLedger,
    Conflict,
    InFlight,
    Unavailable,
}

const COUNTERS: [(Counter, &str); 7] = [
    (Counter::Received, "received"),
    (Counter::Unique, "unique"),
    (Counter::DuplicateCache, "duplicates.cache"),
    (Counter::DuplicateLedger, "duplicates.ledger"),
    (Counter::Conflict, "conflicts"),
    (Counter::InFlight, "inflight_rejected"),
    (Counter::Unavailable, "unavailable"),
];

/// Every rejection reason (bounded: these are also metric labels).
pub const REJECT_REASONS: &[&str] = &[
    "missing_signature",
    "malformed_signature",
    "invalid_signature",
    "bad_timestamp",
    "timestamp_out_of_tolerance",
    "missing_event_id",
    "invalid_event_id",
    "bad_body",
    "ip_not_allowed",
    "certificate_unavailable",
    "body_too_large",
];

#[derive(Default)]
struct TargetCounters {
    delivered: AtomicI64,
    dead: AtomicI64,
    failed_attempts: AtomicI64,
}

struct SourceCounters {
    fixed: [AtomicI64; COUNTERS.len()],
    rejected: Vec<AtomicI64>,
    targets: HashMap<String, TargetCounters>,
}

/// This instance's unflushed counts. All keys exist from the start (built
/// from the config), so counting is a lock-free atomic add.
pub struct Counters {
    sources: HashMap<String, SourceCounters>,
    /// Held by a flush from taking the deltas until the ledger has them, and
    /// by `/stats` while it reads: otherwise a snapshot taken mid-flush would
    /// miss the deltas in transit (zeroed here, not yet in the table).
    flushing: tokio::sync::Mutex<()>,
}

impl Counters {
    pub fn new(config: &Config) -> Self {
        let sources = config
            .sources
            .values()
            .map(|s| {
                let sc = SourceCounters {
                    fixed: Default::default(),
                    rejected: REJECT_REASONS.iter().map(|_| AtomicI64::new(0)).collect(),
                    targets: s
                        .targets
                        .iter()
                        .map(|t| (t.clone(), TargetCounters::default()))
                        .collect(),
                };
                (s.name.clone(), sc)
            })
            .collect();
        Self {
            sources,
            flushing: tokio::sync::Mutex::new(()),
        }
    }

    pub fn add(&self, source: &str, c: Counter) {
        if let Some(s) = self.sources.get(source) {
            s.fixed[c as usize].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn reject(&self, source: &str, reason: &str) {
        let Some(s) = self.sources.get(source) else {
            return;
        };
        if let Some(i) = REJECT_REASONS.iter().position(|r| *r == reason) {
            s.rejected[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `what`: `delivered`, `dead` or `failed_attempts`.
    pub fn delivery(&self, source: &str, target: &str, what: &str) {
        let Some(t) = self.sources.get(source).and_then(|s| s.targets.get(target)) else {
            return;
        };
        let c = match what {
            "delivered" => &t.delivered,
            "dead" => &t.dead,
            _ => &t.failed_attempts,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads (and with `take`, zeroes) every non-zero counter.
    fn collect(&self, take: bool) -> Vec<(String, String, i64)> {
        let read = |a: &AtomicI64| {
            if take {
                a.swap(0, Ordering::Relaxed)
            } else {
                a.load(Ordering::Relaxed)
            }
        };
        let mut out = Vec::new();
        for (source, s) in &self.sources {
            let mut push = |name: String, v: i64| {
                if v != 0 {
                    out.push((source.clone(), name, v));
                }
            };
            for (i, (_, name)) in COUNTERS.iter().enumerate() {
                push((*name).to_owned(), read(&s.fixed[i]));
            }
            for (i, reason) in REJECT_REASONS.iter().enumerate() {
                push(format!("rejected.{reason}"), read(&s.rejected[i]));
            }
            for (target, t) in &s.targets {
                push(format!("targets.{target}.delivered"), read(&t.delivered));
                push(format!("targets.{target}.dead"), read(&t.dead));
                push(
                    format!("targets.{target}.failed_attempts"),
                    read(&t.failed_attempts),
                );
            }
        }
        out
    }

    /// Adds this instance's deltas to the ledger; on failure keeps them.
    pub async fn flush(&self, ledger: &dyn Ledger) -> Result<(), StoreError> {
        let _in_transit = self.flushing.lock().await;
        let deltas = self.collect(true);
        if deltas.is_empty() {
            return Ok(());
        }
        if let Err(e) = ledger.add_counters(&deltas).await {
            self.restore(&deltas);
            return Err(e);
        }
        Ok(())
    }

    fn restore(&self, deltas: &[(String, String, i64)]) {
        for (source, name, v) in deltas {
            let Some(s) = self.sources.get(source) else {
                continue;
            };
            let cell = if let Some(i) = COUNTERS.iter().position(|(_, n)| n == name) {
                Some(&s.fixed[i])
            } else if let Some(r) = name.strip_prefix("rejected.") {
                REJECT_REASONS
                    .iter()
                    .position(|x| *x == r)
                    .map(|i| &s.rejected[i])
            } else {
                name.strip_prefix("targets.")
                    .and_then(|rest| rest.rsplit_once('.'))
                    .and_then(|(t, what)| {
                        let tc = s.targets.get(t)?;
                        Some(match what {
                            "delivered" => &tc.delivered,
                            "dead" => &tc.dead,
                            _ => &tc.failed_attempts,
                        })
                    })
            };
            if let Some(c) = cell {
                c.fetch_add(*v, Ordering::Relaxed);
            }
        }
    }
}

/// Flushes counters every `every` until cancelled, then once more.
pub async fn flush_loop(
    counters: Arc<Counters>,
    ledger: Arc<dyn Ledger>,
    every: Duration,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => break,
        }
        if let Err(e) = counters.flush(ledger.as_ref()).await {
            tracing::debug!(error = %e, "stats flush failed; will retry");
        }
    }
    if let Err(e) = counters.flush(ledger.as_ref()).await {
        tracing::warn!(error = %e, "final stats flush failed; those counts are lost");
    }
}

/// The `/stats` document.
pub async fn snapshot(
    config: &Config,
    counters: &Counters,
    ledger: &dyn Ledger,
) -> Result<Value, StoreError> {
    let mut totals: HashMap<(String, String), i64> = HashMap::new();
    let no_flush_in_transit = counters.flushing.lock().await;
    for (s, n, v) in ledger.counters().await? {
        *totals.entry((s, n)).or_default() += v;
    }
    for (s, n, v) in counters.collect(false) {
        *totals.entry((s, n)).or_default() += v;
    }
    drop(no_flush_in_transit);
    let mut states: HashMap<(String, String, String), i64> = HashMap::new();
    for c in ledger.delivery_counts().await? {
        states.insert((c.source, c.target, c.state), c.count);
    }
    let get = |s: &str, n: &str| {
        totals
            .get(&(s.to_owned(), n.to_owned()))
            .copied()
            .unwrap_or(0)
    };
    let state = |s: &str, t: &str, st: &str| {
        states
            .get(&(s.to_owned(), t.to_owned(), st.to_owned()))
            .copied()
            .unwrap_or(0)
    };

    let mut sources = Map::new();
    for src in config.sources.values() {
        let name = src.name.as_str();
        let rejected: Map<String, Value> = REJECT_REASONS
            .iter()
            .map(|r| ((*r).to_owned(), json!(get(name, &format!("rejected.{r}")))))
            .collect();
        let rejected_total: i64 = rejected.values().filter_map(Value::as_i64).sum();
        let mut targets = Map::new();
        let (mut delivered, mut pending, mut retrying, mut dead) = (0, 0, 0, 0);
        for t in &src.targets {
            let d = get(name, &format!("targets.{t}.delivered"));
            let p = state(name, t, "pending");
            let r = state(name, t, "retrying");
            let x = state(name, t, "dead");
            delivered += d;
            pending += p;
            retrying += r;
            dead += x;
            targets.insert(
                t.clone(),
                json!({
                    "delivered": d,
                    "pending": p,
                    "retrying": r,
                    "dead": x,
                    "dead_total": get(name, &format!("targets.{t}.dead")),
                    "failed_attempts": get(name, &format!("targets.{t}.failed_attempts")),
                }),
            );
        }
        let (dc, dl) = (
            get(name, "duplicates.cache"),
            get(name, "duplicates.ledger"),
        );
        sources.insert(
            name.to_owned(),
            json!({
                "provider": src.provider.name,
                "received": get(name, "received"),
                "rejected": rejected_total,
                "rejected_by_reason": rejected,
                "unique": get(name, "unique"),
                "duplicates": dc + dl,
                "duplicates_by_layer": { "cache": dc, "ledger": dl },
                "conflicts": get(name, "conflicts"),
                "inflight_rejected": get(name, "inflight_rejected"),
                "unavailable": get(name, "unavailable"),
                "delivered": delivered,
                "pending": pending,
                "retrying": retrying,
                "dead": dead,
                "targets": targets,
            }),
        );
    }
    Ok(json!({ "sources": sources }))
}
