//! `GET /stats`: renders the cluster-wide counters.
//!
//! Rule: rendering only. The counts come from the ledger's counters table
//! (every instance's flushed deltas) plus this instance's unflushed ones,
//! summed by [`Counters::totals`]; delivery states are read live from the
//! outbox. Another replica's last unflushed interval is the only thing not
//! shown.

use crate::config::Config;
use crate::stats::{Counters, DeliveryOutcome, RejectReason};
use crate::store::reconcile::Status;
use crate::store::{ReconcileStore, StoreError, Tallies};
use serde_json::{Map, Value, json};
use std::collections::HashMap;

/// The `/stats` document.
pub async fn snapshot(
    config: &Config,
    counters: &Counters,
    tallies: &dyn Tallies,
    reconcile: &dyn ReconcileStore,
) -> Result<Value, StoreError> {
    let totals = counters.totals(async || tallies.counters().await).await?;
    let mut states: HashMap<(String, String, String), i64> = HashMap::new();
    // `overtaken` rides along as one more state (`Tallies::overtaken`).
    for c in tallies
        .delivery_counts()
        .await?
        .into_iter()
        .chain(tallies.overtaken().await?)
    {
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

    let reconcile: HashMap<String, Status> = if config.reconcile.is_empty() {
        HashMap::new()
    } else {
        reconcile
            .statuses()
            .await?
            .into_iter()
            .map(|s| (s.source.clone(), s))
            .collect()
    };
    // `types.<type>` counters, per source (stats::TypeCounts).
    let mut by_type: HashMap<&str, Map<String, Value>> = HashMap::new();
    for ((source, name), n) in &totals {
        if let Some(t) = name.strip_prefix(crate::stats::TYPE_PREFIX) {
            by_type
                .entry(source.as_str())
                .or_default()
                .insert(t.to_owned(), json!(n));
        }
    }
    let mut sources = Map::new();
    for src in config.sources.values() {
        let name = src.name.as_str();
        let rejected: Map<String, Value> = RejectReason::ALL
            .iter()
            .map(|r| {
                let n = get(name, &format!("rejected.{}", r.as_str()));
                (r.as_str().to_owned(), json!(n))
            })
            .collect();
        let rejected_total: i64 = rejected.values().filter_map(Value::as_i64).sum();
        let (targets, [delivered, pending, retrying, dead]) =
            targets_doc(&src.targets, &|n| get(name, n), &|t, st| state(name, t, st));
        let (dc, dl, db) = (
            get(name, "duplicates.cache"),
            get(name, "duplicates.ledger"),
            get(name, "duplicates.body"),
        );
        sources.insert(
            name.to_owned(),
            json!({
                "provider": src.provider.name,
                "signed": crate::verify::signedness::of_source(src).to_json(),
                "received": get(name, "received"),
                "rejected": rejected_total,
                "rejected_by_reason": rejected,
                "unique": get(name, "unique"),
                "unrouted": get(name, "unrouted"),
                "handshakes": get(name, "handshakes"),
                "unique_by_type": by_type.remove(name).unwrap_or_default(),
                "duplicates": dc + dl + db,
                "duplicates_by_layer": { "cache": dc, "ledger": dl, "body": db },
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
        if config.reconcile.contains_key(name) {
            let s = reconcile.get(name).cloned().unwrap_or_default();
            let doc = &mut sources[name];
            doc["recovered"] = json!(s.recovered);
            doc["reconcile_last_run"] = json!(s.last_run.map(time));
            doc["reconcile_last_success"] = json!(s.last_success.map(time));
            doc["reconcile_last_error"] = json!(s.last_error);
            doc["reconcile_failed_runs"] = json!(s.failed_runs);
        }
    }
    let apis = crate::stats::apis::doc(config.apis.keys().map(String::as_str), &get);
    Ok(json!({
        "sources": sources,
        "apis": apis,
        "unconfigured_targets": unconfigured(config, &states),
    }))
}

/// Targets no longer in the config (a reload removed them) that still have
/// deliveries waiting: they stay pending, never dead-lettered, until the
/// target is configured again. Per target: `{"pending": n, "retrying": n}`.
fn unconfigured(config: &Config, states: &HashMap<(String, String, String), i64>) -> Value {
    let mut out = Map::new();
    for ((_, target, state), n) in states {
        if config.targets.contains_key(target)
            || *n == 0
            || !matches!(state.as_str(), "pending" | "retrying")
        {
            continue;
        }
        let doc = out
            .entry(target.clone())
            .or_insert_with(|| json!({"pending": 0, "retrying": 0}));
        doc[state.as_str()] = json!(doc[state.as_str()].as_i64().unwrap_or(0) + n);
    }
    Value::Object(out)
}

/// RFC 3339 with milliseconds, as the events API writes times.
fn time(t: crate::primitives::time::Millis) -> String {
    crate::admin::events::format_time(t)
}

/// Per-target counts of one source, and their sums
/// `[delivered, pending, retrying, dead]`.
fn targets_doc(
    names: &[String],
    get: &dyn Fn(&str) -> i64,
    state: &dyn Fn(&str, &str) -> i64,
) -> (Map<String, Value>, [i64; 4]) {
    let mut targets = Map::new();
    let (mut delivered, mut pending, mut retrying, mut dead) = (0, 0, 0, 0);
    for t in names {
        let count = |o: DeliveryOutcome| get(&format!("targets.{t}.{}", o.as_str()));
        let d = count(DeliveryOutcome::Delivered);
        let p = state(t, "pending");
        let r = state(t, "retrying");
        let x = state(t, "dead");
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
                "dead_total": count(DeliveryOutcome::Dead),
                "failed_attempts": count(DeliveryOutcome::Failed),
                // Ordered targets: deliveries that went ahead of a dead one
                // of their key (docs/design.md "Ordering").
                "overtaken_by": state(t, "overtaken"),
            }),
        );
    }
    (targets, [delivered, pending, retrying, dead])
}
