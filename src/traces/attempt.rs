//! A delivery attempt's span: a child of its event's webhook span (the
//! derived ids of [`super::ids`]), a client span for HTTP targets and a
//! producer span for brokers, and the W3C `traceparent` (plus `tracestate`
//! when there is one) the target receives, so its own spans join the trace
//! (W3C Trace Context, <https://www.w3.org/TR/trace-context/#traceparent-header>).
//!
//! Rule: the target's URL is reduced to its host, port and path; its
//! query and credentials (a token, a broker password) never reach a span.

use super::Traces;
use crate::store::outbox::NextState;
use crate::target::{Kind, Message, Target, kind::render};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::Span;
use std::collections::HashMap;

/// An attempt in flight: its span and the headers that carry it.
pub struct Attempt {
    span: Span,
    http: bool,
    headers: Vec<(&'static str, String)>,
}

impl Traces {
    /// Starts attempt `number` of `message` to `target`.
    pub fn attempt(&self, target: &Target, message: &Message<'_>, number: i32) -> Attempt {
        let parent = Context::new()
            .with_remote_span_context(self.event_context(message.source, message.event_id));
        let url = reqwest::Url::parse(&target.url).ok();
        let mut attributes = Vec::with_capacity(10);
        if let Some(u) = &url {
            if let Some(host) = u.host_str() {
                attributes.push(KeyValue::new("server.address", host.to_owned()));
            }
            if let Some(port) = u.port_or_known_default() {
                attributes.push(KeyValue::new("server.port", i64::from(port)));
            }
        }
        let (name, kind, http) = match &target.kind {
            Kind::Http(_) => {
                attributes.push(KeyValue::new("http.request.method", "POST"));
                if let Some(u) = &url {
                    attributes.push(KeyValue::new("url.path", u.path().to_owned()));
                }
                ("POST".to_owned(), SpanKind::Client, true)
            }
            // No `url.path`: a Slack webhook's path is its credential.
            Kind::Slack(_) => {
                attributes.push(KeyValue::new("http.request.method", "POST"));
                ("POST".to_owned(), SpanKind::Client, true)
            }
            broker => {
                let (system, destination) = match broker {
                    Kind::RedisStream(s) => ("redis", render(&s.stream, message)),
                    Kind::Nats(s) => ("nats", render(&s.subject, message)),
                    Kind::RabbitMq(s) => ("rabbitmq", render(&s.routing_key, message)),
                    Kind::Http(_) | Kind::Slack(_) => unreachable!("matched above"),
                };
                attributes.extend([
                    KeyValue::new("messaging.system", system),
                    KeyValue::new("messaging.destination.name", destination.clone()),
                    KeyValue::new("messaging.operation.type", "send"),
                ]);
                if let Kind::RabbitMq(s) = broker {
                    attributes.push(KeyValue::new(
                        "messaging.rabbitmq.destination.routing_key",
                        destination.clone(),
                    ));
                    attributes.push(KeyValue::new(
                        "hookgate.rabbitmq.exchange",
                        s.exchange.clone(),
                    ));
                }
                (format!("send {destination}"), SpanKind::Producer, false)
            }
        };
        attributes.extend([
            KeyValue::new("hookgate.target", target.name.clone()),
            KeyValue::new("hookgate.source", message.source.to_owned()),
            KeyValue::new("hookgate.event.id", message.event_id.to_owned()),
            KeyValue::new("hookgate.attempt", i64::from(number)),
        ]);
        if let Some(t) = message.event_type {
            attributes.push(KeyValue::new("hookgate.event.type", t.to_owned()));
        }
        let span = self
            .tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        // Sent sampled or not: the flag tells the target what was decided.
        let cx = Context::new().with_remote_span_context(span.span_context().clone());
        let mut carrier = HashMap::new();
        TraceContextPropagator::new().inject_context(&cx, &mut carrier);
        let headers = ["traceparent", "tracestate"]
            .into_iter()
            .filter_map(|name| Some((name, carrier.remove(name).filter(|v| !v.is_empty())?)))
            .collect();
        Attempt {
            span,
            http,
            headers,
        }
    }
}

impl Attempt {
    /// `traceparent` (and `tracestate`), for the message.
    pub fn headers(&self) -> &[(&'static str, String)] {
        &self.headers
    }

    /// Ends the span with what became of the attempt.
    pub fn end(mut self, status: Option<i32>, error: Option<&str>, next: NextState) {
        if self.http
            && let Some(s) = status
        {
            self.span
                .set_attribute(KeyValue::new("http.response.status_code", i64::from(s)));
        }
        let outcome = match next {
            NextState::Delivered => "delivered",
            NextState::RetryAt(_) => "retry",
            NextState::Dead => "dead",
        };
        self.span
            .set_attribute(KeyValue::new("hookgate.outcome", outcome));
        if let Some(e) = error {
            // A low-cardinality class, never the error's text.
            let class = match (status, e) {
                (Some(s), _) => s.to_string(),
                (None, "timeout") => "timeout".to_owned(),
                (None, "connection failed") => "connection_error".to_owned(),
                _ => "_OTHER".to_owned(),
            };
            self.span.set_attribute(KeyValue::new("error.type", class));
            self.span.set_status(Status::error(""));
        }
        self.span.end();
    }
}
