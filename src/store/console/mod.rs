//! The ledger as the admin console reads it: event listing with filters and
//! a stable cursor, one event's full record, a delivery's attempts,
//! operator redelivery, filtered bulk replay and the outbox backlog.
//!
//! Rule: the SQL text is built here once for both backends (`$N`
//! placeholders, which both accept; [`Dialect`] names the few differences)
//! and run by one implementation on either backend's pool
//! ([`portable`](self::portable)). Every list query is driven by an index
//! named in docs/operations.md ("Indexes"), never a full scan.

mod portable;
mod sql;

pub(crate) use sql::Dialect;

use super::StoreError;
use crate::primitives::time::Millis;
use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Largest page of `GET /admin/events`.
pub const MAX_LIMIT: i64 = 500;
/// Most attempts and arrivals one event record shows.
pub const MAX_DETAIL_ROWS: i64 = 1000;

/// A delivery's state as the console names it (`retrying` = pending after
/// at least one failed attempt).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryState {
    Pending,
    Retrying,
    Delivered,
    Dead,
}

impl DeliveryState {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => Self::Pending,
            "retrying" => Self::Retrying,
            "delivered" => Self::Delivered,
            "dead" => Self::Dead,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Retrying => "retrying",
            Self::Delivered => "delivered",
            Self::Dead => "dead",
        }
    }

    /// The state of a row with `state` and `attempts`.
    pub fn of(state: &str, attempts: i32) -> &str {
        match state {
            "pending" if attempts > 0 => "retrying",
            other => other,
        }
    }

    fn condition(self) -> &'static str {
        match self {
            Self::Pending => "d.state = 'pending' AND d.attempts = 0",
            Self::Retrying => "d.state = 'pending' AND d.attempts > 0",
            Self::Delivered => "d.state = 'delivered'",
            Self::Dead => "d.state = 'dead'",
        }
    }
}

/// Which events to list (or whose dead deliveries to replay); `None`
/// matches everything.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    pub source: Option<String>,
    pub target: Option<String>,
    pub state: Option<DeliveryState>,
    pub event_type: Option<String>,
    /// `received_at >= since`.
    pub since: Option<Millis>,
    /// `received_at < until`.
    pub until: Option<Millis>,
    /// Event-id prefix.
    pub q: Option<String>,
    /// Exact event id.
    pub event_id: Option<String>,
    /// Only events recovered by reconciliation (`true`) or only received ones (`false`).
    pub recovered: Option<bool>,
    /// The provider object the event is about, exactly (as stored:
    /// `verify::facts::stored_object_id`).
    pub object: Option<String>,
    /// A body field's value; only listed, over a bounded time range, a
    /// bounded number of events per page ([`FIELD_SCAN`]).
    pub field: Option<FieldFilter>,
}

/// `field=/data/object/customer:cus_123`: the JSON pointer and the value
/// it must hold (a string equal to it, or a number or boolean written so).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldFilter {
    pub pointer: String,
    pub value: String,
}

impl FieldFilter {
    /// Whether `body` (JSON) holds the value at the pointer.
    pub fn matches(&self, body: &[u8]) -> bool {
        let Ok(doc) = serde_json::from_slice::<serde_json::Value>(body) else {
            return false;
        };
        match doc.pointer(&self.pointer) {
            Some(serde_json::Value::String(s)) => *s == self.value,
            // A number or boolean is compared as its JSON text (`42`, `true`);
            // `Value == String` would compare it as a JSON string and never match.
            Some(v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => {
                let text = v.to_string();
                text == self.value
            }
            _ => false,
        }
    }

    /// Whether the value appears in a body that holds it as the same bytes:
    /// JSON writes it unescaped unless it has a quote, a backslash, a `/`
    /// (may be escaped), a control or a non-ASCII character. Only then can
    /// the database narrow the candidates by a byte search.
    pub fn byte_searchable(&self) -> bool {
        !self.value.is_empty()
            && self
                .value
                .bytes()
                .all(|b| (0x20..0x7f).contains(&b) && !matches!(b, b'"' | b'\\' | b'/'))
    }
}

/// Most events a `field` page examines (newest first, from its cursor):
/// the page then holds the matches among them, and its cursor goes on from
/// the last one examined, so a request costs the same however many events
/// the range holds.
pub const FIELD_SCAN: i64 = 2000;

/// A position in the newest-first order: the last item seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub received_at: i64,
    pub pk: i64,
}

impl Cursor {
    /// Opaque text for clients.
    pub fn encode(self) -> String {
        URL_SAFE_NO_PAD.encode(format!("v1:{}:{}", self.received_at, self.pk))
    }

    pub fn decode(text: &str) -> Option<Self> {
        let raw = URL_SAFE_NO_PAD.decode(text.trim()).ok()?;
        let raw = String::from_utf8(raw).ok()?;
        let mut parts = raw.strip_prefix("v1:")?.split(':');
        let received_at = parts.next()?.parse().ok()?;
        let pk = parts.next()?.parse().ok()?;
        parts.next().is_none().then_some(Self { received_at, pk })
    }
}

/// One delivery of an event, as listed.
#[derive(Debug, Clone)]
pub struct DeliveryInfo {
    pub target: String,
    /// `pending`, `retrying`, `delivered` or `dead`.
    pub state: String,
    pub attempts: i32,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
    pub next_attempt_at: Millis,
    pub updated_at: Millis,
    /// The ordering key (`order_by`) and place in it; `None` = unordered.
    pub order_key: Option<String>,
    pub order_seq: Option<i64>,
    /// A dead delivery with an ordering key: how many later deliveries of
    /// its key were delivered (went ahead of it). `None` otherwise.
    pub overtaken_by: Option<i64>,
}

/// One event in a list.
#[derive(Debug, Clone)]
pub struct EventSummary {
    pub pk: i64,
    pub source: String,
    pub event_id: String,
    pub event_type: Option<String>,
    pub received_at: Millis,
    pub body_size: i64,
    pub duplicates: i64,
    pub conflicts: i64,
    /// Recovered by reconciliation from the provider's API, not received.
    pub recovered: bool,
    /// The provider object the event is about.
    pub object_id: Option<String>,
    pub deliveries: Vec<DeliveryInfo>,
}

impl EventSummary {
    pub fn cursor(&self) -> Cursor {
        Cursor {
            received_at: self.received_at.0,
            pk: self.pk,
        }
    }
}

/// One page, and the cursor of the next one (none on the last page).
#[derive(Debug, Clone)]
pub struct EventPage {
    pub items: Vec<EventSummary>,
    pub next: Option<Cursor>,
}

/// One delivery attempt, for an event's record.
#[derive(Debug, Clone)]
pub struct AttemptInfo {
    pub target: String,
    pub attempt: i32,
    pub started_at: Millis,
    pub latency_ms: i64,
    pub status: Option<i32>,
    pub error: Option<String>,
}

/// Duplicate arrivals, as recorded: one row stands for `copies` arrivals
/// of the same kind (same body or conflicting) written by one flush, from
/// `arrived_at` to `last_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArrivalInfo {
    pub arrived_at: Millis,
    pub last_at: Millis,
    pub copies: i64,
    pub conflict: bool,
}

/// An event's full record.
#[derive(Debug, Clone)]
pub struct EventRecord {
    pub summary: EventSummary,
    /// JSON array of `[name, value]` pairs, as stored (not yet redacted).
    pub headers: String,
    pub body: Vec<u8>,
    pub key_index: Option<i32>,
    pub provider_ts: Option<i64>,
    pub arrivals: Vec<ArrivalInfo>,
    pub attempts: Vec<AttemptInfo>,
}

/// One recorded attempt of a delivery.
#[derive(Debug, Clone)]
pub struct AttemptRow {
    pub attempt: i32,
    pub status: Option<i32>,
    pub error: Option<String>,
    pub latency_ms: i64,
}

/// A target's outbox: pending deliveries, the oldest one's event time,
/// and dead deliveries.
#[derive(Debug, Clone, Default)]
pub struct Backlog {
    pub target: String,
    pub pending: i64,
    pub oldest_pending: Option<Millis>,
    pub dead: i64,
}

/// One event as `hookgate listen` streams it.
#[derive(Debug, Clone)]
pub struct StreamEvent {
    /// The ledger id: the stream's order and cursor.
    pub pk: i64,
    pub event_id: String,
    pub event_type: Option<String>,
    pub received_at: Millis,
    /// JSON array of `[name, value]` pairs, as stored.
    pub headers: String,
    pub body: Vec<u8>,
}

/// What a bulk replay would touch: the dead deliveries matching a filter
/// with `id <= bound`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadPlan {
    /// The largest delivery id the plan covers.
    pub bound: i64,
    /// `(source, target, dead deliveries)`.
    pub deliveries: Vec<(String, String, i64)>,
    /// `(source, events)`: events with at least one matching dead delivery.
    pub events: Vec<(String, i64)>,
}

impl DeadPlan {
    pub fn total_deliveries(&self) -> i64 {
        self.deliveries.iter().map(|d| d.2).sum()
    }
}

/// One page of a bulk replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayPage {
    /// Deliveries made pending.
    pub replayed: u64,
    /// The last delivery id examined (the next page starts after it);
    /// `None`: nothing was left.
    pub last: Option<i64>,
}

/// The console's view of the ledger; see the module doc.
#[async_trait]
pub trait Console: Send + Sync + 'static {
    /// Newest first, strictly after `after`, at most `limit` (≤ [`MAX_LIMIT`]).
    async fn list_events(
        &self,
        filter: &EventFilter,
        after: Option<Cursor>,
        limit: i64,
    ) -> Result<EventPage, StoreError>;
    async fn event(&self, source: &str, event_id: &str) -> Result<Option<EventRecord>, StoreError>;
    /// Makes the event's delivery to `target` (all its deliveries when
    /// `None`) pending and due now, whatever its state; creates the
    /// delivery row if the event has none for `target`. Returns the rows
    /// queued. The attempt count goes on, so the next attempt is recorded
    /// as a new one. A delivered or dead row with an ordering key goes to
    /// the back of its key (a new, last sequence number); a created row is
    /// unordered.
    async fn redeliver(
        &self,
        event_pk: i64,
        source: &str,
        target: Option<&str>,
        now: Millis,
    ) -> Result<u64, StoreError>;
    /// Dead deliveries of matching events (and `filter.target`) become
    /// pending again, due now; those with an ordering key go to the back of
    /// their keys. Returns how many.
    async fn replay_matching(&self, filter: &EventFilter, now: Millis) -> Result<u64, StoreError>;
    /// The dead deliveries `filter` matches now, counted by source and
    /// target, with `id <= bound` (`None`: up to the largest id now).
    async fn dead_plan(
        &self,
        filter: &EventFilter,
        bound: Option<i64>,
    ) -> Result<DeadPlan, StoreError>;
    /// Replays (as [`Console::replay_matching`]) the next `limit` matching
    /// dead deliveries with `after < id <= upto`, in one transaction.
    async fn replay_page(
        &self,
        filter: &EventFilter,
        after: i64,
        upto: i64,
        limit: i64,
        now: Millis,
    ) -> Result<ReplayPage, StoreError>;
    /// Attempts of one event's delivery to one target, oldest first.
    async fn attempts(
        &self,
        source: &str,
        event_id: &str,
        target: &str,
    ) -> Result<Vec<AttemptRow>, StoreError>;
    async fn backlog(&self) -> Result<Vec<Backlog>, StoreError>;
    /// The newest event id of the whole ledger (0 when empty).
    async fn listen_horizon(&self) -> Result<i64, StoreError>;
    /// The first id of `source`'s events received at or after `since`.
    async fn listen_since(&self, source: &str, since: Millis) -> Result<Option<i64>, StoreError>;
    /// `source`'s events with `after < id <= upto`, in id order, at most `limit`.
    async fn listen_page(
        &self,
        source: &str,
        after: i64,
        upto: i64,
        limit: i64,
    ) -> Result<Vec<StreamEvent>, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::sql::{Arg, dead_counts_sql, dead_page_sql, list_sql, replay_ids_sql, replay_sql};
    use super::*;

    #[test]
    fn cursors_round_trip_and_garbage_is_refused() {
        let c = Cursor {
            received_at: 1_700_000_000_123,
            pk: 42,
        };
        assert_eq!(Cursor::decode(&c.encode()), Some(c));
        for bad in ["", "abc", "djE6eDoy", "djE6MToyOjM"] {
            assert_eq!(Cursor::decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_field_matches_strings_exactly_and_numbers_as_written() {
        let f = |pointer: &str, value: &str| FieldFilter {
            pointer: pointer.into(),
            value: value.into(),
        };
        let body = br#"{"data":{"object":{"customer":"cus_1","amount":250,"paid":true}}}"#;
        assert!(f("/data/object/customer", "cus_1").matches(body));
        assert!(!f("/data/object/customer", "cus_").matches(body));
        assert!(f("/data/object/amount", "250").matches(body));
        assert!(f("/data/object/paid", "true").matches(body));
        assert!(!f("/data/object", "cus_1").matches(body));
        assert!(!f("/data/object/customer", "cus_1").matches(b"not json cus_1"));
        assert!(f("/x", "cus_1").byte_searchable());
        for escaped in ["caf\u{e9}", "a/b", "a\"b", ""] {
            assert!(!f("/x", escaped).byte_searchable(), "{escaped}");
        }
        assert!(!f("/x", "café").byte_searchable());
    }

    #[test]
    fn filters_become_bound_conditions_never_text() {
        let f = EventFilter {
            source: Some("stripe'--".into()),
            target: Some("billing".into()),
            state: Some(DeliveryState::Dead),
            q: Some("evt_".into()),
            ..Default::default()
        };
        let cur = Cursor {
            received_at: 5,
            pk: 6,
        };
        let sql = list_sql(&f, Some(cur), 50, Dialect::Postgres);
        assert!(!sql.text.contains("stripe'"), "{}", sql.text);
        assert!(sql.text.contains("COLLATE \"C\""));
        assert!(sql.text.contains("d.state = 'dead'"));
        assert_eq!(sql.args.len(), 7);
        assert_eq!(sql.args.last(), Some(&Arg::Int(50)));
        let sql = replay_sql(&EventFilter::default(), Millis(1), Dialect::Sqlite);
        assert!(!sql.text.contains("event_pk IN"), "{}", sql.text);
    }

    #[test]
    fn a_bulk_page_binds_its_bounds_then_the_filter_then_the_limit() {
        let f = EventFilter {
            source: Some("stripe".into()),
            target: Some("billing".into()),
            q: Some("evt_".into()),
            ..Default::default()
        };
        let sql = dead_page_sql(&f, 10, 99, 25, Dialect::Postgres);
        assert!(sql.text.contains("id > $1 AND id <= $2"), "{}", sql.text);
        assert!(sql.text.contains("target = $3") && sql.text.contains("source = $4"));
        assert!(
            sql.text.contains("ORDER BY id LIMIT $8 FOR UPDATE"),
            "{}",
            sql.text
        );
        assert_eq!(sql.args[..2], [Arg::Int(10), Arg::Int(99)]);
        assert_eq!(sql.args.last(), Some(&Arg::Int(25)));
        assert!(
            !dead_page_sql(&f, 0, 1, 1, Dialect::Sqlite)
                .text
                .contains("FOR UPDATE")
        );
        let counts = dead_counts_sql(&EventFilter::default(), 7, Dialect::Sqlite);
        assert!(
            counts.text.contains("state = 'dead' AND id <= $1"),
            "{}",
            counts.text
        );
        assert_eq!(counts.args, [Arg::Int(7)]);
        let update = replay_ids_sql(&[3, 4], Millis(5));
        assert!(
            update
                .text
                .contains("WHERE state = 'dead' AND id IN ($2, $3)"),
            "{}",
            update.text
        );
    }
}
