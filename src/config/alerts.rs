//! `[alerts.<name>]`: alert sinks, and `[alerting]`: how often their
//! conditions are evaluated (docs/operations.md "Alert sinks"). The raw
//! tables as written (every field with its doc and default) and the
//! validated settings; the evaluator is `src/alerts/`.
//!
//! Each sink becomes an internal target named `alert.<name>` (a name no
//! `[targets.*]` can take: those have no `.`), delivered from the outbox
//! like any other, so an alert waits there while its sink is down.

use crate::primitives::duration::Dur;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// `[alerting]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawAlerting {
    /// How often every replica evaluates the conditions (a few cheap reads
    /// of the ledger). Default 15s.
    pub interval: Dur,
}

impl Default for RawAlerting {
    fn default() -> Self {
        Self {
            interval: Dur(Duration::from_secs(15)),
        }
    }
}

/// `[alerts.<name>]`: one sink and the conditions it is told about.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAlert {
    /// A Slack incoming-webhook URL (`https://hooks.slack.com/services/…`;
    /// the URL is the credential: write `env:NAME` or `file:PATH` to keep it
    /// out of the file). Each alert is posted as `{"text": "…"}`. Exactly
    /// one of `slack` and `url`.
    pub slack: Option<String>,
    /// A generic HTTP endpoint (`http://` or `https://`, or `env:`/`file:`)
    /// that receives each alert as JSON, signed with `signing_secret`.
    pub url: Option<String>,
    /// Standard Webhooks secret (`whsec_<base64>`, or `env:`/`file:`) the
    /// gateway signs `url` alerts with. Required with `url`.
    pub signing_secret: Option<String>,
    /// Deadline of one attempt to the sink. Default 10s.
    pub timeout: Option<Dur>,
    /// The conditions this sink is told about. Default: `target_failing`,
    /// `dead_letters`, `source_silent`, `reconcile_failing`, and
    /// `verification_failures` when `verification_failures` is set.
    pub conditions: Option<Vec<String>>,
    /// `target_failing`: a target failing (three failed attempts in a row,
    /// no success since) for longer than this fires; its next success
    /// clears. Default 5m.
    pub target_failing_after: Option<Dur>,
    /// `dead_letters`: a target with more dead deliveries than this fires
    /// (one alert however many; it says how many); replaying or discarding
    /// them back to at most this clears. Default 0.
    pub dead_letters_above: Option<i64>,
    /// `verification_failures`: more requests than this refused for their
    /// signature or timestamp (per source, all replicas together) within
    /// `verification_window` fires; a window at or below it clears.
    /// Default unset (condition off).
    pub verification_failures: Option<i64>,
    /// The window `verification_failures` is counted over. Default 5m.
    pub verification_window: Option<Dur>,
}

/// The conditions a sink can be told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Condition {
    TargetFailing,
    DeadLetters,
    SourceSilent,
    VerificationFailures,
    ReconcileFailing,
}

impl Condition {
    pub const ALL: [Self; 5] = [
        Self::TargetFailing,
        Self::DeadLetters,
        Self::SourceSilent,
        Self::VerificationFailures,
        Self::ReconcileFailing,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::TargetFailing => "target_failing",
            Self::DeadLetters => "dead_letters",
            Self::SourceSilent => "source_silent",
            Self::VerificationFailures => "verification_failures",
            Self::ReconcileFailing => "reconcile_failing",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

/// Where a sink's alerts go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkKind {
    Slack,
    /// JSON signed with Standard Webhooks.
    Http,
}

/// One validated `[alerts.<name>]`.
#[derive(Debug)]
pub struct AlertSink {
    pub name: String,
    pub kind: SinkKind,
    /// The internal target (`alert.<name>`) that delivers its alerts.
    pub target: String,
    pub conditions: Vec<Condition>,
    pub target_failing_after: Duration,
    pub dead_letters_above: i64,
    /// `(failures, window)`, when `verification_failures` is on.
    pub verification: Option<(i64, Duration)>,
}

impl AlertSink {
    pub fn watches(&self, c: Condition) -> bool {
        self.conditions.contains(&c)
    }
}

/// `[alerting]` and every `[alerts.<name>]`.
#[derive(Debug, Clone)]
pub struct Alerts {
    pub interval: Duration,
    pub sinks: BTreeMap<String, Arc<AlertSink>>,
}

impl Default for Alerts {
    fn default() -> Self {
        Self {
            interval: RawAlerting::default().interval.0,
            sinks: BTreeMap::new(),
        }
    }
}

/// The internal target of sink `name`.
pub fn target_name(name: &str) -> String {
    format!("{TARGET_PREFIX}{name}")
}

/// What every alert sink's target name starts with.
pub const TARGET_PREFIX: &str = "alert.";
