//! Configuration: embedded defaults → TOML file → `HOOKGATE_*` environment,
//! then validated into typed values.
//!
//! Rule: every error names the file and the key; no secret value is ever part
//! of an error, `Debug` output or the `check-config` summary.

pub mod alerts;
pub mod apis;
pub mod raw;
pub mod reconcile;
pub mod redis_url;
mod restart;
mod validate;

use crate::primitives::secret::Secret;
use crate::target::Target;
use crate::verify::registry::Registry;
use crate::verify::source::Source;
use figment::Figment;
use figment::providers::{Env, Format, Toml};
use ipnet::IpNet;
use raw::{LogFormat, RawConfig};
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Default config file name, looked up in the working directory.
pub const DEFAULT_FILE: &str = "hookgate.toml";

/// What a command needs from the config. The gateway needs every secret;
/// the commands that only read and write the ledger (`migrate`, `events`,
/// `replay`, `backup`) need only its URL, so an operator can run them from a
/// shell that has no webhook secret in its environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Every secret must resolve (`serve`, `check-config`, `reconcile`).
    Everything,
    /// Only `storage.database_url` must resolve; a secret that does not
    /// leaves its setting unset (no key, no signing secret), never printed.
    Ledger,
}

/// The validated configuration every component is built from.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the config came from (for messages).
    pub origin: String,
    /// The file it was read from, re-read by a reload; `None`: defaults or
    /// an inline config.
    pub path: Option<PathBuf>,
    /// First 12 hex digits of the SHA-256 of the config file's text: which
    /// config is loaded (`/readyz`, `/stats`, the reload log line).
    pub digest: String,
    pub server: Server,
    pub storage: Storage,
    pub dedup: Dedup,
    pub delivery: Delivery,
    pub sources: BTreeMap<String, Arc<Source>>,
    pub targets: BTreeMap<String, Arc<Target>>,
    /// `[apis.*]`: the Idempotency-Key proxy's upstreams.
    pub apis: BTreeMap<String, Arc<apis::Api>>,
    /// `[sources.<name>.reconcile]`, by source name.
    pub reconcile: BTreeMap<String, Arc<reconcile::Reconcile>>,
    /// `[telemetry]`: where traces go; `None` without `otlp_endpoint`.
    pub traces: Option<Traces>,
    /// `[refused]`: the refused-request log.
    pub refused: Refused,
    /// `[alerts.*]` and `[alerting]`: alert sinks (their internal targets
    /// `alert.<name>` are in `targets`).
    pub alerts: alerts::Alerts,
    pub providers: Registry,
    /// Non-fatal findings (e.g. `HOOKGATE_*` variables nothing reads).
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Server {
    pub listen: SocketAddr,
    pub max_body_bytes: usize,
    pub admin_token: Option<Secret>,
    /// `[server.tokens.*]`: named tokens with scopes (besides `admin_token`).
    pub tokens: Vec<AdminToken>,
    pub log_format: LogFormat,
    pub log_level: String,
    pub request_timeout: Duration,
    pub shutdown_grace: Duration,
    /// Proxies whose `X-Forwarded-For` names the client.
    pub trusted_proxies: Vec<IpNet>,
    /// Separate address for the admin endpoints; `None` = the public port serves them.
    pub admin_listen: Option<SocketAddr>,
    /// Most open connections per listener.
    pub max_connections: usize,
    /// Most open connections per client address, per listener.
    pub max_connections_per_client: usize,
    /// Deadline for a request's headers; HTTP/2 without an open stream.
    pub header_read_timeout: Duration,
    /// HTTP/1: idle limit of a kept-alive connection.
    pub keep_alive_timeout: Duration,
    /// HTTP/2 keep-alive ping interval and timeout.
    pub idle_timeout: Duration,
    /// Request bodies held at once, in all and per client address.
    pub max_buffered_body_bytes: usize,
    pub max_buffered_body_bytes_per_client: usize,
    /// Proxy answers buffered at once to be stored.
    pub max_buffered_answer_bytes: usize,
    /// `/metrics` and `/readyz` need the admin token.
    pub protect_metrics: bool,
    /// Native HTTPS on the listeners: certificate chain and key files (PEM),
    /// re-read on reload. `None`: plain HTTP.
    pub tls: Option<Tls>,
}

/// What a bearer token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Everything behind the token: stats, events, replay, reload, console.
    Admin,
    /// The event stream of `hookgate listen`. Not implied by `admin`: the
    /// stream carries the provider's signature headers, which the events
    /// API redacts.
    Listen,
}

impl Scope {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "admin" => Some(Self::Admin),
            "listen" => Some(Self::Listen),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Admin => "admin",
            Self::Listen => "listen",
        }
    }
}

/// The name `server.admin_token` goes by (audit log, `/stats`).
pub const DEFAULT_TOKEN_NAME: &str = "admin";

/// One named token of `[server.tokens.<name>]`.
#[derive(Debug, Clone)]
pub struct AdminToken {
    pub name: String,
    pub secret: Secret,
    pub scopes: Vec<Scope>,
}

impl AdminToken {
    pub fn allows(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope)
    }
}

impl Server {
    /// Every token the gateway accepts: `admin_token` (named
    /// [`DEFAULT_TOKEN_NAME`], scopes `admin` and `listen`, as the single
    /// token of earlier releases could do everything) first, then the named ones.
    pub fn all_tokens(&self) -> Vec<AdminToken> {
        self.admin_token
            .iter()
            .map(|s| AdminToken {
                name: DEFAULT_TOKEN_NAME.to_owned(),
                secret: s.clone(),
                scopes: vec![Scope::Admin, Scope::Listen],
            })
            .chain(self.tokens.iter().cloned())
            .collect()
    }
}

/// `server.tls_cert` and `server.tls_key`, resolved against the config
/// file's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Debug, Clone)]
pub struct Storage {
    pub database: Database,
    pub redis_url: Option<Secret>,
    pub migrate: bool,
    pub key_prefix: String,
    pub cache_capacity: u64,
    pub near_cache_capacity: u64,
    pub redis_timeout: Duration,
    pub max_connections: Option<u32>,
    /// Bound of one ledger call (see `batch` and `store::postgres`).
    pub statement_timeout: Duration,
}

impl Storage {
    /// The claim cache, for output: Redis (topology, URL without
    /// credentials, key prefix) or the in-process cache.
    pub fn cache_display(&self) -> String {
        match &self.redis_url {
            Some(u) => format!(
                "redis {} {} (key prefix `{}`; near cache {} ids)",
                redis_url::RedisTopology::parse(u.expose()).map_or("?", |t| t.kind()),
                crate::primitives::url::show(u.expose()),
                self.key_prefix,
                self.near_cache_capacity
            ),
            None => format!("in-process (capacity {})", self.cache_capacity),
        }
    }
}

/// The durable ledger, chosen by URL scheme.
#[derive(Debug, Clone)]
pub enum Database {
    Sqlite(String),
    /// The URL may hold a password, so it is a secret.
    Postgres(Secret),
}

impl Database {
    /// The ledger a URL names. A relative SQLite path is taken relative to
    /// `base` (the config file's directory), as `file:` secrets are: a
    /// service started from another working directory opens the same file.
    pub(crate) fn parse(url: Secret, base: &Path) -> Result<Self, String> {
        let text = url.expose();
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            Ok(Self::Postgres(url))
        } else if text.starts_with("sqlite:") {
            Ok(Self::Sqlite(sqlite_anchored(text, base)))
        } else {
            let scheme = text.split(':').next().unwrap_or_default();
            Err(format!(
                "unsupported database URL scheme `{scheme}:` (use postgres:// or sqlite://)"
            ))
        }
    }

    /// The URL without credentials, for output.
    pub fn display(&self) -> String {
        match self {
            Self::Sqlite(u) => crate::primitives::url::show(u),
            Self::Postgres(u) => crate::primitives::url::show(u.expose()),
        }
    }
}

/// `url` with a relative file path joined to `base`. In-memory databases,
/// absolute paths and an empty `base` (no config file: the working
/// directory) are left as they are. sqlx percent-decodes the path, so the
/// characters of `base` that a URL path would read otherwise are encoded.
fn sqlite_anchored(url: &str, base: &Path) -> String {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    let (path, query) = match rest.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (rest, None),
    };
    if path.is_empty()
        || path == ":memory:"
        || Path::new(path).is_absolute()
        || base.as_os_str().is_empty()
    {
        return url.to_owned();
    }
    let mut dir = String::new();
    for c in base.to_string_lossy().chars() {
        match c {
            '%' => dir.push_str("%25"),
            '?' => dir.push_str("%3F"),
            '#' => dir.push_str("%23"),
            c => dir.push(c),
        }
    }
    let sep = if dir.ends_with('/') { "" } else { "/" };
    let query = query.map(|q| format!("?{q}")).unwrap_or_default();
    format!("sqlite://{dir}{sep}{path}{query}")
}

/// `[telemetry]` with an `otlp_endpoint`: traces are exported (`traces`).
#[derive(Debug, Clone, PartialEq)]
pub struct Traces {
    /// The full OTLP/HTTP traces URL (`…/v1/traces`); no credentials in it.
    pub endpoint: String,
    /// 0 to 1: the trace-id ratio of the root sampler.
    pub sample_ratio: f64,
    pub service_name: String,
    pub max_queued_spans: usize,
    pub export_interval: Duration,
    pub export_timeout: Duration,
}

#[derive(Debug, Clone)]
pub struct Dedup {
    pub claim_ttl: Duration,
    pub cache_ttl: Duration,
    pub inflight_wait: Duration,
    pub purge_interval: Duration,
    pub stats_flush_interval: Duration,
}

/// `[refused]`: which refused requests are logged and for how long
/// (`ingest::refused`). Read per request and per prune, so a reload applies.
#[derive(Debug, Clone)]
pub struct Refused {
    pub enabled: bool,
    pub keep: Duration,
    pub max_rows: i64,
    pub capture_body: bool,
    pub body_cap: usize,
}

#[derive(Debug, Clone)]
pub struct Delivery {
    pub enabled: bool,
    pub max_in_flight: usize,
    pub poll_interval: Duration,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// How long a lease runs unrenewed (see `deliver::lease`).
    pub lease: Duration,
    /// How often held leases are renewed; at most a third of `lease`.
    pub heartbeat: Duration,
    /// Default retry window of every target.
    pub retry_for: Duration,
    /// Default permanent-failure statuses of every target.
    pub permanent_statuses: Vec<u16>,
}

/// A config that could not be loaded: the file and every offending key.
#[derive(Debug, thiserror::Error)]
pub struct ConfigError {
    pub origin: String,
    pub problems: Vec<(String, String)>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (key, msg)) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            if key.is_empty() {
                write!(f, "{}: {msg}", self.origin)?;
            } else {
                write!(f, "{}: `{key}`: {msg}", self.origin)?;
            }
        }
        Ok(())
    }
}

impl Config {
    /// Loads `path` (or `hookgate.toml` if present) with the `HOOKGATE_*`
    /// environment layered on top, and `DATABASE_URL` / `REDIS_URL` as
    /// fallbacks for unset storage URLs.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_for(path, Needs::Everything)
    }

    /// [`Config::load`] for a command that needs only part of the config.
    pub fn load_for(path: Option<&Path>, needs: Needs) -> Result<Self, ConfigError> {
        let (file, origin) = match path {
            Some(p) => (Some(p.to_path_buf()), p.display().to_string()),
            None if Path::new(DEFAULT_FILE).exists() => {
                (Some(PathBuf::from(DEFAULT_FILE)), DEFAULT_FILE.to_owned())
            }
            None => (None, "(built-in defaults)".to_owned()),
        };
        let mut fig = Figment::new();
        if let Some(f) = &file {
            if !f.exists() {
                return Err(ConfigError {
                    origin,
                    problems: vec![(String::new(), "config file not found".into())],
                });
            }
            fig = fig.merge(Toml::file_exact(f));
        }
        // Only `HOOKGATE_SECTION__KEY` variables are config; plain
        // `HOOKGATE_X` names are left for `env:` secret references.
        fig = fig.merge(
            Env::prefixed("HOOKGATE_")
                .filter(|k| k.as_str().contains("__"))
                .split("__"),
        );
        let mut raw: RawConfig = fig.extract().map_err(|e| figment_error(&origin, e))?;
        let text = file
            .as_deref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .unwrap_or_default();
        if raw.storage.database_url.is_none() && std::env::var_os("DATABASE_URL").is_some() {
            raw.storage.database_url = Some("env:DATABASE_URL".into());
        }
        if raw.storage.redis_url.is_none() && std::env::var_os("REDIS_URL").is_some() {
            raw.storage.redis_url = Some("env:REDIS_URL".into());
        }
        // Absolute, so the ledger path the startup line prints is the one
        // opened whatever the working directory.
        let base = file
            .as_deref()
            .map(|f| std::path::absolute(f).unwrap_or_else(|_| f.to_path_buf()))
            .and_then(|f| f.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        let mut config = validate::config(raw, &origin, &base, needs)?;
        config.warnings.extend(unused_env_vars(&text));
        config.path = file;
        config.digest = digest(&text);
        Ok(config)
    }

    /// Parses a TOML string without consulting the environment (tests,
    /// embedding). `base_dir` anchors `file:` secrets and `providers_dir`.
    pub fn from_toml_str(text: &str, base_dir: &Path) -> Result<Self, ConfigError> {
        let origin = "(inline config)".to_owned();
        let raw: RawConfig = Figment::from(Toml::string(text))
            .extract()
            .map_err(|e| figment_error(&origin, e))?;
        let mut config = validate::config(raw, &origin, base_dir, Needs::Everything)?;
        config.digest = digest(text);
        Ok(config)
    }

    /// The cache TTL for a source: never longer than its dedup window, so the
    /// cache cannot call an id a duplicate after the ledger forgot it.
    pub fn cache_ttl(&self, source: &Source) -> Duration {
        self.dedup.cache_ttl.min(source.dedup_window)
    }
}

/// The short digest of a config file's text: enough to tell two loaded
/// configs apart in a log or a probe, not a security measure.
pub fn digest(text: &str) -> String {
    use sha2::Digest;
    let full = hex::encode(sha2::Sha256::digest(text.as_bytes()));
    full[..12].to_owned()
}

/// `HOOKGATE_*` variables that are neither `SECTION__KEY` overrides,
/// `HOOKGATE_CONFIG`, nor named by an `env:` reference in the config text:
/// most likely typos.
fn unused_env_vars(config_text: &str) -> Vec<String> {
    std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| k.starts_with("HOOKGATE_") && !k.contains("__") && k != "HOOKGATE_CONFIG")
        .filter(|k| !config_text.contains(&format!("env:{k}")))
        .map(|k| format!("environment variable `{k}` is not used by this config"))
        .collect()
}

fn figment_error(origin: &str, e: figment::Error) -> ConfigError {
    let problems = e
        .into_iter()
        .map(|e| {
            let key = e.path.join(".");
            let msg = match &e.kind {
                figment::error::Kind::UnknownField(_, expected) => {
                    format!("unknown key; expected one of: {}", expected.join(", "))
                }
                // Never the value itself: `secrets = "whsec_…"` (a string
                // where a list belongs) would print the secret.
                figment::error::Kind::InvalidType(actual, expected) => {
                    format!(
                        "invalid type: found {}, expected {expected}",
                        kind_of(actual)
                    )
                }
                figment::error::Kind::InvalidValue(actual, expected) => {
                    format!(
                        "invalid value: found {}, expected {expected}",
                        kind_of(actual)
                    )
                }
                figment::error::Kind::UnknownVariant(_, expected) => {
                    format!("unknown value; expected one of: {}", expected.join(", "))
                }
                kind => kind.to_string(),
            };
            let from = e
                .metadata
                .as_ref()
                .map(|m| m.name.to_string())
                .filter(|n| n.contains("environment"))
                .map(|n| format!(" (from {n})"))
                .unwrap_or_default();
            (key, format!("{msg}{from}"))
        })
        .collect();
    ConfigError {
        origin: origin.to_owned(),
        problems,
    }
}

/// What kind of value `actual` is, without the value.
fn kind_of(actual: &figment::error::Actual) -> &'static str {
    use figment::error::Actual;
    match actual {
        Actual::Bool(_) => "a boolean",
        Actual::Unsigned(_) | Actual::Signed(_) => "an integer",
        Actual::Float(_) => "a float",
        Actual::Char(_) | Actual::Str(_) => "a string",
        Actual::Bytes(_) => "bytes",
        Actual::Unit | Actual::Option => "an empty value",
        Actual::Seq => "a list",
        Actual::Map | Actual::NewtypeStruct | Actual::StructVariant => "a table",
        _ => "another kind of value",
    }
}

#[cfg(test)]
mod hardening_tests;
#[cfg(test)]
mod reload_tests;
#[cfg(test)]
mod tests;
