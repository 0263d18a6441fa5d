//! SQLite: the embedded default (one process, one file).
//!
//! WAL with `synchronous = FULL`: a commit is on disk before the 2xx. SQLite
//! has one writer at a time, so group commit (one writer task) is what makes
//! concurrent requests cheap here.
//!
//! Rule: statements are SQLite-specific or the shared text of
//! [`super::rows`]; nothing is imported from the PostgreSQL backend. One
//! file per capability whose statements are its own:
//! [`event_log`](self::event_log) (batches in [`record`](self::record)),
//! [`outbox`](self::outbox), [`tallies`](self::tallies); and the online
//! copy `hookgate backup` makes ([`backup`](self::backup)).

pub mod backup;
mod event_log;
mod outbox;
mod record;
mod tallies;
#[cfg(test)]
mod tests;

use super::console::Dialect;
use super::portable::Portable;
use super::{Backend, StoreError};
use async_trait::async_trait;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection, Executor, Sqlite};
use std::str::FromStr;
use std::time::Duration;

pub struct SqliteStore {
    pool: SqlitePool,
    /// The writer's own connection, shared in turn by every hot-path write
    /// (see [`SqliteStore::on_writer`]).
    writer: tokio::sync::Mutex<Option<SqliteConnection>>,
}

/// The migrations. `ignore_missing`: a ledger that a newer release has
/// already migrated further (a rolling upgrade, a rollback) still opens;
/// docs/upgrade.md says why that is safe (each release's migrations only
/// add) and what is checked.
static MIGRATOR: sqlx::migrate::Migrator = {
    let mut m = sqlx::migrate!("migrations/sqlite");
    m.ignore_missing = true;
    m
};

impl SqliteStore {
    pub async fn connect(url: &str, max_connections: Option<u32>) -> Result<Self, StoreError> {
        let opts = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(5))
            // A multi-row INSERT inside the batch's transaction keeps a
            // statement journal (to undo that one statement); past 64 KiB
            // SQLite spills it to a temporary file, created and deleted in
            // every batch. In memory it stays (https://sqlite.org/tempfiles.html,
            // "Statement Journals" and "Temporary File Storage Locations").
            // It is never read for crash recovery, which is the WAL's job.
            .pragma("temp_store", "memory");
        let pool = SqlitePoolOptions::new()
            .max_connections(max_connections.unwrap_or(4))
            .acquire_timeout(Duration::from_secs(5))
            // No ping on each checkout: there is no server to hang up, and
            // a crashed worker thread is still found on return, where the
            // pool pings and drops a broken connection.
            .test_before_acquire(false)
            // A connection on which sqlx still counts a transaction as open
            // (its ROLLBACK failed because SQLite had already ended the
            // transaction, see `on_writer`) is closed, not reused: its next
            // user's transaction would be a savepoint, and a failed one
            // would leave SQLite's transaction open, holding the write lock
            // against every other writer. A transaction dropped on an error
            // path may still have its rollback queued at this point; that
            // connection is closed too (rare, and harmless), so no extra
            // round trip is spent on every release to tell the two apart.
            .after_release(|conn, _| Box::pin(async move { Ok(!conn.is_in_transaction()) }))
            .connect_with(opts)
            .await?;
        Ok(Self {
            pool,
            writer: tokio::sync::Mutex::new(None),
        })
    }

    /// Runs a write on the writer's connection: the group-commit writer's
    /// batches, and the outbox's claims, attempt records and lease
    /// renewals. From the pool each would get a different connection most
    /// times, and a connection that finds the database written by another
    /// one since its last transaction starts from an empty page cache:
    /// every b-tree page of the batch read again.
    ///
    /// One in-process queue also shares SQLite's one write lock fairly.
    /// Writers on separate connections wait for that lock in SQLite's busy
    /// handler, which sleeps and retries (https://sqlite.org/c3ref/busy_timeout.html)
    /// and keeps no queue: under a steady ingest the group-commit writer,
    /// committing batch after batch, takes the lock again before a sleeping
    /// delivery worker wakes, and deliveries fall behind what is acknowledged.
    /// Tokio's mutex is fair (first come, first served), so each write
    /// waits at most for the ones queued before it.
    ///
    /// Any error drops the connection, and the next batch opens a new one.
    /// A refused row is not only the database's answer: on some errors
    /// (`SQLITE_FULL`, an I/O error, a trigger's `RAISE(ROLLBACK)`) SQLite
    /// ends the transaction itself, sqlx's own `ROLLBACK` then fails, and
    /// sqlx 0.9 still counts the transaction as open. Kept, the connection
    /// would make the next batches savepoints inside a transaction that
    /// never commits. Errors are rare; a cold cache after one costs
    /// nothing that matters.
    async fn on_writer<T>(
        &self,
        work: impl AsyncFnOnce(&mut SqliteConnection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut slot = self.writer.lock().await;
        let conn = match &mut *slot {
            Some(c) => c,
            // The pool's own options: the same file and pragmas.
            None => slot.insert(self.pool.connect_options().connect().await?),
        };
        let done = work(conn).await;
        if done.is_err() {
            *slot = None;
        }
        done
    }

    /// The capabilities whose SQL both backends share, on the pool.
    pub(super) fn portable(&self) -> Portable<Sqlite> {
        Portable::new(self.pool.clone(), Dialect::Sqlite)
    }
}

#[async_trait]
impl Backend for SqliteStore {
    async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.pool.execute("SELECT 1").await?;
        Ok(())
    }

    async fn clock(&self) -> Result<Option<crate::primitives::time::Millis>, StoreError> {
        Ok(None)
    }
}
