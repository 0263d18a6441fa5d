//! [`Tallies`] on SQLite: each flush's deltas as one transaction of small
//! upserts (one writer at a time makes them cheap).

use super::SqliteStore;
use crate::store::tallies::{MINUTES_KEPT, MinuteCount};
use crate::store::{DeliveryCount, StoreError, Tallies, rows};
use async_trait::async_trait;

#[async_trait]
impl Tallies for SqliteStore {
    async fn add_counters(&self, deltas: &[(String, String, i64)]) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        for (source, name, delta) in deltas {
            sqlx::query(
                "INSERT INTO hookgate_counters (source, name, value) VALUES (?, ?, ?)
                 ON CONFLICT (source, name) DO UPDATE
                     SET value = hookgate_counters.value + excluded.value",
            )
            .bind(source)
            .bind(name)
            .bind(delta)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
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
            let mut tx = self.pool.begin().await?;
            for (source, name, delta) in deltas {
                sqlx::query(
                    "INSERT INTO hookgate_counter_minutes (minute, source, name, value)
                     VALUES (?, ?, ?, ?)
                     ON CONFLICT (minute, source, name) DO UPDATE
                         SET value = hookgate_counter_minutes.value + excluded.value",
                )
                .bind(minute)
                .bind(source)
                .bind(name)
                .bind(delta)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
        }
        if minute % 60 == 0 {
            rows::purge_minutes(&self.pool, minute - MINUTES_KEPT).await?;
        }
        Ok(())
    }

    async fn minute_counters(&self, since_minute: i64) -> Result<Vec<MinuteCount>, StoreError> {
        rows::minute_counters(&self.pool, since_minute).await
    }

    async fn delivery_counts(&self) -> Result<Vec<DeliveryCount>, StoreError> {
        rows::delivery_counts(&self.pool).await
    }

    async fn overtaken(&self) -> Result<Vec<DeliveryCount>, StoreError> {
        rows::overtaken(&self.pool).await
    }
}
