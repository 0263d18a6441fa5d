//! `hookgate backup`: an online copy of the SQLite ledger.
//!
//! `VACUUM INTO` reads the database inside one read transaction, so the copy
//! is the database as of one commit: every event whose transaction
//! committed (and was therefore acknowledged) before the copy began is in
//! it, and no half of a later one. In WAL mode that reader does not block
//! the gateway's writer, and the writer does not block it
//! (<https://www.sqlite.org/lang_vacuum.html#vacuuminto>,
//! <https://www.sqlite.org/wal.html>).
//!
//! Rule: the copy is written beside its destination under a temporary name,
//! checked, synced to disk and only then renamed into place: SQLite does not
//! sync the file `VACUUM INTO` writes, and a copy cut short by a crash must
//! never sit under the name an operator would restore from.

use super::StoreError;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
use sqlx::{ConnectOptions, Connection};
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

/// What a finished backup holds.
#[derive(Debug)]
pub struct BackupSummary {
    /// Stored events in the copy.
    pub events: i64,
    /// The newest migration applied to the copy (its schema).
    pub schema_version: i64,
}

/// Copies the ledger at `url` (which must exist) into `tmp`, checks the copy
/// and syncs it. The caller renames `tmp` into place.
pub async fn backup_into(url: &str, tmp: &Path) -> Result<BackupSummary, StoreError> {
    let opts = SqliteConnectOptions::from_str(url)?
        .create_if_missing(false)
        .busy_timeout(Duration::from_secs(30));
    let mut conn = opts.connect().await?;
    let dest = tmp.to_str().ok_or_else(|| {
        StoreError::Database(sqlx::Error::Configuration(
            "the backup path is not valid UTF-8".into(),
        ))
    })?;
    sqlx::query("VACUUM INTO ?")
        .bind(dest)
        .execute(&mut conn)
        .await?;
    conn.close().await?;

    // Rollback-journal mode: the copy is one self-contained file (no -wal
    // beside it to lose), whatever mode the ledger's header recorded. The
    // gateway switches a restored copy back to WAL when it opens it.
    let mut copy = SqliteConnectOptions::new()
        .filename(tmp)
        .journal_mode(SqliteJournalMode::Delete)
        .connect()
        .await?;
    let check: String = sqlx::query_scalar("PRAGMA quick_check")
        .fetch_one(&mut copy)
        .await?;
    if check != "ok" {
        return Err(StoreError::Database(sqlx::Error::Protocol(format!(
            "the copy failed SQLite's quick_check: {check}"
        ))));
    }
    let events: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM hookgate_events")
        .fetch_one(&mut copy)
        .await?;
    let schema_version: i64 =
        sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM _sqlx_migrations WHERE success")
            .fetch_one(&mut copy)
            .await?;
    copy.close().await?;
    std::fs::File::open(tmp)
        .and_then(|f| f.sync_all())
        .map_err(|e| StoreError::Database(sqlx::Error::Io(e)))?;
    Ok(BackupSummary {
        events,
        schema_version,
    })
}
