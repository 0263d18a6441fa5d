//! `hookgate reconcile --source <name> [--since 2d] [--dry-run]`: one
//! reconciliation run from the command line, straight on the ledger and
//! cache named by the config (a running gateway delivers what it recovers:
//! PostgreSQL wakes it at once, SQLite on its next poll). Prints a table;
//! exits non-zero when the provider could not be read.

use crate::dedup::cache::ClaimCache;
use crate::dedup::writer::GroupCommit;
use crate::dedup::{Dedup, memory::MemoryCache, redis::RedisCache};
use crate::deliver::Wake;
use crate::deliver::lanes::Lanes;
use crate::reconcile::{Reconciler, Report, RunOptions};
use crate::store;
use anyhow::Context;
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// The source to reconcile (it needs a `[sources.<name>.reconcile]` table).
    #[arg(long)]
    pub source: String,
    /// How far back to look, e.g. `2d`, `36h`. Default: the source's `lookback`.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub since: Option<Duration>,
    /// Compare only: nothing is written, resent or delivered.
    #[arg(long)]
    pub dry_run: bool,
}

pub async fn run(config: &Option<PathBuf>, args: ReconcileArgs) -> anyhow::Result<()> {
    let config = Arc::new(super::load(config)?);
    // Per-event failures are warnings on stderr; the table goes to stdout.
    crate::telemetry::init_logs(config.server.log_format, "warn");
    let Some(rec) = config.reconcile.get(&args.source) else {
        anyhow::bail!(
            "source `{0}` has no reconciliation configured (add [sources.{0}.reconcile])",
            args.source
        );
    };
    let db = &config.storage.database;
    let store = store::connect(db, Some(2), config.storage.statement_timeout)
        .await
        .with_context(|| format!("opening ledger {}", db.display()))?;
    if config.storage.migrate {
        store
            .backend
            .migrate()
            .await
            .with_context(|| format!("migrating {}", db.display()))?;
    }
    let cache: Arc<dyn ClaimCache> = match &config.storage.redis_url {
        Some(url) => Arc::new(
            RedisCache::connect(url, config.storage.redis_timeout)
                .context("configuring the Redis client")?,
        ),
        None => Arc::new(MemoryCache::new(config.storage.cache_capacity)),
    };
    // This process does not deliver: nothing is handed off, the serving
    // gateways claim the recovered events' deliveries.
    let lanes = Lanes::from_config(&config, false);
    let group = GroupCommit::start(
        store.event_log.clone(),
        lanes.clone(),
        128,
        config.storage.statement_timeout,
    );
    let dedup = Arc::new(Dedup::new(
        cache,
        group,
        store.event_log.clone(),
        config.dedup.clone(),
        config.storage.key_prefix.clone(),
    ));
    let r = Reconciler {
        wake: Wake::new(&lanes),
        config: config.clone(),
        dedup,
        store: store.reconcile,
        client: Reconciler::http_client(),
        retry: Default::default(),
        stop: tokio_util::sync::CancellationToken::new(),
    };
    let opts = RunOptions {
        window: args.since.unwrap_or(rec.lookback),
        dry_run: args.dry_run,
        scheduled: false,
    };
    let report = r
        .run(&args.source, opts)
        .await
        .with_context(|| format!("reconciling `{}`", args.source))?
        .unwrap_or_default();
    print!("{}", table(&args.source, &report, args.dry_run));
    Ok(())
}

/// The run as a table: one header line, one row.
pub fn table(source: &str, r: &Report, dry_run: bool) -> String {
    let recovered = if dry_run {
        "would recover"
    } else {
        "recovered"
    };
    let w = source.len().max(6);
    format!(
        "{:<w$}  {:>8}  {:>16}  {:>13}  {:>6}  {:>9}\n{:<w$}  {:>8}  {:>16}  {:>13}  {:>6}  {:>9}\n",
        "source",
        "found",
        "already received",
        recovered,
        "failed",
        "too young",
        source,
        r.found,
        r.already,
        r.recovered,
        r.failed,
        r.deferred,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_the_dry_run_column() {
        let r = Report {
            found: 1000,
            already: 963,
            recovered: 37,
            failed: 0,
            deferred: 2,
        };
        let t = table("stripe", &r, true);
        assert!(t.contains("would recover"), "{t}");
        let row = t.lines().nth(1).unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells, ["stripe", "1000", "963", "37", "0", "2"]);
    }
}
