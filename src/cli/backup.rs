//! `hookgate backup FILE`: an online copy of the SQLite ledger, taken while
//! the gateway serves; `hookgate restore FILE`: that copy back in place of
//! a stopped gateway's ledger (see `store::sqlite::backup`). A PostgreSQL
//! ledger is backed up and restored with PostgreSQL's own tools; the
//! commands say so and fail.

use crate::config::Database;
use crate::primitives::time::Millis;
use crate::store::sqlite::backup::{backup_into, restore_from};
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};

pub async fn run(config: &Option<PathBuf>, file: &Path) -> anyhow::Result<()> {
    let config = super::load_ledger(config)?;
    let url = match &config.storage.database {
        Database::Sqlite(url) => url,
        Database::Postgres(_) => bail!(
            "the ledger is PostgreSQL ({}): back it up with pg_dump, e.g. \
             `pg_dump --format=custom --file=hookgate.dump \"$DATABASE_URL\"`, and restore \
             with pg_restore (docs/operations.md, \"Backup and restore\"); \
             `hookgate backup` copies SQLite ledgers only",
            config.storage.database.display()
        ),
    };
    if file.exists() {
        bail!(
            "{} already exists: name a new file (a backup never overwrites one)",
            file.display()
        );
    }
    let name = file
        .file_name()
        .with_context(|| format!("{} is not a file name", file.display()))?;
    let mut tmp_name = name.to_owned();
    tmp_name.push(".partial");
    let tmp = file.with_file_name(tmp_name);
    // A leftover from a backup cut short: never a backup, always safe to drop.
    let _ = std::fs::remove_file(&tmp);
    let summary = match backup_into(url, &tmp).await {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(anyhow::Error::new(e)
                .context(format!("backing up {}", config.storage.database.display())));
        }
    };
    std::fs::rename(&tmp, file)
        .with_context(|| format!("renaming {} to {}", tmp.display(), file.display()))?;
    // The rename itself survives a crash once its directory is synced.
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))?;
    println!(
        "backed up {} to {}: {} events, schema version {}",
        config.storage.database.display(),
        file.display(),
        summary.events,
        summary.schema_version
    );
    Ok(())
}

pub async fn restore(config: &Option<PathBuf>, file: &Path) -> anyhow::Result<()> {
    let config = super::load_ledger(config)?;
    let url = match &config.storage.database {
        Database::Sqlite(url) => url,
        Database::Postgres(_) => bail!(
            "the ledger is PostgreSQL ({}): restore a pg_dump archive with pg_restore \
             (docs/operations.md, \"Backup and restore\"); `hookgate restore` restores \
             SQLite ledgers only",
            config.storage.database.display()
        ),
    };
    if !file.is_file() {
        bail!("{} is not a file", file.display());
    }
    // Seconds since the epoch: sortable, and no two restores share one.
    let stamp = Millis::now().as_secs().to_string();
    let done = restore_from(url, file, &stamp)
        .await
        .with_context(|| format!("restoring {}", file.display()))?;
    println!(
        "restored {} to {}: {} events, schema version {}",
        file.display(),
        config.storage.database.display(),
        done.summary.events,
        done.summary.schema_version
    );
    if let Some(p) = done.previous {
        println!("the ledger it replaced is kept as {}", p.display());
    }
    Ok(())
}
