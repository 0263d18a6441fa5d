//! Command line: serve, check-config, sign, providers, migrate, replay,
//! events, reconcile, backup, restore, listen.

mod backup;
pub(crate) mod describe;
mod events;
mod listen;
mod reconcile;
mod sign;

pub use describe::describe;

use crate::app::App;
use crate::config::{Config, Needs};
use crate::store;
use crate::{shutdown, telemetry};
use anyhow::Context;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Parser)]
#[command(
    name = "hookgate",
    version,
    about = "Webhook receiver gateway: verify, dedupe, store, forward"
)]
pub struct Cli {
    /// Config file (default: ./hookgate.toml if present). `HOOKGATE_SECTION__KEY`
    /// variables override it.
    #[arg(long, short, global = true, env = "HOOKGATE_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway.
    Serve {
        /// Do not apply migrations at start.
        #[arg(long)]
        no_migrate: bool,
    },
    /// Validate the config and print what it resolves to (never a secret).
    CheckConfig,
    /// Print the headers a provider would send for a body, and a curl line.
    Sign(sign::SignArgs),
    /// Print the catalogue of built-in providers (Markdown tables, one per
    /// category), or write it into a document between its markers.
    Providers {
        /// Replace the generated part of this file (`docs/providers.md`)
        /// instead of printing.
        #[arg(long, value_name = "FILE")]
        update: Option<PathBuf>,
    },
    /// Apply the ledger migrations and exit.
    Migrate,
    /// Copy the SQLite ledger to FILE while the gateway keeps serving (a
    /// consistent snapshot). For PostgreSQL, use pg_dump.
    Backup {
        /// Where the copy goes; must not exist yet.
        file: PathBuf,
    },
    /// Put a backup in place of the SQLite ledger (the gateway stopped).
    /// The replaced ledger is kept beside it, renamed.
    Restore {
        /// A file `hookgate backup` wrote.
        file: PathBuf,
    },
    /// Make dead deliveries pending again (all dead ones unless filtered).
    Replay(events::ReplayArgs),
    /// Find, inspect and redeliver stored events.
    Events {
        #[command(subcommand)]
        command: events::EventsCommand,
    },
    /// Ask a provider's API for the events of a window and recover the ones
    /// never received (prints a table; non-zero exit if the API could not be read).
    Reconcile(reconcile::ReconcileArgs),
    /// Stream a gateway's events for one source to a local URL (needs a
    /// token with the `listen` scope); resumes where it stopped.
    Listen(listen::ListenArgs),
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve { no_migrate } => serve(&cli.config, no_migrate).await,
        Command::CheckConfig => {
            let config = load(&cli.config)?;
            print!("{}", describe::describe(&config));
            for w in &config.warnings {
                eprintln!("warning: {w}");
            }
            Ok(())
        }
        Command::Sign(args) => sign::run(args, &cli.config),
        Command::Providers { update } => providers(update.as_deref()),
        Command::Migrate => {
            let config = load_ledger(&cli.config)?;
            let store = store::connect(
                &config.storage.database,
                Some(1),
                config.storage.statement_timeout,
            )
            .await?;
            store.backend.migrate().await?;
            println!("migrated {}", config.storage.database.display());
            Ok(())
        }
        Command::Backup { file } => backup::run(&cli.config, &file).await,
        Command::Restore { file } => backup::restore(&cli.config, &file).await,
        Command::Replay(args) => events::replay(&cli.config, args).await,
        Command::Events { command } => events::run(&cli.config, command).await,
        Command::Reconcile(args) => reconcile::run(&cli.config, args).await,
        Command::Listen(args) => listen::run(args).await,
    }
}

async fn serve(config: &Option<PathBuf>, no_migrate: bool) -> anyhow::Result<()> {
    // First of all: once a SIGHUP handler is installed (for the whole
    // process, by tokio), the signal no longer ends it; `App` reloads on it.
    drop(crate::reload::Hangup::register());
    let mut config = load(config)?;
    telemetry::init_logs(config.server.log_format, &config.server.log_level);
    for w in &config.warnings {
        tracing::warn!("{w}");
    }
    if no_migrate {
        config.storage.migrate = false;
    }
    let listener = tokio::net::TcpListener::bind(config.server.listen)
        .await
        .with_context(|| format!("binding {}", config.server.listen))?;
    let app = App::build(config).await?;
    let stop = CancellationToken::new();
    shutdown::on_signal(stop.clone());
    app.run_until_stopped(listener, stop).await
}

fn providers(update: Option<&std::path::Path>) -> anyhow::Result<()> {
    use crate::verify::catalogue;
    let tables = catalogue::markdown();
    let Some(path) = update else {
        print!("{tables}");
        return Ok(());
    };
    let doc =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let new =
        catalogue::splice(&doc, &tables).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    std::fs::write(path, new).with_context(|| format!("writing {}", path.display()))?;
    println!("updated {}", path.display());
    Ok(())
}

pub(crate) fn load(path: &Option<PathBuf>) -> anyhow::Result<Config> {
    Config::load(path.as_deref()).map_err(|e| anyhow::anyhow!("invalid config:\n{e}"))
}

/// The config of a command that uses only the ledger: webhook and target
/// secrets need not be in the environment (see [`Needs::Ledger`]).
pub(crate) fn load_ledger(path: &Option<PathBuf>) -> anyhow::Result<Config> {
    Config::load_for(path.as_deref(), Needs::Ledger)
        .map_err(|e| anyhow::anyhow!("invalid config:\n{e}"))
}
