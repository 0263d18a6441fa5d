//! Recording a batch of events on SQLite, on the writer's own connection.
//!
//! Rule: one batch, one transaction: the events' rows (one multi-row
//! statement), the renamed rows of ids past their window, and each new
//! event's delivery rows (leased to this process where the writer marked
//! them). A batch without delivery rows whose ids are all new is its one
//! INSERT alone, in autocommit.

use crate::primitives::time::Millis;
use crate::store::event_log::{duplicate_of, first_occurrence, fresh_results};
use crate::store::rows::NEXT_SEQ_SQL;
use crate::store::{LeasedRow, NewEvent, Recorded, StoreError, Written};
use foldhash::HashMap;
use sqlx::sqlite::SqliteConnection;
use sqlx::{Connection, Sqlite, Transaction};

/// Rows of one multi-row event insert: 11 bound values each, far below
/// SQLite's limit on variables in one statement.
const EVENT_ROWS: usize = 128;

/// Writes one group-commit batch; outcomes in input order.
pub(super) async fn record(
    conn: &mut SqliteConnection,
    batch: &[NewEvent],
) -> Result<Written, StoreError> {
    let repeats = first_occurrence(batch);
    // Every first occurrence in one statement, in batch order.
    let firsts: Vec<&NewEvent> = batch
        .iter()
        .zip(&repeats)
        .filter(|(_, rep)| rep.is_none())
        .map(|(e, _)| e)
        .collect();
    // Without delivery rows the events' INSERT is the whole write, and on
    // its own (autocommit) it is one implicit transaction: no BEGIN and
    // COMMIT, each a round trip to sqlx's worker thread and a wake-up of
    // this task behind the requests on the runtime. Only ids that were
    // stored already go on to the transaction below (renamed past their
    // window, or read as duplicates). One statement only: a batch longer
    // than `EVENT_ROWS` (never, with ingest's batches of at most as many)
    // keeps the transaction.
    let autocommitted = if firsts.len() <= EVENT_ROWS && firsts.iter().all(|e| e.targets.is_empty())
    {
        let pks = insert_events(&mut *conn, &firsts).await?;
        if pks.iter().all(Option::is_some) {
            return Ok(fresh_results(batch, &repeats));
        }
        Some(pks)
    } else {
        None
    };
    let mut tx = conn.begin().await?;
    let mut inserted = match autocommitted {
        Some(pks) => pks,
        None => insert_events(&mut tx, &firsts).await?,
    }
    .into_iter();
    let mut written = Written {
        outcomes: Vec::with_capacity(batch.len()),
        leased: Vec::new(),
    };
    let mut unordered = Vec::new();
    for (at, (e, rep)) in batch.iter().zip(&repeats).enumerate() {
        if let Some(first) = rep {
            written.outcomes.push(duplicate_of(&batch[*first]));
            continue;
        }
        let pk = match inserted.next().flatten() {
            Some(pk) => Some(pk),
            None => readmit_expired(&mut tx, e).await?,
        };
        let outcome = match pk {
            Some(pk) => {
                insert_deliveries(&mut tx, e, pk, at, &mut written.leased, &mut unordered).await?;
                Recorded::New
            }
            None => stored_duplicate(&mut tx, e).await?,
        };
        written.outcomes.push(outcome);
    }
    for chunk in unordered.chunks(DELIVERY_ROWS) {
        insert_unordered(&mut tx, batch, chunk, &mut written.leased).await?;
    }
    // `Written::leased` is read event by event, in batch order.
    written.leased.sort_by_key(|r| (r.event, r.target));
    tx.commit().await?;
    Ok(written)
}

/// Past its window, the id is new again: the kept row is renamed (see
/// `postgres::record::readmit_expired`) and the event inserted. Its new
/// primary key; `None` when the stored row is still within its window.
async fn readmit_expired(
    tx: &mut Transaction<'_, Sqlite>,
    e: &NewEvent,
) -> Result<Option<i64>, StoreError> {
    let renamed = sqlx::query(
        "UPDATE hookgate_events SET event_id = event_id || '~expired~' || id
         WHERE source = ? AND event_id = ? AND expires_at <= ?",
    )
    .bind(&e.source)
    .bind(&e.event_id)
    .bind(e.received_at)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    if renamed == 0 {
        return Ok(None);
    }
    Ok(insert_events(&mut *tx, &[e]).await?.pop().flatten())
}

/// A stored event's outcome: a duplicate of the stored body.
async fn stored_duplicate(
    tx: &mut Transaction<'_, Sqlite>,
    e: &NewEvent,
) -> Result<Recorded, StoreError> {
    let (stored_sha256, expires_at): (Vec<u8>, Millis) = sqlx::query_as(
        "SELECT body_sha256, expires_at FROM hookgate_events
         WHERE source = ? AND event_id = ?",
    )
    .bind(&e.source)
    .bind(&e.event_id)
    .fetch_one(&mut **tx)
    .await?;
    Ok(Recorded::Duplicate {
        stored_sha256,
        expires_at,
    })
}

/// A delivery row of an unordered target, written with the others of the
/// batch in one statement ([`insert_unordered`]).
struct Unordered {
    pk: i64,
    /// The event's place in the batch and the target's in the event.
    event: usize,
    target: usize,
}

/// Rows of one multi-row delivery insert: 7 bound values each.
const DELIVERY_ROWS: usize = 256;

/// The new event `e`'s delivery rows (its primary key `pk`, its place `at`
/// in the batch): an ordered target's row now (its sequence number reads
/// the rows before it), the others into `unordered` for one statement at
/// the end of the batch. The ones written leased are added to `leased`.
async fn insert_deliveries(
    tx: &mut Transaction<'_, Sqlite>,
    e: &NewEvent,
    pk: i64,
    at: usize,
    leased: &mut Vec<LeasedRow>,
    unordered: &mut Vec<Unordered>,
) -> Result<(), StoreError> {
    for (i, t) in e.targets.iter().enumerate() {
        let (key, seq) = order_seq(tx, e, i).await?;
        if seq.is_none() {
            unordered.push(Unordered {
                pk,
                event: at,
                target: i,
            });
            continue;
        }
        let lease = e.lease(i);
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO hookgate_deliveries
                 (event_pk, source, target, next_attempt_at, updated_at,
                  lease_until, lease_token, order_key, order_seq)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        )
        .bind(pk)
        .bind(&e.source)
        .bind(t)
        .bind(e.received_at)
        .bind(e.received_at)
        .bind(lease.map(|l| l.1))
        .bind(lease.map(|l| l.0))
        .bind(key)
        .bind(seq)
        .fetch_one(&mut **tx)
        .await?;
        if lease.is_some() {
            leased.push(LeasedRow {
                event: at,
                target: i,
                delivery_id: id,
            });
        }
    }
    Ok(())
}

/// Writes `rows` (unordered targets' rows of `batch`) in one statement, in
/// batch order. SQLite does not promise RETURNING's order, so each id is
/// matched to its row by (event row, target), which is unique.
async fn insert_unordered(
    tx: &mut Transaction<'_, Sqlite>,
    batch: &[NewEvent],
    rows: &[Unordered],
    leased: &mut Vec<LeasedRow>,
) -> Result<(), StoreError> {
    let mut q = sqlx::QueryBuilder::<Sqlite>::new(
        "INSERT INTO hookgate_deliveries
             (event_pk, source, target, next_attempt_at, updated_at, lease_until, lease_token) ",
    );
    q.push_values(rows, |mut row, r| {
        let e = &batch[r.event];
        let lease = e.lease(r.target);
        row.push_bind(r.pk)
            .push_bind(e.source.as_str())
            .push_bind(e.targets[r.target].as_str())
            .push_bind(e.received_at)
            .push_bind(e.received_at)
            .push_bind(lease.map(|l| l.1))
            .push_bind(lease.map(|l| l.0));
    });
    q.push(" RETURNING id, event_pk, target");
    let ids: HashMap<(i64, String), i64> = q
        .build_query_as::<(i64, i64, String)>()
        .fetch_all(&mut **tx)
        .await?
        .into_iter()
        .map(|(id, pk, target)| ((pk, target), id))
        .collect();
    for r in rows {
        let e = &batch[r.event];
        if e.lease(r.target).is_none() {
            continue;
        }
        let key = (r.pk, e.targets[r.target].clone());
        let Some(&delivery_id) = ids.get(&key) else {
            // Every row of the statement comes back: nothing can skip it.
            return Err(StoreError::Database(sqlx::Error::RowNotFound));
        };
        leased.push(LeasedRow {
            event: r.event,
            target: r.target,
            delivery_id,
        });
    }
    Ok(())
}

/// Target `i`'s ordering key and sequence number: for an ordered target,
/// the key's next number, in batch (arrival) order; one writer, so also
/// commit order. An ordered target without a key in the event: unordered,
/// sequence 0 (see `NewEvent::order_keys`). An unordered target: neither.
async fn order_seq<'e>(
    tx: &mut Transaction<'_, Sqlite>,
    e: &'e NewEvent,
    i: usize,
) -> Result<(Option<&'e str>, Option<i64>), StoreError> {
    let Some(key) = e.order_key(i) else {
        return Ok((None, None));
    };
    if key.is_empty() {
        return Ok((None, Some(0)));
    }
    let seq: i64 = sqlx::query_scalar(NEXT_SEQ_SQL)
        .bind(&e.targets[i])
        .bind(key)
        .fetch_one(&mut **tx)
        .await?;
    Ok((Some(key), Some(seq)))
}

/// Inserts `events` (distinct keys) with one statement per [`EVENT_ROWS`],
/// skipping ids already stored: each event's new primary key, in input
/// order, `None` where its id was already there. One statement instead of
/// one per event: each statement is a round trip to sqlx's SQLite worker
/// thread.
async fn insert_events(
    conn: &mut SqliteConnection,
    events: &[&NewEvent],
) -> Result<Vec<Option<i64>>, StoreError> {
    let mut pks = Vec::with_capacity(events.len());
    for chunk in events.chunks(EVENT_ROWS) {
        let mut q = sqlx::QueryBuilder::new(
            "INSERT INTO hookgate_events
                 (source, event_id, body, body_sha256, headers, received_at, expires_at,
                  event_type, key_index, provider_ts, object_id, recovered) ",
        );
        q.push_values(chunk, |mut row, e| {
            row.push_bind(e.source.as_str())
                .push_bind(e.event_id.as_str())
                .push_bind(e.body.as_ref())
                .push_bind(&e.body_sha256[..])
                .push_bind(e.headers.to_json())
                .push_bind(e.received_at)
                .push_bind(e.expires_at)
                // Console facts.
                .push_bind(e.facts.event_type.as_deref())
                .push_bind(e.facts.key_index)
                .push_bind(e.facts.provider_ts)
                .push_bind(e.facts.object_id.as_deref())
                .push_bind(e.facts.recovered);
        });
        q.push(" ON CONFLICT (source, event_id) DO NOTHING RETURNING id, source, event_id");
        let rows: Vec<(i64, String, String)> = q.build_query_as().fetch_all(&mut *conn).await?;
        let mut new: HashMap<(&str, &str), i64> = rows
            .iter()
            .map(|(id, s, e)| ((s.as_str(), e.as_str()), *id))
            .collect();
        pks.extend(
            chunk
                .iter()
                .map(|e| new.remove(&(e.source.as_str(), e.event_id.as_str()))),
        );
    }
    Ok(pks)
}
