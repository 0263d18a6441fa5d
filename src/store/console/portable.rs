//! [`Console`] on either backend's main pool: the text of
//! [`sql`](super::sql), bound and run, and the rows read back.
//!
//! Rule: no SQL text here, and nothing that depends on the database beyond
//! the dialect the text was built in.

use super::sql::{
    ARRIVALS_SQL, ATTEMPTS_SQL, BACKLOG_SQL, DEAD_SQL, EVENT_ATTEMPTS_SQL, EVENT_SQL,
    LISTEN_HORIZON_SQL, LISTEN_PAGE_SQL, LISTEN_SINCE_SQL, MAX_DELIVERY_SQL, REDELIVER_ALL_SQL,
    REDELIVER_ONE_SQL, REDELIVER_ORDERED_SQL, SET_SEQ_SQL, arguments, begin_write, dead_counts_sql,
    dead_events_sql, dead_page_sql, deliveries_sql, field_scan_sql, list_sql, lock_rows,
    replay_ids_sql, replay_ordered_sql, replay_sql, summaries_sql,
};
use super::{
    ArrivalInfo, AttemptInfo, AttemptRow, Backlog, Console, Cursor, DeadPlan, DeliveryInfo,
    DeliveryState, EventFilter, EventPage, EventRecord, EventSummary, FIELD_SCAN, MAX_DETAIL_ROWS,
    MAX_LIMIT, ReplayPage, StreamEvent,
};
use crate::primitives::time::Millis;
use crate::store::StoreError;
use crate::store::portable::Portable;
use crate::store::rows::{Bind, Column, NEXT_SEQ_SQL, RowsAffected};
use async_trait::async_trait;
use sqlx::{AssertSqlSafe, Database, Executor, IntoArguments, Row};

/// An event summary from the columns of `sql::SUMMARY_COLUMNS`.
fn summary<R: Row>(r: &R) -> Result<EventSummary, StoreError>
where
    usize: sqlx::ColumnIndex<R>,
    i64: Column<R::Database>,
    bool: Column<R::Database>,
    String: Column<R::Database>,
{
    Ok(EventSummary {
        pk: r.try_get(0usize)?,
        source: r.try_get(1usize)?,
        event_id: r.try_get(2usize)?,
        event_type: r.try_get(3usize)?,
        received_at: Millis(r.try_get(4usize)?),
        body_size: r.try_get(5usize)?,
        duplicates: r.try_get(6usize)?,
        conflicts: r.try_get(7usize)?,
        recovered: r.try_get(8usize)?,
        object_id: r.try_get(9usize)?,
        deliveries: Vec::new(),
    })
}

#[async_trait]
impl<DB> Console for Portable<DB>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'a> &'a str: Bind<DB>,
    for<'a> Option<&'a str>: sqlx::Encode<'a, DB> + sqlx::Type<DB> + Send,
    i64: Bind<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
    i64: Column<DB>,
    i32: Column<DB>,
    bool: Column<DB>,
    String: Column<DB>,
    Vec<u8>: Column<DB>,
    DB::QueryResult: RowsAffected,
{
    async fn list_events(
        &self,
        filter: &EventFilter,
        after: Option<Cursor>,
        limit: i64,
    ) -> Result<EventPage, StoreError> {
        let limit = limit.clamp(1, MAX_LIMIT);
        if filter.field.is_some() {
            return self.list_by_field(filter, after, limit).await;
        }
        // One extra row tells whether there is a next page.
        let sql = list_sql(filter, after, limit + 1, self.dialect);
        let rows = sqlx::query_with(AssertSqlSafe(sql.text), arguments::<DB>(&sql.args)?)
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

    async fn event(&self, source: &str, event_id: &str) -> Result<Option<EventRecord>, StoreError> {
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
        let attempts = self
            .details(EVENT_ATTEMPTS_SQL, pk, |a| {
                Ok(AttemptInfo {
                    target: a.try_get(0)?,
                    attempt: a.try_get(1)?,
                    started_at: Millis(a.try_get(2)?),
                    latency_ms: a.try_get(3)?,
                    status: a.try_get(4)?,
                    error: a.try_get(5)?,
                })
            })
            .await?;
        let arrivals = self
            .details(ARRIVALS_SQL, pk, |a| {
                Ok(ArrivalInfo {
                    arrived_at: Millis(a.try_get(0)?),
                    last_at: Millis(a.try_get(1)?),
                    copies: a.try_get(2)?,
                    conflict: a.try_get(3)?,
                })
            })
            .await?;
        Ok(Some(EventRecord {
            summary: items.remove(0),
            headers: r.try_get(10)?,
            body: r.try_get(11)?,
            key_index: r.try_get(12)?,
            provider_ts: r.try_get(13)?,
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
        let mut tx = self.pool.begin_with(begin_write(self.dialect)).await?;
        let lock = format!("{REDELIVER_ORDERED_SQL}{}", lock_rows(self.dialect));
        let ordered: Vec<(i64, String, String)> = sqlx::query_as(AssertSqlSafe(lock))
            .bind(event_pk)
            .bind(target)
            .fetch_all(&mut *tx)
            .await?;
        Self::resequence(&mut tx, &ordered).await?;
        let moved = match target {
            None => {
                sqlx::query(REDELIVER_ALL_SQL)
                    .bind(now.0)
                    .bind(event_pk)
                    .execute(&mut *tx)
                    .await?
            }
            Some(t) => {
                sqlx::query(REDELIVER_ONE_SQL)
                    .bind(now.0)
                    .bind(event_pk)
                    .bind(source)
                    .bind(t)
                    .execute(&mut *tx)
                    .await?
            }
        };
        tx.commit().await?;
        Ok(moved.rows_affected())
    }

    async fn replay_matching(&self, filter: &EventFilter, now: Millis) -> Result<u64, StoreError> {
        let mut tx = self.pool.begin_with(begin_write(self.dialect)).await?;
        let sql = replay_ordered_sql(filter, self.dialect);
        let ordered: Vec<(i64, String, String)> =
            sqlx::query_as_with(AssertSqlSafe(sql.text), arguments::<DB>(&sql.args)?)
                .fetch_all(&mut *tx)
                .await?;
        Self::resequence(&mut tx, &ordered).await?;
        let sql = replay_sql(filter, now, self.dialect);
        let moved = sqlx::query_with(AssertSqlSafe(sql.text), arguments::<DB>(&sql.args)?)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(moved.rows_affected())
    }

    async fn dead_plan(
        &self,
        filter: &EventFilter,
        bound: Option<i64>,
    ) -> Result<DeadPlan, StoreError> {
        let bound = match bound {
            Some(b) => b,
            None => {
                sqlx::query_scalar(MAX_DELIVERY_SQL)
                    .fetch_one(&self.pool)
                    .await?
            }
        };
        let sql = dead_counts_sql(filter, bound, self.dialect);
        let rows = sqlx::query_with(AssertSqlSafe(sql.text), arguments::<DB>(&sql.args)?)
            .fetch_all(&self.pool)
            .await?;
        let deliveries = rows
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
        let sql = dead_events_sql(filter, bound, self.dialect);
        let rows = sqlx::query_with(AssertSqlSafe(sql.text), arguments::<DB>(&sql.args)?)
            .fetch_all(&self.pool)
            .await?;
        let events = rows
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
        Ok(DeadPlan {
            bound,
            deliveries,
            events,
        })
    }

    async fn replay_page(
        &self,
        filter: &EventFilter,
        after: i64,
        upto: i64,
        limit: i64,
        now: Millis,
    ) -> Result<ReplayPage, StoreError> {
        let mut tx = self.pool.begin_with(begin_write(self.dialect)).await?;
        let sql = dead_page_sql(filter, after, upto, limit, self.dialect);
        let rows = sqlx::query_with(AssertSqlSafe(sql.text), arguments::<DB>(&sql.args)?)
            .fetch_all(&mut *tx)
            .await?;
        let mut ids = Vec::with_capacity(rows.len());
        let mut ordered: Vec<(String, String, i64, i64)> = Vec::new();
        for r in &rows {
            let id: i64 = r.try_get(0)?;
            ids.push(id);
            let key: Option<String> = r.try_get(2)?;
            let seq: Option<i64> = r.try_get(3)?;
            if let Some(key) = key {
                ordered.push((r.try_get(1)?, key, seq.unwrap_or(0), id));
            }
        }
        let Some(&last) = ids.last() else {
            return Ok(ReplayPage {
                replayed: 0,
                last: None,
            });
        };
        // To the back of their keys in key and sequence order, as a whole
        // replay does.
        ordered.sort();
        let ordered: Vec<(i64, String, String)> = ordered
            .into_iter()
            .map(|(t, k, _, id)| (id, t, k))
            .collect();
        Self::resequence(&mut tx, &ordered).await?;
        let sql = replay_ids_sql(&ids, now);
        let moved = sqlx::query_with(AssertSqlSafe(sql.text), arguments::<DB>(&sql.args)?)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(ReplayPage {
            replayed: moved.rows_affected(),
            last: Some(last),
        })
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

    async fn listen_horizon(&self) -> Result<i64, StoreError> {
        let r = sqlx::query(LISTEN_HORIZON_SQL)
            .fetch_one(&self.pool)
            .await?;
        Ok(r.try_get(0)?)
    }

    async fn listen_since(&self, source: &str, since: Millis) -> Result<Option<i64>, StoreError> {
        let r = sqlx::query(LISTEN_SINCE_SQL)
            .bind(source)
            .bind(since.0)
            .fetch_one(&self.pool)
            .await?;
        Ok(r.try_get(0)?)
    }

    async fn listen_page(
        &self,
        source: &str,
        after: i64,
        upto: i64,
        limit: i64,
    ) -> Result<Vec<StreamEvent>, StoreError> {
        let rows = sqlx::query(LISTEN_PAGE_SQL)
            .bind(source)
            .bind(after)
            .bind(upto)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(StreamEvent {
                    pk: r.try_get(0)?,
                    event_id: r.try_get(1)?,
                    event_type: r.try_get(2)?,
                    received_at: Millis(r.try_get(3)?),
                    headers: r.try_get(4)?,
                    body: r.try_get(5)?,
                })
            })
            .collect()
    }

    async fn attempts(
        &self,
        source: &str,
        event_id: &str,
        target: &str,
    ) -> Result<Vec<AttemptRow>, StoreError> {
        let rows = sqlx::query(ATTEMPTS_SQL)
            .bind(source)
            .bind(event_id)
            .bind(target)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(AttemptRow {
                    attempt: r.try_get(0)?,
                    status: r.try_get(1)?,
                    error: r.try_get(2)?,
                    latency_ms: r.try_get(3)?,
                })
            })
            .collect()
    }
}

impl<DB> Portable<DB>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'a> &'a str: Bind<DB>,
    i64: Bind<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
    i64: Column<DB>,
    i32: Column<DB>,
    String: Column<DB>,
    bool: Column<DB>,
    Vec<u8>: Column<DB>,
    (i64,): for<'r> sqlx::FromRow<'r, DB::Row>,
{
    /// An event's rows of `sql` (`$1` = event pk, `$2` = limit), at most
    /// [`MAX_DETAIL_ROWS`], each read by `read`.
    async fn details<T>(
        &self,
        sql: &'static str,
        pk: i64,
        read: impl Fn(&DB::Row) -> Result<T, sqlx::Error>,
    ) -> Result<Vec<T>, StoreError> {
        let rows = sqlx::query(sql)
            .bind(pk)
            .bind(MAX_DETAIL_ROWS)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.iter().map(read).collect::<Result<_, _>>()?)
    }

    /// A page of `filter`'s events whose body holds its field: the matches
    /// among the next [`FIELD_SCAN`] events of the rest of the filter. The
    /// next cursor is the last match when the page filled up, else the last
    /// event examined when there may be more; so a page may hold fewer
    /// than `limit` events (even none) and still have a next one.
    async fn list_by_field(
        &self,
        filter: &EventFilter,
        after: Option<Cursor>,
        limit: i64,
    ) -> Result<EventPage, StoreError> {
        let Some(field) = &filter.field else {
            return Ok(EventPage {
                items: Vec::new(),
                next: None,
            });
        };
        let sql = field_scan_sql(filter, after, FIELD_SCAN, self.dialect);
        let rows = sqlx::query_with(AssertSqlSafe(sql.text), arguments::<DB>(&sql.args)?)
            .fetch_all(&self.pool)
            .await?;
        let mut pks = Vec::new();
        let mut last_match = None;
        let mut beyond = false;
        for r in &rows {
            let pk: i64 = r.try_get(0)?;
            let body: Option<Vec<u8>> = r.try_get(2)?;
            if !body.is_some_and(|b| field.matches(&b)) {
                continue;
            }
            if pks.len() as i64 == limit {
                // A match beyond the page: the next page starts after the last one.
                beyond = true;
                break;
            }
            pks.push(pk);
            last_match = Some(Cursor {
                received_at: r.try_get(1)?,
                pk,
            });
        }
        let next = if beyond {
            last_match
        } else if rows.len() as i64 == FIELD_SCAN {
            // The scan stopped short of the range: go on after its last row.
            match rows.last() {
                Some(r) => Some(Cursor {
                    received_at: r.try_get(1)?,
                    pk: r.try_get(0)?,
                }),
                None => None,
            }
        } else {
            None
        };
        let mut items = if pks.is_empty() {
            Vec::new()
        } else {
            let sql = summaries_sql(&pks);
            let rows = sqlx::query_with(AssertSqlSafe(sql.text), arguments::<DB>(&sql.args)?)
                .fetch_all(&self.pool)
                .await?;
            rows.iter().map(summary).collect::<Result<Vec<_>, _>>()?
        };
        self.with_deliveries(&mut items).await?;
        Ok(EventPage { items, next })
    }

    /// Fills in the deliveries of `items`.
    async fn with_deliveries(&self, items: &mut [EventSummary]) -> Result<(), StoreError> {
        if items.is_empty() {
            return Ok(());
        }
        let pks: Vec<i64> = items.iter().map(|e| e.pk).collect();
        let sql = deliveries_sql(&pks);
        let rows = sqlx::query_with(AssertSqlSafe(sql.text), arguments::<DB>(&sql.args)?)
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
                order_key: r.try_get(8)?,
                order_seq: r.try_get(9)?,
                overtaken_by: r.try_get(10)?,
            };
            if let Some(e) = items.iter_mut().find(|e| e.pk == pk) {
                e.deliveries.push(info);
            }
        }
        Ok(())
    }

    /// Gives `rows` (`id, target, order_key`, in key and sequence order) the
    /// next sequence numbers of their keys: the back of each key, in the
    /// transaction `tx` that makes them pending again. Keys are taken in
    /// sorted order, like ingest's.
    async fn resequence(
        tx: &mut sqlx::Transaction<'_, DB>,
        rows: &[(i64, String, String)],
    ) -> Result<(), StoreError> {
        for (id, target, key) in rows {
            let seq: i64 = sqlx::query_scalar(NEXT_SEQ_SQL)
                .bind(target.as_str())
                .bind(key.as_str())
                .fetch_one(&mut **tx)
                .await?;
            sqlx::query(SET_SEQ_SQL)
                .bind(seq)
                .bind(*id)
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }
}
