//! Traces: OpenTelemetry spans over OTLP/HTTP (protobuf), when
//! `[telemetry] otlp_endpoint` is set (docs/operations.md, "Traces").
//!
//! One trace per webhook: the `POST /webhooks/{source}` server span with
//! `hookgate.verify`, `hookgate.dedup` and `hookgate.commit` below it
//! ([`webhook`]). Each delivery attempt is a span of the event's trace,
//! whenever and wherever it runs, because the event's trace is derived
//! from its id ([`ids`]); the attempt sends its `traceparent` to the
//! target ([`attempt`]). A duplicate's request is a trace of its own that
//! links to the original event's.
//!
//! Rule: spans carry names, ids, statuses and outcomes, never a body, a
//! signature, a secret or a header value; with tracing off nothing here
//! runs (`AppState::traces` is `None`).

pub mod attempt;
mod export;
pub mod ids;
pub mod webhook;

use crate::config;
use opentelemetry::trace::{SpanContext, SpanKind, TraceFlags, TraceState, TracerProvider};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SamplingDecision, SdkTracerProvider,
    ShouldSample,
};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

/// Most spans in one export request.
const MAX_BATCH: usize = 512;

/// The exporter and the tracer every span of this process is built with.
pub struct Traces {
    provider: SdkTracerProvider,
    tracer: opentelemetry_sdk::trace::SdkTracer,
    /// The root sampler, asked again for an attempt's remote parent so an
    /// event's attempts are sampled exactly when its webhook was.
    ratio: Sampler,
}

impl std::fmt::Debug for Traces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Traces").finish_non_exhaustive()
    }
}

/// `otlp_endpoint` as the URL spans are posted to: http(s), a host, no
/// credentials (they would be printed), `/v1/traces` added unless the
/// path ends with it (the OTLP/HTTP default path,
/// <https://opentelemetry.io/docs/specs/otlp/#otlphttp-request>).
pub fn endpoint(text: &str) -> Result<String, String> {
    let url = reqwest::Url::parse(text.trim())
        .map_err(|e| format!("not a URL ({e}); e.g. \"http://127.0.0.1:4318\""))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "`{}:` is not supported: traces are exported over OTLP/HTTP (http:// or https://); \
             OTLP/gRPC is not built in",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("needs a host".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not hold credentials; put the collector's header in \
             OTEL_EXPORTER_OTLP_TRACES_HEADERS instead"
            .into());
    }
    let mut url = url;
    if !url.path().ends_with("/v1/traces") {
        let path = format!("{}/v1/traces", url.path().trim_end_matches('/'));
        url.set_path(&path);
    }
    Ok(url.to_string())
}

impl Traces {
    /// The exporter for `cfg`. Built on a thread of its own: the exporter's
    /// blocking HTTP client runs a runtime of its own, which may be neither
    /// built nor dropped on a runtime's thread.
    pub async fn start(cfg: &config::Traces) -> anyhow::Result<Arc<Self>> {
        let cfg = cfg.clone();
        let built = tokio::task::spawn_blocking(move || Self::build(&cfg)).await?;
        Ok(Arc::new(built?))
    }

    fn build(cfg: &config::Traces) -> anyhow::Result<Self> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(&cfg.endpoint)
            .with_timeout(cfg.export_timeout)
            .build()
            .map_err(|e| anyhow::anyhow!("telemetry.otlp_endpoint: building the exporter: {e}"))?;
        let queued = Arc::new(AtomicUsize::new(0));
        let exporter = export::Counted {
            inner: exporter,
            queued: queued.clone(),
        };
        let batch = BatchConfigBuilder::default()
            .with_max_queue_size(cfg.max_queued_spans)
            .with_max_export_batch_size(MAX_BATCH.min(cfg.max_queued_spans))
            .with_scheduled_delay(cfg.export_interval)
            .build();
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(batch)
            .build();
        let ratio = Sampler::TraceIdRatioBased(cfg.sample_ratio);
        let provider = SdkTracerProvider::builder()
            .with_span_processor(export::Bounded::new(
                processor,
                queued,
                cfg.max_queued_spans,
            ))
            .with_sampler(Sampler::ParentBased(Box::new(ratio.clone())))
            .with_id_generator(ids::Ids::default())
            .with_resource(
                opentelemetry_sdk::Resource::builder_empty()
                    .with_service_name(cfg.service_name.clone())
                    .with_attribute(opentelemetry::KeyValue::new(
                        "service.version",
                        env!("CARGO_PKG_VERSION"),
                    ))
                    .build(),
            )
            .build();
        let tracer = provider.tracer("hookgate");
        Ok(Self {
            provider,
            tracer,
            ratio,
        })
    }

    /// Exports what is queued and stops the exporter, within `timeout`
    /// (blocking: run it off the runtime).
    pub fn shutdown(&self, timeout: Duration) {
        if let Err(e) = self.provider.shutdown_with_timeout(timeout) {
            tracing::warn!(error = %e, "trace exporter did not stop cleanly");
        }
    }

    /// The span context of event `event_id`'s webhook span, as a remote
    /// parent or link target: derived ids, sampled as the root sampler
    /// decided for that trace id.
    fn event_context(&self, source: &str, event_id: &str) -> SpanContext {
        let (trace_id, span_id) = ids::of_event(source, event_id);
        let sampled = self
            .ratio
            .should_sample(None, trace_id, "", &SpanKind::Server, &[], &[])
            .decision
            == SamplingDecision::RecordAndSample;
        let flags = if sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        SpanContext::new(trace_id, span_id, flags, true, TraceState::default())
    }
}

/// Stops `traces` off the runtime, flushing queued spans.
pub async fn stop(traces: Option<Arc<Traces>>) {
    if let Some(t) = traces {
        let _ = tokio::task::spawn_blocking(move || t.shutdown(Duration::from_secs(5))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::endpoint;
    use crate::config::Config;

    fn load(telemetry: &str) -> Result<Config, String> {
        Config::from_toml_str(
            &format!("[telemetry]\n{telemetry}"),
            std::path::Path::new("."),
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn telemetry_settings_are_checked_by_key() {
        let off = load("sample_ratio = 0.5").unwrap();
        assert_eq!(off.traces, None, "no endpoint: no traces");
        let on = load("otlp_endpoint = \"http://127.0.0.1:4318\"\nsample_ratio = 0.01").unwrap();
        let t = on.traces.unwrap();
        assert_eq!(t.endpoint, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(
            (t.sample_ratio, t.service_name.as_str()),
            (0.01, "hookgate")
        );

        let e = load("otlp_endpoint = \"http://c:4318\"\nsample_ratio = 1.5").unwrap_err();
        assert!(
            e.contains("telemetry.sample_ratio") && e.contains("between 0 and 1"),
            "{e}"
        );
        let e = load("otlp_endpoint = \"grpc://c:4317\"").unwrap_err();
        assert!(
            e.contains("telemetry.otlp_endpoint") && e.contains("gRPC"),
            "{e}"
        );
        let e = load("otlp_endpoint = \"http://u:pw-in-url@c:4318\"").unwrap_err();
        assert!(
            e.contains("telemetry.otlp_endpoint") && !e.contains("pw-in-url"),
            "{e}"
        );
        let e = load("service_name = \"\"").unwrap_err();
        assert!(e.contains("telemetry.service_name"), "{e}");
        let e = load("sampel_ratio = 1").unwrap_err();
        assert!(e.contains("sampel_ratio"), "{e}");
    }

    #[test]
    fn the_endpoint_gets_the_otlp_path_and_refuses_what_it_cannot_use() {
        assert_eq!(
            endpoint("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            endpoint("https://otel.example/base/").unwrap(),
            "https://otel.example/base/v1/traces"
        );
        assert_eq!(
            endpoint("http://c:4318/v1/traces").unwrap(),
            "http://c:4318/v1/traces"
        );
        assert!(endpoint("grpc://c:4317").unwrap_err().contains("gRPC"));
        let creds = endpoint("http://user:hunter2@c:4318").unwrap_err();
        assert!(creds.contains("credentials") && !creds.contains("hunter2"));
        assert!(endpoint("c:4318").is_err());
    }
}
