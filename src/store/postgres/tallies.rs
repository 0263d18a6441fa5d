//! [`Tallies`] on PostgreSQL: each flush's deltas as one `UNNEST` upsert;
//! the reads of `/stats` bounded like every call on the request path.
//!
//! Rule: one statement per flush, whatever the number of counters.

use super::PgStore;
use crate::store::tallies::MinuteCount;
use crate::store::{DeliveryCount, StoreError, Tallies, rows};
use async_trait::async_trait;

#[async_trait]
impl Tallies for PgStore {
    async fn add_counters(&self, deltas: &[(String, String, i64)]) -> Result<(), StoreError> {
        if deltas.is_empty() {
            return Ok(());
        }
        let write = sqlx::query(
            "INSERT INTO hookgate_counters (source, name, value)
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::int8[])
             ON CONFLICT (source, name) DO UPDATE
                 SET value = hookgate_counters.value + excluded.value",
        )
        .bind(deltas.iter().map(|d| d.0.as_str()).collect::<Vec<_>>())
        .bind(deltas.iter().map(|d| d.1.as_str()).collect::<Vec<_>>())
        .bind(deltas.iter().map(|d| d.2).collect::<Vec<_>>());
        self.bounded(&self.pool, async |c| {
            write.execute(&mut *c).await?;
            Ok(())
        })
        .await
    }

    async fn fold_counters(
        &self,
        source: &str,
        names: &[String],
        into: &str,
    ) -> Result<u64, StoreError> {
        // One statement: the DELETE and the upsert commit together.
        let n: i64 = sqlx::query_scalar(
            "WITH gone AS (
                 DELETE FROM hookgate_counters WHERE source = $1 AND name = ANY($2)
                 RETURNING value
             ), moved AS (
                 INSERT INTO hookgate_counters (source, name, value)
                 SELECT $1, $3, SUM(value) FROM gone HAVING COUNT(*) > 0
                 ON CONFLICT (source, name) DO UPDATE
                     SET value = hookgate_counters.value + excluded.value
             )
             SELECT COUNT(*) FROM gone",
        )
        .bind(source)
        .bind(names)
        .bind(into)
        .fetch_one(&self.pool)
        .await?;
        Ok(n as u64)
    }

    async fn counters(&self) -> Result<Vec<(String, String, i64)>, StoreError> {
        self.bounded(&self.pool, async |c| rows::counters(c).await)
            .await
    }

    async fn add_minute_counters(
        &self,
        minute: i64,
        deltas: &[(String, String, i64)],
    ) -> Result<(), StoreError> {
        if !deltas.is_empty() {
            sqlx::query(
                "INSERT INTO hookgate_counter_minutes (minute, source, name, value)
                 SELECT $1, s, n, v FROM UNNEST($2::text[], $3::text[], $4::int8[]) AS u(s, n, v)
                 ON CONFLICT (minute, source, name) DO UPDATE
                     SET value = hookgate_counter_minutes.value + excluded.value",
            )
            .bind(minute)
            .bind(deltas.iter().map(|d| d.0.as_str()).collect::<Vec<_>>())
            .bind(deltas.iter().map(|d| d.1.as_str()).collect::<Vec<_>>())
            .bind(deltas.iter().map(|d| d.2).collect::<Vec<_>>())
            .execute(&self.pool)
            .await?;
        }
        rows::purge_old_minutes(&self.pool, minute).await
    }

    async fn minute_counters(&self, since_minute: i64) -> Result<Vec<MinuteCount>, StoreError> {
        rows::minute_counters(&self.pool, since_minute).await
    }

    async fn delivery_counts(&self) -> Result<Vec<DeliveryCount>, StoreError> {
        self.bounded(&self.pool, async |c| {
            rows::counts(c, rows::COUNTS_SQL).await
        })
        .await
    }

    async fn overtaken(&self) -> Result<Vec<DeliveryCount>, StoreError> {
        self.bounded(&self.pool, async |c| {
            rows::counts(c, rows::OVERTAKEN_SQL).await
        })
        .await
    }
}
