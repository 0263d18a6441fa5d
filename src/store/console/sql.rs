//! The console's SQL, built once for both backends with `$N` placeholders.
//!
//! Rule: filter values are always bound ([`Arg`]), never written into the
//! text.

use super::{Cursor, EventFilter, MAX_LIMIT};
use crate::primitives::time::Millis;
use crate::store::StoreError;
use crate::store::rows::{Bind, encode_error};

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
    if let Some(r) = f.recovered {
        c.push(if r { "e.recovered" } else { "NOT e.recovered" }.to_owned());
    }
    if let Some(o) = &f.object {
        c.push(format!("e.object_id = {}", sql.arg(Arg::Text(o.clone()))));
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

/// Columns of an event summary, in `portable::summary`'s decoding order.
const SUMMARY_COLUMNS: &str = "e.id, e.source, e.event_id, e.event_type, e.received_at,
    CAST(length(e.body) AS BIGINT), CAST((SELECT COALESCE(SUM(a.copies), 0) FROM hookgate_arrivals a WHERE a.event_pk = e.id) AS BIGINT),
    CAST((SELECT COALESCE(SUM(CASE WHEN a.conflict THEN a.copies ELSE 0 END), 0)
          FROM hookgate_arrivals a WHERE a.event_pk = e.id) AS BIGINT), e.recovered, e.object_id";

/// One page of events, newest first.
pub(crate) fn list_sql(f: &EventFilter, after: Option<Cursor>, limit: i64, d: Dialect) -> Sql {
    let mut sql = Sql::default();
    let mut c = conditions(f, d, &mut sql, true);
    if let Some(cur) = after {
        let r = sql.arg(Arg::Int(cur.received_at));
        let p = sql.arg(Arg::Int(cur.pk));
        c.push(format!("(e.received_at, e.id) < ({r}, {p})"));
    }
    // The caller asks for one row past its page (`MAX_LIMIT + 1` at most) to
    // know whether a next page exists.
    let lim = sql.arg(Arg::Int(limit.clamp(1, MAX_LIMIT + 1)));
    sql.text = format!(
        "SELECT {SUMMARY_COLUMNS} FROM hookgate_events e {} ORDER BY e.received_at DESC, e.id DESC LIMIT {lim}",
        where_clause(&c)
    );
    sql
}

/// One `field` page's scan: the next `scan` events `f` matches without its
/// field (newest first, strictly after `after`), each as `id, received_at,
/// body`, the body only where it may hold the value (all of them when the
/// value is not byte-searchable: `FieldFilter::byte_searchable`). The
/// caller checks the field itself.
pub(crate) fn field_scan_sql(f: &EventFilter, after: Option<Cursor>, scan: i64, d: Dialect) -> Sql {
    let mut sql = Sql::default();
    let mut c = conditions(f, d, &mut sql, true);
    if let Some(cur) = after {
        let r = sql.arg(Arg::Int(cur.received_at));
        let p = sql.arg(Arg::Int(cur.pk));
        c.push(format!("(e.received_at, e.id) < ({r}, {p})"));
    }
    let lim = sql.arg(Arg::Int(scan));
    let body = match f.field.as_ref().filter(|x| x.byte_searchable()) {
        Some(x) => {
            let v = sql.arg(Arg::Text(x.value.clone()));
            let found = match d {
                Dialect::Postgres => format!("position(convert_to({v}, 'UTF8') in s.body) > 0"),
                Dialect::Sqlite => format!("instr(s.body, CAST({v} AS BLOB)) > 0"),
            };
            format!("CASE WHEN {found} THEN s.body END")
        }
        None => "s.body".to_owned(),
    };
    sql.text = format!(
        "SELECT s.id, s.received_at, {body} FROM (
             SELECT e.id, e.received_at, e.body FROM hookgate_events e {}
             ORDER BY e.received_at DESC, e.id DESC LIMIT {lim}) s
         ORDER BY s.received_at DESC, s.id DESC",
        where_clause(&c)
    );
    sql
}

/// The summaries of the events `pks`, newest first.
pub(crate) fn summaries_sql(pks: &[i64]) -> Sql {
    let mut sql = Sql::default();
    let list: Vec<String> = pks.iter().map(|p| sql.arg(Arg::Int(*p))).collect();
    sql.text = format!(
        "SELECT {SUMMARY_COLUMNS} FROM hookgate_events e WHERE e.id IN ({})
         ORDER BY e.received_at DESC, e.id DESC",
        list.join(", ")
    );
    sql
}

/// Replays the dead deliveries of the events `f` matches.
pub(crate) fn replay_sql(f: &EventFilter, now: Millis, d: Dialect) -> Sql {
    let mut sql = Sql::default();
    let at = sql.arg(Arg::Int(now.0));
    let c = dead_deliveries(f, d, &mut sql, "state = 'dead'");
    sql.text = format!(
        "UPDATE hookgate_deliveries
         SET state = 'pending', earlier_attempts = earlier_attempts + attempts, attempts = 0,
             next_attempt_at = {at}, updated_at = {at},
             lease_until = NULL, lease_token = NULL
         {c}"
    );
    sql
}

/// The dead deliveries with an ordering key that [`replay_sql`] with the
/// same filter makes pending again: `id, target, order_key`, in key and
/// sequence order (they go to the back of their keys in that order).
pub(crate) fn replay_ordered_sql(f: &EventFilter, d: Dialect) -> Sql {
    let mut sql = Sql::default();
    let c = dead_deliveries(f, d, &mut sql, "state = 'dead' AND order_key IS NOT NULL");
    sql.text = format!(
        "SELECT id, target, order_key FROM hookgate_deliveries {c}
         ORDER BY target, order_key, order_seq{}",
        lock_rows(d)
    );
    sql
}

/// The dead deliveries a bulk replay's plan counts (`id <= upto`), by
/// source and target: `source, target, deliveries, events`.
pub(crate) fn dead_counts_sql(f: &EventFilter, upto: i64, d: Dialect) -> Sql {
    let mut sql = Sql::default();
    let bound = sql.arg(Arg::Int(upto));
    let c = dead_deliveries(f, d, &mut sql, &format!("state = 'dead' AND id <= {bound}"));
    sql.text = format!(
        "SELECT source, target, CAST(COUNT(*) AS BIGINT), CAST(COUNT(DISTINCT event_pk) AS BIGINT)
         FROM hookgate_deliveries {c} GROUP BY source, target ORDER BY source, target"
    );
    sql
}

/// The dead deliveries a bulk replay's events per source: `source, events`
/// (an event with two dead targets counts once).
pub(crate) fn dead_events_sql(f: &EventFilter, upto: i64, d: Dialect) -> Sql {
    let mut sql = Sql::default();
    let bound = sql.arg(Arg::Int(upto));
    let c = dead_deliveries(f, d, &mut sql, &format!("state = 'dead' AND id <= {bound}"));
    sql.text = format!(
        "SELECT source, CAST(COUNT(DISTINCT event_pk) AS BIGINT)
         FROM hookgate_deliveries {c} GROUP BY source ORDER BY source"
    );
    sql
}

/// One page of a bulk replay: the next `limit` dead deliveries with
/// `after < id <= upto`, in id order, as `id, target, order_key, order_seq`,
/// locked for the transaction that makes them pending.
pub(crate) fn dead_page_sql(f: &EventFilter, after: i64, upto: i64, limit: i64, d: Dialect) -> Sql {
    let mut sql = Sql::default();
    let lo = sql.arg(Arg::Int(after));
    let hi = sql.arg(Arg::Int(upto));
    let state = format!("state = 'dead' AND id > {lo} AND id <= {hi}");
    let c = dead_deliveries(f, d, &mut sql, &state);
    let lim = sql.arg(Arg::Int(limit));
    sql.text = format!(
        "SELECT id, target, order_key, order_seq FROM hookgate_deliveries {c}
         ORDER BY id LIMIT {lim}{}",
        lock_rows(d)
    );
    sql
}

/// Makes the dead deliveries `ids` pending again, due now (as [`replay_sql`]).
pub(crate) fn replay_ids_sql(ids: &[i64], now: Millis) -> Sql {
    let mut sql = Sql::default();
    let at = sql.arg(Arg::Int(now.0));
    let list: Vec<String> = ids.iter().map(|i| sql.arg(Arg::Int(*i))).collect();
    sql.text = format!(
        "UPDATE hookgate_deliveries
         SET state = 'pending', earlier_attempts = earlier_attempts + attempts, attempts = 0,
             next_attempt_at = {at}, updated_at = {at},
             lease_until = NULL, lease_token = NULL
         WHERE state = 'dead' AND id IN ({})",
        list.join(", ")
    );
    sql
}

/// The largest delivery id (0 when there is none): a plan's bound.
pub(crate) const MAX_DELIVERY_SQL: &str =
    "SELECT CAST(COALESCE(MAX(id), 0) AS BIGINT) FROM hookgate_deliveries";

/// The `WHERE` clause on `hookgate_deliveries` of a replay: `state` (the
/// dead rows, or some of them), then the filter's target, source and event
/// conditions, in that order of placeholders.
fn dead_deliveries(f: &EventFilter, d: Dialect, sql: &mut Sql, state: &str) -> String {
    let mut c = vec![state.to_owned()];
    if let Some(t) = &f.target {
        c.push(format!("target = {}", sql.arg(Arg::Text(t.clone()))));
    }
    if let Some(s) = &f.source {
        c.push(format!("source = {}", sql.arg(Arg::Text(s.clone()))));
    }
    let ev = conditions(f, d, sql, false);
    if !ev.is_empty() {
        c.push(format!(
            "event_pk IN (SELECT e.id FROM hookgate_events e {})",
            where_clause(&ev)
        ));
    }
    where_clause(&c)
}

/// The start of a transaction that reads, then writes: SQLite takes the
/// write lock at once (`IMMEDIATE`), or a deferred reader could not become
/// the writer once another one committed (`SQLITE_BUSY`).
pub(crate) fn begin_write(d: Dialect) -> &'static str {
    match d {
        Dialect::Postgres => "BEGIN",
        Dialect::Sqlite => "BEGIN IMMEDIATE",
    }
}

/// `FOR UPDATE` where the dialect has it (SQLite has one writer).
pub(crate) fn lock_rows(d: Dialect) -> &'static str {
    match d {
        Dialect::Postgres => " FOR UPDATE",
        Dialect::Sqlite => "",
    }
}

/// `$1` = event pk, `$2` = target (NULL: every target). The event's
/// delivered or dead rows with an ordering key: a redelivery makes them
/// pending again at the back of their keys. Pending rows keep their place.
pub(crate) const REDELIVER_ORDERED_SQL: &str = "SELECT id, target, order_key
    FROM hookgate_deliveries
    WHERE event_pk = $1 AND ($2 IS NULL OR target = $2)
      AND state <> 'pending' AND order_key IS NOT NULL
    ORDER BY target, order_key, order_seq";

/// `$1` = sequence number, `$2` = delivery id.
pub(crate) const SET_SEQ_SQL: &str = "UPDATE hookgate_deliveries SET order_seq = $1 WHERE id = $2";

/// The deliveries of the events `pks`, by event then target.
pub(crate) fn deliveries_sql(pks: &[i64]) -> Sql {
    let mut sql = Sql::default();
    let list: Vec<String> = pks.iter().map(|p| sql.arg(Arg::Int(*p))).collect();
    sql.text = format!(
        "SELECT d.event_pk, d.target, d.state, d.attempts, d.last_status, d.last_error,
                d.next_attempt_at, d.updated_at, d.order_key, d.order_seq,
                CASE WHEN d.state = 'dead' AND d.order_key IS NOT NULL THEN (
                    SELECT COUNT(*) FROM hookgate_deliveries o
                    WHERE o.target = d.target AND o.order_key = d.order_key
                      AND o.order_seq > d.order_seq AND o.state = 'delivered') END
         FROM hookgate_deliveries d WHERE d.event_pk IN ({}) ORDER BY d.event_pk, d.target",
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
    CAST(length(e.body) AS BIGINT), CAST((SELECT COALESCE(SUM(a.copies), 0) FROM hookgate_arrivals a WHERE a.event_pk = e.id) AS BIGINT),
    CAST((SELECT COALESCE(SUM(CASE WHEN a.conflict THEN a.copies ELSE 0 END), 0)
          FROM hookgate_arrivals a WHERE a.event_pk = e.id) AS BIGINT), e.recovered, e.object_id,
    e.headers, e.body, e.key_index, e.provider_ts
    FROM hookgate_events e WHERE e.source = $1 AND e.event_id = $2";

/// `$1` = event pk, `$2` = limit.
pub(crate) const EVENT_ATTEMPTS_SQL: &str = "SELECT d.target, a.attempt, a.started_at,
    a.latency_ms, a.status, a.error
    FROM hookgate_attempts a JOIN hookgate_deliveries d ON d.id = a.delivery_id
    WHERE d.event_pk = $1 ORDER BY a.id LIMIT $2";

/// `$1` = event pk, `$2` = limit.
pub(crate) const ARRIVALS_SQL: &str = "SELECT arrived_at, COALESCE(last_at, arrived_at),
    CAST(copies AS BIGINT), conflict FROM hookgate_arrivals
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

/// Pending count and oldest pending event per target, then dead counts.
pub(crate) const BACKLOG_SQL: &str = "SELECT d.target, COUNT(*), MIN(e.received_at)
    FROM hookgate_deliveries d JOIN hookgate_events e ON e.id = d.event_pk
    WHERE d.state = 'pending' GROUP BY d.target";
pub(crate) const DEAD_SQL: &str =
    "SELECT target, COUNT(*) FROM hookgate_deliveries WHERE state = 'dead' GROUP BY target";

/// The bind values of generated SQL as the backend's arguments.
pub(crate) fn arguments<DB>(args: &[Arg]) -> Result<DB::Arguments, StoreError>
where
    DB: sqlx::Database,
    for<'a> &'a str: Bind<DB>,
    i64: Bind<DB>,
{
    use sqlx::Arguments;
    let mut out = DB::Arguments::default();
    for a in args {
        match a {
            Arg::Text(s) => out.add(s.as_str()),
            Arg::Int(i) => out.add(*i),
        }
        .map_err(encode_error)?;
    }
    Ok(out)
}

/// `$1` = source, `$2` = event id, `$3` = target; oldest attempt first.
pub(crate) const ATTEMPTS_SQL: &str = "SELECT a.attempt, a.status, a.error, a.latency_ms
     FROM hookgate_attempts a
     JOIN hookgate_deliveries d ON d.id = a.delivery_id
     JOIN hookgate_events e ON e.id = d.event_pk
     WHERE e.source = $1 AND e.event_id = $2 AND d.target = $3
     ORDER BY a.id";

/// The newest event id (0 in an empty ledger): where `--from now` starts.
pub(crate) const LISTEN_HORIZON_SQL: &str =
    "SELECT CAST(COALESCE(MAX(id), 0) AS BIGINT) FROM hookgate_events";

/// `$1` = source, `$2` = since (ms): the first event id received since.
pub(crate) const LISTEN_SINCE_SQL: &str =
    "SELECT CAST(MIN(id) AS BIGINT) FROM hookgate_events WHERE source = $1 AND received_at >= $2";

/// `$1` = source, `$2` = after id, `$3` = up to id, `$4` = limit; ledger
/// order (index `hookgate_events_source_id`).
pub(crate) const LISTEN_PAGE_SQL: &str = "SELECT e.id, e.event_id, e.event_type, e.received_at,
    e.headers, e.body FROM hookgate_events e
    WHERE e.source = $1 AND e.id > $2 AND e.id <= $3 ORDER BY e.id LIMIT $4";
