//! Secrets a provider hands over in a handshake instead of showing them in
//! a dashboard (Asana's `X-Hook-Secret`, one per webhook; Notion's
//! `verification_token`): one row per (source, secret) in
//! `hookgate_handshake_secrets`, read by every replica, so an event signed
//! with a secret one replica learned verifies on all of them.
//!
//! Rule: both backends run the same SQL text (`$N` placeholders work on
//! both), so one implementation serves either backend's main pool
//! ([`Portable`]). Values are never logged; a source keeps at most
//! [`MAX_PER_SOURCE`] of them.

use super::StoreError;
use super::portable::Portable;
use super::rows::{Bind, Column};
use crate::primitives::time::Millis;
use async_trait::async_trait;
use sqlx::{Database, Executor, IntoArguments};

/// Most secrets one source keeps: one per provider webhook (Asana creates
/// one per watched resource); a flood of handshakes cannot grow the table
/// or the key list each request is checked against without bound.
pub const MAX_PER_SOURCE: i64 = 100;

/// What storing a handshake secret did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Learned {
    /// Stored now, or already stored (a repeated handshake).
    Stored,
    /// The source holds [`MAX_PER_SOURCE`] secrets already.
    Full,
}

#[async_trait]
pub trait HandshakeSecrets: Send + Sync {
    /// Stores `secret` for `source`, unless the source is full.
    async fn learn(&self, source: &str, secret: &str, now: Millis) -> Result<Learned, StoreError>;
    /// Every secret of `source`, oldest first.
    async fn secrets(&self, source: &str) -> Result<Vec<String>, StoreError>;
}

/// `$1` source, `$2` secret, `$3` now, `$4` the cap. A repeated handshake
/// inserts nothing and still counts as stored.
const INSERT_SQL: &str = "INSERT INTO hookgate_handshake_secrets (source, secret, learned_at)
     SELECT $1, $2, $3
      WHERE (SELECT COUNT(*) FROM hookgate_handshake_secrets WHERE source = $1) < $4
     ON CONFLICT (source, secret) DO NOTHING";

const EXISTS_SQL: &str =
    "SELECT 1 FROM hookgate_handshake_secrets WHERE source = $1 AND secret = $2";

const SELECT_SQL: &str = "SELECT secret FROM hookgate_handshake_secrets
     WHERE source = $1 ORDER BY learned_at, secret";

#[async_trait]
impl<DB> HandshakeSecrets for Portable<DB>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'a> &'a str: Bind<DB>,
    i64: Bind<DB>,
    i32: Column<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
    String: Column<DB>,
{
    async fn learn(&self, source: &str, secret: &str, now: Millis) -> Result<Learned, StoreError> {
        sqlx::query(INSERT_SQL)
            .bind(source)
            .bind(secret)
            .bind(now.0)
            .bind(MAX_PER_SOURCE)
            .execute(&self.pool)
            .await?;
        let there: Option<i32> = sqlx::query_scalar(EXISTS_SQL)
            .bind(source)
            .bind(secret)
            .fetch_optional(&self.pool)
            .await?;
        Ok(if there.is_some() {
            Learned::Stored
        } else {
            Learned::Full
        })
    }

    async fn secrets(&self, source: &str) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(SELECT_SQL)
            .bind(source)
            .fetch_all(&self.pool)
            .await?)
    }
}
