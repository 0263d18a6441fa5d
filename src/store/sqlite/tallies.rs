//! [`Tallies`] on SQLite: each flush's deltas as one transaction of small
//! upserts (one writer at a time makes them cheap).
//!
//! Rule: one transaction (one fsync) per flush.

use super::SqliteStore;
use crate::store::tallies::MinuteCount;
use crate::store::{DeliveryCount, StoreError, Tallies, rows};
use async_trait::async_trait;

/// `?1` = source, `?2` = name, `?3` = delta.
const COUNTER_SQL: &str = "INSERT INTO hookgate_counters (source, name, value) VALUES (?1, ?2, ?3)
     ON CONFLICT (source, name) DO UPDATE SET value = hookgate_counters.value + excluded.value";

/// [`COUNTER_SQL`] for the minute `?4`.
const MINUTE_COUNTER_SQL: &str =
    "INSERT INTO hookgate_counter_minutes (minute, source, name, value)
     VALUES (?4, ?1, ?2, ?3)
     ON CONFLICT (minute, source, name) DO UPDATE
         SET value = hookgate_counter_minutes.value + excluded.value";

#[async_trait]
impl Tallies for SqliteStore {
    async fn add_counters(&self, deltas: &[(String, String, i64)]) -> Result<(), StoreError> {
        self.add_each(COUNTER_SQL, 0, deltas).await
    }

    async fn fold_counters(
        &self,
        source: &str,
        names: &[String],
        into: &str,
    ) -> Result<u64, StoreError> {
        let list = serde_json::to_string(names).unwrap_or_else(|_| "[]".into());
        let mut tx = self.pool.begin().await?;
        let (n, sum): (i64, Option<i64>) = sqlx::query_as(
            "SELECT COUNT(*), SUM(value) FROM hookgate_counters
             WHERE source = ?1 AND name IN (SELECT value FROM json_each(?2))",
        )
        .bind(source)
        .bind(&list)
        .fetch_one(&mut *tx)
        .await?;
        sqlx::query(
            "DELETE FROM hookgate_counters
             WHERE source = ?1 AND name IN (SELECT value FROM json_each(?2))",
        )
        .bind(source)
        .bind(&list)
        .execute(&mut *tx)
        .await?;
        if let Some(sum) = sum.filter(|_| n > 0) {
            sqlx::query(COUNTER_SQL)
                .bind(source)
                .bind(into)
                .bind(sum)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(n as u64)
    }

    async fn counters(&self) -> Result<Vec<(String, String, i64)>, StoreError> {
        rows::counters(&self.pool).await
    }

    async fn add_minute_counters(
        &self,
        minute: i64,
        deltas: &[(String, String, i64)],
    ) -> Result<(), StoreError> {
        if !deltas.is_empty() {
            self.add_each(MINUTE_COUNTER_SQL, minute, deltas).await?;
        }
        rows::purge_old_minutes(&self.pool, minute).await
    }

    async fn minute_counters(&self, since_minute: i64) -> Result<Vec<MinuteCount>, StoreError> {
        rows::minute_counters(&self.pool, since_minute).await
    }

    async fn delivery_counts(&self) -> Result<Vec<DeliveryCount>, StoreError> {
        rows::counts(&self.pool, rows::COUNTS_SQL).await
    }

    async fn overtaken(&self) -> Result<Vec<DeliveryCount>, StoreError> {
        rows::counts(&self.pool, rows::OVERTAKEN_SQL).await
    }
}

impl SqliteStore {
    /// Runs `sql` once per delta (`?1` source, `?2` name, `?3` delta, `?4`
    /// minute; a statement without `?4` leaves that value unused), all in
    /// one transaction.
    async fn add_each(
        &self,
        sql: &'static str,
        minute: i64,
        deltas: &[(String, String, i64)],
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        for (source, name, delta) in deltas {
            sqlx::query(sql)
                .bind(source)
                .bind(name)
                .bind(delta)
                .bind(minute)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}
