//! What each condition sees in one tick: a pure function of the tick's
//! reads ([`Inputs`]) and a sink's thresholds, so it is tested without a
//! ledger or a clock.
//!
//! Rule: a condition whose data could not be read this tick is unknown:
//! it neither fires nor clears (a ledger hiccup is not a recovery).

use crate::config::alerts::{AlertSink, Condition, TARGET_PREFIX};
use crate::deliver::health::{State, View};
use crate::primitives::time::Millis;
use crate::stats::RejectReason;
use crate::store::backlog::Snapshot;
use crate::store::reconcile::Status;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

/// The reasons that count as verification failures: the request's
/// signature or timestamp was refused (a secret rotated at the provider and
/// not here, or a forger), not its body or size.
pub const VERIFICATION_REASONS: [RejectReason; 5] = [
    RejectReason::MissingSignature,
    RejectReason::MalformedSignature,
    RejectReason::InvalidSignature,
    RejectReason::BadTimestamp,
    RejectReason::TimestampOutOfTolerance,
];

/// One tick's reads.
#[derive(Default)]
pub struct Inputs<'a> {
    pub now: Millis,
    /// Per target this process attempted: its state, last success and
    /// last failure (`deliver::health`). Targets it never attempted are
    /// absent.
    pub health: BTreeMap<String, View>,
    /// The targets configured now (a removed one's alert clears).
    pub targets: Vec<&'a str>,
    /// The cluster-wide backlog (`store::backlog`); `None`: not read.
    pub backlog: Option<&'a Snapshot>,
    /// Sources with `silent_after`.
    pub silent_after: Vec<(&'a str, Duration)>,
    /// Reconciliation's last runs; `None`: not read.
    pub reconcile: Option<&'a [Status]>,
    /// The sources reconciled now.
    pub reconciled: Vec<&'a str>,
    /// Verification failure totals over time; `None`: not read.
    pub verification: Option<&'a Samples>,
}

/// A condition holding for one subject (a target or a source).
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub condition: Condition,
    pub subject: String,
    pub summary: String,
    pub details: Value,
}

/// What a sink's conditions found this tick.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Holding now, by key (`<condition>/<subject>`).
    pub active: BTreeMap<String, Finding>,
    /// Conditions whose data was read: a firing key of one of these that
    /// is not active clears (once [`Inputs::may_clear`] agrees).
    pub known: Vec<Condition>,
}

/// `<condition>/<subject>`: a key within one sink.
pub fn key(condition: Condition, subject: &str) -> String {
    format!("{}/{subject}", condition.as_str())
}

/// Every condition `sink` watches, evaluated.
pub fn evaluate(sink: &AlertSink, i: &Inputs<'_>) -> Verdict {
    let mut v = Verdict::default();
    let mut add = |f: Finding| {
        v.active.insert(key(f.condition, &f.subject), f);
    };
    for c in sink.conditions.iter().copied() {
        match c {
            Condition::TargetFailing => {
                for f in target_failing(sink, i) {
                    add(f);
                }
            }
            Condition::DeadLetters => {
                let Some(b) = i.backlog else { continue };
                for f in dead_letters(sink, b) {
                    add(f);
                }
            }
            Condition::SourceSilent => {
                let Some(b) = i.backlog else { continue };
                for f in source_silent(i, b) {
                    add(f);
                }
            }
            Condition::VerificationFailures => {
                let (Some(s), Some((limit, window))) = (i.verification, sink.verification) else {
                    continue;
                };
                for f in verification(s, limit, window, i.now) {
                    add(f);
                }
            }
            Condition::ReconcileFailing => {
                let Some(r) = i.reconcile else { continue };
                for f in reconcile_failing(r, &i.reconciled) {
                    add(f);
                }
            }
        }
        v.known.push(c);
    }
    v
}

/// Whether the alert of `condition` on `subject`, fired at `fired_at`, may
/// clear now that it no longer holds. A target's recovery is only told by a
/// process that saw it deliver after the alert fired: a replica that never
/// attempted the target knows nothing of its health.
pub fn may_clear(i: &Inputs<'_>, condition: Condition, subject: &str, fired_at: Millis) -> bool {
    if condition != Condition::TargetFailing || !i.targets.contains(&subject) {
        return true;
    }
    match i.health.get(subject) {
        Some(View {
            state: State::Failing { .. },
            ..
        })
        | None => false,
        Some(v) => v.last_success.is_some_and(|s| s > fired_at),
    }
}

/// Whether `condition` on `subject`, cleared at `cleared_at`, may fire
/// again. A target's failing state here is only news if this process saw a
/// failure after the clear: a replica that stopped attempting the target
/// keeps its old `failing` view while another one delivers.
pub fn may_fire(i: &Inputs<'_>, condition: Condition, subject: &str, cleared_at: Millis) -> bool {
    if condition != Condition::TargetFailing {
        return true;
    }
    i.health
        .get(subject)
        .and_then(|v| v.last_failure)
        .is_some_and(|f| f > cleared_at)
}

/// The summary of a clear: what is true again.
pub fn cleared(condition: Condition, subject: &str) -> String {
    match condition {
        Condition::TargetFailing => format!("target {subject} delivers again"),
        Condition::DeadLetters => {
            format!("target {subject}: dead deliveries back within the threshold")
        }
        Condition::SourceSilent => format!("source {subject} receives events again"),
        Condition::VerificationFailures => {
            format!("source {subject}: verification failures back within the threshold")
        }
        Condition::ReconcileFailing => format!("reconciliation of source {subject} succeeds again"),
    }
}

fn is_alert_target(name: &str) -> bool {
    name.starts_with(TARGET_PREFIX)
}

fn ago(now: Millis, then: Millis) -> String {
    let secs = ((now.0 - then.0).max(0) / 1000) as u64;
    humantime::format_duration(Duration::from_secs(secs)).to_string()
}

/// A target (not an alert sink's own: its failure cannot be told through
/// itself) failing in this process for at least `target_failing_after`.
fn target_failing(sink: &AlertSink, i: &Inputs<'_>) -> Vec<Finding> {
    let after = sink.target_failing_after.as_millis() as i64;
    i.health
        .iter()
        .filter(|(t, _)| !is_alert_target(t) && i.targets.contains(&t.as_str()))
        .filter_map(|(target, view)| match &view.state {
            State::Failing {
                since,
                failures,
                last_error,
                ..
            } if i.now.0 - since.0 >= after => Some(Finding {
                condition: Condition::TargetFailing,
                subject: target.clone(),
                summary: format!(
                    "target {target} failing for {}: {failures} failed attempts in a row, last error: {last_error}",
                    ago(i.now, *since)
                ),
                details: json!({
                    "target": target,
                    "since": since.rfc3339(),
                    "failed_attempts": failures,
                    "last_error": last_error,
                }),
            }),
            _ => None,
        })
        .collect()
}

/// A target with more dead deliveries than `dead_letters_above`: one
/// finding however many (the alert says how many).
fn dead_letters(sink: &AlertSink, b: &Snapshot) -> Vec<Finding> {
    b.targets
        .iter()
        .filter(|t| !is_alert_target(&t.target) && t.dead > sink.dead_letters_above)
        .map(|t| Finding {
            condition: Condition::DeadLetters,
            subject: t.target.clone(),
            summary: format!(
                "target {} has {} dead deliveries (replay or discard them in the console)",
                t.target, t.dead
            ),
            details: json!({"target": t.target, "dead": t.dead, "above": sink.dead_letters_above}),
        })
        .collect()
}

/// A source whose newest stored event is older than its `silent_after`. A
/// source that never stored an event has no last event to be late after.
fn source_silent(i: &Inputs<'_>, b: &Snapshot) -> Vec<Finding> {
    let last: HashMap<&str, Millis> = b
        .last_accepted
        .iter()
        .map(|(s, at)| (s.as_str(), *at))
        .collect();
    i.silent_after
        .iter()
        .filter_map(|(source, after)| {
            let at = *last.get(source)?;
            (i.now.0 - at.0 >= after.as_millis() as i64).then(|| Finding {
                condition: Condition::SourceSilent,
                subject: (*source).to_owned(),
                summary: format!(
                    "source {source} silent for {} (silent_after {}); last event at {}",
                    ago(i.now, at),
                    humantime::format_duration(*after),
                    at.rfc3339_seconds()
                ),
                details: json!({
                    "source": source,
                    "last_accepted": at.rfc3339(),
                    "silent_after_seconds": after.as_secs(),
                }),
            })
        })
        .collect()
}

fn verification(s: &Samples, limit: i64, window: Duration, now: Millis) -> Vec<Finding> {
    s.within(window, now)
        .into_iter()
        .filter(|(_, n)| *n > limit)
        .map(|(source, n)| Finding {
            condition: Condition::VerificationFailures,
            summary: format!(
                "source {source}: {n} requests refused for their signature or timestamp in the last {} (above {limit}); \
                 a secret rotated at the provider and not here?",
                humantime::format_duration(window)
            ),
            details: json!({"source": source, "failures": n, "above": limit, "window_seconds": window.as_secs()}),
            subject: source,
        })
        .collect()
}

/// A reconciled source whose last run failed (a success clears
/// `last_error`).
fn reconcile_failing(statuses: &[Status], reconciled: &[&str]) -> Vec<Finding> {
    statuses
        .iter()
        .filter(|s| reconciled.contains(&s.source.as_str()))
        .filter_map(|s| {
            let error = s.last_error.as_deref()?;
            Some(Finding {
                condition: Condition::ReconcileFailing,
                subject: s.source.clone(),
                summary: format!(
                    "reconciliation of source {} failing ({} failed runs; last success {}): {error}",
                    s.source,
                    s.failed_runs,
                    s.last_success
                        .map_or("never".to_owned(), Millis::rfc3339_seconds)
                ),
                details: json!({
                    "source": s.source,
                    "last_run": s.last_run.map(Millis::rfc3339),
                    "last_success": s.last_success.map(Millis::rfc3339),
                    "failed_runs": s.failed_runs,
                    "last_error": error,
                }),
            })
        })
        .collect()
}

/// Verification failure totals per source (cluster-wide counters), one
/// sample per tick, kept for the longest window a sink counts over.
#[derive(Debug, Default)]
pub struct Samples(VecDeque<(Millis, HashMap<String, i64>)>);

impl Samples {
    /// Adds the totals read at `now`, and forgets samples no window
    /// `keep` long needs (one at or before its start stays: the baseline).
    pub fn push(&mut self, now: Millis, totals: HashMap<String, i64>, keep: Duration) {
        self.0.push_back((now, totals));
        let start = now.0 - keep.as_millis() as i64;
        while self.0.len() > 2 && self.0[1].0.0 <= start {
            self.0.pop_front();
        }
    }

    /// Per source, the failures within `window` before `now`: the newest
    /// totals less those of the newest sample at or before the window's
    /// start (or the oldest sample, while the process is younger than the
    /// window).
    pub fn within(&self, window: Duration, now: Millis) -> BTreeMap<String, i64> {
        let (Some(first), Some((_, newest))) = (self.0.front(), self.0.back()) else {
            return BTreeMap::new();
        };
        let start = now.0 - window.as_millis() as i64;
        let base = self
            .0
            .iter()
            .rev()
            .find(|(at, _)| at.0 <= start)
            .unwrap_or(first);
        newest
            .iter()
            .map(|(s, n)| (s.clone(), n - base.1.get(s).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

/// The verification failure totals per source out of the cluster-wide
/// counters' `(source, name, total)` rows.
pub fn verification_totals(totals: &[(String, String, i64)]) -> HashMap<String, i64> {
    let names: Vec<String> = VERIFICATION_REASONS
        .iter()
        .map(|r| r.counter_name())
        .collect();
    let mut out: HashMap<String, i64> = HashMap::new();
    for (source, name, n) in totals {
        if names.contains(name) {
            *out.entry(source.clone()).or_default() += n;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::backlog::TargetBacklog;

    const T0: Millis = Millis(10_000_000);

    fn at(secs: i64) -> Millis {
        Millis(T0.0 + secs * 1000)
    }

    fn sink(conditions: &[Condition]) -> AlertSink {
        AlertSink {
            name: "ops".into(),
            kind: crate::config::alerts::SinkKind::Slack,
            target: "alert.ops".into(),
            conditions: conditions.to_vec(),
            target_failing_after: Duration::from_secs(60),
            dead_letters_above: 0,
            verification: Some((2, Duration::from_secs(60))),
        }
    }

    fn view(state: State, last_success: Option<Millis>, last_failure: Option<Millis>) -> View {
        View {
            state,
            last_success,
            last_failure,
        }
    }

    fn failing(since: Millis) -> State {
        State::Failing {
            since,
            failures: 4,
            last_error: "HTTP 503".into(),
            warned_at: since,
        }
    }

    #[test]
    fn a_target_fires_after_its_threshold_and_clears_only_on_a_later_success() {
        let s = sink(&[Condition::TargetFailing]);
        let mut i = Inputs {
            now: at(59),
            targets: vec!["billing", "alert.ops"],
            ..Inputs::default()
        };
        i.health
            .insert("billing".into(), view(failing(at(0)), None, Some(at(59))));
        i.health
            .insert("alert.ops".into(), view(failing(at(0)), None, Some(at(59))));
        assert!(evaluate(&s, &i).active.is_empty(), "not yet");
        i.now = at(60);
        let v = evaluate(&s, &i);
        assert_eq!(
            v.active.keys().collect::<Vec<_>>(),
            ["target_failing/billing"]
        );
        assert!(
            v.active["target_failing/billing"]
                .summary
                .contains("HTTP 503")
        );
        // Fired at 60: still failing, or a success from before, is no clear.
        let fired = at(60);
        assert!(!may_clear(&i, Condition::TargetFailing, "billing", fired));
        let recovering = |t| view(State::Recovering { since: t }, Some(t), Some(at(59)));
        i.health.insert("billing".into(), recovering(at(50)));
        assert!(!may_clear(&i, Condition::TargetFailing, "billing", fired));
        i.health.insert("billing".into(), recovering(at(61)));
        assert!(may_clear(&i, Condition::TargetFailing, "billing", fired));
        // Cleared at 61: the failing view from before is no news; a later
        // failure is.
        let cleared = at(61);
        i.health
            .insert("billing".into(), view(failing(at(0)), None, Some(at(59))));
        assert!(!may_fire(&i, Condition::TargetFailing, "billing", cleared));
        i.health
            .insert("billing".into(), view(failing(at(0)), None, Some(at(62))));
        assert!(may_fire(&i, Condition::TargetFailing, "billing", cleared));
        // A replica that never attempted it says nothing.
        i.health.remove("billing");
        assert!(!may_clear(&i, Condition::TargetFailing, "billing", fired));
        // A target a reload removed clears.
        i.targets = vec![];
        assert!(may_clear(&i, Condition::TargetFailing, "billing", fired));
    }

    #[test]
    fn dead_letters_are_one_finding_however_many_and_unknown_without_a_read() {
        let s = sink(&[Condition::DeadLetters]);
        let snap = Snapshot {
            targets: vec![
                TargetBacklog {
                    target: "ledger".into(),
                    pending: 0,
                    retrying: 0,
                    dead: 500,
                    oldest_pending_received_at: None,
                },
                TargetBacklog {
                    target: "quiet".into(),
                    pending: 3,
                    retrying: 0,
                    dead: 0,
                    oldest_pending_received_at: None,
                },
            ],
            ..Snapshot::default()
        };
        let i = Inputs {
            backlog: Some(&snap),
            ..Inputs::default()
        };
        let v = evaluate(&s, &i);
        assert_eq!(v.active.len(), 1);
        assert!(v.active["dead_letters/ledger"].summary.contains("500 dead"));
        assert_eq!(v.known, [Condition::DeadLetters]);
        let v = evaluate(&s, &Inputs::default());
        assert!(
            v.active.is_empty() && v.known.is_empty(),
            "no read: unknown"
        );
    }

    #[test]
    fn a_source_is_silent_after_its_setting_and_never_before_its_first_event() {
        let s = sink(&[Condition::SourceSilent]);
        let snap = Snapshot {
            last_accepted: vec![("stripe".into(), at(0))],
            ..Snapshot::default()
        };
        let mut i = Inputs {
            now: at(3599),
            backlog: Some(&snap),
            silent_after: vec![
                ("stripe", Duration::from_secs(3600)),
                ("github", Duration::from_secs(1)),
            ],
            ..Inputs::default()
        };
        assert!(evaluate(&s, &i).active.is_empty());
        i.now = at(3600);
        let v = evaluate(&s, &i);
        assert_eq!(
            v.active.keys().collect::<Vec<_>>(),
            ["source_silent/stripe"]
        );
    }

    #[test]
    fn verification_failures_are_counted_over_the_window() {
        let s = sink(&[Condition::VerificationFailures]);
        let mut samples = Samples::default();
        let keep = Duration::from_secs(60);
        let totals = |n: i64| HashMap::from([("stripe".to_owned(), n)]);
        samples.push(at(0), totals(10), keep);
        samples.push(at(30), totals(12), keep);
        let i = Inputs {
            now: at(30),
            verification: Some(&samples),
            ..Inputs::default()
        };
        assert!(evaluate(&s, &i).active.is_empty(), "2 is not above 2");
        samples.push(at(40), totals(13), keep);
        let i = Inputs {
            now: at(40),
            verification: Some(&samples),
            ..Inputs::default()
        };
        assert!(
            evaluate(&s, &i).active["verification_failures/stripe"]
                .summary
                .contains("3 requests")
        );
        // A minute on, the window starts after the failures: quiet.
        samples.push(at(101), totals(13), keep);
        let i = Inputs {
            now: at(101),
            verification: Some(&samples),
            ..Inputs::default()
        };
        assert!(evaluate(&s, &i).active.is_empty());
        assert!(samples.0.len() <= 3, "old samples are dropped");
        let rows = vec![
            (
                "stripe".to_owned(),
                "rejected.invalid_signature".to_owned(),
                4,
            ),
            ("stripe".to_owned(), "rejected.bad_timestamp".to_owned(), 1),
            ("stripe".to_owned(), "rejected.body_too_large".to_owned(), 9),
        ];
        assert_eq!(
            verification_totals(&rows)["stripe"],
            5,
            "only signature and timestamp"
        );
    }

    #[test]
    fn reconciliation_fails_while_its_last_run_did() {
        let s = sink(&[Condition::ReconcileFailing]);
        let statuses = vec![
            Status {
                source: "stripe".into(),
                last_run: Some(at(10)),
                last_success: Some(at(0)),
                last_error: Some("HTTP 401 from the provider API".into()),
                recovered: 0,
                failed_runs: 2,
            },
            Status {
                source: "removed".into(),
                last_error: Some("x".into()),
                ..Status::default()
            },
        ];
        let i = Inputs {
            reconcile: Some(&statuses),
            reconciled: vec!["stripe"],
            ..Inputs::default()
        };
        let v = evaluate(&s, &i);
        assert_eq!(
            v.active.keys().collect::<Vec<_>>(),
            ["reconcile_failing/stripe"]
        );
        assert!(
            v.active["reconcile_failing/stripe"]
                .summary
                .contains("HTTP 401")
        );
    }
}
