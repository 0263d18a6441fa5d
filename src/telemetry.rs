//! Logs (tracing, human or JSON) and the Prometheus recorder.
//!
//! Rule: log fields use dotted names and units (`event.id`, `latency_ms`);
//! bodies, signatures and secrets are never recorded.

use crate::config::raw::LogFormat;
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};
use std::io::IsTerminal;
use std::sync::OnceLock;
use std::time::Duration;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry, reload};

/// The installed subscriber's filter, for [`set_log_level`]. Process-wide
/// like the subscriber itself.
static FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

/// The filter for `level` (`server.log_level`), unless `RUST_LOG` is set.
fn filter(level: &str) -> Result<EnvFilter, String> {
    match EnvFilter::try_from_default_env() {
        Ok(f) => Ok(f),
        Err(_) => EnvFilter::try_new(format!("{level},sqlx=warn")).map_err(|e| e.to_string()),
    }
}

/// Installs the global log subscriber. `RUST_LOG` overrides `default_level`.
pub fn init_logs(format: LogFormat, default_level: &str) {
    let filter = filter(default_level).unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let (filter, handle) = reload::Layer::new(filter);
    // Colour codes only for a person at a terminal: in a file, journald or
    // a log shipper they are noise around every field.
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Json => tracing_subscriber::registry()
            .with(filter)
            .with(fmt.json().flatten_event(true))
            .try_init(),
        LogFormat::Human => tracing_subscriber::registry()
            .with(filter)
            .with(fmt)
            .try_init(),
    };
    if installed.is_ok() {
        let _ = FILTER.set(handle);
    }
}

/// Applies a reloaded `server.log_level`. `RUST_LOG`, when set, still wins
/// (it is re-read too). Without an installed subscriber (tests, embedding)
/// there is nothing to change.
pub fn set_log_level(level: &str) -> Result<(), String> {
    let f = filter(level)?;
    match FILTER.get() {
        Some(h) => h.reload(f).map_err(|e| e.to_string()),
        None => Ok(()),
    }
}

/// A duration as the `latency_ms` log field: milliseconds with microsecond
/// resolution, so a log line reads `1.234`, not `1.2340000000000002`.
pub fn log_millis(d: Duration) -> f64 {
    d.as_micros() as f64 / 1000.0
}

/// Verification and request latency buckets, in seconds.
const LATENCY_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];

/// How often the recorder's histogram samples are folded into their buckets
/// when nobody scrapes `/metrics` (a scrape folds them too).
const UPKEEP_EVERY: Duration = Duration::from_secs(1);

/// The recorder with hookgate's bucket lists.
fn recorder() -> PrometheusRecorder {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Suffix("_batch_size".into()),
                &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0],
            )
        })
        .expect("bucket lists are not empty")
        .build_recorder()
}

/// Folds `handle`'s histogram samples into their buckets every `every`, on a
/// thread of its own (process-wide, like the recorder: it outlives any one
/// runtime). The recorder keeps every recorded sample until an upkeep or a
/// render drains it; a recorder built with `build_recorder` gets no upkeep
/// task (metrics-exporter-prometheus docs, "Upkeep and maintenance":
/// <https://docs.rs/metrics-exporter-prometheus/0.18.3/metrics_exporter_prometheus/#upkeep-and-maintenance>),
/// so without this thread a gateway nobody scrapes grew by ~16 bytes per
/// sample (64 MiB for 4 M, the test's control below), three samples per
/// request: over 1 GiB an hour at 8,000 requests/s.
fn keep_up(handle: PrometheusHandle, every: Duration) {
    let spawned = std::thread::Builder::new()
        .name("hookgate-metrics".into())
        .spawn(move || {
            loop {
                std::thread::sleep(every);
                handle.run_upkeep();
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "could not start the metrics upkeep thread; histograms grow until /metrics is scraped");
    }
}

/// The process-wide Prometheus recorder. Metrics are per process by nature
/// (the cluster-wide view is `/stats`), so one recorder serves every `App`
/// in the process, tests included.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = recorder();
            let handle = recorder.handle();
            keep_up(handle.clone(), UPKEEP_EVERY);
            // Fails only if a host program installed its own recorder
            // first; /metrics then shows nothing, and that program's
            // recorder gets our metrics.
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was already installed; /metrics will be empty");
            }
            crate::stats::families::describe();
            handle
        })
        .clone()
}

#[cfg(test)]
mod tests {
    #[test]
    fn log_latencies_are_milliseconds_without_float_noise() {
        assert_eq!(log_millis(Duration::from_micros(1234)).to_string(), "1.234");
        assert_eq!(
            log_millis(Duration::from_nanos(2_300_999)).to_string(),
            "2.3"
        );
        assert_eq!(log_millis(Duration::ZERO).to_string(), "0");
    }

    use super::*;

    const CHILD: &str = "HOOKGATE_TEST_UPKEEP_CHILD";
    const SAMPLES: usize = 4_000_000;

    /// Peak RSS of this process, in KiB.
    fn peak_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/self/status")
    }

    /// Runs `child_records_samples` alone in a new process of this test
    /// binary (the parent's RSS is shared with every test running beside it)
    /// and returns how far its peak RSS rose while recording, in KiB.
    fn growth_in_child(upkeep: bool) -> u64 {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "telemetry::tests::child_records_samples",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, if upkeep { "upkeep" } else { "none" })
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "child failed: {stdout}");
        // The harness prints the test's name on the same line.
        stdout
            .split_once("GROWTH_KIB=")
            .and_then(|(_, v)| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no GROWTH_KIB line in: {stdout}"))
    }

    #[test]
    fn histogram_samples_do_not_pile_up_when_nobody_scrapes() {
        // 4 M samples kept as they are take ~64 MiB. The control shows the
        // recorder keeps them without upkeep, so the bound below can fail.
        let without = growth_in_child(false);
        assert!(without > 24 * 1024, "control: {without} KiB");
        let with = growth_in_child(true);
        assert!(
            with < 8 * 1024,
            "with upkeep: {with} KiB (without: {without})"
        );
    }

    /// The child half of the test above (does nothing when run directly).
    #[test]
    #[ignore = "run by histogram_samples_do_not_pile_up_when_nobody_scrapes in a child process"]
    fn child_records_samples() {
        let Ok(mode) = std::env::var(CHILD) else {
            return;
        };
        let recorder = recorder();
        if mode == "upkeep" {
            keep_up(recorder.handle(), Duration::from_millis(5));
        }
        let before = peak_kib();
        metrics::with_local_recorder(&recorder, || {
            let h = metrics::histogram!("hookgate_test_seconds");
            for chunk in 0..SAMPLES / 10_000 {
                for i in 0..10_000 {
                    h.record((chunk * 10_000 + i) as f64 * 1e-9);
                }
                // Room for the upkeep thread on a busy machine.
                std::thread::sleep(Duration::from_micros(500));
            }
        });
        println!("GROWTH_KIB={}", peak_kib() - before);
    }
}
