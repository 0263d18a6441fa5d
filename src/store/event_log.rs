//! The event log: what dedup's writer records (events and their delivery
//! rows, in one transaction per batch), the body claims of
//! `dedup_by_body`, the duplicate arrivals the console counts, and the
//! purge of all of it past its window.
//!
//! Rule: [`EventLog::record`] writes a batch in ONE transaction and reports
//! one outcome per event; it never decides which rows are handed to this
//! process's delivery lanes (its caller marks them in
//! [`NewEvent::handoff`]), it only writes them leased and returns their ids.

use super::StoreError;
use super::body_hashes::BodyClaim;
use crate::primitives::headers::StoredHeaders;
use crate::primitives::time::Millis;
use async_trait::async_trait;
use bytes::Bytes;
use std::sync::Arc;

/// A verified event ready to be written.
#[derive(Debug)]
pub struct NewEvent {
    pub source: String,
    pub event_id: String,
    pub body: Bytes,
    pub body_sha256: [u8; 32],
    /// The provider headers forwarded with it.
    pub headers: StoredHeaders,
    pub received_at: Millis,
    pub expires_at: Millis,
    /// One delivery row per target is written with the event.
    pub targets: Vec<String>,
    /// Parallel to `targets`: the delivery's ordering key. `None`: the
    /// target has no `order_by`; `Some("")`: it has, but the event holds no
    /// key (delivered unordered); otherwise the key, and the row gets the
    /// next sequence number of its (target, key) in the event's transaction.
    pub order_keys: Vec<Option<String>>,
    /// Verification facts shown by the admin console.
    pub facts: EventFacts,
    /// Which delivery rows to write already leased to this process (set by
    /// the writer that reserved room for them on its delivery lanes).
    pub handoff: Option<HandoffLease>,
    /// The cache had no entry for this id: this request took its claim, so
    /// the ledger is unlikely to hold it. PostgreSQL writes a batch of fresh
    /// events without delivery rows as a plain INSERT first, and only after
    /// a unique violation with `ON CONFLICT` (`postgres::record`).
    pub fresh: bool,
}

impl NewEvent {
    /// Target `i`'s ordering key, if it has one.
    pub fn order_key(&self, i: usize) -> Option<&str> {
        self.order_keys.get(i).and_then(Option::as_deref)
    }

    /// The lease to write on target `i`'s delivery row, if it is handed off.
    pub fn lease(&self, i: usize) -> Option<(&str, Millis)> {
        let h = self.handoff.as_ref()?;
        h.leased
            .get(i)
            .copied()
            .unwrap_or(false)
            .then_some((&*h.token, h.until))
    }
}

/// The hand-off lease of one event's delivery rows: the rows marked in
/// `leased` (parallel to the event's targets) are inserted leased under
/// `token` until `until`, so no claim query is needed to send them.
#[derive(Debug, Clone)]
pub struct HandoffLease {
    pub token: Arc<str>,
    pub until: Millis,
    /// When the lease was taken, on the monotonic clock (no later than the
    /// time `until` is counted from): the delivery loop's deadline for it.
    pub taken: std::time::Instant,
    pub leased: Vec<bool>,
}

/// What verification learned besides the id: event type, matched secret,
/// provider timestamp (unix seconds), and whether reconciliation recovered
/// it from the provider's API instead of receiving it.
#[derive(Debug, Clone, Default)]
pub struct EventFacts {
    pub event_type: Option<String>,
    pub key_index: Option<i32>,
    pub provider_ts: Option<i64>,
    /// The provider object the event is about (`object_id` locator;
    /// `verify::facts::object_id`), searched by the console.
    pub object_id: Option<String>,
    pub recovered: bool,
}

/// What the ledger did with one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// First time: the row and its deliveries are committed.
    New,
    /// Already there; `stored_sha256` is the hash of the body first recorded,
    /// `expires_at` the end of that row's dedup window.
    Duplicate {
        stored_sha256: Vec<u8>,
        expires_at: Millis,
    },
}

/// What [`EventLog::record`] committed.
#[derive(Debug, Default)]
pub struct Written {
    /// One per event of the batch, in input order.
    pub outcomes: Vec<Recorded>,
    /// The delivery rows written leased (hand-off), of new events only.
    pub leased: Vec<LeasedRow>,
}

/// A delivery row written leased: its event's place in the batch, its
/// target's place in that event's `targets`, and its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeasedRow {
    pub event: usize,
    pub target: usize,
    pub delivery_id: i64,
}

/// Duplicate arrivals to record: `copies` (≥ 1) arrivals of one event id,
/// all conflicting or all not, the first at `arrived_at`, the last at
/// `last_at` (see `dedup::arrivals`).
#[derive(Debug, Clone)]
pub struct NewArrival {
    pub source: String,
    pub event_id: String,
    pub arrived_at: Millis,
    pub last_at: Millis,
    pub copies: u32,
    pub conflict: bool,
}

#[async_trait]
pub trait EventLog: Send + Sync + 'static {
    /// Inserts every event not already present, with its delivery rows, in
    /// ONE transaction.
    async fn record(&self, batch: &[NewEvent]) -> Result<Written, StoreError>;
    /// `dedup_by_body`: claims the body for `c.event_id` unless another id
    /// holds it within its window; returns the id holding it afterwards
    /// (see [`super::body_hashes`]).
    async fn claim_body(&self, c: &BodyClaim<'_>) -> Result<String, StoreError>;
    /// Records duplicate arrivals and adds them to their events' counts.
    /// Arrivals of events no longer stored are dropped.
    async fn record_arrivals(&self, batch: &[NewArrival]) -> Result<(), StoreError>;
    /// Deletes events past their window whose deliveries are all delivered,
    /// and body claims past theirs.
    async fn purge(&self, now: Millis) -> Result<u64, StoreError>;
    /// Number of event rows (tests and diagnostics).
    async fn event_count(&self, source: &str, event_id: &str) -> Result<i64, StoreError>;
}

/// The outcome of a batch whose first occurrences were all inserted (and
/// had no delivery rows to hand off): each new, and a repeat within the
/// batch a duplicate of its first occurrence. `repeats` is
/// [`first_occurrence`]'s.
pub(crate) fn fresh_results(batch: &[NewEvent], repeats: &[Option<usize>]) -> Written {
    Written {
        outcomes: repeats
            .iter()
            .map(|rep| match rep {
                Some(first) => duplicate_of(&batch[*first]),
                None => Recorded::New,
            })
            .collect(),
        leased: Vec::new(),
    }
}

/// The outcome of an event that repeats `first` within its batch.
pub(crate) fn duplicate_of(first: &NewEvent) -> Recorded {
    Recorded::Duplicate {
        stored_sha256: first.body_sha256.to_vec(),
        expires_at: first.expires_at,
    }
}

/// In-batch duplicates: the index of the first event with the same key, for
/// each event that repeats an earlier one.
pub(crate) fn first_occurrence(batch: &[NewEvent]) -> Vec<Option<usize>> {
    let mut seen = std::collections::HashMap::new();
    batch
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let key = (e.source.as_str(), e.event_id.as_str());
            match seen.get(&key) {
                Some(&first) => Some(first),
                None => {
                    seen.insert(key, i);
                    None
                }
            }
        })
        .collect()
}
