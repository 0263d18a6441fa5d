//! Retry timing, for deliveries to targets and calls to provider APIs:
//! exponential backoff, capped; the other side's `Retry-After` replaces the
//! computed wait, within the cap.
//!
//! Rule: every retry loop in the crate takes its waits from here.

use std::time::Duration;

/// `base · 2^(attempt-1)` for failed attempt number `attempt` (1-based),
/// never above `cap`.
pub fn ceiling(attempt: u32, base: Duration, cap: Duration) -> Duration {
    let exp = attempt.saturating_sub(1).min(31);
    base.saturating_mul(1u32 << exp).min(cap)
}

/// Delay before the retry that follows failed attempt number `attempt`
/// (1-based). `jitter` is a uniform random number in `[0, 1)`.
pub fn delay(
    attempt: u32,
    base: Duration,
    cap: Duration,
    retry_after: Option<Duration>,
    jitter: f64,
) -> Duration {
    if let Some(ra) = retry_after {
        return ra.min(cap);
    }
    // Full jitter: anywhere in [0, ceiling); never less than 1 ms so a burst
    // of failures does not spin.
    ceiling(attempt, base, cap)
        .mul_f64(jitter.clamp(0.0, 1.0))
        .max(Duration::from_millis(1))
}

/// `Retry-After` as seconds or an HTTP date, relative to `now`.
pub fn parse_retry_after(value: &str, now: std::time::SystemTime) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_secs(1);
    const CAP: Duration = Duration::from_secs(60);

    #[test]
    fn ceiling_doubles_per_attempt_and_is_capped() {
        let top = |a| delay(a, BASE, CAP, None, 0.999_999);
        assert!(top(1) <= Duration::from_secs(1));
        assert!(top(2) > Duration::from_millis(1900) && top(2) <= Duration::from_secs(2));
        assert!(top(4) > Duration::from_millis(7900) && top(4) <= Duration::from_secs(8));
        assert!(top(30) <= CAP && top(30) > Duration::from_secs(59));
        assert!(top(u32::MAX) <= CAP);
    }

    #[test]
    fn full_jitter_spans_zero_to_ceiling() {
        assert_eq!(delay(3, BASE, CAP, None, 0.0), Duration::from_millis(1));
        assert_eq!(delay(3, BASE, CAP, None, 0.5), Duration::from_secs(2));
    }

    #[test]
    fn retry_after_wins_but_is_capped() {
        assert_eq!(
            delay(1, BASE, CAP, Some(Duration::from_secs(30)), 0.1),
            Duration::from_secs(30)
        );
        assert_eq!(
            delay(1, BASE, CAP, Some(Duration::from_secs(3600)), 0.1),
            CAP
        );
    }

    #[test]
    fn retry_after_parses_seconds_and_dates() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:47 GMT", now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(parse_retry_after("soon", now), None);
    }
}
