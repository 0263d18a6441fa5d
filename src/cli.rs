//! Command line: serve, check-config, sign, migrate, replay.

use crate::app::App;
use crate::config::redis_url::RedisTopology;
use crate::config::{Config, redact_url};
use crate::primitives::duration::show;
use crate::primitives::secret::Secret;
use crate::store::{self, ReplayFilter};
use crate::verify::crypto::SigningKey;
use crate::verify::registry::Registry;
use crate::verify::schemes::Scheme;
use crate::verify::schemes::plaid::signing_key_jwk as plaid_public_jwk;
use crate::verify::sign::{PaypalSign, PlaidSign, SignRequest, sign};
use crate::{shutdown, telemetry};
use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use std::fmt::Write as _;
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
#[expect(
    clippy::large_enum_variant,
    reason = "parsed once per process; boxing would only obscure the clap definition"
)]
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
    Sign {
        /// Provider name (see `check-config` for the list).
        #[arg(long)]
        provider: String,
        /// Secret as configured at the provider: literal, `env:NAME` or `file:PATH`
        /// (not used by PayPal, which signs with --private-key).
        #[arg(long)]
        secret: Option<String>,
        /// File holding the exact body to sign.
        #[arg(long)]
        body: PathBuf,
        /// Where the curl line sends it.
        #[arg(long, default_value = "http://127.0.0.1:8080/webhooks/PROVIDER")]
        to: String,
        /// Unix timestamp to sign (default: now).
        #[arg(long)]
        timestamp: Option<i64>,
        /// Event id for providers that send it in a header (default: random).
        #[arg(long)]
        event_id: Option<String>,
        /// Public URL for schemes that sign the URL (default: --to).
        #[arg(long)]
        public_url: Option<String>,
        /// Directory of extra provider definitions.
        #[arg(long)]
        providers_dir: Option<PathBuf>,
        /// PayPal: an RSA private key (PEM file) matching the certificate
        /// pinned in the source; Plaid: a P-256 private key whose public JWK
        /// the source pins. The providers' own keys are theirs: tests only.
        #[arg(long)]
        private_key: Option<PathBuf>,
        /// Plaid only: the `kid` the token names (pin the printed JWK under it).
        #[arg(long, default_value = "hookgate-test")]
        key_id: String,
        /// PayPal only: the webhook id the source is configured with.
        #[arg(long, default_value = "WEBHOOK_ID")]
        webhook_id: String,
        /// PayPal only: the certificate URL to send.
        #[arg(
            long,
            default_value = "https://api.paypal.com/v1/notifications/certs/CERT-hookgate-test"
        )]
        cert_url: String,
        /// Where to write the signed body when signing changes it (Adyen,
        /// T-Bank, Robokassa, Braintree). Default: next to --body, `.signed`.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Apply the ledger migrations and exit.
    Migrate,
    /// Make dead deliveries pending again (all dead ones unless filtered).
    Replay {
        #[arg(long)]
        source: Option<String>,
        #[arg(long)]
        event_id: Option<String>,
        #[arg(long)]
        target: Option<String>,
    },
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve { no_migrate } => {
            let mut config = load(&cli.config)?;
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
        Command::CheckConfig => {
            let config = load(&cli.config)?;
            print!("{}", describe(&config));
            for w in &config.warnings {
                eprintln!("warning: {w}");
            }
            Ok(())
        }
        Command::Sign {
            provider,
            secret,
            body,
            to,
            timestamp,
            event_id,
            public_url,
            providers_dir,
            private_key,
            key_id,
            webhook_id,
            cert_url,
            out,
        } => {
            let mut registry = Registry::builtin();
            if let Some(dir) = providers_dir {
                registry.load_dir(&dir)?;
            }
            let p = registry.get(&provider).with_context(|| {
                format!(
                    "unknown provider `{provider}` (known: {})",
                    registry.names().join(", ")
                )
            })?;
            let pem = match &private_key {
                Some(p) => Some(
                    std::fs::read_to_string(p)
                        .with_context(|| format!("reading {}", p.display()))?,
                ),
                None => None,
            };
            let key = match (&secret, p.needs_secret()) {
                (Some(secret), _) => {
                    let secret = Secret::resolve(secret, std::path::Path::new("."))
                        .map_err(|e| anyhow::anyhow!("--secret: {e}"))?;
                    p.signing_key(&secret)
                        .map_err(|e| anyhow::anyhow!("--secret: {e}"))?
                }
                (None, false) => SigningKey::from_bytes(Vec::new()),
                (None, true) => bail!("--secret is required for provider `{provider}`"),
            };
            let bytes =
                std::fs::read(&body).with_context(|| format!("reading {}", body.display()))?;
            let to = to.replace("PROVIDER", &provider);
            let url = public_url.unwrap_or_else(|| to.clone());
            let ts = timestamp.unwrap_or_else(|| store::now_ms() / 1000);
            let query = url.split_once('?').map(|(_, q)| q.to_owned());
            let req = SignRequest {
                body: &bytes,
                timestamp: ts,
                event_id,
                url: Some(&url),
                query: query.as_deref(),
                paypal: pem.as_deref().map(|pem| PaypalSign {
                    private_key_pem: pem,
                    webhook_id: &webhook_id,
                    cert_url: &cert_url,
                }),
                plaid: pem.as_deref().map(|pem| PlaidSign {
                    private_key_pem: pem,
                    kid: &key_id,
                }),
            };
            let signed = sign(&p, &key, &req).map_err(|e| anyhow::anyhow!(e))?;
            if let (Some(plaid), Scheme::Plaid) = (&req.plaid, p.signature.scheme) {
                let jwk = plaid_public_jwk(plaid).map_err(|e| anyhow::anyhow!(e))?;
                eprintln!("pin this key in [sources.<name>.plaid] keys: {jwk}");
            }
            let headers = signed.headers;
            let mut to = to;
            if let Some(q) = &signed.query {
                to.push(if to.contains('?') { '&' } else { '?' });
                to.push_str(q);
            }
            let mut body = body;
            if let Some(new_body) = &signed.body {
                let path = out.unwrap_or_else(|| body.with_extension("signed"));
                std::fs::write(&path, new_body)
                    .with_context(|| format!("writing {}", path.display()))?;
                eprintln!("signed body written to {}", path.display());
                body = path;
            }
            let bytes = signed.body.unwrap_or(bytes);
            let content_type = if serde_json::from_slice::<serde_json::Value>(&bytes).is_ok() {
                "application/json"
            } else {
                "application/x-www-form-urlencoded"
            };
            let mut curl = format!("curl -sS -i -X POST '{to}' -H 'content-type: {content_type}'");
            for (k, v) in &headers {
                println!("{k}: {v}");
                let _ = write!(curl, " -H '{k}: {v}'");
            }
            let _ = write!(curl, " --data-binary @'{}'", body.display());
            println!("\n{curl}");
            Ok(())
        }
        Command::Migrate => {
            let config = load(&cli.config)?;
            let ledger = store::connect(&config.storage.database, Some(1)).await?;
            ledger.migrate().await?;
            println!("migrated {}", config.storage.database.display());
            Ok(())
        }
        Command::Replay {
            source,
            event_id,
            target,
        } => {
            let config = load(&cli.config)?;
            if let Some(s) = &source
                && !config.sources.contains_key(s)
            {
                bail!("unknown source `{s}`");
            }
            if let Some(t) = &target
                && !config.targets.contains_key(t)
            {
                bail!("unknown target `{t}`");
            }
            let ledger = store::connect(&config.storage.database, Some(1)).await?;
            let filter = ReplayFilter {
                source,
                event_id,
                target,
            };
            let n = ledger.replay(&filter, store::now_ms()).await?;
            println!(
                "replayed {n} dead deliveries; running gateways pick them up within their poll interval"
            );
            Ok(())
        }
    }
}

fn load(path: &Option<PathBuf>) -> anyhow::Result<Config> {
    Config::load(path.as_deref()).map_err(|e| anyhow::anyhow!("invalid config:\n{e}"))
}

/// The `check-config` summary: everything resolved, no secret.
pub fn describe(c: &Config) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "config: {} (ok)", c.origin);
    let _ = writeln!(
        o,
        "server: listen={} max_body_bytes={} admin_token={} log_format={:?}",
        c.server.listen,
        c.server.max_body_bytes,
        if c.server.admin_token.is_some() {
            "set"
        } else {
            "unset (admin endpoints refuse all)"
        },
        c.server.log_format
    );
    let _ = writeln!(o, "ledger: {}", c.storage.database.display());
    let cache = match &c.storage.redis_url {
        Some(u) => format!(
            "redis {} {} (key prefix `{}`)",
            RedisTopology::parse(u.expose()).map_or("?", |t| t.kind()),
            redact_url(u.expose()),
            c.storage.key_prefix
        ),
        None => format!("in-process (capacity {})", c.storage.cache_capacity),
    };
    let _ = writeln!(o, "cache: {cache}");
    let _ = writeln!(o, "providers: {}", c.providers.names().join(", "));
    let _ = writeln!(o, "sources:");
    for s in c.sources.values() {
        let _ = writeln!(
            o,
            "  {:<16} POST /webhooks/{:<16} provider={} secrets={} tolerance={} dedup_window={} targets=[{}]{}",
            s.name,
            s.name,
            s.provider.name,
            s.keys.len(),
            if s.provider.timestamp.is_some() {
                show(s.tolerance)
            } else {
                "-".into()
            },
            show(s.dedup_window),
            s.targets.join(", "),
            s.public_url
                .as_deref()
                .map(|u| format!(" public_url={u}"))
                .unwrap_or_default()
        );
    }
    let _ = writeln!(o, "targets:");
    for t in c.targets.values() {
        let _ = writeln!(
            o,
            "  {:<16} {} timeout={} max_attempts={} concurrency={} signed={}",
            t.name,
            redact_url(&t.url),
            show(t.timeout),
            t.max_attempts,
            t.concurrency,
            if t.signing_key.is_some() { "yes" } else { "no" }
        );
    }
    o
}
