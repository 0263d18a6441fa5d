//! `GET /metrics`: Prometheus text format. Two parts:
//! - what this process counted (the process-wide recorder: requests,
//!   attempts, latencies; labels from bounded sets: source, target,
//!   outcome), described in `stats::families`;
//! - what is read at each scrape ([`SCRAPED`]): the backlog and each
//!   source's last accepted event from the ledger, so every replica sharing
//!   a ledger reports the same numbers (one read shared by concurrent
//!   scrapes: `store::backlog`); this process's target health; the
//!   config's expectations (`silent_after`, reconciliation intervals);
//!   whether the ledger and the cache answer; the build.
//!
//! Rule: the second part is written per `App` into this response, never
//! into the process-wide recorder, so two gateways in one process (tests)
//! each show their own ledger, and a target or source a reload removed
//! leaves no stale series behind.

use crate::primitives::time::Millis;
use crate::state::AppState;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use metrics_exporter_prometheus::formatting::{
    sanitize_label_value, write_help_line, write_type_line,
};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// Longest a scrape waits for the ledger or the cache: under Prometheus's
/// default scrape timeout (10 s), so a hanging database shows as
/// `hookgate_ledger_up 0` instead of a failed scrape.
const BACKEND_WAIT: Duration = Duration::from_secs(3);

/// (name, type, help) of every family computed at scrape time.
pub const SCRAPED: &[(&str, &str, &str)] = &[
    (
        "hookgate_build_info",
        "gauge",
        "Always 1; the labels name the running build: version and commit.",
    ),
    (
        "hookgate_ledger_up",
        "gauge",
        "1 when the ledger answered this scrape's read, 0 when it failed or took over 3 s.",
    ),
    (
        "hookgate_cache_up",
        "gauge",
        "1 when the claim cache answers a ping, 0 when not (dedup goes on exactly through the ledger).",
    ),
    (
        "hookgate_ledger_read_seconds",
        "gauge",
        "How long the last ledger read behind the backlog families took (shared by scrapes for 2 s).",
    ),
    (
        "hookgate_target_deliveries",
        "gauge",
        "Deliveries not delivered, by target and state: pending (not attempted yet), retrying (failed at least once), dead. Cluster-wide, from the ledger.",
    ),
    (
        "hookgate_target_oldest_pending_age_seconds",
        "gauge",
        "Age of the event of the target's oldest pending or retrying delivery (0 when none). Cluster-wide, from the ledger.",
    ),
    (
        "hookgate_target_health",
        "gauge",
        "1 for the target's health state in this process (healthy, failing, recovering), 0 for the other two.",
    ),
    (
        "hookgate_source_last_accepted_timestamp_seconds",
        "gauge",
        "Unix time of the newest event stored for the source, by any replica (0: none stored). Cluster-wide, from the ledger.",
    ),
    (
        "hookgate_source_silent_after_seconds",
        "gauge",
        "The source's silent_after setting: how long it may go without an accepted event (only sources that set it).",
    ),
    (
        "hookgate_reconcile_interval_seconds",
        "gauge",
        "The source's reconciliation interval setting.",
    ),
    (
        "hookgate_reconcile_lag_seconds",
        "gauge",
        "Seconds since the source's last successful reconciliation run, by any replica (absent before the first).",
    ),
    (
        "hookgate_reconcile_last_run_failed",
        "gauge",
        "1 when the source's last reconciliation run, by any replica, failed; else 0.",
    ),
];

pub async fn render(State(state): State<AppState>) -> impl IntoResponse {
    state.metrics.run_upkeep();
    let mut text = state.metrics.render();
    text.push_str(&scraped(&state, Millis::now()).await);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

/// The families of [`SCRAPED`], in the text format.
async fn scraped(state: &AppState, now: Millis) -> String {
    let config = state.config();
    let (backlog, cache, reconcile) = tokio::join!(
        tokio::time::timeout(BACKEND_WAIT, state.store.backlog.backlog()),
        tokio::time::timeout(BACKEND_WAIT, state.dedup.cache().ping()),
        async {
            if config.reconcile.is_empty() {
                return None;
            }
            tokio::time::timeout(BACKEND_WAIT, state.store.reconcile.statuses())
                .await
                .ok()?
                .ok()
        },
    );
    let backlog = match backlog {
        Ok(Ok(b)) => Some(b),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "the ledger read of /metrics failed");
            None
        }
        Err(_) => None,
    };
    let mut out = Text::default();
    out.family("hookgate_build_info");
    out.sample(
        &[
            ("version", env!("CARGO_PKG_VERSION")),
            ("commit", env!("HOOKGATE_COMMIT")),
        ],
        1.0,
    );
    out.family("hookgate_ledger_up");
    out.sample(&[], f64::from(u8::from(backlog.is_some())));
    out.family("hookgate_cache_up");
    out.sample(&[], f64::from(u8::from(matches!(cache, Ok(Ok(()))))));

    if let Some(b) = &backlog {
        out.family("hookgate_ledger_read_seconds");
        out.sample(&[], b.took.as_secs_f64());
        // Configured targets show 0s; targets a reload removed show while
        // their rows wait.
        let mut rows: BTreeMap<&str, Option<&crate::store::backlog::TargetBacklog>> =
            config.targets.keys().map(|t| (t.as_str(), None)).collect();
        for t in &b.targets {
            rows.insert(t.target.as_str(), Some(t));
        }
        out.family("hookgate_target_deliveries");
        for (target, row) in &rows {
            let (p, r, d) = row.map_or((0, 0, 0), |t| (t.pending, t.retrying, t.dead));
            for (state, n) in [("pending", p), ("retrying", r), ("dead", d)] {
                out.sample(&[("target", target), ("state", state)], n as f64);
            }
        }
        out.family("hookgate_target_oldest_pending_age_seconds");
        for (target, row) in &rows {
            let age = row
                .and_then(|t| t.oldest_pending_received_at)
                .map_or(0.0, |at| (now.0 - at.0).max(0) as f64 / 1000.0);
            out.sample(&[("target", target)], age);
        }
        out.family("hookgate_source_last_accepted_timestamp_seconds");
        let accepted: BTreeMap<&str, Millis> = b
            .last_accepted
            .iter()
            .map(|(s, at)| (s.as_str(), *at))
            .collect();
        for source in config.sources.keys() {
            let at = accepted
                .get(source.as_str())
                .map_or(0.0, |m| m.0 as f64 / 1000.0);
            out.sample(&[("source", source)], at);
        }
    }

    out.family("hookgate_target_health");
    for target in config.targets.keys() {
        let doc = state.health.doc(target, now);
        let current = doc["state"].as_str().unwrap_or("healthy");
        for s in ["healthy", "failing", "recovering"] {
            out.sample(
                &[("target", target), ("state", s)],
                f64::from(u8::from(s == current)),
            );
        }
    }

    let silent: Vec<_> = config
        .sources
        .iter()
        .filter_map(|(name, s)| Some((name, s.silent_after?)))
        .collect();
    if !silent.is_empty() {
        out.family("hookgate_source_silent_after_seconds");
        for (name, d) in silent {
            out.sample(&[("source", name)], d.as_secs_f64());
        }
    }

    if !config.reconcile.is_empty() {
        out.family("hookgate_reconcile_interval_seconds");
        for (source, r) in &config.reconcile {
            out.sample(&[("source", source)], r.interval.as_secs_f64());
        }
        if let Some(statuses) = reconcile {
            let by_source: BTreeMap<&str, _> =
                statuses.iter().map(|s| (s.source.as_str(), s)).collect();
            out.family("hookgate_reconcile_lag_seconds");
            for source in config.reconcile.keys() {
                if let Some(ok) = by_source.get(source.as_str()).and_then(|s| s.last_success) {
                    out.sample(&[("source", source)], (now.0 - ok.0).max(0) as f64 / 1000.0);
                }
            }
            out.family("hookgate_reconcile_last_run_failed");
            for source in config.reconcile.keys() {
                let failed = by_source
                    .get(source.as_str())
                    .is_some_and(|s| s.last_error.is_some());
                out.sample(&[("source", source)], f64::from(u8::from(failed)));
            }
        }
    }
    out.out
}

/// The text format, one family after another.
#[derive(Default)]
struct Text {
    out: String,
    /// The family being written.
    name: &'static str,
}

impl Text {
    /// `# HELP` and `# TYPE` of `name`, as [`SCRAPED`] lists it.
    fn family(&mut self, name: &'static str) {
        let (_, kind, help) = SCRAPED
            .iter()
            .find(|(n, ..)| *n == name)
            .expect("every scraped family is listed in SCRAPED");
        write_help_line(&mut self.out, name, None, None, help);
        write_type_line(&mut self.out, name, None, None, kind);
        self.name = name;
    }

    fn sample(&mut self, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(self.name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", sanitize_label_value(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scraped_families_are_written_with_help_type_and_escaped_labels() {
        let mut t = Text::default();
        t.family("hookgate_target_deliveries");
        t.sample(&[("target", "a\"b\\c"), ("state", "dead")], 3.0);
        assert_eq!(
            t.out,
            "# HELP hookgate_target_deliveries Deliveries not delivered, by target and state: pending (not attempted yet), retrying (failed at least once), dead. Cluster-wide, from the ledger.\n\
             # TYPE hookgate_target_deliveries gauge\n\
             hookgate_target_deliveries{target=\"a\\\"b\\\\c\",state=\"dead\"} 3\n"
        );
    }

    #[test]
    fn scraped_names_follow_the_conventions_and_differ_from_recorded_ones() {
        for (name, kind, help) in SCRAPED {
            assert!(
                name.starts_with("hookgate_") && !name.ends_with("_total"),
                "{name}"
            );
            assert_eq!(*kind, "gauge", "{name}");
            assert!(!help.is_empty(), "{name}");
            assert!(
                crate::stats::families::FAMILIES
                    .iter()
                    .all(|f| f.0 != *name),
                "{name} is recorded and scraped"
            );
        }
    }
}
