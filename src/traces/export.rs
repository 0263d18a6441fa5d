//! The way out: the SDK's batch processor (a thread of its own, so the
//! request path only queues a finished span) in front of the OTLP/HTTP
//! exporter, with a bound hookgate can count.
//!
//! The SDK's processor drops a span when its queue is full but keeps the
//! count to itself (it logs it at shutdown), so [`Bounded`] admits spans
//! itself: it counts the spans handed over and not yet exported, and drops
//! (and counts, `hookgate_trace_spans_dropped_total`) beyond the bound. The
//! processor's own queue has the same size, so it never drops first.
//!
//! Rule: nothing here waits on the collector from a request or delivery
//! task; a collector that is down costs queued spans, then dropped ones.

use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{BatchSpanProcessor, Span, SpanData, SpanExporter, SpanProcessor};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The batch processor behind an admission bound.
pub struct Bounded {
    inner: BatchSpanProcessor,
    /// Spans handed to `inner` and not yet through an export.
    queued: Arc<AtomicUsize>,
    max: usize,
    dropped: metrics::Counter,
}

impl Bounded {
    pub fn new(inner: BatchSpanProcessor, queued: Arc<AtomicUsize>, max: usize) -> Self {
        Self {
            inner,
            queued,
            max,
            dropped: metrics::counter!("hookgate_trace_spans_dropped_total"),
        }
    }
}

impl fmt::Debug for Bounded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bounded")
            .field("queued", &self.queued.load(Ordering::Relaxed))
            .field("max", &self.max)
            .finish()
    }
}

impl SpanProcessor for Bounded {
    fn on_start(&self, span: &mut Span, cx: &opentelemetry::Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.queued.fetch_add(1, Ordering::Relaxed) >= self.max {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            self.dropped.increment(1);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The OTLP exporter, telling [`Bounded`] when spans have left the queue
/// and counting exports by outcome (`hookgate_trace_exports_total`).
#[derive(Debug)]
pub struct Counted<E> {
    pub inner: E,
    pub queued: Arc<AtomicUsize>,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len();
        let result = self.inner.export(batch).await;
        self.queued.fetch_sub(n, Ordering::Relaxed);
        let outcome = if result.is_ok() { "ok" } else { "error" };
        metrics::counter!("hookgate_trace_exports_total", "outcome" => outcome).increment(1);
        if let Err(e) = &result {
            // The exporter's error names the endpoint at most, never a
            // header value.
            tracing::debug!(error = %e, spans = n, "trace export failed");
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
