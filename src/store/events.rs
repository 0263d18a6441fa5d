//! The ledger as the admin console reads it: event listing with filters and
//! a stable cursor, one event's full record, operator redelivery, filtered
//! bulk replay, duplicate arrivals and per-minute counters.
//!
//! Rule: the SQL text is built here once for both backends (`$N`
//! placeholders, which both accept); the backends only execute it
//! ([`console_ledger!`]) and add the two batch writes whose fastest form
//! differs (arrivals, per-minute counters). Every list query is driven by an
//! index named in docs/operations.md ("Indexes"), never a full scan.

use super::StoreError;
use crate::primitives::time::Millis;
use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Largest page of `GET /admin/events`.
pub const MAX_LIMIT: i64 = 500;
/// Most attempts and arrivals one event record shows.
pub const MAX_DETAIL_ROWS: i64 = 1000;
/// Per-minute counters older than this many minutes are deleted.
pub const MINUTES_KEPT: i64 = 2 * 24 * 60;

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
}

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

/// A duplicate arrival, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArrivalInfo {
    pub arrived_at: Millis,
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

/// A duplicate arrival to record.
#[derive(Debug, Clone)]
pub struct NewArrival {
    pub source: String,
    pub event_id: String,
    pub arrived_at: Millis,
    pub conflict: bool,
}

/// One per-minute counter row.
#[derive(Debug, Clone)]
pub struct MinuteCount {
    /// Unix minute (milliseconds / 60 000).
    pub minute: i64,
    pub source: String,
    pub name: String,
    pub value: i64,
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

/// The console's view of the ledger; see the module doc.
#[async_trait]
pub trait Console: Send + Sync {
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
    /// as a new one.
    async fn redeliver(
        &self,
        event_pk: i64,
        source: &str,
        target: Option<&str>,
        now: Millis,
    ) -> Result<u64, StoreError>;
    /// Dead deliveries of matching events (and `filter.target`) become
    /// pending again, due now. Returns how many.
    async fn replay_matching(&self, filter: &EventFilter, now: Millis) -> Result<u64, StoreError>;
    /// Records duplicate arrivals and adds them to their events' counts.
    /// Arrivals of events no longer stored are dropped.
    async fn record_arrivals(&self, batch: &[NewArrival]) -> Result<(), StoreError>;
    /// Adds `(source, name, delta)` to the counters of `minute`.
    async fn add_minute_counters(
        &self,
        minute: i64,
        deltas: &[(String, String, i64)],
    ) -> Result<(), StoreError>;
    /// Per-minute counters from `since_minute` on.
    async fn minute_counters(&self, since_minute: i64) -> Result<Vec<MinuteCount>, StoreError>;
    async fn backlog(&self) -> Result<Vec<Backlog>, StoreError>;
}

/// A bind value of generated SQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Arg {
    Text(String),
    Int(i64),
}

/// SQL text and its bind values, in placeholder order.
#[derive(Debug, Default)]
pub(crate) struct Sql {
    pub(crate) text: String,
    pub(crate) args: Vec<Arg>,
}

impl Sql {
    /// Adds a bind value; returns its placeholder.
    fn arg(&mut self, a: Arg) -> String {
        self.args.push(a);
        format!("${}", self.args.len())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Postgres,
    Sqlite,
}

/// The conditions on `hookgate_events e` (and, with `deliveries`, on its
/// deliveries) that `f` asks for.
fn conditions(f: &EventFilter, d: Dialect, sql: &mut Sql, deliveries: bool) -> Vec<String> {
    let mut c = Vec::new();
    if let Some(s) = &f.source {
        c.push(format!("e.source = {}", sql.arg(Arg::Text(s.clone()))));
    }
    if let Some(t) = &f.event_type {
        c.push(format!("e.event_type = {}", sql.arg(Arg::Text(t.clone()))));
    }
    if let Some(at) = f.since {
        c.push(format!("e.received_at >= {}", sql.arg(Arg::Int(at.0))));
    }
    if let Some(at) = f.until {
        c.push(format!("e.received_at < {}", sql.arg(Arg::Int(at.0))));
    }
    if let Some(id) = &f.event_id {
        c.push(format!("e.event_id = {}", sql.arg(Arg::Text(id.clone()))));
    }
    if let Some(q) = f.q.as_deref().filter(|q| !q.is_empty()) {
        // A prefix is one range in byte order: [q, q + U+10FFFF).
        let col = match d {
            Dialect::Postgres => "e.event_id COLLATE \"C\"",
            Dialect::Sqlite => "e.event_id",
        };
        let lo = sql.arg(Arg::Text(q.to_owned()));
        let hi = sql.arg(Arg::Text(format!("{q}\u{10FFFF}")));
        c.push(format!("{col} >= {lo} AND {col} < {hi}"));
    }
    if deliveries && (f.target.is_some() || f.state.is_some()) {
        let mut inner = vec!["d.event_pk = e.id".to_owned()];
        if let Some(t) = &f.target {
            inner.push(format!("d.target = {}", sql.arg(Arg::Text(t.clone()))));
        }
        if let Some(s) = f.state {
            inner.push(s.condition().to_owned());
        }
        c.push(format!(
            "EXISTS (SELECT 1 FROM hookgate_deliveries d WHERE {})",
            inner.join(" AND ")
        ));
    }
    c
}

/// Columns of an event summary, in [`console_ledger!`]'s decoding order.
const SUMMARY_COLUMNS: &str = "e.id, e.source, e.event_id, e.event_type, e.received_at,
    CAST(length(e.body) AS BIGINT), CAST(e.duplicates AS BIGINT), CAST(e.conflicts AS BIGINT)";

/// One page of events, newest first.
pub(crate) fn list_sql(f: &EventFilter, after: Option<Cursor>, limit: i64, d: Dialect) -> Sql {
    let mut sql = Sql::default();
    let mut c = conditions(f, d, &mut sql, true);
    if let Some(cur) = after {
        let r = sql.arg(Arg::Int(cur.received_at));
        let p = sql.arg(Arg::Int(cur.pk));
        c.push(format!("(e.received_at, e.id) < ({r}, {p})"));
    }
    let lim = sql.arg(Arg::Int(limit.clamp(1, MAX_LIMIT)));
    sql.text = format!(
        "SELECT {SUMMARY_COLUMNS} FROM hookgate_events e {} ORDER BY e.received_at DESC, e.id DESC LIMIT {lim}",
        where_clause(&c)
    );
    sql
}

/// Replays the dead deliveries of the events `f` matches.
pub(crate) fn replay_sql(f: &EventFilter, now: Millis, d: Dialect) -> Sql {
    let mut sql = Sql::default();
    let at = sql.arg(Arg::Int(now.0));
    let mut c = vec!["state = 'dead'".to_owned()];
    if let Some(t) = &f.target {
        c.push(format!("target = {}", sql.arg(Arg::Text(t.clone()))));
    }
    if let Some(s) = &f.source {
        c.push(format!("source = {}", sql.arg(Arg::Text(s.clone()))));
    }
    let ev = conditions(f, d, &mut sql, false);
    if !ev.is_empty() {
        c.push(format!(
            "event_pk IN (SELECT e.id FROM hookgate_events e {})",
            where_clause(&ev)
        ));
    }
    sql.text = format!(
        "UPDATE hookgate_deliveries
         SET state = 'pending', attempts = 0, next_attempt_at = {at}, updated_at = {at},
             lease_until = NULL, lease_token = NULL
         {}",
        where_clause(&c)
    );
    sql
}

/// The deliveries of the events `pks`, by event then target.
pub(crate) fn deliveries_sql(pks: &[i64]) -> Sql {
    let mut sql = Sql::default();
    let list: Vec<String> = pks.iter().map(|p| sql.arg(Arg::Int(*p))).collect();
    sql.text = format!(
        "SELECT event_pk, target, state, attempts, last_status, last_error, next_attempt_at,
                updated_at
         FROM hookgate_deliveries WHERE event_pk IN ({}) ORDER BY event_pk, target",
        list.join(", ")
    );
    sql
}

fn where_clause(c: &[String]) -> String {
    if c.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", c.join(" AND "))
    }
}

/// `$1` = source, `$2` = event id.
pub(crate) const EVENT_SQL: &str = "SELECT e.id, e.source, e.event_id, e.event_type, e.received_at,
    CAST(length(e.body) AS BIGINT), CAST(e.duplicates AS BIGINT), CAST(e.conflicts AS BIGINT),
    e.headers, e.body, e.key_index, e.provider_ts
    FROM hookgate_events e WHERE e.source = $1 AND e.event_id = $2";

/// `$1` = event pk, `$2` = limit.
pub(crate) const EVENT_ATTEMPTS_SQL: &str = "SELECT d.target, a.attempt, a.started_at,
    a.latency_ms, a.status, a.error
    FROM hookgate_attempts a JOIN hookgate_deliveries d ON d.id = a.delivery_id
    WHERE d.event_pk = $1 ORDER BY a.id LIMIT $2";

/// `$1` = event pk, `$2` = limit.
pub(crate) const ARRIVALS_SQL: &str = "SELECT arrived_at, conflict FROM hookgate_arrivals
    WHERE event_pk = $1 ORDER BY arrived_at, id LIMIT $2";

/// `$1` = now, `$2` = event pk. Every delivery of the event, due now.
pub(crate) const REDELIVER_ALL_SQL: &str = "UPDATE hookgate_deliveries
    SET state = 'pending', next_attempt_at = $1, updated_at = $1
    WHERE event_pk = $2";

/// `$1` = now, `$2` = event pk, `$3` = source, `$4` = target.
pub(crate) const REDELIVER_ONE_SQL: &str = "INSERT INTO hookgate_deliveries
        (event_pk, source, target, next_attempt_at, updated_at)
    VALUES ($2, $3, $4, $1, $1)
    ON CONFLICT (event_pk, target) DO UPDATE
        SET state = 'pending', next_attempt_at = $1, updated_at = $1";

/// `$1` = first minute.
pub(crate) const MINUTES_SQL: &str = "SELECT minute, source, name, value
    FROM hookgate_counter_minutes WHERE minute >= $1";

/// `$1` = first minute kept.
pub(crate) const MINUTES_PURGE_SQL: &str = "DELETE FROM hookgate_counter_minutes WHERE minute < $1";

/// Pending count and oldest pending event per target, then dead counts.
pub(crate) const BACKLOG_SQL: &str = "SELECT d.target, COUNT(*), MIN(e.received_at)
    FROM hookgate_deliveries d JOIN hookgate_events e ON e.id = d.event_pk
    WHERE d.state = 'pending' GROUP BY d.target";
pub(crate) const DEAD_SQL: &str =
    "SELECT target, COUNT(*) FROM hookgate_deliveries WHERE state = 'dead' GROUP BY target";

/// Binds `args` to a `sqlx::query` in order.
macro_rules! bind_args {
    ($q:expr, $args:expr) => {{
        let mut q = $q;
        for a in $args {
            q = match a {
                $crate::store::events::Arg::Text(s) => q.bind(s.clone()),
                $crate::store::events::Arg::Int(i) => q.bind(*i),
            };
        }
        q
    }};
}
pub(crate) use bind_args;

/// Implements [`Console`] for a backend type with a `pool` field and the
/// inherent `write_arrivals` and `write_minute_counters` methods.
macro_rules! console_ledger {
    ($ledger:ty, $row:ty, $dialect:expr) => {
        use sqlx::Row;
        use $crate::store::events::*;

        fn summary(r: &$row) -> Result<EventSummary, StoreError> {
            Ok(EventSummary {
                pk: r.try_get(0usize)?,
                source: r.try_get(1usize)?,
                event_id: r.try_get(2usize)?,
                event_type: r.try_get(3usize)?,
                received_at: Millis(r.try_get(4usize)?),
                body_size: r.try_get(5usize)?,
                duplicates: r.try_get(6usize)?,
                conflicts: r.try_get(7usize)?,
                deliveries: Vec::new(),
            })
        }

        impl $ledger {
            /// Fills in the deliveries of `items`.
            async fn with_deliveries(&self, items: &mut [EventSummary]) -> Result<(), StoreError> {
                if items.is_empty() {
                    return Ok(());
                }
                let pks: Vec<i64> = items.iter().map(|e| e.pk).collect();
                let sql = deliveries_sql(&pks);
                let rows = bind_args!(sqlx::query(sqlx::AssertSqlSafe(sql.text)), &sql.args)
                    .fetch_all(&self.pool)
                    .await?;
                for r in &rows {
                    let pk: i64 = r.try_get(0)?;
                    let state: String = r.try_get(2)?;
                    let attempts: i32 = r.try_get(3)?;
                    let info = DeliveryInfo {
                        target: r.try_get(1)?,
                        state: DeliveryState::of(&state, attempts).to_owned(),
                        attempts,
                        last_status: r.try_get(4)?,
                        last_error: r.try_get(5)?,
                        next_attempt_at: Millis(r.try_get(6)?),
                        updated_at: Millis(r.try_get(7)?),
                    };
                    if let Some(e) = items.iter_mut().find(|e| e.pk == pk) {
                        e.deliveries.push(info);
                    }
                }
                Ok(())
            }
        }

        #[async_trait]
        impl Console for $ledger {
            async fn list_events(
                &self,
                filter: &EventFilter,
                after: Option<Cursor>,
                limit: i64,
            ) -> Result<EventPage, StoreError> {
                let limit = limit.clamp(1, MAX_LIMIT);
                // One extra row tells whether there is a next page.
                let sql = list_sql(filter, after, limit + 1, $dialect);
                let rows = bind_args!(sqlx::query(sqlx::AssertSqlSafe(sql.text)), &sql.args)
                    .fetch_all(&self.pool)
                    .await?;
                let mut items = rows.iter().map(summary).collect::<Result<Vec<_>, _>>()?;
                let more = items.len() as i64 > limit;
                items.truncate(limit as usize);
                self.with_deliveries(&mut items).await?;
                let next = if more {
                    items.last().map(EventSummary::cursor)
                } else {
                    None
                };
                Ok(EventPage { items, next })
            }

            async fn event(
                &self,
                source: &str,
                event_id: &str,
            ) -> Result<Option<EventRecord>, StoreError> {
                let Some(r) = sqlx::query(EVENT_SQL)
                    .bind(source)
                    .bind(event_id)
                    .fetch_optional(&self.pool)
                    .await?
                else {
                    return Ok(None);
                };
                let mut items = vec![summary(&r)?];
                self.with_deliveries(&mut items).await?;
                let pk = items[0].pk;
                let attempts = sqlx::query(EVENT_ATTEMPTS_SQL)
                    .bind(pk)
                    .bind(MAX_DETAIL_ROWS)
                    .fetch_all(&self.pool)
                    .await?
                    .iter()
                    .map(|a| {
                        Ok(AttemptInfo {
                            target: a.try_get(0)?,
                            attempt: a.try_get(1)?,
                            started_at: Millis(a.try_get(2)?),
                            latency_ms: a.try_get(3)?,
                            status: a.try_get(4)?,
                            error: a.try_get(5)?,
                        })
                    })
                    .collect::<Result<Vec<_>, StoreError>>()?;
                let arrivals = sqlx::query(ARRIVALS_SQL)
                    .bind(pk)
                    .bind(MAX_DETAIL_ROWS)
                    .fetch_all(&self.pool)
                    .await?
                    .iter()
                    .map(|a| {
                        Ok(ArrivalInfo {
                            arrived_at: Millis(a.try_get(0)?),
                            conflict: a.try_get(1)?,
                        })
                    })
                    .collect::<Result<Vec<_>, StoreError>>()?;
                Ok(Some(EventRecord {
                    summary: items.remove(0),
                    headers: r.try_get(8)?,
                    body: r.try_get(9)?,
                    key_index: r.try_get(10)?,
                    provider_ts: r.try_get(11)?,
                    arrivals,
                    attempts,
                }))
            }

            async fn redeliver(
                &self,
                event_pk: i64,
                source: &str,
                target: Option<&str>,
                now: Millis,
            ) -> Result<u64, StoreError> {
                let r = match target {
                    None => {
                        sqlx::query(REDELIVER_ALL_SQL)
                            .bind(now.0)
                            .bind(event_pk)
                            .execute(&self.pool)
                            .await?
                    }
                    Some(t) => {
                        sqlx::query(REDELIVER_ONE_SQL)
                            .bind(now.0)
                            .bind(event_pk)
                            .bind(source)
                            .bind(t)
                            .execute(&self.pool)
                            .await?
                    }
                };
                Ok(r.rows_affected())
            }

            async fn replay_matching(
                &self,
                filter: &EventFilter,
                now: Millis,
            ) -> Result<u64, StoreError> {
                let sql = replay_sql(filter, now, $dialect);
                let r = bind_args!(sqlx::query(sqlx::AssertSqlSafe(sql.text)), &sql.args)
                    .execute(&self.pool)
                    .await?;
                Ok(r.rows_affected())
            }

            async fn record_arrivals(&self, batch: &[NewArrival]) -> Result<(), StoreError> {
                if batch.is_empty() {
                    return Ok(());
                }
                self.write_arrivals(batch).await
            }

            async fn add_minute_counters(
                &self,
                minute: i64,
                deltas: &[(String, String, i64)],
            ) -> Result<(), StoreError> {
                if !deltas.is_empty() {
                    self.write_minute_counters(minute, deltas).await?;
                }
                if minute % 60 == 0 {
                    sqlx::query(MINUTES_PURGE_SQL)
                        .bind(minute - MINUTES_KEPT)
                        .execute(&self.pool)
                        .await?;
                }
                Ok(())
            }

            async fn minute_counters(
                &self,
                since_minute: i64,
            ) -> Result<Vec<MinuteCount>, StoreError> {
                let rows = sqlx::query(MINUTES_SQL)
                    .bind(since_minute)
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter()
                    .map(|r| {
                        Ok(MinuteCount {
                            minute: r.try_get(0)?,
                            source: r.try_get(1)?,
                            name: r.try_get(2)?,
                            value: r.try_get(3)?,
                        })
                    })
                    .collect()
            }

            async fn backlog(&self) -> Result<Vec<Backlog>, StoreError> {
                let mut out: Vec<Backlog> = Vec::new();
                for r in sqlx::query(BACKLOG_SQL).fetch_all(&self.pool).await? {
                    let oldest: Option<i64> = r.try_get(2)?;
                    out.push(Backlog {
                        target: r.try_get(0)?,
                        pending: r.try_get(1)?,
                        oldest_pending: oldest.map(Millis),
                        dead: 0,
                    });
                }
                for r in sqlx::query(DEAD_SQL).fetch_all(&self.pool).await? {
                    let target: String = r.try_get(0)?;
                    let dead: i64 = r.try_get(1)?;
                    match out.iter_mut().find(|b| b.target == target) {
                        Some(b) => b.dead = dead,
                        None => out.push(Backlog {
                            target,
                            dead,
                            ..Backlog::default()
                        }),
                    }
                }
                Ok(out)
            }
        }
    };
}
pub(crate) use console_ledger;

#[cfg(test)]
mod tests {
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
}
