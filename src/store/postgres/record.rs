//! Recording a batch of events on PostgreSQL.
//!
//! Rule: a batch costs the same round trips as one event, thanks to
//! `UNNEST`: ONE statement inserts the events, their deliveries and the
//! NOTIFY, and commits; a second reads conflicting hashes (only when there
//! are conflicts). A fresh batch without deliveries is first tried as a
//! plain INSERT, which a stored id fails as a whole (then the batch is
//! written the usual way: one statement more, only then). Rows are
//! locked in one global key order so concurrent batches cannot deadlock.

use super::super::rows::{first_occurrence, fresh_results};
use super::super::{NewEvent, Recorded, StoreError};
use super::NOTIFY_CHANNEL;
use crate::primitives::time::Millis;
use sqlx::PgConnection;
use sqlx::Row;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};

/// An event's key, borrowed from the batch.
type Key<'a> = (&'a str, &'a str);

/// Inserts every event not already present, with its delivery rows, in one
/// statement (its own transaction: one round trip, one commit); a fresh
/// batch without delivery rows first as a plain INSERT ([`insert_fresh`]),
/// which costs one statement more when it holds a stored id. Results are in
/// input order.
pub(super) async fn record(
    conn: &mut PgConnection,
    batch: &[NewEvent],
    pause: &FreshPause,
) -> Result<Vec<Recorded>, StoreError> {
    let repeats = first_occurrence(batch);
    // Arrival order (the queue's), for the sequence numbers of ordered
    // targets: the batch is written in key order, not in this one.
    // Only built for a batch with ordering keys.
    let ordered = batch
        .iter()
        .any(|e| e.order_keys.iter().any(Option::is_some));
    let arrival: HashMap<Key, i64> = if ordered {
        batch
            .iter()
            .zip(&repeats)
            .enumerate()
            .filter(|(_, (_, r))| r.is_none())
            .map(|(i, (e, _))| (key(e), i as i64))
            .collect()
    } else {
        HashMap::new()
    };
    let unique = unique_in_lock_order(batch, &repeats);
    if unique.iter().all(|e| e.fresh && e.targets.is_empty()) && pause.try_plain() {
        match insert_fresh(conn, &unique).await {
            Ok(()) => return Ok(fresh_results(batch, &repeats)),
            // Some id was stored after all (the cache had lost it, or its
            // row outlived the cache entry): nothing was written; the
            // general statement below sorts the batch out.
            Err(e) if is_unique_violation(&e) => {
                pause.failed();
                tracing::debug!("a fresh batch held a stored id; writing it with ON CONFLICT");
            }
            Err(e) => return Err(e.into()),
        }
    }
    // Rows come back in no particular order: match them to `unique` by key,
    // borrowing the batch's strings (no copies per lookup).
    let position: HashMap<Key, usize> = unique
        .iter()
        .enumerate()
        .map(|(i, e)| (key(e), i))
        .collect();

    let (mut pk, leased) = insert_all(conn, &unique, &position, &arrival).await?;
    // Committed: hand the leased rows to this process's loops.
    for (at, e) in unique.iter().enumerate() {
        if pk[at].is_some() {
            e.committed(&leased[at]);
        }
    }
    // Only when something conflicted: the conflicting rows are committed
    // (ON CONFLICT waited for them), so a plain read sees their hashes.
    let mut stored = stored_hashes(conn, &unique, &pk, &position).await?;
    readmit_expired(conn, &unique, &position, &arrival, &mut pk, &mut stored).await?;

    Ok(results(batch, &repeats, &position, &pk, stored))
}

/// An id whose stored row is past its window is new again (docs/design.md
/// "Dedup window"), even while that row is kept for an unfinished delivery:
/// the old row is renamed `<id>~expired~<pk>` (its deliveries, attempts and
/// arrivals stay with it, for the operator) and the event is inserted again.
/// Only runs when a conflict hit an expired row. Two writers racing here
/// both rename at most the expired row; one insert wins, the other is a
/// duplicate of it.
async fn readmit_expired(
    conn: &mut PgConnection,
    unique: &[&NewEvent],
    position: &HashMap<Key<'_>, usize>,
    arrival: &HashMap<Key<'_>, i64>,
    pk: &mut [Option<i64>],
    stored: &mut [Option<(Vec<u8>, Millis)>],
) -> Result<(), StoreError> {
    let expired: Vec<&NewEvent> = unique
        .iter()
        .zip(stored.iter())
        .filter(|(e, st)| {
            st.as_ref()
                .is_some_and(|(_, until)| *until <= e.received_at)
        })
        .map(|(e, _)| *e)
        .collect();
    if expired.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "UPDATE hookgate_events e SET event_id = e.event_id || '~expired~' || e.id
         FROM UNNEST($1::text[], $2::text[], $3::int8[]) AS k(s, i, now)
         WHERE e.source = k.s AND e.event_id = k.i AND e.expires_at <= k.now",
    )
    .bind(column(&expired, |e| e.source.as_str()))
    .bind(column(&expired, |e| e.event_id.as_str()))
    .bind(column(&expired, |e| e.received_at.0))
    .execute(&mut *conn)
    .await?;
    let again: HashMap<Key, usize> = expired
        .iter()
        .enumerate()
        .map(|(i, e)| (key(e), i))
        .collect();
    let (pk2, leased2) = insert_all(conn, &expired, &again, arrival).await?;
    for (i, e) in expired.iter().enumerate() {
        if pk2[i].is_some() {
            e.committed(&leased2[i]);
        }
        let at = position[&key(e)];
        pk[at] = pk2[i];
    }
    // Whatever still conflicts (another writer re-admitted it first) is a
    // duplicate of that new row.
    let still = stored_hashes(conn, &expired, &pk2, &again).await?;
    for (i, e) in expired.iter().enumerate() {
        stored[position[&key(e)]] = still[i].clone();
    }
    Ok(())
}

/// A batch of fresh events without delivery rows (see [`NewEvent::fresh`]):
/// one plain INSERT, its own transaction. Without `ON CONFLICT` PostgreSQL
/// skips the speculative insertion (a probe of the unique index before
/// each row, then the insert) and returns no rows; a stored id fails the
/// whole statement with a unique violation and nothing is written.
async fn insert_fresh(conn: &mut PgConnection, unique: &[&NewEvent]) -> Result<(), sqlx::Error> {
    events(FRESH_INSERT_SQL, unique)
        .bind(column(unique, |e| e.facts.recovered))
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// After a fresh batch failed on a stored id, the next [`FreshPause::BATCHES`]
/// batches are written with conflict handling at once. Stored ids tend to
/// come together (a Redis restart empties the cache while the ledger keeps
/// every id; a provider resends a day of old events), and each failed plain
/// INSERT costs a statement, and its dead rows, for nothing. One plain try
/// per pause then shows whether the ids are fresh again.
#[derive(Default)]
pub(super) struct FreshPause(AtomicU32);

impl FreshPause {
    const BATCHES: u32 = 64;

    /// True when this batch may try the plain INSERT.
    fn try_plain(&self) -> bool {
        self.0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_err()
    }

    fn failed(&self) {
        self.0.store(Self::BATCHES, Ordering::Relaxed);
    }
}

/// `sql` with the events' columns bound as `$1`..`$10` (each statement
/// binds `recovered` and the rest itself).
fn events<'q>(
    sql: &'static str,
    unique: &[&'q NewEvent],
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(sql)
        .bind(column(unique, |e| e.source.as_str()))
        .bind(column(unique, |e| e.event_id.as_str()))
        .bind(column(unique, |e| e.body.as_ref()))
        .bind(column(unique, |e| &e.body_sha256[..]))
        .bind(column(unique, |e| e.headers.as_str()))
        .bind(column(unique, |e| e.received_at))
        .bind(column(unique, |e| e.expires_at))
        // Console facts (store::events): event type, matched key, provider time.
        .bind(column(unique, |e| e.facts.event_type.as_deref()))
        .bind(column(unique, |e| e.facts.key_index))
        .bind(column(unique, |e| e.facts.provider_ts))
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}

fn key(e: &NewEvent) -> Key<'_> {
    (e.source.as_str(), e.event_id.as_str())
}

/// One field of every event, as an array parameter for `UNNEST`.
fn column<'a, T>(events: &[&'a NewEvent], field: impl Fn(&'a NewEvent) -> T) -> Vec<T> {
    events.iter().map(|e| field(e)).collect()
}

/// The first occurrence of each key, sorted by key. One lock order for every
/// writer: two batches holding the same ids (possible while the cache is
/// down) wait for each other instead of deadlocking.
fn unique_in_lock_order<'a>(batch: &'a [NewEvent], repeats: &[Option<usize>]) -> Vec<&'a NewEvent> {
    let mut unique: Vec<&NewEvent> = batch
        .iter()
        .zip(repeats)
        .filter(|(_, r)| r.is_none())
        .map(|(e, _)| e)
        .collect();
    unique.sort_unstable_by(|a, b| key(a).cmp(&key(b)));
    unique
}

/// Inserts the events, one delivery row per target of each inserted event
/// (due at once; leased to this process where a hand-off slot was reserved)
/// and one NOTIFY per distinct target with unleased rows (delivered at
/// COMMIT, waking the workers of every replica), in ONE statement. Returns
/// the new primary key of each event inserted (`None` where the key already
/// existed), and per event its leased rows as `(target index, delivery id)`.
///
/// A batch with ordering keys uses [`ORDERED_INSERT_SQL`] instead: the same
/// statement, which also takes each ordered row's sequence number.
async fn insert_all(
    conn: &mut PgConnection,
    unique: &[&NewEvent],
    position: &HashMap<Key<'_>, usize>,
    arrival: &HashMap<Key<'_>, i64>,
) -> Result<(Vec<Option<i64>>, Vec<Vec<(usize, i64)>>), StoreError> {
    let (mut t_source, mut t_event, mut t_target) = (vec![], vec![], vec![]);
    let (mut t_lease_until, mut t_token) = (vec![], vec![]);
    let (mut t_order_key, mut t_arrival) = (vec![], vec![]);
    let ordered = unique
        .iter()
        .any(|e| e.order_keys.iter().any(Option::is_some));
    for e in unique {
        for (i, t) in e.targets.iter().enumerate() {
            let lease = e.lease(i);
            t_source.push(e.source.as_str());
            t_event.push(e.event_id.as_str());
            t_target.push(t.as_str());
            t_lease_until.push(lease.map(|l| l.1.0));
            t_token.push(lease.map(|l| l.0));
            if ordered {
                t_order_key.push(e.order_key(i));
                t_arrival.push(arrival.get(&key(e)).copied().unwrap_or_default());
            }
        }
    }
    let query = if t_target.is_empty() {
        // No delivery rows (no targets, or none routed): the plain insert,
        // a smaller plan to start and run per batch.
        events(EVENTS_ONLY_SQL, unique).bind(column(unique, |e| e.facts.recovered))
    } else {
        let query = events(
            if ordered {
                ORDERED_INSERT_SQL
            } else {
                INSERT_SQL
            },
            unique,
        )
        .bind(&t_source)
        .bind(&t_event)
        .bind(&t_target)
        .bind(NOTIFY_CHANNEL)
        .bind(&t_lease_until)
        .bind(&t_token)
        .bind(column(unique, |e| e.facts.recovered));
        if ordered {
            query.bind(&t_order_key).bind(&t_arrival)
        } else {
            query
        }
    };
    let inserted = query.fetch_all(&mut *conn).await?;
    let mut pk: Vec<Option<i64>> = vec![None; unique.len()];
    let mut leased: Vec<Vec<(usize, i64)>> = vec![vec![]; unique.len()];
    for row in &inserted {
        let kind: i32 = row.try_get(0)?;
        let (s, i): Key = (row.try_get(2)?, row.try_get(3)?);
        let Some(&at) = position.get(&(s, i)) else {
            continue;
        };
        let id: i64 = row.try_get(1)?;
        if kind == 0 {
            pk[at] = Some(id);
        } else {
            let target: &str = row.try_get(4)?;
            if let Some(ti) = unique[at].targets.iter().position(|t| t == target) {
                leased[at].push((ti, id));
            }
        }
    }
    Ok((pk, leased))
}

/// The stored body hash of each event whose insert conflicted (`None`
/// elsewhere). No query when nothing conflicted.
async fn stored_hashes(
    conn: &mut PgConnection,
    unique: &[&NewEvent],
    pk: &[Option<i64>],
    position: &HashMap<Key<'_>, usize>,
) -> Result<Vec<Option<(Vec<u8>, Millis)>>, StoreError> {
    let mut stored: Vec<Option<(Vec<u8>, Millis)>> = vec![None; unique.len()];
    let conflicted: Vec<&NewEvent> = unique
        .iter()
        .zip(pk)
        .filter(|(_, pk)| pk.is_none())
        .map(|(e, _)| *e)
        .collect();
    if conflicted.is_empty() {
        return Ok(stored);
    }
    let rows = sqlx::query(
        "SELECT e.source, e.event_id, e.body_sha256, e.expires_at FROM hookgate_events e
         JOIN UNNEST($1::text[], $2::text[]) AS k(s, i)
           ON e.source = k.s AND e.event_id = k.i",
    )
    .bind(column(&conflicted, |e| e.source.as_str()))
    .bind(column(&conflicted, |e| e.event_id.as_str()))
    .fetch_all(&mut *conn)
    .await?;
    for r in &rows {
        let (s, i): Key = (r.try_get(0)?, r.try_get(1)?);
        if let Some(&at) = position.get(&(s, i)) {
            stored[at] = Some((r.try_get(2)?, r.try_get(3)?));
        }
    }
    Ok(stored)
}

/// One result per input event, in input order.
fn results(
    batch: &[NewEvent],
    repeats: &[Option<usize>],
    position: &HashMap<Key<'_>, usize>,
    pk: &[Option<i64>],
    mut stored: Vec<Option<(Vec<u8>, Millis)>>,
) -> Vec<Recorded> {
    batch
        .iter()
        .zip(repeats)
        .map(|(e, rep)| match rep {
            Some(first) => Recorded::Duplicate {
                stored_sha256: batch[*first].body_sha256.to_vec(),
                expires_at: batch[*first].expires_at,
            },
            None => {
                let at = position[&key(e)];
                match pk[at] {
                    Some(_) => Recorded::New,
                    None => {
                        let (stored_sha256, expires_at) = stored[at].take().unwrap_or_default();
                        Recorded::Duplicate {
                            stored_sha256,
                            expires_at,
                        }
                    }
                }
            }
        })
        .collect()
}

/// The statement's head, shared by both forms: insert the events, skipping
/// ids already stored (`ins`), then the form's own CTEs follow.
macro_rules! events_cte {
    () => {
        "WITH ins AS (
         INSERT INTO hookgate_events
             (source, event_id, body, body_sha256, headers, received_at, expires_at,
              event_type, key_index, provider_ts, recovered)
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::bytea[], $4::bytea[],
                              $5::text[], $6::int8[], $7::int8[],
                              $8::text[], $9::int4[], $10::int8[], $17::bool[])
         ON CONFLICT (source, event_id) DO NOTHING
         RETURNING id, source, event_id, received_at
     ), "
    };
}

/// The statement's tail, shared by both forms: after `dl` (the delivery
/// rows) ends `INSERT … SELECT …`, one NOTIFY per target with unleased
/// rows, then the inserted events (kind 0) and their leased rows (kind 1).
macro_rules! result_tail {
    () => {
        "
         RETURNING id, event_pk, target, lease_token IS NOT NULL AS leased
     ), woke AS (
         SELECT pg_notify($14, target)
         FROM (SELECT DISTINCT target FROM dl WHERE NOT leased) AS x
     )
     SELECT 0 AS kind, id, source, event_id, NULL::text AS target,
            (SELECT count(*) FROM woke) AS woke
     FROM ins
     UNION ALL
     SELECT 1, dl.id, ins.source, ins.event_id, dl.target, 0
     FROM dl JOIN ins ON ins.id = dl.event_pk WHERE dl.leased"
    };
}

/// Events, their delivery rows and the NOTIFY, in one statement. The scalar
/// subquery makes `woke` run (once), after `dl`. Rows of kind 0 are the
/// inserted events, kind 1 their leased delivery rows.
const INSERT_SQL: &str = concat!(
    events_cte!(),
    "dl AS (
         INSERT INTO hookgate_deliveries
             (event_pk, source, target, next_attempt_at, updated_at, lease_until, lease_token)
         SELECT ins.id, ins.source, t.target, ins.received_at, ins.received_at,
                t.lease_until, t.token
         FROM ins JOIN UNNEST($11::text[], $12::text[], $13::text[], $15::int8[], $16::text[])
             AS t(source, event_id, target, lease_until, token)
           ON t.source = ins.source AND t.event_id = ins.event_id",
    result_tail!()
);

/// The events alone, `recovered` as `$11`: the head of [`FRESH_INSERT_SQL`]
/// and [`EVENTS_ONLY_SQL`].
macro_rules! events_insert {
    () => {
        "INSERT INTO hookgate_events
             (source, event_id, body, body_sha256, headers, received_at, expires_at,
              event_type, key_index, provider_ts, recovered)
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::bytea[], $4::bytea[],
                              $5::text[], $6::int8[], $7::int8[],
                              $8::text[], $9::int4[], $10::int8[], $11::bool[])"
    };
}

/// [`insert_fresh`]: no conflict handling, no rows back.
const FRESH_INSERT_SQL: &str = events_insert!();

/// [`INSERT_SQL`] for a batch without delivery rows: the events alone, with
/// the same result rows (kind 0).
const EVENTS_ONLY_SQL: &str = concat!(
    events_insert!(),
    "
     ON CONFLICT (source, event_id) DO NOTHING
     RETURNING 0 AS kind, id, source, event_id, NULL::text AS target"
);

/// [`INSERT_SQL`] for a batch with ordering keys (`$18`, parallel to the
/// delivery arrays: NULL for an unordered target, `''` for an ordered one
/// whose event has no key, stored as key NULL and sequence 0; `$19` = each
/// row's place in the batch's arrival order).
/// Per (target, key) of the inserted events, `bump` adds the number of new
/// rows to `hookgate_order_keys.last_seq` and each row takes its number in
/// arrival order. The counter's row lock is held until COMMIT, so a second
/// batch with the same key waits for this one: sequence order is commit
/// order (docs/design.md "Ordering"). `bump` runs after `ins` has finished
/// (its window sort reads all of it) and takes keys sorted, so two batches
/// lock counters in one order and never deadlock.
const ORDERED_INSERT_SQL: &str = concat!(
    events_cte!(),
    "t AS (
         SELECT * FROM UNNEST($11::text[], $12::text[], $13::text[], $15::int8[], $16::text[],
                              $18::text[], $19::int8[])
             AS t(source, event_id, target, lease_until, token, order_key, arrival)
     ), ord AS (
         SELECT t.target, t.order_key, t.arrival,
                row_number() OVER (PARTITION BY t.target, t.order_key ORDER BY t.arrival) AS r,
                count(*) OVER (PARTITION BY t.target, t.order_key) AS c
         FROM ins JOIN t ON t.source = ins.source AND t.event_id = ins.event_id
         WHERE t.order_key <> ''
     ), bump AS (
         INSERT INTO hookgate_order_keys AS k (target, order_key, last_seq)
         SELECT target, order_key, count(*) FROM ord
         GROUP BY target, order_key ORDER BY target, order_key
         ON CONFLICT (target, order_key) DO UPDATE SET last_seq = k.last_seq + excluded.last_seq
         RETURNING k.target, k.order_key, k.last_seq
     ), dl AS (
         INSERT INTO hookgate_deliveries
             (event_pk, source, target, next_attempt_at, updated_at, lease_until, lease_token,
              order_key, order_seq)
         SELECT ins.id, ins.source, t.target, ins.received_at, ins.received_at,
                t.lease_until, t.token, NULLIF(t.order_key, ''),
                CASE WHEN t.order_key = '' THEN 0 ELSE b.last_seq - o.c + o.r END
         FROM ins JOIN t ON t.source = ins.source AND t.event_id = ins.event_id
         LEFT JOIN ord o ON o.target = t.target AND o.arrival = t.arrival
         LEFT JOIN bump b ON b.target = t.target AND b.order_key = t.order_key",
    result_tail!()
);

#[cfg(test)]
mod tests {
    use super::FreshPause;

    #[test]
    fn a_failed_fresh_batch_pauses_plain_inserts_for_the_next_batches() {
        let pause = FreshPause::default();
        assert!(pause.try_plain(), "plain first");
        assert!(pause.try_plain());
        pause.failed();
        for i in 0..FreshPause::BATCHES {
            assert!(!pause.try_plain(), "batch {i} after the failure");
        }
        assert!(pause.try_plain(), "one plain try after the pause");
        assert!(pause.try_plain(), "and on while it succeeds");
    }
}
