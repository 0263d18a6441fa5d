//! The last good keys a scheme fetched from a provider (PayPal
//! certificates, Plaid's JWKs), kept per source so that a restart starts
//! with them instead of fetching each again (and instead of answering 503
//! while a fetch budget is spent).
//!
//! Rule: only keys a fetch found are written, as the provider served them
//! (the material is parsed and checked again when it is loaded), and only
//! rows still valid are read. Both backends run the same SQL text
//! ([`Portable`]).

use super::StoreError;
use super::portable::Portable;
use super::rows::{Bind, Column};
use async_trait::async_trait;
use sqlx::{Database, Executor, IntoArguments};

/// One remembered key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderKey {
    /// The name the request gave (PayPal's canonical certificate URL,
    /// Plaid's `kid`).
    pub name: String,
    /// The key as fetched (PEM, JWK JSON).
    pub material: Vec<u8>,
    /// Unix seconds (exclusive) until which it may be used.
    pub valid_until: i64,
}

/// Most keys read back per source at start-up.
pub const MAX_LOADED: i64 = 64;

#[async_trait]
pub trait ProviderKeys: Send + Sync + 'static {
    /// Remembers `key` for `source` (replacing one of the same name), and
    /// forgets that source's keys past their time at `now`.
    async fn save_key(&self, source: &str, key: &ProviderKey, now: i64) -> Result<(), StoreError>;
    /// `source`'s keys still valid at `now`, newest first.
    async fn load_keys(&self, source: &str, now: i64) -> Result<Vec<ProviderKey>, StoreError>;
}

const SAVE_SQL: &str =
    "INSERT INTO hookgate_provider_keys (source, name, material, valid_until, saved_at)
     VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (source, name) DO UPDATE
     SET material = excluded.material, valid_until = excluded.valid_until,
         saved_at = excluded.saved_at";

const FORGET_SQL: &str =
    "DELETE FROM hookgate_provider_keys WHERE source = $1 AND valid_until <= $2";

const LOAD_SQL: &str = "SELECT name, material, valid_until FROM hookgate_provider_keys
     WHERE source = $1 AND valid_until > $2
     ORDER BY saved_at DESC LIMIT $3";

#[async_trait]
impl<DB> ProviderKeys for Portable<DB>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'a> &'a str: Bind<DB>,
    for<'a> &'a [u8]: Bind<DB>,
    i64: Bind<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
    i64: Column<DB>,
    String: Column<DB>,
    Vec<u8>: Column<DB>,
{
    async fn save_key(&self, source: &str, key: &ProviderKey, now: i64) -> Result<(), StoreError> {
        sqlx::query(SAVE_SQL)
            .bind(source)
            .bind(key.name.as_str())
            .bind(key.material.as_slice())
            .bind(key.valid_until)
            .bind(now)
            .execute(&self.pool)
            .await?;
        sqlx::query(FORGET_SQL)
            .bind(source)
            .bind(now)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn load_keys(&self, source: &str, now: i64) -> Result<Vec<ProviderKey>, StoreError> {
        let rows: Vec<(String, Vec<u8>, i64)> = sqlx::query_as(LOAD_SQL)
            .bind(source)
            .bind(now)
            .bind(MAX_LOADED)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .into_iter()
            .map(|(name, material, valid_until)| ProviderKey {
                name,
                material,
                valid_until,
            })
            .collect())
    }
}
