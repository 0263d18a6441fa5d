//! `hookgate backup` and `hookgate restore`: an online copy of the SQLite
//! ledger, and putting one back in place of a stopped gateway's ledger.
//!
//! `VACUUM INTO` reads the database inside one read transaction, so the copy
//! is the database as of one commit: every event whose transaction
//! committed (and was therefore acknowledged) before the copy began is in
//! it, and no half of a later one. In WAL mode that reader does not block
//! the gateway's writer, and the writer does not block it
//! (<https://www.sqlite.org/lang_vacuum.html#vacuuminto>,
//! <https://www.sqlite.org/wal.html>).
//!
//! Rule: a copy is written beside its destination under a temporary name,
//! checked, synced to disk and only then renamed into place: SQLite does not
//! sync the file `VACUUM INTO` writes, and a copy cut short by a crash must
//! never sit under the name an operator would restore from (or the gateway
//! open). A restore never deletes the ledger it replaces.

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
    let summary = check_copy(tmp).await?;
    sync(tmp)?;
    Ok(summary)
}

/// Checks a copy (SQLite's `quick_check`, a hookgate schema) and reads its
/// summary; leaves it in rollback-journal mode.
async fn check_copy(path: &Path) -> Result<BackupSummary, StoreError> {
    let mut copy = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(false)
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
    Ok(BackupSummary {
        events,
        schema_version,
    })
}

fn sync(path: &Path) -> Result<(), StoreError> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| StoreError::Database(sqlx::Error::Io(e)))
}

/// Why a restore did not happen.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// Another connection has the ledger open: a gateway still runs on it.
    #[error("the ledger {0} is in use (a gateway still has it open): stop it first")]
    InUse(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
}

/// What a restore did.
#[derive(Debug)]
pub struct Restored {
    pub summary: BackupSummary,
    /// Where the replaced ledger was moved, if there was one.
    pub previous: Option<std::path::PathBuf>,
}

/// Puts the backup `from` in place of the ledger at `url`, which no process
/// may have open. The backup is copied and checked beside the ledger first;
/// the ledger (with its WAL folded in) is then moved aside, never deleted,
/// and the copy renamed into its place. `stamp` names the moved-aside file.
pub async fn restore_from(url: &str, from: &Path, stamp: &str) -> Result<Restored, RestoreError> {
    let ledger = SqliteConnectOptions::from_str(url)
        .map_err(StoreError::from)?
        .get_filename()
        .to_path_buf();
    let io = |what: &Path| {
        let what = what.display().to_string();
        move |e| RestoreError::Io(what, e)
    };
    let with_suffix = |suffix: &str| {
        let mut name = ledger.as_os_str().to_owned();
        name.push(suffix);
        std::path::PathBuf::from(name)
    };
    let staged = with_suffix(".restoring");
    let _ = std::fs::remove_file(&staged);
    std::fs::copy(from, &staged).map_err(io(from))?;
    let summary = match check_copy(&staged).await {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_file(&staged);
            return Err(e.into());
        }
    };
    sync(&staged)?;

    let previous = if ledger.exists() {
        // Leaving WAL mode needs the only connection to the file: SQLite
        // refuses it ("database is locked") while a gateway has the ledger
        // open, even idle. On success the WAL is folded into the file, so
        // the ledger moved aside below is whole without its `-wal`.
        let mut conn = SqliteConnectOptions::new()
            .filename(&ledger)
            .create_if_missing(false)
            .busy_timeout(Duration::from_millis(500))
            .connect()
            .await
            .map_err(StoreError::from)?;
        let mode = sqlx::query_scalar::<_, String>("PRAGMA journal_mode = DELETE")
            .fetch_one(&mut conn)
            .await;
        let _ = conn.close().await;
        let in_use = match mode {
            Ok(m) => !m.eq_ignore_ascii_case("delete"),
            Err(e) if busy(&e) => true,
            Err(e) => {
                let _ = std::fs::remove_file(&staged);
                return Err(StoreError::from(e).into());
            }
        };
        if in_use {
            let _ = std::fs::remove_file(&staged);
            return Err(RestoreError::InUse(ledger.display().to_string()));
        }
        let aside = with_suffix(&format!(".before-restore-{stamp}"));
        std::fs::rename(&ledger, &aside).map_err(io(&ledger))?;
        Some(aside)
    } else {
        None
    };
    // Left by a crashed process: they belong to the ledger moved aside and
    // would be applied to the restored file if they stayed.
    for suffix in ["-wal", "-shm"] {
        let f = with_suffix(suffix);
        if f.exists() {
            let aside = with_suffix(&format!(".before-restore-{stamp}{suffix}"));
            std::fs::rename(&f, &aside).map_err(io(&f))?;
        }
    }
    std::fs::rename(&staged, &ledger).map_err(io(&staged))?;
    if let Some(dir) = ledger.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io(dir))?;
    }
    Ok(Restored { summary, previous })
}

/// `SQLITE_BUSY` or `SQLITE_LOCKED` (any extended code of either):
/// another connection holds the file. <https://www.sqlite.org/rescode.html>
fn busy(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .and_then(|c| c.parse::<i32>().ok())
        .is_some_and(|c| matches!(c & 0xff, 5 | 6))
}
