//! Target health: whether a target answers, told once per change rather
//! than once per attempt.
//!
//! A target turns `failing` after [`FAILING_AFTER`] failed attempts in a
//! row (one poison event among successes never counts): one WARN with the
//! count and the last error, then at most one WARN per [`REPEAT_EVERY`]
//! while it keeps failing. Its first success after that makes it
//! `recovering` (one INFO: how long it was down, how many attempts failed);
//! a minute without a failure makes it `healthy` again. `/stats` shows each
//! target's state ([`Health::doc`]).
//!
//! Rule: a pure state machine over the attempts' outcomes and times (the
//! caller passes `now`); it logs, it never changes what is delivered.

use crate::primitives::time::Millis;
use foldhash::HashMap;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Failed attempts in a row after which a target is failing.
pub const FAILING_AFTER: u32 = 3;
/// Most one WARN per this while a target keeps failing.
pub const REPEAT_EVERY: Duration = Duration::from_secs(60);
/// Time without a failure after which a recovering target is healthy.
pub const HEALTHY_AFTER: Duration = Duration::from_secs(60);

/// One target's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Healthy,
    Failing {
        since: Millis,
        /// Failed attempts in a row.
        failures: u64,
        last_error: String,
        /// When the last WARN went out.
        warned_at: Millis,
    },
    Recovering {
        since: Millis,
    },
}

/// What one attempt changed, for the caller's log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    None,
    /// Turned failing, or still failing and a minute since the last WARN.
    Warn {
        first: bool,
        failures: u64,
        since: Millis,
    },
    Recovered {
        failures: u64,
        down_for: Duration,
    },
}

/// One target's health cell.
#[derive(Debug)]
pub struct TargetHealth {
    state: State,
    /// Failed attempts in a row (also counted while healthy, below the
    /// threshold).
    streak: u64,
    /// When an attempt last succeeded, and when one last failed and why
    /// (the console's overview).
    last_success: Option<Millis>,
    last_failure: Option<(Millis, String)>,
}

impl Default for TargetHealth {
    fn default() -> Self {
        Self {
            state: State::Healthy,
            streak: 0,
            last_success: None,
            last_failure: None,
        }
    }
}

impl TargetHealth {
    /// A failed attempt at `now` with `error`.
    pub fn failed(&mut self, now: Millis, error: &str) -> Change {
        self.streak += 1;
        self.last_failure = Some((now, error.to_owned()));
        match &mut self.state {
            State::Failing {
                since,
                failures,
                last_error,
                warned_at,
            } => {
                *failures = self.streak;
                *last_error = error.to_owned();
                if now.0 - warned_at.0 >= REPEAT_EVERY.as_millis() as i64 {
                    *warned_at = now;
                    return Change::Warn {
                        first: false,
                        failures: *failures,
                        since: *since,
                    };
                }
                Change::None
            }
            _ if self.streak >= u64::from(FAILING_AFTER) => {
                // The streak started with its first failure; the target has
                // been failing since about then.
                self.state = State::Failing {
                    since: now,
                    failures: self.streak,
                    last_error: error.to_owned(),
                    warned_at: now,
                };
                Change::Warn {
                    first: true,
                    failures: self.streak,
                    since: now,
                }
            }
            _ => Change::None,
        }
    }

    /// A delivered attempt at `now`.
    pub fn delivered(&mut self, now: Millis) -> Change {
        self.streak = 0;
        self.last_success = Some(now);
        match &self.state {
            State::Failing {
                since, failures, ..
            } => {
                let change = Change::Recovered {
                    failures: *failures,
                    down_for: Duration::from_millis((now.0 - since.0).max(0) as u64),
                };
                self.state = State::Recovering { since: now };
                change
            }
            _ => {
                self.settle(now);
                Change::None
            }
        }
    }

    /// Recovering for [`HEALTHY_AFTER`] without a failure: healthy.
    fn settle(&mut self, now: Millis) {
        if let State::Recovering { since } = self.state
            && now.0 - since.0 >= HEALTHY_AFTER.as_millis() as i64
        {
            self.state = State::Healthy;
        }
    }

    /// The state as of `now`.
    pub fn state(&mut self, now: Millis) -> State {
        self.settle(now);
        self.state.clone()
    }
}

/// One target's health as [`Health::view`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub state: State,
    pub last_success: Option<Millis>,
    pub last_failure: Option<Millis>,
}

/// Every target's health in this process; cheap to clone.
#[derive(Clone, Default)]
pub struct Health(Arc<Mutex<HashMap<String, TargetHealth>>>);

impl Health {
    /// Records an attempt's outcome for `target` and logs what changed.
    pub fn record(&self, target: &str, error: Option<&str>, now: Millis) {
        let change = {
            let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
            // Found without a copy of the name once the target is known.
            let cell = match map.get_mut(target) {
                Some(cell) => cell,
                None => map.entry(target.to_owned()).or_default(),
            };
            match error {
                Some(e) => cell.failed(now, e),
                None => cell.delivered(now),
            }
        };
        match change {
            Change::None => {}
            Change::Warn {
                first,
                failures,
                since,
            } => {
                let error = error.unwrap_or_default();
                let since = since.rfc3339();
                if first {
                    tracing::warn!(target, failures, error, %since, "target is failing; its deliveries are retried");
                } else {
                    tracing::warn!(target, failures, error, %since, "target still failing");
                }
            }
            Change::Recovered { failures, down_for } => {
                tracing::info!(
                    target,
                    failed_attempts = failures,
                    down_for = %humantime::format_duration(Duration::from_secs(down_for.as_secs())),
                    "target recovered"
                );
            }
        }
    }

    /// Forgets a target a reload removed.
    pub fn forget(&self, target: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(target);
    }

    /// `target`'s state as of `now`, as this process saw it; `None`: it
    /// made no attempt to `target` (alerts).
    pub fn view(&self, target: &str, now: Millis) -> Option<View> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(target)
            .map(|h| View {
                state: h.state(now),
                last_success: h.last_success,
                last_failure: h.last_failure.as_ref().map(|(at, _)| *at),
            })
    }

    /// `/stats`'s view of `target`: `{"state": "healthy"}`, or `failing`
    /// with `since`, `failed_attempts` and `last_error`, or `recovering`
    /// with `since`; with `last_success` and `last_failure` (`at`,
    /// `error`) as this process saw them. A target that made no attempt
    /// yet is healthy.
    pub fn doc(&self, target: &str, now: Millis) -> Value {
        let (state, last_success, last_failure) = self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(target)
            .map(|h| (h.state(now), h.last_success, h.last_failure.clone()))
            .unwrap_or((State::Healthy, None, None));
        let mut doc = Self::state_doc(state);
        doc["last_success"] = json!(last_success.map(Millis::rfc3339));
        doc["last_failure"] =
            json!(last_failure.map(|(at, error)| json!({"at": at.rfc3339(), "error": error})));
        doc
    }

    fn state_doc(state: State) -> Value {
        match state {
            State::Healthy => json!({"state": "healthy"}),
            State::Failing {
                since,
                failures,
                last_error,
                ..
            } => json!({
                "state": "failing",
                "since": since.rfc3339(),
                "failed_attempts": failures,
                "last_error": last_error,
            }),
            State::Recovering { since } => json!({"state": "recovering", "since": since.rfc3339()}),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Millis = Millis(1_000_000);

    fn at(secs: i64) -> Millis {
        Millis(T0.0 + secs * 1000)
    }

    #[test]
    fn one_warn_when_it_turns_failing_then_one_a_minute() {
        let mut h = TargetHealth::default();
        assert_eq!(h.failed(at(0), "HTTP 503"), Change::None);
        assert_eq!(h.failed(at(1), "HTTP 503"), Change::None);
        assert_eq!(
            h.failed(at(2), "HTTP 503"),
            Change::Warn {
                first: true,
                failures: 3,
                since: at(2)
            }
        );
        for s in 3..62 {
            assert_eq!(h.failed(at(s), "timeout"), Change::None, "second {s}");
        }
        assert_eq!(
            h.failed(at(62), "timeout"),
            Change::Warn {
                first: false,
                failures: 63,
                since: at(2)
            }
        );
        match h.state(at(62)) {
            State::Failing { last_error, .. } => assert_eq!(last_error, "timeout"),
            s => panic!("{s:?}"),
        }
    }

    #[test]
    fn one_success_recovers_and_a_quiet_minute_makes_it_healthy() {
        let mut h = TargetHealth::default();
        for s in 0..3 {
            h.failed(at(s), "HTTP 500");
        }
        assert_eq!(
            h.delivered(at(12)),
            Change::Recovered {
                failures: 3,
                down_for: Duration::from_secs(10)
            }
        );
        assert_eq!(h.state(at(13)), State::Recovering { since: at(12) });
        assert_eq!(h.delivered(at(20)), Change::None);
        assert_eq!(h.state(at(72)), State::Healthy);
    }

    #[test]
    fn a_lone_failure_among_successes_is_not_failing() {
        let mut h = TargetHealth::default();
        for s in 0..10 {
            assert_eq!(h.failed(at(s), "HTTP 500"), Change::None);
            assert_eq!(h.failed(at(s), "HTTP 500"), Change::None);
            assert_eq!(h.delivered(at(s)), Change::None);
        }
        assert_eq!(h.state(at(10)), State::Healthy);
    }

    #[test]
    fn stats_show_each_state() {
        let health = Health::default();
        assert_eq!(health.doc("t", at(0))["state"], "healthy");
        for s in 0..3 {
            health.record("t", Some("HTTP 503"), at(s));
        }
        let doc = health.doc("t", at(3));
        assert_eq!(doc["state"], "failing");
        assert_eq!(doc["failed_attempts"], 3);
        assert_eq!(doc["last_error"], "HTTP 503");
        health.record("t", None, at(4));
        assert_eq!(health.doc("t", at(5))["state"], "recovering");
        assert_eq!(health.doc("t", at(70))["state"], "healthy");
    }
}
