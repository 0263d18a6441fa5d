//! Points in time as unix epoch milliseconds: the one unit the ledger stores
//! and every layer passes around.
//!
//! Rule: a time is a [`Millis`], never a bare integer; seconds appear only at
//! the edge that needs them ([`Millis::as_secs`], [`Millis::from_secs`]).
//! Arithmetic saturates instead of overflowing. In SQL a `Millis` is an
//! `int8`/`INTEGER` column (transparent encoding).

use std::fmt;
use std::ops::{Add, Sub};
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Milliseconds since the unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, sqlx::Type)]
#[sqlx(transparent)]
pub struct Millis(pub i64);

impl Millis {
    /// The current time: this machine's wall clock, or, once the process
    /// follows a shared ledger's clock ([`follow_ledger_clock`]), the
    /// ledger's time carried forward by the monotonic clock.
    pub fn now() -> Self {
        PROCESS_CLOCK.now()
    }

    /// This machine's wall clock (the epoch if the clock is before it).
    pub fn wall() -> Self {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(Self(0), |d| Self(duration_ms(d)))
    }

    /// `secs` unix seconds.
    pub const fn from_secs(secs: i64) -> Self {
        Self(secs.saturating_mul(1000))
    }

    /// Whole unix seconds (truncated).
    pub const fn as_secs(self) -> i64 {
        self.0 / 1000
    }

    /// An RFC 3339 time (`Z`, a `±HH:MM` offset, or no zone, read as UTC;
    /// optional fraction), as APIs and some providers' signed timestamps
    /// write it.
    pub fn parse_rfc3339(text: &str) -> Option<Self> {
        let text = text.trim();
        // Split a numeric offset off the time part (after `T`, position ≥ 19).
        let (base, offset_secs) = match text.get(19..).and_then(|t| t.rfind(['+', '-'])) {
            Some(at) if !text.ends_with(['Z', 'z']) => {
                let (b, off) = text.split_at(19 + at);
                let sign = if off.starts_with('-') { -1 } else { 1 };
                let (h, m) = off[1..].split_once(':')?;
                let secs = h.parse::<i64>().ok()? * 3600 + m.parse::<i64>().ok()? * 60;
                (b, sign * secs)
            }
            _ => (text, 0),
        };
        let t = humantime::parse_rfc3339_weak(base.trim_end_matches(['Z', 'z'])).ok()?;
        let ms = duration_ms(t.duration_since(UNIX_EPOCH).ok()?);
        Some(Self(ms - offset_secs * 1000))
    }

    /// RFC 3339 in UTC with milliseconds (`2026-01-31T12:00:00.000Z`).
    pub fn rfc3339(self) -> String {
        let at = UNIX_EPOCH + Duration::from_millis(self.0.max(0) as u64);
        humantime::format_rfc3339_millis(at).to_string()
    }

    /// RFC 3339 in UTC, whole seconds (`2026-01-31T12:00:00Z`): how
    /// providers that sign an RFC 3339 time write it (Box, Increase,
    /// Zendesk), and how provider APIs take a time in a query.
    pub fn rfc3339_seconds(self) -> String {
        let at = UNIX_EPOCH + Duration::from_secs(self.as_secs().max(0) as u64);
        humantime::format_rfc3339_seconds(at).to_string()
    }

    /// Time elapsed from `earlier` to `self`; zero if `earlier` is later.
    pub fn saturating_sub(self, earlier: Millis) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0).max(0) as u64)
    }
}

/// Where [`Millis::now`] reads the time.
///
/// Replicas on one PostgreSQL ledger compare times each of them wrote: a
/// delivery's lease (`lease_until`), its next attempt, a dedup window's end.
/// If each used its own wall clock, one replica whose clock steps forward
/// (a bad NTP step, a VM resumed from a snapshot) would see the others'
/// leases as run out and send what they are sending. So a process on a
/// shared ledger takes its time from the ledger's server: it samples the
/// server's clock now and then, and between samples advances it by its own
/// monotonic clock, which a step of the wall clock does not move. A
/// single-process ledger (SQLite) keeps the wall clock.
struct Clock {
    /// Whether [`Clock::offset_ms`] is set (a sample was taken).
    following: AtomicBool,
    /// The followed clock's time at [`Clock::base`], in ms.
    offset_ms: AtomicI64,
    base: Instant,
}

impl Clock {
    fn new() -> Self {
        Self {
            following: AtomicBool::new(false),
            offset_ms: AtomicI64::new(0),
            base: Instant::now(),
        }
    }

    fn now(&self) -> Millis {
        if !self.following.load(Ordering::Acquire) {
            return Millis::wall();
        }
        let since = duration_ms(self.base.elapsed());
        Millis(self.offset_ms.load(Ordering::Relaxed).saturating_add(since))
    }

    /// Follows a clock that read `at` somewhere between `sent` and
    /// `answered` (taken as the midpoint). Returns how far that clock is
    /// ahead of this machine's wall clock.
    fn follow(&self, at: Millis, sent: Instant, answered: Instant) -> Duration {
        let mid = sent + answered.saturating_duration_since(sent) / 2;
        let since = duration_ms(mid.saturating_duration_since(self.base));
        self.offset_ms
            .store(at.0.saturating_sub(since), Ordering::Relaxed);
        self.following.store(true, Ordering::Release);
        let wall = Millis::wall().0 - duration_ms(answered.elapsed());
        Duration::from_millis(at.0.abs_diff(wall))
    }
}

static PROCESS_CLOCK: LazyLock<Clock> = LazyLock::new(Clock::new);

/// Makes [`Millis::now`] follow the ledger's clock, read as `at` by a
/// statement sent at `sent` and answered at `answered`. Returns how far the
/// ledger's clock is from this machine's wall clock (either way).
pub fn follow_ledger_clock(at: Millis, sent: Instant, answered: Instant) -> Duration {
    PROCESS_CLOCK.follow(at, sent, answered)
}

/// Whole milliseconds of `d`, saturating at `i64::MAX`.
fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Add<Duration> for Millis {
    type Output = Millis;
    fn add(self, d: Duration) -> Millis {
        Millis(self.0.saturating_add(duration_ms(d)))
    }
}

impl Sub<Duration> for Millis {
    type Output = Millis;
    fn sub(self, d: Duration) -> Millis {
        Millis(self.0.saturating_sub(duration_ms(d)))
    }
}

/// The number of milliseconds, e.g. `1700000000123`.
impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_convert_both_ways() {
        assert_eq!(Millis::from_secs(1_700_000_000), Millis(1_700_000_000_000));
        assert_eq!(Millis(1_700_000_000_999).as_secs(), 1_700_000_000);
        assert_eq!(Millis::from_secs(i64::MAX), Millis(i64::MAX));
    }

    #[test]
    fn durations_add_subtract_and_saturate() {
        let t = Millis(10_000);
        assert_eq!(t + Duration::from_millis(1500), Millis(11_500));
        assert_eq!(t - Duration::from_secs(2), Millis(8_000));
        assert_eq!(
            Millis(i64::MAX - 1) + Duration::from_secs(1),
            Millis(i64::MAX)
        );
        assert_eq!(t + Duration::MAX, Millis(i64::MAX));
        assert_eq!(
            Millis(12_500).saturating_sub(t),
            Duration::from_millis(2500)
        );
        assert_eq!(t.saturating_sub(Millis(12_500)), Duration::ZERO);
    }

    #[test]
    fn rfc3339_parses_with_zone_offset_or_none() {
        let z = Millis::parse_rfc3339("2026-01-31T12:00:00Z").unwrap();
        assert_eq!(Millis::parse_rfc3339("2026-01-31T13:00:00+01:00"), Some(z));
        assert_eq!(Millis::parse_rfc3339("2026-01-31T11:30:00-00:30"), Some(z));
        // No zone: UTC (Orb's `X-Orb-Timestamp`).
        assert_eq!(Millis::parse_rfc3339("2026-01-31T12:00:00"), Some(z));
        assert_eq!(
            Millis::parse_rfc3339("2026-01-31T12:00:00.250"),
            Some(Millis(z.0 + 250))
        );
        assert_eq!(z.rfc3339(), "2026-01-31T12:00:00.000Z");
        assert_eq!(Millis(z.0 + 999).rfc3339_seconds(), "2026-01-31T12:00:00Z");
        for bad in [
            "yesterday",
            "2026-01-31",
            "2026-13-01T00:00:00Z",
            "",
            "1700000000",
        ] {
            assert_eq!(Millis::parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_followed_clock_moves_with_the_monotonic_clock_not_the_wall() {
        let c = Clock::new();
        let wall = Millis::wall();
        assert!(c.now().saturating_sub(wall) < Duration::from_secs(1));
        // A ledger 90 s ahead, read by a statement that took 20 ms.
        let sent = Instant::now();
        let answered = sent + Duration::from_millis(20);
        let ahead = c.follow(Millis(wall.0 + 90_000), sent, answered);
        assert!(ahead.abs_diff(Duration::from_secs(90)) < Duration::from_secs(1));
        let t0 = c.now();
        assert!(
            t0.0 - wall.0 >= 89_000 && t0.0 - wall.0 <= 91_000,
            "{t0} {wall}"
        );
        std::thread::sleep(Duration::from_millis(30));
        let t1 = c.now();
        assert!(t1.0 - t0.0 >= 30 && t1.0 - t0.0 < 1_000, "{t0} {t1}");
        // A later sample replaces the offset.
        c.follow(wall, Instant::now(), Instant::now());
        assert!(c.now().0 - wall.0 < 2_000);
    }

    #[test]
    fn orders_and_displays_as_milliseconds() {
        assert!(Millis(1) < Millis(2));
        assert_eq!(Millis(1_700_000_000_123).to_string(), "1700000000123");
        assert!(Millis::now() > Millis::from_secs(1_600_000_000));
    }
}
