//! A webhook's trace: `POST /webhooks/{source}` (server span), with
//! `hookgate.verify`, `hookgate.dedup` and, for a new event,
//! `hookgate.commit` as its children.
//!
//! The request only notes instants while it runs ([`Webhook`]); the spans
//! are built when it is answered, from those instants, because the span
//! ids of a new event's root span come from its id ([`super::ids`]),
//! known only after verification, and whether it is new only at the end.
//!
//! Rule: the root span takes the event's derived ids only when the event
//! was stored by this request (exactly one request per event does), so
//! attempts find their parent; every other request gets random ids.

use super::{Traces, ids};
use opentelemetry::trace::{Link, Span as _, SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// What the dedup step decided, for its span.
pub enum Decision {
    /// Stored by this request; the commit (the group-commit wait) began
    /// at `committing`.
    New { committing: Instant },
    /// Already known, by the layer that said so (`cache`, `ledger`, `body`).
    Duplicate { layer: &'static str },
}

struct Decided {
    started: Instant,
    ended: Instant,
    decision: Decision,
}

/// The instants of one webhook request (tracing on only).
pub struct Webhook {
    traces: Arc<Traces>,
    /// Wall clock at `started`: spans carry wall-clock times.
    wall: SystemTime,
    started: Instant,
    verify: Option<(Instant, Instant)>,
    dedup: Option<Decided>,
    event_type: Option<String>,
    /// The stored items of a split batch: each gets a root span of its own
    /// (the parent of its attempts), linked to this request.
    items: Vec<String>,
}

/// How the request was answered.
pub struct Answer<'a> {
    /// The configured source, or `_unknown` (never the client's path text).
    pub source: &'a str,
    pub event_id: Option<&'a str>,
    pub status: u16,
    /// The request's outcome (`new`, `duplicate`, `rejected`, …).
    pub outcome: &'a str,
}

impl Traces {
    /// Starts noting a request that arrived at `started`.
    pub fn webhook(self: &Arc<Self>, started: Instant) -> Webhook {
        let wall = SystemTime::now() - started.elapsed();
        Webhook {
            traces: self.clone(),
            wall,
            started,
            verify: None,
            dedup: None,
            event_type: None,
            items: Vec::new(),
        }
    }
}

impl Webhook {
    /// Verification ran from `started` until now.
    pub fn verified(&mut self, started: Instant) {
        self.verify = Some((started, Instant::now()));
    }

    /// Dedup ran from `started` until now and decided `decision`.
    pub fn decided(&mut self, started: Instant, decision: Decision, event_type: Option<&str>) {
        self.dedup = Some(Decided {
            started,
            ended: Instant::now(),
            decision,
        });
        self.event_type = event_type.map(str::to_owned);
    }

    /// A split batch's item `event_id` was stored.
    pub fn stored_item(&mut self, event_id: &str) {
        self.items.push(event_id.to_owned());
    }

    fn at(&self, i: Instant) -> SystemTime {
        self.wall + i.saturating_duration_since(self.started)
    }

    /// Builds and ends the request's spans (queued for export).
    pub fn finish(self, a: Answer<'_>) {
        let ended = Instant::now();
        let tracer = &self.traces.tracer;
        let new = matches!(
            self.dedup,
            Some(Decided {
                decision: Decision::New { .. },
                ..
            })
        );
        let mut attributes = vec![
            KeyValue::new("http.request.method", "POST"),
            KeyValue::new("http.route", "/webhooks/{source}"),
            KeyValue::new("url.path", format!("/webhooks/{}", a.source)),
            KeyValue::new("http.response.status_code", i64::from(a.status)),
            KeyValue::new("hookgate.source", a.source.to_owned()),
            KeyValue::new("hookgate.outcome", a.outcome.to_owned()),
        ];
        if let Some(id) = a.event_id {
            attributes.push(KeyValue::new("hookgate.event.id", id.to_owned()));
        }
        if let Some(t) = &self.event_type {
            attributes.push(KeyValue::new("hookgate.event.type", t.clone()));
        }
        // Server spans: a 5xx is the server's error, a 4xx the client's
        // (semantic conventions, HTTP server span status).
        let failed = a.status >= 500;
        if failed {
            attributes.push(KeyValue::new("error.type", a.status.to_string()));
        }
        let mut links = Vec::new();
        if let (
            Some(Decided {
                decision: Decision::Duplicate { .. },
                ..
            }),
            Some(id),
        ) = (&self.dedup, a.event_id)
        {
            // The original event's webhook span, wherever it was recorded.
            links.push(Link::with_context(self.traces.event_context(a.source, id)));
        }
        let builder = tracer
            .span_builder("POST /webhooks/{source}")
            .with_kind(SpanKind::Server)
            .with_start_time(self.wall)
            .with_attributes(attributes)
            .with_links(links);
        let root = match (new, a.event_id) {
            (true, Some(id)) => ids::with_ids(ids::of_event(a.source, id), || {
                builder.start_with_context(tracer, &Context::new())
            }),
            _ => builder.start_with_context(tracer, &Context::new()),
        };
        let request = root.span_context().clone();
        if root.is_recording() {
            let cx = Context::new().with_span(root);
            self.children(&cx);
            let root = cx.span();
            if failed {
                root.set_status(Status::error(""));
            }
            root.end_with_timestamp(self.at(ended));
        }
        for id in &self.items {
            let builder = tracer
                .span_builder("hookgate.event")
                .with_kind(SpanKind::Internal)
                .with_start_time(self.wall)
                .with_attributes([
                    KeyValue::new("hookgate.source", a.source.to_owned()),
                    KeyValue::new("hookgate.event.id", id.clone()),
                ])
                .with_links(vec![Link::with_context(request.clone())]);
            let mut item = ids::with_ids(ids::of_event(a.source, id), || {
                builder.start_with_context(tracer, &Context::new())
            });
            item.end_with_timestamp(self.at(ended));
        }
    }

    /// The verify, dedup and commit spans under the root in `cx`.
    fn children(&self, cx: &Context) {
        let tracer = &self.traces.tracer;
        if let Some((from, to)) = self.verify {
            let mut s = tracer
                .span_builder("hookgate.verify")
                .with_start_time(self.at(from))
                .start_with_context(tracer, cx);
            s.end_with_timestamp(self.at(to));
        }
        let Some(d) = &self.dedup else { return };
        let (decided_at, decision, layer) = match d.decision {
            Decision::New { committing } => (committing, "new", None),
            Decision::Duplicate { layer } => (d.ended, "duplicate", Some(layer)),
        };
        let mut attributes = vec![KeyValue::new("hookgate.dedup.decision", decision)];
        if let Some(l) = layer {
            attributes.push(KeyValue::new("hookgate.dedup.layer", l));
        }
        let mut s = tracer
            .span_builder("hookgate.dedup")
            .with_start_time(self.at(d.started))
            .with_attributes(attributes)
            .start_with_context(tracer, cx);
        s.end_with_timestamp(self.at(decided_at));
        if let Decision::New { committing } = d.decision {
            let mut s = tracer
                .span_builder("hookgate.commit")
                .with_start_time(self.at(committing))
                .start_with_context(tracer, cx);
            s.end_with_timestamp(self.at(d.ended));
        }
    }
}
