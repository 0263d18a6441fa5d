//! When a failed delivery is retried, and when it is dead.
//!
//! A delivery is retried for its target's `retry_for` (default three days,
//! as Stripe retries), counted from when its event was received: long
//! enough to outlast a bad deploy or a night's migration. Each retry waits
//! a random time below a ceiling that doubles from `backoff_base` to
//! `backoff_max` (`backoff::delay`); a retry that would fall after the
//! window is moved to the window's end, and a failure at or after the end
//! is dead. It is dead at once when the target answers one of its
//! `permanent_statuses` (default 410 Gone), when the request cannot even be
//! built, or after `max_attempts` when a target caps them.
//!
//! A replayed delivery of an event older than the window gets its attempt;
//! if that fails it is dead again (a replay is an operator's explicit ask).
//!
//! Rule: decisions only, from the policy, the row and `now`; no I/O.

use crate::primitives::backoff;
use crate::primitives::time::Millis;
use crate::store::NextState;
use crate::target::RetryPolicy;
use std::time::Duration;

/// A failed attempt, as the sink classified it.
pub struct Failure {
    /// The attempt's number (1-based).
    pub number: u32,
    pub status: Option<i32>,
    /// The target's `Retry-After` (429/503).
    pub retry_after: Option<Duration>,
    /// No retry could succeed (the request cannot be built).
    pub permanent: bool,
}

/// Where a delivery received at `received_at` goes after `failure` at `now`.
/// `jitter` is uniform in `[0, 1)`.
pub fn after_failure(
    policy: &RetryPolicy,
    received_at: Millis,
    now: Millis,
    failure: &Failure,
    jitter: f64,
) -> NextState {
    let declared = failure
        .status
        .is_some_and(|s| policy.permanent_statuses.iter().any(|p| i32::from(*p) == s));
    if failure.permanent || declared {
        return NextState::Dead;
    }
    if policy.max_attempts.is_some_and(|m| failure.number >= m) {
        return NextState::Dead;
    }
    let end = received_at + policy.retry_for;
    if now >= end {
        return NextState::Dead;
    }
    let wait = backoff::delay(
        failure.number,
        policy.backoff_base,
        policy.backoff_max,
        failure.retry_after,
        jitter,
    );
    NextState::RetryAt((now + wait).min(end))
}

/// Why a dead delivery is dead, for its log line.
pub fn dead_reason(
    policy: &RetryPolicy,
    received_at: Millis,
    now: Millis,
    f: &Failure,
) -> &'static str {
    if f.permanent {
        "the request cannot be built"
    } else if f
        .status
        .is_some_and(|s| policy.permanent_statuses.iter().any(|p| i32::from(*p) == s))
    {
        "the target answered a permanent-failure status"
    } else if now >= received_at + policy.retry_for {
        "its retry window (retry_for) is over"
    } else {
        "max_attempts reached"
    }
}

/// The retry delays' ceilings, one per retry, until they add up to the
/// window: the schedule at its slowest (each wait is random below its
/// ceiling, so retries usually come sooner and more of them fit). Used by
/// `check-config` and the docs.
pub fn ceilings(policy: &RetryPolicy) -> Vec<Duration> {
    let mut out = Vec::new();
    let mut total = Duration::ZERO;
    let mut n = 1u32;
    while total < policy.retry_for && policy.max_attempts.is_none_or(|m| n < m) {
        let c = backoff::delay(n, policy.backoff_base, policy.backoff_max, None, 1.0);
        let c = c.min(policy.retry_for - total);
        out.push(c);
        total += c;
        n += 1;
    }
    out
}

/// One line on `policy`'s window for `check-config`.
pub fn describe(policy: &RetryPolicy) -> String {
    let show = |d: Duration| humantime::format_duration(d).to_string();
    let ceilings = ceilings(policy);
    let doubling = ceilings
        .iter()
        .take_while(|c| **c < policy.backoff_max)
        .count();
    let cap = policy
        .max_attempts
        .map(|m| format!(", at most {m} attempts"))
        .unwrap_or_default();
    let statuses = policy
        .permanent_statuses
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(",");
    format!(
        "retry_for={} (retries: {} doubling from {} to {}, then every <= {}; at least {} retries{cap}; dead at once on HTTP {})",
        show(policy.retry_for),
        doubling,
        show(policy.backoff_base),
        show(policy.backoff_max),
        show(policy.backoff_max),
        ceilings.len(),
        if statuses.is_empty() {
            "-".to_owned()
        } else {
            statuses
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(retry_for: Duration) -> RetryPolicy {
        RetryPolicy {
            retry_for,
            permanent_statuses: vec![410],
            max_attempts: None,
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(3600),
        }
    }

    fn failure(number: u32, status: Option<i32>) -> Failure {
        Failure {
            number,
            status,
            retry_after: None,
            permanent: false,
        }
    }

    const T0: Millis = Millis(1_700_000_000_000);

    #[test]
    fn retried_inside_the_window_and_the_last_retry_is_at_its_end() {
        let p = policy(Duration::from_secs(3 * 86_400));
        let end = T0 + p.retry_for;
        // Attempt 40, a day in: retried within the hour.
        let now = T0 + Duration::from_secs(86_400);
        match after_failure(&p, T0, now, &failure(40, Some(503)), 0.99) {
            NextState::RetryAt(at) => assert!(at > now && at <= now + p.backoff_max),
            s => panic!("{s:?}"),
        }
        // Ten minutes before the end: the retry is moved to the end, not past it.
        let late = end - Duration::from_secs(600);
        assert_eq!(
            after_failure(&p, T0, late, &failure(80, Some(503)), 0.99),
            NextState::RetryAt(end)
        );
        // At the end: dead.
        assert_eq!(
            after_failure(&p, T0, end, &failure(81, None), 0.5),
            NextState::Dead
        );
    }

    #[test]
    fn a_declared_permanent_status_is_dead_at_once_others_are_not() {
        let p = policy(Duration::from_secs(3600));
        let now = T0 + Duration::from_secs(1);
        assert_eq!(
            after_failure(&p, T0, now, &failure(1, Some(410)), 0.5),
            NextState::Dead
        );
        assert!(matches!(
            after_failure(&p, T0, now, &failure(1, Some(404)), 0.5),
            NextState::RetryAt(_)
        ));
        let mut custom = p.clone();
        custom.permanent_statuses = vec![404, 422];
        assert_eq!(
            after_failure(&custom, T0, now, &failure(1, Some(422)), 0.5),
            NextState::Dead
        );
    }

    #[test]
    fn max_attempts_still_caps_when_set() {
        let mut p = policy(Duration::from_secs(86_400));
        p.max_attempts = Some(3);
        let now = T0 + Duration::from_secs(5);
        assert!(matches!(
            after_failure(&p, T0, now, &failure(2, None), 0.5),
            NextState::RetryAt(_)
        ));
        assert_eq!(
            after_failure(&p, T0, now, &failure(3, None), 0.5),
            NextState::Dead
        );
    }

    #[test]
    fn the_default_schedule_spans_three_days() {
        let p = policy(crate::config::raw::DEFAULT_RETRY_FOR);
        let c = ceilings(&p);
        let total: Duration = c.iter().sum();
        assert_eq!(total, Duration::from_secs(3 * 86_400));
        // 1s, 2s, … 2048s (12 doublings), then hourly.
        assert_eq!(c[0], Duration::from_secs(1));
        assert_eq!(c[11], Duration::from_secs(2048));
        assert_eq!(c[12], Duration::from_secs(3600));
        assert_eq!(c.len(), 83);
        let line = describe(&p);
        assert!(line.starts_with("retry_for=3days"), "{line}");
        assert!(line.contains("dead at once on HTTP 410"), "{line}");
    }
}
