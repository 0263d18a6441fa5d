//! Recording a batch of events on PostgreSQL.
//!
//! Rule: a batch costs the same round trips as one event, thanks to
//! `UNNEST`: ONE statement inserts the events, their deliveries and the
//! NOTIFY, and commits; a second reads conflicting hashes (only when there
//! are conflicts). A fresh batch without deliveries is first tried as a
//! plain INSERT, which a stored id fails as a whole (then the batch is
//! written the usual way: one statement more, only then). Rows are
//! locked in one global key order so concurrent batches cannot deadlock.

use super::NOTIFY_CHANNEL;
use super::record_sql::{EVENTS_ONLY_SQL, FRESH_INSERT_SQL, INSERT_SQL, ORDERED_INSERT_SQL};
use crate::primitives::headers::JsonRows;
use crate::primitives::time::Millis;
use crate::store::event_log::{duplicate_of, first_occurrence, fresh_results};
use crate::store::{LeasedRow, NewEvent, Recorded, StoreError, Written};
use foldhash::{HashMap, HashMapExt};
use sqlx::PgConnection;
use sqlx::Row;
use std::sync::atomic::{AtomicU32, Ordering};

/// An event's key, borrowed from the batch.
type Key<'a> = (&'a str, &'a str);

/// Inserts every event not already present, with its delivery rows, in one
/// statement (its own transaction: one round trip, one commit); a fresh
/// batch without delivery rows first as a plain INSERT ([`insert_fresh`]),
/// which costs one statement more when it holds a stored id. Outcomes are in
/// input order.
pub(super) async fn record(
    conn: &mut PgConnection,
    batch: &[NewEvent],
    pause: &FreshPause,
) -> Result<Written, StoreError> {
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

    let mut rows = insert_all(conn, &unique, &position, &arrival).await?;
    // Only when something conflicted: the conflicting rows are committed
    // (ON CONFLICT waited for them), so a plain read sees their hashes.
    let mut stored = stored_hashes(conn, &unique, &rows.pk, &position).await?;
    readmit_expired(conn, &unique, &position, &arrival, &mut rows, &mut stored).await?;

    Ok(results(batch, &repeats, &position, rows, stored))
}

/// What [`insert_all`] wrote, per event of its input: the new primary key
/// (`None` where the id was stored already), and the rows written leased as
/// `(target index, delivery id)`.
struct Inserted {
    pk: Vec<Option<i64>>,
    leased: Vec<Vec<(usize, i64)>>,
}

/// An id whose stored row is past its window is new again (docs/design.md,
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
    rows: &mut Inserted,
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
    let again_rows = insert_all(conn, &expired, &again, arrival).await?;
    for (i, e) in expired.iter().enumerate() {
        let at = position[&key(e)];
        rows.pk[at] = again_rows.pk[i];
        rows.leased[at].clone_from(&again_rows.leased[i]);
    }
    // Whatever still conflicts (another writer re-admitted it first) is a
    // duplicate of that new row.
    let still = stored_hashes(conn, &expired, &again_rows.pk, &again).await?;
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

/// `sql` with the events' columns bound as `$1`..`$11` (each statement
/// binds `recovered` and the rest itself).
fn events<'q>(
    sql: &'static str,
    unique: &[&'q NewEvent],
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    let headers = JsonRows::of(unique.iter().map(|e| &e.headers));
    sqlx::query(sql)
        .bind(column(unique, |e| e.source.as_str()))
        .bind(column(unique, |e| e.event_id.as_str()))
        .bind(column(unique, |e| e.body.as_ref()))
        .bind(column(unique, |e| &e.body_sha256[..]))
        .bind(headers.iter().collect::<Vec<_>>())
        .bind(column(unique, |e| e.received_at))
        .bind(column(unique, |e| e.expires_at))
        // Console facts: event type, matched key, provider time.
        .bind(column(unique, |e| e.facts.event_type.as_deref()))
        .bind(column(unique, |e| e.facts.key_index))
        .bind(column(unique, |e| e.facts.provider_ts))
        .bind(column(unique, |e| e.facts.object_id.as_deref()))
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
/// COMMIT, waking the workers of every replica), in ONE statement.
///
/// A batch with ordering keys uses [`ORDERED_INSERT_SQL`] instead: the same
/// statement, which also takes each ordered row's sequence number.
async fn insert_all(
    conn: &mut PgConnection,
    unique: &[&NewEvent],
    position: &HashMap<Key<'_>, usize>,
    arrival: &HashMap<Key<'_>, i64>,
) -> Result<Inserted, StoreError> {
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
    Ok(Inserted { pk, leased })
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

/// One outcome per input event, in input order, and the leased rows of
/// the new ones by their place in the batch.
fn results(
    batch: &[NewEvent],
    repeats: &[Option<usize>],
    position: &HashMap<Key<'_>, usize>,
    mut rows: Inserted,
    mut stored: Vec<Option<(Vec<u8>, Millis)>>,
) -> Written {
    let mut leased = Vec::new();
    let outcomes = batch
        .iter()
        .zip(repeats)
        .enumerate()
        .map(|(i, (e, rep))| {
            if let Some(first) = rep {
                return duplicate_of(&batch[*first]);
            }
            let at = position[&key(e)];
            if rows.pk[at].is_none() {
                let (stored_sha256, expires_at) = stored[at].take().unwrap_or_default();
                return Recorded::Duplicate {
                    stored_sha256,
                    expires_at,
                };
            }
            leased.extend(std::mem::take(&mut rows.leased[at]).into_iter().map(
                |(target, delivery_id)| LeasedRow {
                    event: i,
                    target,
                    delivery_id,
                },
            ));
            Recorded::New
        })
        .collect();
    Written { outcomes, leased }
}

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
