//! Logs (tracing, human or JSON) and the Prometheus recorder.
//!
//! Rule: log fields use dotted names and units (`event.id`, `latency_ms`);
//! bodies, signatures and secrets are never recorded.

use crate::config::raw::LogFormat;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;
use tracing_subscriber::EnvFilter;

/// Installs the global log subscriber. `RUST_LOG` overrides `default_level`.
pub fn init_logs(format: LogFormat, default_level: &str) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("{default_level},sqlx=warn")));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Human => builder.try_init(),
    };
}

/// Verification and request latency buckets, in seconds.
const LATENCY_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];

/// The process-wide Prometheus recorder. Metrics are per process by nature
/// (the cluster-wide view is `/stats`), so one recorder serves every `App`
/// in the process, tests included.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Suffix("_batch_size".into()),
                        &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0],
                    )
                })
                .expect("bucket lists are not empty");
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            // Fails only if a host program installed its own recorder
            // first; /metrics then shows nothing, and that program's
            // recorder gets our metrics.
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was already installed; /metrics will be empty");
            }
            handle
        })
        .clone()
}
