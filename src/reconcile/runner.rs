//! The background runner: one loop per reconciled source, in every
//! replica. Each tick tries to take the source's lease row; only the replica
//! whose compare-and-set wins runs, once per `interval` cluster-wide
//! (`store::reconcile`). A failed run is logged once per distinct error
//! (not once per tick while the provider stays down) and counted.

use super::{Reconciler, RunOptions};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often a replica looks whether a run is due: a quarter of the
/// interval, within [200 ms, 1 min].
fn tick(interval: Duration) -> Duration {
    (interval / 4).clamp(Duration::from_millis(200), Duration::from_secs(60))
}

/// Runs `source` on schedule until `stop`.
pub async fn run(r: Reconciler, source: String, stop: CancellationToken) {
    let Some(rec) = r.config.reconcile.get(&source).cloned() else {
        return;
    };
    let opts = RunOptions {
        window: rec.lookback,
        dry_run: false,
        scheduled: true,
    };
    let mut last_error: Option<String> = None;
    loop {
        // The run watches `r.stop` itself, to hand its lease back.
        let outcome = r.run(&source, opts).await;
        if stop.is_cancelled() {
            return;
        }
        match outcome {
            Ok(None) => {}
            Ok(Some(report)) => {
                metrics::counter!("hookgate_reconcile_runs_total", "source" => source.clone(), "outcome" => "ok")
                    .increment(1);
                if last_error.take().is_some() {
                    tracing::info!(source, "reconciliation works again");
                }
                tracing::info!(
                    source,
                    found = report.found,
                    already = report.already,
                    recovered = report.recovered,
                    failed = report.failed,
                    "reconciliation run"
                );
            }
            Err(e) => {
                metrics::counter!("hookgate_reconcile_runs_total", "source" => source.clone(), "outcome" => "failed")
                    .increment(1);
                let text = e.to_string();
                if last_error.as_deref() != Some(text.as_str()) {
                    tracing::error!(source, error = %text, "reconciliation run failed; retried every interval");
                    last_error = Some(text);
                }
            }
        }
        publish_last_success(&r, &source).await;
        tokio::select! {
            _ = tokio::time::sleep(tick(rec.interval)) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// Sets `hookgate_reconcile_last_success_timestamp_seconds` from the ledger
/// (cluster-wide: whichever replica ran last), so an alert on its age fires
/// when no replica succeeds.
async fn publish_last_success(r: &Reconciler, source: &str) {
    let Ok(statuses) = r.store.statuses().await else {
        return;
    };
    if let Some(ok) = statuses
        .iter()
        .find(|s| s.source == source)
        .and_then(|s| s.last_success)
    {
        metrics::gauge!("hookgate_reconcile_last_success_timestamp_seconds", "source" => source.to_owned())
            .set(ok.0 as f64 / 1000.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_look_a_few_times_per_interval_within_bounds() {
        assert_eq!(tick(Duration::from_secs(600)), Duration::from_secs(60));
        assert_eq!(tick(Duration::from_secs(2)), Duration::from_millis(500));
        assert_eq!(tick(Duration::from_secs(1)), Duration::from_millis(250));
    }
}
