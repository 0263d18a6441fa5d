//! Traces over OTLP/HTTP: a loopback collector that decodes the official
//! protobuf messages (opentelemetry-proto) receives what the gateway
//! exports; targets are the usual loopback servers.

use crate::helpers::*;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message;
use std::sync::{Arc, Mutex};
use std::time::Duration;

crate::both_backends!(a_webhook_is_one_trace_and_its_delivery_joins_it);

const WAIT: Duration = Duration::from_secs(20);

/// A loopback OTLP/HTTP collector: every request's raw bytes and decoded spans.
#[derive(Clone, Default)]
pub(crate) struct Collector {
    raw: Arc<Mutex<Vec<Bytes>>>,
    spans: Arc<Mutex<Vec<(String, Span)>>>,
}

impl Collector {
    /// Starts it; returns it and its base URL (`http://127.0.0.1:<port>`).
    pub(crate) async fn start() -> (Self, String) {
        let c = Self::default();
        let app = Router::new()
            .route("/v1/traces", post(receive))
            .with_state(c.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (c, url)
    }

    fn spans(&self) -> Vec<Span> {
        let spans = self.spans.lock().unwrap();
        spans.iter().map(|(_, s)| s.clone()).collect()
    }

    /// The `service.name` every exported resource carried.
    fn services(&self) -> Vec<String> {
        let spans = self.spans.lock().unwrap();
        spans.iter().map(|(s, _)| s.clone()).collect()
    }

    /// Every byte received, for the secret checks.
    fn bytes(&self) -> Vec<u8> {
        self.raw.lock().unwrap().concat()
    }

    /// The spans named `name`, once there are `n` of them.
    pub(crate) async fn wait_for(&self, name: &str, n: usize) -> Vec<Span> {
        let named =
            |c: &Self| -> Vec<Span> { c.spans().into_iter().filter(|s| s.name == name).collect() };
        let ok = eventually(WAIT, || async { named(self).len() >= n }).await;
        assert!(
            ok,
            "{n} `{name}` span(s) expected; got {:?}",
            names(&self.spans())
        );
        named(self)
    }
}

async fn receive(State(c): State<Collector>, body: Bytes) -> axum::http::StatusCode {
    let request = ExportTraceServiceRequest::decode(body.clone()).expect("valid OTLP protobuf");
    c.raw.lock().unwrap().push(body);
    let mut spans = c.spans.lock().unwrap();
    for rs in request.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|r| r.attributes.iter())
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| text(kv.value.as_ref()?.value.as_ref()?))
            .unwrap_or_default();
        for ss in rs.scope_spans {
            spans.extend(ss.spans.into_iter().map(|s| (service.clone(), s)));
        }
    }
    axum::http::StatusCode::OK
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::StringValue(s) => Some(s.clone()),
        Value::IntValue(i) => Some(i.to_string()),
        Value::BoolValue(b) => Some(b.to_string()),
        _ => None,
    }
}

fn names(spans: &[Span]) -> Vec<&str> {
    spans.iter().map(|s| s.name.as_str()).collect()
}

/// Attribute `key` of `span`, as text.
pub(crate) fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| text(kv.value.as_ref()?.value.as_ref()?))
}

/// The one span with attribute `key` = `value` among `spans`.
fn with_attr<'a>(spans: &'a [Span], key: &str, value: &str) -> &'a Span {
    let found: Vec<&Span> = spans
        .iter()
        .filter(|s| attr(s, key).as_deref() == Some(value))
        .collect();
    assert_eq!(found.len(), 1, "one span with {key}={value}");
    found[0]
}

/// `[telemetry]` exporting to `collector` quickly, at `ratio`.
pub(crate) fn telemetry(collector: &str, ratio: f64) -> String {
    format!(
        "[telemetry]\notlp_endpoint = \"{collector}\"\nsample_ratio = {ratio}\n\
         service_name = \"hookgate-test\"\nexport_interval = \"50ms\"\n"
    )
}

/// `traceparent` as (trace id, parent id, flags), hex.
pub(crate) fn traceparent(value: &str) -> (String, String, String) {
    let parts: Vec<&str> = value.split('-').collect();
    assert_eq!(parts.len(), 4, "traceparent: {value}");
    assert_eq!(parts[0], "00");
    (parts[1].into(), parts[2].into(), parts[3].into())
}

async fn a_webhook_is_one_trace_and_its_delivery_joins_it(backend: Backend) {
    // Arrange
    let (collector, endpoint) = Collector::start().await;
    let target = TestTarget::start().await;
    let mut opts = Opts::forwarding_to(backend, "t", &target, "");
    opts.extra.push_str(&telemetry(&endpoint, 1.0));
    let app = spawn_app(opts).await;

    // Act
    let res = app.post_stripe("evt_traced").await;
    assert_eq!(res.status(), 200);

    // Assert: receive → verify, dedup, commit, in one trace.
    let root = collector.wait_for("POST /webhooks/{source}", 1).await;
    let root = with_attr(&root, "hookgate.event.id", "evt_traced");
    assert_eq!(root.kind, SpanKind::Server as i32);
    assert!(root.parent_span_id.is_empty(), "the webhook span is a root");
    for (key, value) in [
        ("http.request.method", "POST"),
        ("http.route", "/webhooks/{source}"),
        ("url.path", "/webhooks/stripe"),
        ("http.response.status_code", "200"),
        ("hookgate.source", "stripe"),
        ("hookgate.outcome", "new"),
    ] {
        assert_eq!(attr(root, key).as_deref(), Some(value), "{key}");
    }
    for child in ["hookgate.verify", "hookgate.dedup", "hookgate.commit"] {
        let spans = collector.wait_for(child, 1).await;
        let s = spans
            .iter()
            .find(|s| s.trace_id == root.trace_id)
            .unwrap_or_else(|| panic!("{child} in the webhook's trace"));
        assert_eq!(s.parent_span_id, root.span_id, "{child}'s parent");
        assert!(s.start_time_unix_nano >= root.start_time_unix_nano);
        assert!(s.end_time_unix_nano <= root.end_time_unix_nano);
    }
    let dedup = collector.wait_for("hookgate.dedup", 1).await;
    assert_eq!(
        attr(&dedup[0], "hookgate.dedup.decision").as_deref(),
        Some("new")
    );

    // The attempt: a client span under the webhook span, and the target's
    // traceparent names it.
    let attempts = collector.wait_for("POST", 1).await;
    let attempt = &attempts[0];
    assert_eq!(attempt.kind, SpanKind::Client as i32);
    assert_eq!(attempt.trace_id, root.trace_id);
    assert_eq!(attempt.parent_span_id, root.span_id);
    for (key, value) in [
        ("hookgate.target", "t"),
        ("hookgate.source", "stripe"),
        ("hookgate.event.id", "evt_traced"),
        ("hookgate.outcome", "delivered"),
        ("http.response.status_code", "200"),
        ("server.address", "127.0.0.1"),
        ("url.path", "/hook"),
        ("hookgate.attempt", "1"),
    ] {
        assert_eq!(attr(attempt, key).as_deref(), Some(value), "{key}");
    }
    let got = target.received();
    let header = got[0].headers["traceparent"].to_str().unwrap();
    let (trace, parent, flags) = traceparent(header);
    assert_eq!(trace, hex::encode(&root.trace_id));
    assert_eq!(parent, hex::encode(&attempt.span_id));
    assert_eq!(flags, "01", "sampled");
    assert!(
        collector.services().iter().all(|s| s == "hookgate-test"),
        "service.name"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_secret_is_exported() {
    // Arrange: a webhook with a credential header, a target whose URL holds
    // a token and that signs with a key of its own.
    let (collector, endpoint) = Collector::start().await;
    let target = TestTarget::start().await;
    let url = format!("{}?token=query-token-in-target-url", target.url);
    let mut opts = Opts::new(Backend::Embedded);
    opts.stripe_targets = vec!["t".into()];
    opts.extra = format!(
        "[targets.t]\nurl = \"{url}\"\nforward_credentials = true\n\
         signing_secret = \"whsec_dGFyZ2V0LXNpZ25pbmcta2V5LXNlY3JldA==\"\n{}",
        telemetry(&endpoint, 1.0)
    );
    let app = spawn_app(opts).await;
    let body =
        br#"{"id":"evt_secret","object":"event","type":"x","data":{"card":"body-marker-4242"}}"#;
    let mut headers = signers::stripe(STRIPE_SECRET, now(), body);
    let sig = headers[0].1.clone();
    headers.push((
        "authorization".to_owned(),
        "Bearer credential-header-value".to_owned(),
    ));

    // Act
    let res = app.post("stripe", &headers, body).await;
    assert_eq!(res.status(), 200);
    collector.wait_for("POST /webhooks/{source}", 1).await;
    collector.wait_for("POST", 1).await;
    // Admin calls are not traced, and carry the token anyway.
    let _ = app.stats().await;

    // Assert
    let sent = target.received();
    assert!(sent[0].headers.contains_key("traceparent"));
    let exported = collector.bytes();
    let signature = sent[0].headers["webhook-signature"].to_str().unwrap();
    // Control: the search below looks at what was exported.
    assert!(exported.windows(10).any(|w| w == b"evt_secret"));
    for secret in [
        STRIPE_SECRET,
        ADMIN_TOKEN,
        sig.as_str(),
        "credential-header-value",
        "query-token-in-target-url",
        "dGFyZ2V0LXNpZ25pbmcta2V5LXNlY3JldA",
        signature,
        "body-marker-4242",
    ] {
        assert!(
            !exported
                .windows(secret.len())
                .any(|w| w == secret.as_bytes()),
            "`{secret}` was exported"
        );
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_is_its_own_trace_linked_to_the_original() {
    // Arrange
    let (collector, endpoint) = Collector::start().await;
    let mut opts = Opts::new(Backend::Embedded);
    opts.extra = telemetry(&endpoint, 1.0);
    let app = spawn_app(opts).await;

    // Act
    assert_eq!(dedup_header(&app.post_stripe("evt_twice").await), "new");
    assert_eq!(
        dedup_header(&app.post_stripe("evt_twice").await),
        "duplicate"
    );

    // Assert
    let roots = collector.wait_for("POST /webhooks/{source}", 2).await;
    let original = with_attr(&roots, "hookgate.outcome", "new");
    let copy = roots
        .iter()
        .find(|s| attr(s, "hookgate.outcome").is_some_and(|o| o.starts_with("duplicate")))
        .expect("the duplicate's span");
    assert_ne!(copy.trace_id, original.trace_id, "a trace of its own");
    assert_eq!(copy.links.len(), 1);
    assert_eq!(copy.links[0].trace_id, original.trace_id);
    assert_eq!(copy.links[0].span_id, original.span_id);
    assert!(original.links.is_empty());
    let decisions = collector.wait_for("hookgate.dedup", 2).await;
    let dup = decisions
        .iter()
        .find(|s| s.trace_id == copy.trace_id)
        .expect("the duplicate's decision");
    assert_eq!(
        attr(dup, "hookgate.dedup.decision").as_deref(),
        Some("duplicate")
    );
    assert_eq!(dup.parent_span_id, copy.span_id);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_stream_message_carries_the_trace() {
    // Arrange
    let (collector, endpoint) = Collector::start().await;
    let prefix = unique_prefix();
    let stream = format!("{prefix}:traced");
    let mut opts = Opts::new(Backend::Embedded);
    opts.stripe_targets = vec!["q".into()];
    opts.extra = format!(
        "[targets.q]\nkind = \"redis-stream\"\nurl = \"{}\"\nstream = \"{stream}\"\n{}",
        redis_url(),
        telemetry(&endpoint, 1.0)
    );
    let app = spawn_app(opts).await;

    // Act
    assert_eq!(app.post_stripe("evt_stream").await.status(), 200);

    // Assert
    let sends = collector.wait_for(&format!("send {stream}"), 1).await;
    let send = &sends[0];
    assert_eq!(send.kind, SpanKind::Producer as i32);
    assert_eq!(attr(send, "messaging.system").as_deref(), Some("redis"));
    assert_eq!(
        attr(send, "messaging.destination.name").as_deref(),
        Some(stream.as_str())
    );
    let root = collector.wait_for("POST /webhooks/{source}", 1).await;
    assert_eq!(send.trace_id, root[0].trace_id);
    let client = redis::Client::open(redis_url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(&stream)
        .arg("-")
        .arg("+")
        .query_async(&mut c)
        .await
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg(&stream)
        .query_async(&mut c)
        .await
        .unwrap();
    let entry = &reply.ids[0].map;
    let headers: String = redis::from_redis_value(entry["headers"].clone()).unwrap();
    let headers: serde_json::Value = serde_json::from_str(&headers).unwrap();
    let (trace, parent, _) = traceparent(headers["traceparent"].as_str().unwrap());
    assert_eq!(trace, hex::encode(&send.trace_id));
    assert_eq!(parent, hex::encode(&send.span_id));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_ratio_zero_exports_nothing() {
    // Arrange
    let (collector, endpoint) = Collector::start().await;
    let target = TestTarget::start().await;
    let mut opts = Opts::forwarding_to(Backend::Embedded, "t", &target, "");
    opts.extra.push_str(&telemetry(&endpoint, 0.0));
    let app = spawn_app(opts).await;

    // Act
    for i in 0..5 {
        assert_eq!(
            app.post_stripe(&format!("evt_unsampled_{i}"))
                .await
                .status(),
            200
        );
    }
    assert!(eventually(WAIT, || async { target.count() >= 5 }).await);
    // Stopping flushes whatever was queued.
    app.stop().await;

    // Assert: the targets still learn the (unsampled) trace context.
    let got = target.received();
    let (_, _, flags) = traceparent(got[0].headers["traceparent"].to_str().unwrap());
    assert_eq!(flags, "00", "not sampled");
    assert_eq!(
        collector.spans().len(),
        0,
        "{:?}",
        names(&collector.spans())
    );
}
