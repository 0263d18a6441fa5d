//! Trace ids derived from the event, so no replica has to store or look
//! up an event's trace to join it.
//!
//! An event's root span (its `POST /webhooks/…`) has the trace id and span
//! id [`of_event`] computes from the source and event id; every later
//! attempt, on any replica, computes the same pair and uses it as its
//! parent, and a duplicate links to it. The SDK draws ids from its
//! [`IdGenerator`]; [`Ids`] hands it the derived pair for the one span
//! built inside [`with_ids`] (on the same thread, no await in between),
//! and random ids otherwise.
//!
//! Rule: the derivation is a hash of what the ledger's unique key holds
//! (source, event id), never of a body or a secret.

use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
use sha2::{Digest, Sha256};
use std::cell::Cell;

thread_local! {
    /// The ids the next span built on this thread takes (see [`with_ids`]).
    static NEXT: Cell<Option<(TraceId, SpanId)>> = const { Cell::new(None) };
}

/// The trace id and root span id of event `event_id` of `source`.
pub fn of_event(source: &str, event_id: &str) -> (TraceId, SpanId) {
    let mut h = Sha256::new();
    h.update(b"hookgate trace\0");
    h.update(source.as_bytes());
    h.update([0]);
    h.update(event_id.as_bytes());
    let d = h.finalize();
    let mut trace = [0u8; 16];
    let mut span = [0u8; 8];
    trace.copy_from_slice(&d[..16]);
    span.copy_from_slice(&d[16..24]);
    // All zeros is the invalid id (W3C Trace Context §3.2.2.3, §3.2.2.4).
    if trace == [0; 16] {
        trace[15] = 1;
    }
    if span == [0; 8] {
        span[7] = 1;
    }
    (TraceId::from_bytes(trace), SpanId::from_bytes(span))
}

/// Runs `build` (which starts exactly one span, without a parent) with the
/// ids `ids` for that span.
pub fn with_ids<T>(ids: (TraceId, SpanId), build: impl FnOnce() -> T) -> T {
    NEXT.with(|n| n.set(Some(ids)));
    let built = build();
    NEXT.with(|n| n.set(None));
    built
}

/// The SDK's id generator: the pair [`with_ids`] set, else random ids.
#[derive(Debug, Default)]
pub struct Ids {
    random: RandomIdGenerator,
}

impl IdGenerator for Ids {
    fn new_trace_id(&self) -> TraceId {
        NEXT.with(Cell::get)
            .map_or_else(|| self.random.new_trace_id(), |(t, _)| t)
    }

    fn new_span_id(&self) -> SpanId {
        NEXT.with(Cell::get)
            .map_or_else(|| self.random.new_span_id(), |(_, s)| s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_has_one_trace_whatever_replica_computes_it() {
        let a = of_event("stripe", "evt_1");
        assert_eq!(a, of_event("stripe", "evt_1"));
        assert_ne!(a.0, of_event("stripe", "evt_2").0);
        // The separator keeps ("ab", "c") and ("a", "bc") apart.
        assert_ne!(of_event("ab", "c").0, of_event("a", "bc").0);
        assert_ne!(a.0, TraceId::INVALID);
        assert_ne!(a.1, SpanId::INVALID);
    }

    #[test]
    fn the_generator_hands_out_the_set_ids_once() {
        let g = Ids::default();
        let ids = of_event("s", "e");
        let (t, s) = with_ids(ids, || (g.new_trace_id(), g.new_span_id()));
        assert_eq!((t, s), ids);
        assert_ne!(g.new_trace_id(), ids.0);
    }
}
