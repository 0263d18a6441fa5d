//! Alerts without Prometheus: every replica evaluates the `[alerts.*]`
//! sinks' conditions each `alerting.interval` ([`conditions`]) and tells
//! each change once: an alert that fires, and later its clear.
//!
//! How a change travels:
//! 1. A replica sees condition `<sink>/<condition>/<subject>` hold while
//!    its row in the ledger (`store::alert_state`) says it is not firing
//!    (episode `n`), or not hold while it says firing.
//! 2. It writes the alert as an event of the reserved source
//!    [`SOURCE`], id `<key>#<n+1>#fired` (or `<key>#<n>#cleared`), with
//!    one delivery row for the sink's target `alert.<sink>`, in the event
//!    log's one transaction. Two replicas that see the same change write
//!    the same id: the ledger keeps one event and one delivery.
//! 3. It moves the row by compare-and-set; a replica that lost the race
//!    finds the row moved and does nothing more. A crash between 2 and 3
//!    leaves the row unmoved: the next tick writes the same id again (a
//!    duplicate, not a second alert) and moves it.
//! 4. The delivery workers send it like any event: retried with backoff
//!    while the sink is down, kept across a restart, one condition's alerts
//!    in order (the target is ordered by the condition key).
//!
//! Replicas read at different moments, so one may see a condition hold a
//! moment after another saw it end. A tick therefore never moves a row
//! that changed after the tick began (its change rests on fresher reads
//! than this tick's; replicas' clocks are assumed to agree within a tick),
//! and reads the backlog uncached.
//!
//! Rule: reads only, cheap and cluster-wide where the ledger has the state
//! (the backlog's one shared read, reconciliation's rows, the counters);
//! target health is this process's own view (`deliver::health`).

pub mod conditions;
pub mod message;

use crate::config::Config;
use crate::config::alerts::{AlertSink, Condition};
use crate::primitives::headers::StoredHeaders;
use crate::primitives::time::Millis;
use crate::state::AppState;
use crate::store::alert_state::Episode;
use crate::store::{EventFacts, NewEvent, StoreError};
use conditions::{Finding, Inputs, Samples};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The reserved source alerts are stored under (a configured source's name
/// has no `.`).
pub const SOURCE: &str = "hookgate.alerts";

/// How long an alert event is kept once delivered.
const KEEP_FOR: Duration = Duration::from_secs(7 * 24 * 3600);

/// Evaluates every `alerting.interval` until `stop` (the config is read
/// each tick, so a reload's sinks and thresholds apply at the next one).
pub async fn run(state: AppState, stop: CancellationToken) {
    let mut evaluator = Evaluator::default();
    loop {
        let config = state.config();
        if !config.alerts.sinks.is_empty()
            && let Err(e) = evaluator.tick(&state, &config, Millis::now()).await
        {
            tracing::warn!(error = %e, "alert evaluation failed; retried next tick");
        }
        tokio::select! {
            _ = tokio::time::sleep(config.alerts.interval) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// What an evaluator keeps between ticks.
#[derive(Default)]
pub struct Evaluator {
    verification: Samples,
}

impl Evaluator {
    /// One evaluation at `now`.
    pub async fn tick(
        &mut self,
        state: &AppState,
        config: &Config,
        now: Millis,
    ) -> Result<(), StoreError> {
        let sinks: Vec<&Arc<AlertSink>> = config.alerts.sinks.values().collect();
        let wants = |c: Condition| sinks.iter().any(|s| s.watches(c));
        let backlog = if wants(Condition::DeadLetters) || wants(Condition::SourceSilent) {
            read("backlog", state.store.backlog_now.backlog()).await
        } else {
            None
        };
        let reconcile = if wants(Condition::ReconcileFailing) && !config.reconcile.is_empty() {
            read("reconciliation", state.store.reconcile.statuses()).await
        } else {
            Some(Vec::new())
        };
        let longest = sinks
            .iter()
            .filter_map(|s| s.verification)
            .map(|(_, w)| w)
            .max();
        let mut verification_read = false;
        if let Some(window) = longest {
            // The ledger's totals only: every replica reads the same (this
            // process's unflushed counts would be its own view).
            let totals = read("counters", state.store.tallies.counters()).await;
            if let Some(t) = totals {
                self.verification
                    .push(now, conditions::verification_totals(&t), window);
                verification_read = true;
            }
        }
        let inputs = Inputs {
            now,
            health: config
                .targets
                .keys()
                .filter_map(|t| Some((t.clone(), state.health.view(t, now)?)))
                .collect(),
            targets: config.targets.keys().map(String::as_str).collect(),
            backlog: backlog.as_deref(),
            silent_after: config
                .sources
                .values()
                .filter_map(|s| Some((s.name.as_str(), s.silent_after?)))
                .collect(),
            reconcile: reconcile.as_deref(),
            reconciled: config.reconcile.keys().map(String::as_str).collect(),
            verification: verification_read.then_some(&self.verification),
        };
        let episodes: HashMap<String, Episode> = state
            .store
            .alert_state
            .episodes()
            .await?
            .into_iter()
            .collect();
        for sink in sinks {
            tell(state, sink, &inputs, &episodes).await?;
        }
        Ok(())
    }
}

/// A read whose failure only makes its conditions unknown this tick.
async fn read<T>(what: &str, f: impl Future<Output = Result<T, StoreError>>) -> Option<T> {
    match f.await {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(error = %e, "alerts: could not read the {what}; its conditions wait for the next tick");
            None
        }
    }
}

/// Fires what holds and is not firing, clears what is firing and no longer
/// holds, for one sink.
async fn tell(
    state: &AppState,
    sink: &AlertSink,
    inputs: &Inputs<'_>,
    episodes: &HashMap<String, Episode>,
) -> Result<(), StoreError> {
    let verdict = conditions::evaluate(sink, inputs);
    let prefix = format!("{}/", sink.name);
    for (key, finding) in &verdict.active {
        let key = format!("{prefix}{key}");
        let from = episodes.get(&key).copied().unwrap_or_default();
        if from.firing
            || from.changed_at > inputs.now
            || (from.number > 0
                && !conditions::may_fire(
                    inputs,
                    finding.condition,
                    &finding.subject,
                    from.changed_at,
                ))
        {
            continue;
        }
        let to = Episode {
            number: from.number + 1,
            firing: true,
            changed_at: inputs.now,
        };
        change(state, sink, &key, from, to, finding, inputs.now).await?;
    }
    for (key, from) in episodes
        .iter()
        .filter(|(_, e)| e.firing && e.changed_at <= inputs.now)
    {
        let Some(local) = key.strip_prefix(&prefix) else {
            continue;
        };
        if verdict.active.contains_key(local) {
            continue;
        }
        let Some((condition, subject)) = local
            .split_once('/')
            .and_then(|(c, s)| Some((Condition::parse(c)?, s)))
        else {
            continue;
        };
        // A condition the sink no longer watches clears too: its alert
        // would otherwise stay open for good.
        if sink.watches(condition)
            && (!verdict.known.contains(&condition)
                || !conditions::may_clear(inputs, condition, subject, from.changed_at))
        {
            continue;
        }
        let finding = Finding {
            condition,
            subject: subject.to_owned(),
            summary: conditions::cleared(condition, subject),
            details: serde_json::json!({}),
        };
        let to = Episode {
            firing: false,
            changed_at: inputs.now,
            ..*from
        };
        change(state, sink, key, *from, to, &finding, inputs.now).await?;
    }
    Ok(())
}

/// Writes the alert of one change to the outbox, then moves its row.
async fn change(
    state: &AppState,
    sink: &AlertSink,
    key: &str,
    from: Episode,
    to: Episode,
    finding: &Finding,
    now: Millis,
) -> Result<(), StoreError> {
    let alert = message::Alert {
        sink: &sink.name,
        key,
        episode: to.number,
        firing: to.firing,
        finding,
        at: now,
    };
    let body = bytes::Bytes::from(alert.body());
    let mut headers = StoredHeaders::default();
    headers.push(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    let event = NewEvent {
        source: SOURCE.to_owned(),
        event_id: alert.event_id(),
        body_sha256: Sha256::digest(&body).into(),
        body,
        headers,
        received_at: now,
        expires_at: Millis(now.0 + KEEP_FOR.as_millis() as i64),
        targets: vec![sink.target.clone()],
        order_keys: vec![Some(key.to_owned())],
        facts: EventFacts {
            event_type: Some(alert.event_type().to_owned()),
            ..EventFacts::default()
        },
        handoff: None,
        fresh: false,
    };
    state
        .store
        .event_log
        .record(std::slice::from_ref(&event))
        .await?;
    state.wake.notify(&[&sink.target]);
    if state
        .store
        .alert_state
        .transition(key, from, to, now)
        .await?
    {
        if to.firing {
            tracing::warn!(
                alert = sink.name,
                key,
                episode = to.number,
                summary = finding.summary,
                "alert fired"
            );
        } else {
            tracing::info!(alert = sink.name, key, episode = to.number, "alert cleared");
        }
    }
    Ok(())
}
