//! [`Outbox`] on SQLite: one writer at a time makes each claim a plain
//! `UPDATE … RETURNING id` (no row locks to skip), and the claimed rows are
//! read with their events in the same transaction.
//!
//! Rule: a delivery row changes only under its lease token, so two workers
//! never both own one row.

use super::SqliteStore;
use crate::primitives::time::Millis;
use crate::store::rows::{
    ORDERED_CANDIDATES_SQL, SUCCESSOR_SQL, claim_arguments, due_from_row, encode_error,
    lease_arguments,
};
use crate::store::{AttemptRecord, DueDelivery, LeaseRequest, Outbox, StoreError, rows};
use async_trait::async_trait;
use foldhash::{HashMap, HashSetExt};
use sqlx::{Arguments, Connection, Database, Sqlite};
use std::sync::LazyLock;

/// `?1` = target, `?2` = now, `?3` = lease until, `?4` = token, `?5` =
/// limit. One writer at a time in SQLite makes this UPDATE the whole claim.
const CLAIM_SQL: &str = "UPDATE hookgate_deliveries SET lease_until = ?3, lease_token = ?4
     WHERE id IN (
         SELECT id FROM hookgate_deliveries
         WHERE target = ?1 AND state = 'pending' AND next_attempt_at <= ?2
           AND (lease_until IS NULL OR lease_until < ?2)
         ORDER BY next_attempt_at LIMIT ?5)
     RETURNING id";

/// [`CLAIM_SQL`] for a target with `order_by`: the candidates of
/// [`ORDERED_CANDIDATES_SQL`] (each key's first pending row, round-robin
/// from the cursor, `?6`), with `?N` placeholders.
static CLAIM_ORDERED_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{ORDERED_CANDIDATES_SQL}
         UPDATE hookgate_deliveries SET lease_until = ?3, lease_token = ?4
         WHERE id IN (
             SELECT d.id FROM hookgate_deliveries d JOIN candidates c ON c.id = d.id
             WHERE d.target = ?1 AND d.state = 'pending' AND d.next_attempt_at <= ?2
               AND (d.lease_until IS NULL OR d.lease_until < ?2)
             ORDER BY c.pass, c.k
             LIMIT ?5)
         RETURNING id"
    )
    .replace('$', "?")
});

/// The key's next row ([`SUCCESSOR_SQL`], `?5` = key), leased.
static SUCCESSOR_CLAIM_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE hookgate_deliveries SET lease_until = ?3, lease_token = ?4
         WHERE id IN ({SUCCESSOR_SQL}) RETURNING id"
    )
    .replace('$', "?")
});

impl SqliteStore {
    /// Runs a claim (`UPDATE … RETURNING id` with `args`) on the writer's
    /// connection and reads the claimed rows with their events, in one
    /// transaction.
    async fn claim(
        &self,
        sql: &'static str,
        args: <Sqlite as Database>::Arguments,
    ) -> Result<Vec<DueDelivery>, StoreError> {
        self.on_writer(async |conn| {
            let mut tx = conn.begin().await?;
            let ids: Vec<i64> = sqlx::query_scalar_with(sql, args)
                .fetch_all(&mut *tx)
                .await?;
            let rows = read_claimed(&mut tx, &ids).await?;
            tx.commit().await?;
            Ok(rows)
        })
        .await
    }
}

#[async_trait]
impl Outbox for SqliteStore {
    async fn claim_due(&self, r: &LeaseRequest<'_>) -> Result<Vec<DueDelivery>, StoreError> {
        self.claim(CLAIM_SQL, lease_arguments::<Sqlite>(r)?).await
    }

    async fn claim_due_ordered(
        &self,
        r: &LeaseRequest<'_>,
        after: &str,
    ) -> Result<(Vec<DueDelivery>, Option<String>), StoreError> {
        // One writer: the claim and the cursor's read are one transaction.
        let mut args = lease_arguments::<Sqlite>(r)?;
        args.add(after).map_err(encode_error)?;
        let rows = self.claim(CLAIM_ORDERED_SQL.as_str(), args).await?;
        let keys = rows.iter().filter_map(|r| r.order_key.clone()).collect();
        Ok((rows, last_key(keys, after)))
    }

    async fn claim_successor(
        &self,
        r: &LeaseRequest<'_>,
        key: &str,
    ) -> Result<Option<DueDelivery>, StoreError> {
        let args = claim_arguments::<Sqlite, _>(r, key)?;
        let rows = self.claim(SUCCESSOR_CLAIM_SQL.as_str(), args).await?;
        Ok(rows.into_iter().next())
    }

    async fn finish_attempts(
        &self,
        token: &str,
        batch: &[(i64, AttemptRecord)],
    ) -> Result<Vec<bool>, StoreError> {
        // One transaction (one fsync) for the whole batch, and two
        // statements per chunk of it rather than two per attempt: each
        // statement is a round trip to sqlx's SQLite worker thread.
        self.on_writer(async |conn| {
            let mut tx = conn.begin().await?;
            let mut out = Vec::with_capacity(batch.len());
            for chunk in batch.chunks(FINISH_ROWS) {
                out.extend(finish_chunk(&mut tx, token, chunk).await?);
            }
            tx.commit().await?;
            Ok(out)
        })
        .await
    }

    async fn expedite(&self, target: &str, now: Millis) -> Result<u64, StoreError> {
        let r = sqlx::query(
            "UPDATE hookgate_deliveries SET next_attempt_at = ?2
             WHERE target = ?1 AND state = 'pending' AND attempts > 0 AND next_attempt_at > ?2
               AND (lease_until IS NULL OR lease_until < ?2)",
        )
        .bind(target)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected())
    }

    async fn renew_leases(
        &self,
        token: &str,
        ids: &[i64],
        now: Millis,
        until: Millis,
    ) -> Result<Vec<i64>, StoreError> {
        self.on_writer(async |conn| {
            Ok(sqlx::query_scalar(
                "UPDATE hookgate_deliveries SET lease_until = ?
                 WHERE id IN (SELECT value FROM json_each(?)) AND lease_token = ? AND lease_until > ?
                 RETURNING id",
            )
            .bind(until)
            .bind(json_ids(ids))
            .bind(token)
            .bind(now)
            .fetch_all(conn)
            .await?)
        })
        .await
    }

    async fn release_leases(&self, token: &str, target: &str) -> Result<u64, StoreError> {
        rows::release_leases(&self.pool, token, target).await
    }
}

/// Attempts recorded per statement pair: 7 bound values each in the
/// update, 6 in the insert, far below SQLite's limit on variables.
const FINISH_ROWS: usize = 256;

/// Records `chunk`'s attempts: one UPDATE over all of them (each row only
/// while still leased under `token`), then one INSERT of the history rows of
/// those it updated. Whether each was recorded, in input order.
async fn finish_chunk(
    tx: &mut sqlx::Transaction<'_, Sqlite>,
    token: &str,
    chunk: &[(i64, AttemptRecord)],
) -> Result<Vec<bool>, StoreError> {
    // A row is leased to one attempt at a time, so a batch holds each id
    // once; were one there twice, the joined UPDATE would count it once.
    let mut seen = foldhash::HashSet::with_capacity(chunk.len());
    if !chunk.iter().all(|(id, _)| seen.insert(*id)) {
        let mut out = Vec::with_capacity(chunk.len());
        for one in chunk {
            out.extend(Box::pin(finish_chunk(tx, token, std::slice::from_ref(one))).await?);
        }
        return Ok(out);
    }
    let mut q = sqlx::QueryBuilder::<Sqlite>::new(
        "WITH v(delivery_id, state, next_at, status, error, updated_at) AS (",
    );
    q.push_values(chunk, |mut row, (id, rec)| {
        let (state, next_at) = rec.next_columns();
        row.push_bind(*id)
            .push_bind(state)
            .push_bind(next_at)
            .push_bind(rec.status)
            .push_bind(rec.error.as_deref())
            .push_bind(rec.finished_at());
    });
    q.push(
        ") UPDATE hookgate_deliveries AS d
         SET state = v.state, attempts = d.attempts + 1,
             next_attempt_at = COALESCE(v.next_at, d.next_attempt_at),
             lease_until = NULL, lease_token = NULL, last_status = v.status,
             last_error = v.error, updated_at = v.updated_at
         FROM v WHERE d.id = v.delivery_id AND d.lease_token = ",
    );
    q.push_bind(token);
    // RETURNING sees only the updated table, unqualified.
    q.push(" RETURNING id, earlier_attempts + attempts");
    let numbers: HashMap<i64, i32> = q
        .build_query_as()
        .fetch_all(&mut **tx)
        .await?
        .into_iter()
        .collect();
    let recorded: Vec<(&(i64, AttemptRecord), i32)> = chunk
        .iter()
        .filter_map(|r| numbers.get(&r.0).map(|n| (r, *n)))
        .collect();
    if !recorded.is_empty() {
        let mut q = sqlx::QueryBuilder::<Sqlite>::new(
            "INSERT INTO hookgate_attempts
                 (delivery_id, attempt, started_at, latency_ms, status, error) ",
        );
        q.push_values(&recorded, |mut row, ((id, rec), attempt)| {
            row.push_bind(*id)
                .push_bind(*attempt)
                .push_bind(rec.started_at)
                .push_bind(rec.latency_ms)
                .push_bind(rec.status)
                .push_bind(rec.error.as_deref());
        });
        q.build().execute(&mut **tx).await?;
    }
    Ok(chunk
        .iter()
        .map(|(id, _)| numbers.contains_key(id))
        .collect())
}

/// The ids as a JSON array, for `json_each`.
fn json_ids(ids: &[i64]) -> String {
    format!(
        "[{}]",
        ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
    )
}

/// The claimed rows with their events, in one read (the ids go in as a
/// JSON array).
async fn read_claimed(
    tx: &mut sqlx::Transaction<'_, Sqlite>,
    ids: &[i64],
) -> Result<Vec<DueDelivery>, StoreError> {
    if ids.is_empty() {
        return Ok(vec![]);
    }
    let rows = sqlx::query(
        "SELECT d.id, d.source, d.target, e.event_id, e.body, e.headers, e.received_at,
                d.attempts, e.event_type, d.earlier_attempts, d.order_key
         FROM hookgate_deliveries d JOIN hookgate_events e ON e.id = d.event_pk
         WHERE d.id IN (SELECT value FROM json_each(?))",
    )
    .bind(json_ids(ids))
    .fetch_all(&mut **tx)
    .await?;
    rows.iter().map(due_from_row).collect()
}

/// The ordered claim's next cursor: the last key in walk order, which
/// visits the keys after `after` first and then wraps around, so it is the
/// largest key not after `after` if the walk wrapped, else the largest.
/// (SQLite compares text by bytes, like `str`.)
pub(super) fn last_key(keys: Vec<String>, after: &str) -> Option<String> {
    let wrapped = keys.iter().filter(|k| k.as_str() <= after).max().cloned();
    wrapped.or_else(|| keys.into_iter().max())
}
