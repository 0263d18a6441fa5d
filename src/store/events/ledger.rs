//! [`console_ledger!`]: the `Console` implementation each backend expands.

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
                recovered: r.try_get(8usize)?,
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
        }

        /// Gives `rows` (`id, target, order_key`, in key and sequence
        /// order) the next sequence numbers of their keys: the back of each
        /// key, in the transaction `tx` that makes them pending again.
        /// Keys are taken in sorted order, like ingest's.
        async fn resequence<'c>(
            tx: &mut sqlx::Transaction<'c, <$row as sqlx::Row>::Database>,
            rows: &[(i64, String, String)],
        ) -> Result<(), StoreError> {
            for (id, target, key) in rows {
                let seq: i64 = sqlx::query_scalar(NEXT_SEQ_SQL)
                    .bind(target)
                    .bind(key)
                    .fetch_one(&mut **tx)
                    .await?;
                sqlx::query(SET_SEQ_SQL)
                    .bind(seq)
                    .bind(id)
                    .execute(&mut **tx)
                    .await?;
            }
            Ok(())
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
                            last_at: Millis(a.try_get(1)?),
                            copies: a.try_get(2)?,
                            conflict: a.try_get(3)?,
                        })
                    })
                    .collect::<Result<Vec<_>, StoreError>>()?;
                Ok(Some(EventRecord {
                    summary: items.remove(0),
                    headers: r.try_get(9)?,
                    body: r.try_get(10)?,
                    key_index: r.try_get(11)?,
                    provider_ts: r.try_get(12)?,
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
                let mut tx = self.pool.begin_with(begin_write($dialect)).await?;
                let lock = format!("{REDELIVER_ORDERED_SQL}{}", lock_rows($dialect));
                let ordered: Vec<(i64, String, String)> = sqlx::query_as(sqlx::AssertSqlSafe(lock))
                    .bind(event_pk)
                    .bind(target)
                    .fetch_all(&mut *tx)
                    .await?;
                resequence(&mut tx, &ordered).await?;
                let r = match target {
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
                Ok(r.rows_affected())
            }

            async fn replay_matching(
                &self,
                filter: &EventFilter,
                now: Millis,
            ) -> Result<u64, StoreError> {
                let mut tx = self.pool.begin_with(begin_write($dialect)).await?;
                let sql = replay_ordered_sql(filter, $dialect);
                let ordered: Vec<(i64, String, String)> =
                    bind_args!(sqlx::query_as(sqlx::AssertSqlSafe(sql.text)), &sql.args)
                        .fetch_all(&mut *tx)
                        .await?;
                resequence(&mut tx, &ordered).await?;
                let sql = replay_sql(filter, now, $dialect);
                let r = bind_args!(sqlx::query(sqlx::AssertSqlSafe(sql.text)), &sql.args)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
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
