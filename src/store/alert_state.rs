//! Alert state: per alert condition, whether it is firing and the number of
//! its latest episode, so that replicas sharing a ledger tell a condition
//! once per change (`src/alerts/`).
//!
//! Rule: a row only moves by compare-and-set ([`AlertState::transition`]):
//! the replica whose `UPDATE … WHERE episode = $old AND firing = $old`
//! changed the row is the one that saw the change first; the others find
//! the row moved and do nothing. Both backends run the same SQL text
//! ([`Portable`]).

use super::StoreError;
use super::portable::Portable;
use super::rows::{Bind, Column, RowsAffected};
use crate::primitives::time::Millis;
use async_trait::async_trait;
use sqlx::{Database, Executor, IntoArguments};

/// One condition's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Episode {
    /// How many times the condition fired (0: never).
    pub number: i64,
    pub firing: bool,
    /// When the row last moved; `Millis(0)` for a condition never seen.
    pub changed_at: Millis,
}

#[async_trait]
pub trait AlertState: Send + Sync + 'static {
    /// Every condition's row, by key.
    async fn episodes(&self) -> Result<Vec<(String, Episode)>, StoreError>;
    /// Moves `key` from `from` (number and firing; a key without a row is
    /// `Episode::default()`) to `to` at `now`. `true`: this call moved it;
    /// `false`: the row was no longer `from` (another replica moved it).
    async fn transition(
        &self,
        key: &str,
        from: Episode,
        to: Episode,
        now: Millis,
    ) -> Result<bool, StoreError>;
}

const EPISODES_SQL: &str = "SELECT key, episode, firing, changed_at FROM hookgate_alert_state";

/// A condition never seen starts as episode 0, not firing, so the first
/// transition is the same compare-and-set as every other.
const SEED_SQL: &str = "INSERT INTO hookgate_alert_state (key, episode, firing, changed_at)
     VALUES ($1, 0, FALSE, 0) ON CONFLICT (key) DO NOTHING";

const MOVE_SQL: &str = "UPDATE hookgate_alert_state
     SET episode = $4, firing = $5, changed_at = $6
     WHERE key = $1 AND episode = $2 AND firing = $3";

#[async_trait]
impl<DB> AlertState for Portable<DB>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    DB::QueryResult: RowsAffected,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'a> &'a str: Bind<DB>,
    i64: Bind<DB>,
    bool: Bind<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
    i64: Column<DB>,
    bool: Column<DB>,
    String: Column<DB>,
{
    async fn episodes(&self) -> Result<Vec<(String, Episode)>, StoreError> {
        let rows: Vec<(String, i64, bool, i64)> =
            sqlx::query_as(EPISODES_SQL).fetch_all(&self.pool).await?;
        Ok(rows
            .into_iter()
            .map(|(key, number, firing, at)| {
                (
                    key,
                    Episode {
                        number,
                        firing,
                        changed_at: Millis(at),
                    },
                )
            })
            .collect())
    }

    async fn transition(
        &self,
        key: &str,
        from: Episode,
        to: Episode,
        now: Millis,
    ) -> Result<bool, StoreError> {
        if from.number == 0 && !from.firing {
            sqlx::query(SEED_SQL).bind(key).execute(&self.pool).await?;
        }
        let done = sqlx::query(MOVE_SQL)
            .bind(key)
            .bind(from.number)
            .bind(from.firing)
            .bind(to.number)
            .bind(to.firing)
            .bind(now.0)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }
}
