//! The durable half of the Idempotency-Key proxy (docs/idempotency.md): one
//! row per (api, scope, key) in `hookgate_idempotency`.
//!
//! ```text
//! begin:    INSERT … ON CONFLICT DO NOTHING           → Claimed (in_progress, our token, locked_until)
//!           else UPDATE … WHERE lock expired (CAS)     → Claimed (took over a dead owner's row)
//!           else SELECT                                → Completed | InProgress | Vanished
//! complete: UPDATE … SET completed WHERE lock_token = ours
//! release:  DELETE … WHERE lock_token = ours AND in_progress
//! ```
//! The row is the truth; the claim cache in front of it is only the fast path.
//!
//! Rule: both backends run the same SQL text (`$N` placeholders work on
//! both), so one implementation serves either backend's main pool
//! ([`Portable`]); each statement is atomic on its own.

use super::StoreError;
use super::portable::Portable;
use super::rows::{Bind, Column, RowsAffected};
use crate::primitives::time::Millis;
use async_trait::async_trait;
use bytes::Bytes;
use sqlx::{Database, Executor, IntoArguments};

/// Where a key lives: the API, the subject it is namespaced to, the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdemKey {
    pub api: String,
    /// The subject (e.g. a user id) or `""` when the API is unscoped.
    pub scope: String,
    pub key: String,
}

/// A stored upstream answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

/// One attempt to own a key.
#[derive(Debug, Clone)]
pub struct RowClaim<'a> {
    pub key: &'a IdemKey,
    pub request_sha256: &'a [u8; 32],
    pub token: &'a str,
    pub now: Millis,
    pub locked_until: Millis,
    pub expires_at: Millis,
}

/// What the row said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begin {
    /// The row is ours (`in_progress`, our token).
    Claimed,
    Completed {
        request_sha256: Vec<u8>,
        response: StoredResponse,
    },
    /// Another request owns the key and its lock has not expired.
    InProgress { request_sha256: Vec<u8> },
    /// No row (released between two statements, or never there): try again.
    Vanished,
}

#[async_trait]
pub trait IdempotencyStore: Send + Sync + 'static {
    /// Claims the key, takes over an expired one, or says who has it.
    async fn begin(&self, c: &RowClaim<'_>) -> Result<Begin, StoreError>;
    /// Reads the row without claiming it.
    async fn lookup(&self, key: &IdemKey) -> Result<Begin, StoreError>;
    /// Stores the response; `false` when the lock was lost (taken over).
    async fn complete(
        &self,
        key: &IdemKey,
        token: &str,
        response: &StoredResponse,
        expires_at: Millis,
    ) -> Result<bool, StoreError>;
    /// Deletes our in-progress row so the next retry runs at once.
    async fn release(&self, key: &IdemKey, token: &str) -> Result<(), StoreError>;
    /// Deletes completed rows past `expires_at` and in-progress rows whose
    /// lock and window both ended.
    async fn purge_idempotency(&self, now: Millis) -> Result<u64, StoreError>;
}

/// `$1..$3` key, `$4` request hash, `$5` token, `$6` locked_until,
/// `$7` now, `$8` expires_at.
const INSERT_SQL: &str = "INSERT INTO hookgate_idempotency
        (api, scope, idem_key, request_sha256, state, lock_token, locked_until,
         created_at, expires_at)
     VALUES ($1, $2, $3, $4, 'in_progress', $5, $6, $7, $8)
     ON CONFLICT (api, scope, idem_key) DO NOTHING
     RETURNING locked_until";

/// Compare-and-set takeover, same parameters as [`INSERT_SQL`]: an
/// in-progress row of the same request whose owner's lock ran out, or any
/// row past its window (not yet purged).
const TAKEOVER_SQL: &str = "UPDATE hookgate_idempotency
     SET request_sha256 = $4, state = 'in_progress', lock_token = $5, locked_until = $6,
         created_at = $7, expires_at = $8,
         resp_status = NULL, resp_headers = NULL, resp_body = NULL
     WHERE api = $1 AND scope = $2 AND idem_key = $3
       AND ((state = 'in_progress' AND locked_until < $7 AND request_sha256 = $4)
            OR expires_at < $7)
     RETURNING locked_until";

const SELECT_SQL: &str = "SELECT state, request_sha256, resp_status, resp_headers, resp_body
     FROM hookgate_idempotency WHERE api = $1 AND scope = $2 AND idem_key = $3";

/// `$1..$3` key, `$4` token, `$5` status, `$6` headers, `$7` body, `$8` expires_at.
const COMPLETE_SQL: &str = "UPDATE hookgate_idempotency
     SET state = 'completed', lock_token = NULL, resp_status = $5, resp_headers = $6,
         resp_body = $7, expires_at = $8
     WHERE api = $1 AND scope = $2 AND idem_key = $3
       AND state = 'in_progress' AND lock_token = $4";

const RELEASE_SQL: &str = "DELETE FROM hookgate_idempotency
     WHERE api = $1 AND scope = $2 AND idem_key = $3
       AND state = 'in_progress' AND lock_token = $4";

/// One bounded batch (`$2` rows) of expired keys.
const PURGE_SQL: &str = "DELETE FROM hookgate_idempotency
     WHERE (api, scope, idem_key) IN (
         SELECT api, scope, idem_key FROM hookgate_idempotency
         WHERE expires_at < $1 AND (state = 'completed' OR locked_until < $1) LIMIT $2)";

/// A row as read by [`SELECT_SQL`], turned into a [`Begin`].
fn from_row(
    state: String,
    request_sha256: Vec<u8>,
    status: Option<i32>,
    headers: Option<String>,
    body: Option<Vec<u8>>,
) -> Begin {
    match (state.as_str(), status) {
        ("completed", Some(status)) => Begin::Completed {
            request_sha256,
            response: StoredResponse {
                status: u16::try_from(status).unwrap_or(500),
                headers: headers
                    .and_then(|h| serde_json::from_str(&h).ok())
                    .unwrap_or_default(),
                body: body.map(Bytes::from).unwrap_or_default(),
            },
        },
        _ => Begin::InProgress { request_sha256 },
    }
}

/// A row's columns as [`SELECT_SQL`] reads them.
type StoredRow = (
    String,
    Vec<u8>,
    Option<i32>,
    Option<String>,
    Option<Vec<u8>>,
);

#[async_trait]
impl<DB> IdempotencyStore for Portable<DB>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'a> &'a str: Bind<DB>,
    for<'a> &'a [u8]: Bind<DB>,
    String: Bind<DB>,
    i64: Bind<DB>,
    i32: Bind<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
    i64: Column<DB>,
    i32: Column<DB>,
    String: Column<DB>,
    Vec<u8>: Column<DB>,
    DB::QueryResult: RowsAffected,
{
    async fn begin(&self, c: &RowClaim<'_>) -> Result<Begin, StoreError> {
        for sql in [INSERT_SQL, TAKEOVER_SQL] {
            let won: Option<i64> = sqlx::query_scalar(sql)
                .bind(c.key.api.as_str())
                .bind(c.key.scope.as_str())
                .bind(c.key.key.as_str())
                .bind(&c.request_sha256[..])
                .bind(c.token)
                .bind(c.locked_until.0)
                .bind(c.now.0)
                .bind(c.expires_at.0)
                .fetch_optional(&self.pool)
                .await?;
            if won.is_some() {
                return Ok(Begin::Claimed);
            }
        }
        self.lookup(c.key).await
    }

    async fn lookup(&self, key: &IdemKey) -> Result<Begin, StoreError> {
        let row: Option<StoredRow> = sqlx::query_as(SELECT_SQL)
            .bind(key.api.as_str())
            .bind(key.scope.as_str())
            .bind(key.key.as_str())
            .fetch_optional(&self.pool)
            .await?;
        Ok(match row {
            Some((state, sha, status, headers, body)) => {
                from_row(state, sha, status, headers, body)
            }
            None => Begin::Vanished,
        })
    }

    async fn complete(
        &self,
        key: &IdemKey,
        token: &str,
        response: &StoredResponse,
        expires_at: Millis,
    ) -> Result<bool, StoreError> {
        let headers = serde_json::to_string(&response.headers).unwrap_or_else(|_| "[]".into());
        let r = sqlx::query(COMPLETE_SQL)
            .bind(key.api.as_str())
            .bind(key.scope.as_str())
            .bind(key.key.as_str())
            .bind(token)
            .bind(i32::from(response.status))
            .bind(headers)
            .bind(response.body.as_ref())
            .bind(expires_at.0)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected() == 1)
    }

    async fn release(&self, key: &IdemKey, token: &str) -> Result<(), StoreError> {
        sqlx::query(RELEASE_SQL)
            .bind(key.api.as_str())
            .bind(key.scope.as_str())
            .bind(key.key.as_str())
            .bind(token)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn purge_idempotency(&self, now: Millis) -> Result<u64, StoreError> {
        let mut total = 0;
        loop {
            let n = sqlx::query(PURGE_SQL)
                .bind(now.0)
                .bind(super::PURGE_BATCH)
                .execute(&self.pool)
                .await?
                .rows_affected();
            total += n;
            if n < super::PURGE_BATCH as u64 {
                return Ok(total);
            }
        }
    }
}
