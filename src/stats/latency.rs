//! Latency histograms as counters: one counter per bucket
//! (`<prefix>latency_le_<ms>`), flushed with the rest into the per-minute
//! series, so a percentile over any window is a sum of minutes, cluster-wide,
//! with no row per attempt read back.
//!
//! Rule: a percentile is reported as the upper bound of the bucket it falls
//! in (the last bucket, beyond [`BUCKETS_MS`], as `null`): an estimate
//! whose error is the bucket's width, never a made-up value.

use std::sync::atomic::{AtomicI64, Ordering};

/// Bucket upper bounds, in milliseconds; one more bucket takes the rest.
pub const BUCKETS_MS: [i64; 14] = [
    5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000, 60_000, 120_000,
];
/// Buckets including the last, unbounded one.
pub const BUCKETS: usize = BUCKETS_MS.len() + 1;

/// The counter name suffix of bucket `i`.
pub fn bucket_name(i: usize) -> String {
    match BUCKETS_MS.get(i) {
        Some(ms) => format!("latency_le_{ms}"),
        None => "latency_le_inf".to_owned(),
    }
}

/// The bucket a counter name suffix names.
pub fn bucket_of_name(name: &str) -> Option<usize> {
    let rest = name.strip_prefix("latency_le_")?;
    if rest == "inf" {
        return Some(BUCKETS_MS.len());
    }
    let ms: i64 = rest.parse().ok()?;
    BUCKETS_MS.iter().position(|b| *b == ms)
}

/// The bucket of one observation.
pub fn bucket_of(ms: i64) -> usize {
    BUCKETS_MS
        .iter()
        .position(|b| ms <= *b)
        .unwrap_or(BUCKETS_MS.len())
}

/// One histogram of atomics.
#[derive(Default)]
pub struct Cells(pub [AtomicI64; BUCKETS]);

impl Cells {
    pub fn observe(&self, ms: i64) {
        self.0[bucket_of(ms)].fetch_add(1, Ordering::Relaxed);
    }
}

/// The `q` quantile (0..=1) of `counts`: the upper bound of its bucket in
/// milliseconds; `None` without observations or beyond the last bound.
pub fn quantile(counts: &[i64; BUCKETS], q: f64) -> Option<i64> {
    let total: i64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = ((q * total as f64).ceil() as i64).max(1);
    let mut seen = 0;
    for (i, n) in counts.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return BUCKETS_MS.get(i).copied();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_their_bucket_and_quantiles_read_its_bound() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(5), 0);
        assert_eq!(bucket_of(6), 1);
        assert_eq!(bucket_of(999_999), BUCKETS_MS.len());
        for i in 0..BUCKETS {
            assert_eq!(bucket_of_name(&bucket_name(i)), Some(i));
        }
        let mut c = [0; BUCKETS];
        assert_eq!(quantile(&c, 0.5), None);
        c[bucket_of(20)] = 98; // ≤ 25 ms
        c[bucket_of(400)] = 2; // ≤ 500 ms
        assert_eq!(quantile(&c, 0.5), Some(25));
        assert_eq!(quantile(&c, 0.99), Some(500));
        c[BUCKETS - 1] = 100;
        assert_eq!(quantile(&c, 0.99), None, "beyond the last bound");
    }
}
