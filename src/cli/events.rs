//! `hookgate events list|show|redeliver` and `hookgate replay`: the events
//! API from the command line, straight on the ledger named by the config
//! (no running gateway needed). Output is the API's JSON (`list` prints a
//! table unless `--json`). Running gateways pick queued deliveries up on
//! their next poll.

use crate::admin::events::{parse_filter, record_json, summary_json};
use crate::primitives::time::Millis;
use crate::store::{self, Console};
use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::sync::Arc;

/// The list filters, as flags (same names and forms as the API's).
#[derive(Debug, Args, Default)]
pub struct FilterArgs {
    #[arg(long)]
    pub source: Option<String>,
    #[arg(long)]
    pub target: Option<String>,
    /// Event type (Stripe `type`, GitHub `X-GitHub-Event`, …).
    #[arg(long = "type")]
    pub event_type: Option<String>,
    /// RFC 3339, or a duration back from now (`90m`, `1h`, `2d`); inclusive.
    #[arg(long, value_parser = point_in_time)]
    pub since: Option<String>,
    /// RFC 3339, or a duration back from now; exclusive.
    #[arg(long, value_parser = point_in_time)]
    pub until: Option<String>,
    /// Event-id prefix.
    #[arg(long)]
    pub q: Option<String>,
    /// Exact event id.
    #[arg(long)]
    pub event_id: Option<String>,
    /// `true`: only events recovered by reconciliation (read from the
    /// provider API, or resent on its request); `false`: only received ones.
    #[arg(long)]
    pub recovered: Option<String>,
}

/// `--since` / `--until`: a duration (`1h`) is that long before now, as
/// RFC 3339; anything else goes to the API's own time parser as it is.
fn point_in_time(text: &str) -> Result<String, String> {
    point_before(text, std::time::SystemTime::now())
}

fn point_before(text: &str, now: std::time::SystemTime) -> Result<String, String> {
    match humantime::parse_duration(text) {
        Ok(back) => now
            .checked_sub(back)
            .filter(|t| *t >= std::time::UNIX_EPOCH)
            .map(|t| humantime::format_rfc3339_millis(t).to_string())
            .ok_or_else(|| format!("`{text}` reaches back before 1970")),
        Err(_) => Ok(text.to_owned()),
    }
}

impl FilterArgs {
    fn pairs(&self) -> Vec<(&'static str, &str)> {
        [
            ("source", &self.source),
            ("target", &self.target),
            ("type", &self.event_type),
            ("since", &self.since),
            ("until", &self.until),
            ("q", &self.q),
            ("event_id", &self.event_id),
            ("recovered", &self.recovered),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k, v.as_deref()?)))
        .collect()
    }
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub filter: FilterArgs,
}

#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// Newest first; `--cursor` continues where the last page ended.
    List {
        #[command(flatten)]
        filter: FilterArgs,
        /// pending, retrying, delivered or dead.
        #[arg(long)]
        state: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
        #[arg(long)]
        cursor: Option<String>,
        /// Print the API's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One event's full record (headers redacted), as JSON.
    Show { source: String, event_id: String },
    /// Send an event again (to one target, or all of its targets).
    Redeliver {
        source: String,
        event_id: String,
        #[arg(long)]
        target: Option<String>,
    },
}

/// The config and the console's queries on the ledger it names.
async fn console(
    config: &Option<PathBuf>,
) -> anyhow::Result<(crate::config::Config, Arc<dyn Console>)> {
    let config = super::load_ledger(config)?;
    let store = store::connect(
        &config.storage.database,
        Some(1),
        config.storage.statement_timeout,
    )
    .await
    .context("opening the ledger")?;
    Ok((config, store.console))
}

fn filter_error(e: crate::error::ApiError) -> anyhow::Error {
    anyhow::anyhow!("{}", e.to_string().trim_end())
}

// Longer than most: one match arm per subcommand, each a few lines.
pub async fn run(config: &Option<PathBuf>, command: EventsCommand) -> anyhow::Result<()> {
    match command {
        EventsCommand::List {
            filter,
            state,
            limit,
            cursor,
            json,
        } => {
            let limit = limit.to_string();
            let mut pairs = filter.pairs();
            pairs.extend(state.as_deref().map(|s| ("state", s)));
            pairs.extend(cursor.as_deref().map(|c| ("cursor", c)));
            pairs.push(("limit", &limit));
            let req = parse_filter(pairs, true).map_err(filter_error)?;
            let (_, console) = self::console(config).await?;
            let page = console
                .list_events(&req.filter, req.cursor, req.limit)
                .await?;
            if json {
                let doc = serde_json::json!({
                    "items": page.items.iter().map(summary_json).collect::<Vec<_>>(),
                    "next_cursor": page.next.map(|c| c.encode()),
                });
                println!("{}", serde_json::to_string_pretty(&doc)?);
                return Ok(());
            }
            println!(
                "{:<24} {:<12} {:<32} {:<24} deliveries",
                "received", "source", "event id", "type"
            );
            for e in &page.items {
                let d: Vec<String> = e
                    .deliveries
                    .iter()
                    .map(|d| format!("{}={}({})", d.target, d.state, d.attempts))
                    .collect();
                println!(
                    "{:<24} {:<12} {:<32} {:<24} {}",
                    crate::admin::events::format_time(e.received_at),
                    e.source,
                    e.event_id,
                    e.event_type.as_deref().unwrap_or("-"),
                    d.join(" ")
                );
            }
            if let Some(c) = page.next {
                println!("next page: --cursor {}", c.encode());
            }
            Ok(())
        }
        EventsCommand::Show { source, event_id } => {
            let (_, console) = self::console(config).await?;
            let Some(rec) = console.event(&source, &event_id).await? else {
                bail!("unknown event {source}/{event_id}");
            };
            println!("{}", serde_json::to_string_pretty(&record_json(&rec))?);
            Ok(())
        }
        EventsCommand::Redeliver {
            source,
            event_id,
            target,
        } => {
            let (config, console) = self::console(config).await?;
            if let Some(t) = &target
                && !config.targets.contains_key(t)
            {
                bail!("unknown target `{t}`");
            }
            let Some(rec) = console.event(&source, &event_id).await? else {
                bail!("unknown event {source}/{event_id}");
            };
            let n = console
                .redeliver(rec.summary.pk, &source, target.as_deref(), Millis::now())
                .await?;
            println!(
                "queued {n} deliveries; running gateways send them within their poll interval"
            );
            Ok(())
        }
    }
}

pub async fn replay(config: &Option<PathBuf>, args: ReplayArgs) -> anyhow::Result<()> {
    let filter = parse_filter(args.filter.pairs(), false)
        .map_err(filter_error)?
        .filter;
    let (config, console) = self::console(config).await?;
    if let Some(s) = &filter.source
        && !config.sources.contains_key(s)
    {
        bail!("unknown source `{s}`");
    }
    if let Some(t) = &filter.target
        && !config.targets.contains_key(t)
    {
        bail!("unknown target `{t}`");
    }
    let n = console.replay_matching(&filter, Millis::now()).await?;
    println!(
        "replayed {n} dead deliveries; running gateways pick them up within their poll interval"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::point_before;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn since_takes_a_duration_back_from_now_or_a_time_as_written() {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(point_before("1h", now).unwrap(), "2023-11-14T21:13:20.000Z");
        assert_eq!(
            point_before("90m", now).unwrap(),
            "2023-11-14T20:43:20.000Z"
        );
        assert_eq!(
            point_before("2024-01-01T00:00:00Z", now).unwrap(),
            "2024-01-01T00:00:00Z"
        );
        assert!(point_before("100000d", UNIX_EPOCH + Duration::from_secs(10)).is_err());
    }
}
