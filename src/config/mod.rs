//! Configuration: embedded defaults → TOML file → `HOOKGATE_*` environment,
//! then validated into typed values.
//!
//! Rule: every error names the file and the key; no secret value is ever part
//! of an error, `Debug` output or the `check-config` summary.

pub mod raw;
pub mod redis_url;

use crate::primitives::secret::Secret;
use crate::verify::client_ip::parse_net;
use crate::verify::provider::{Provider, Registry};
use crate::verify::scheme::SigningKey;
use crate::verify::schemes::{Scheme, braintree, paypal, plaid_keys};
use figment::Figment;
use figment::providers::{Env, Format, Toml};
use ipnet::IpNet;
use raw::{LogFormat, RawConfig};
use redis_url::RedisTopology;
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Default config file name, looked up in the working directory.
pub const DEFAULT_FILE: &str = "hookgate.toml";

/// The validated configuration every component is built from.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the config came from (for messages).
    pub origin: String,
    pub server: Server,
    pub storage: Storage,
    pub dedup: Dedup,
    pub delivery: Delivery,
    pub sources: BTreeMap<String, Arc<Source>>,
    pub targets: BTreeMap<String, Arc<Target>>,
    pub providers: Registry,
    /// Non-fatal findings (e.g. `HOOKGATE_*` variables nothing reads).
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Server {
    pub listen: SocketAddr,
    pub max_body_bytes: usize,
    pub admin_token: Option<Secret>,
    pub log_format: LogFormat,
    pub log_level: String,
    pub request_timeout: Duration,
    pub shutdown_grace: Duration,
    /// Proxies whose `X-Forwarded-For` names the client.
    pub trusted_proxies: Vec<IpNet>,
}

#[derive(Debug, Clone)]
pub struct Storage {
    pub database: Database,
    pub redis_url: Option<Secret>,
    pub migrate: bool,
    pub key_prefix: String,
    pub cache_capacity: u64,
    pub redis_timeout: Duration,
    pub max_connections: Option<u32>,
}

/// The durable ledger, chosen by URL scheme.
#[derive(Debug, Clone)]
pub enum Database {
    Sqlite(String),
    /// The URL may hold a password, so it is a secret.
    Postgres(Secret),
}

impl Database {
    fn parse(url: Secret) -> Result<Self, String> {
        let text = url.expose();
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            Ok(Self::Postgres(url))
        } else if text.starts_with("sqlite:") {
            Ok(Self::Sqlite(text.to_owned()))
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
            Self::Sqlite(u) => u.clone(),
            Self::Postgres(u) => redact_url(u.expose()),
        }
    }
}

/// Replaces the `user:password@` part of a URL with `***@`.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}***{}", &url[..s + 3], &url[at..]),
        _ => url.to_owned(),
    }
}

#[derive(Debug, Clone)]
pub struct Dedup {
    pub claim_ttl: Duration,
    pub cache_ttl: Duration,
    pub inflight_wait: Duration,
    pub purge_interval: Duration,
    pub stats_flush_interval: Duration,
}

#[derive(Debug, Clone)]
pub struct Delivery {
    pub enabled: bool,
    pub max_in_flight: usize,
    pub poll_interval: Duration,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    pub lease: Duration,
}

/// One provider endpoint: `POST /webhooks/<name>`.
#[derive(Debug)]
pub struct Source {
    pub name: String,
    pub provider: Arc<Provider>,
    /// Decoded verification keys; several = rotation.
    pub keys: Vec<SigningKey>,
    pub tolerance: Duration,
    pub dedup_window: Duration,
    pub targets: Vec<String>,
    pub public_url: Option<String>,
    /// Client address allowlist; empty = everyone.
    pub allow_ips: Vec<IpNet>,
    /// PayPal sources: webhook id and certificate handling.
    pub paypal: Option<Arc<paypal::Settings>>,
    /// Plaid sources: key fetching (credentials, host) or pinned keys.
    pub plaid: Option<Arc<plaid_keys::Settings>>,
    /// Braintree sources: the public key for the `bt_challenge` GET.
    pub braintree: Option<braintree::Settings>,
}

/// An internal endpoint events are forwarded to.
#[derive(Debug)]
pub struct Target {
    pub name: String,
    pub url: String,
    pub timeout: Duration,
    pub max_attempts: u32,
    /// Standard Webhooks key the gateway signs forwards with.
    pub signing_key: Option<SigningKey>,
    pub concurrency: usize,
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
        let base = file
            .as_deref()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let mut config = Self::validate(raw, &origin, &base)?;
        config.warnings.extend(unused_env_vars(&text));
        Ok(config)
    }

    /// Parses a TOML string without consulting the environment (tests,
    /// embedding). `base_dir` anchors `file:` secrets and `providers_dir`.
    pub fn from_toml_str(text: &str, base_dir: &Path) -> Result<Self, ConfigError> {
        let origin = "(inline config)".to_owned();
        let raw: RawConfig = Figment::from(Toml::string(text))
            .extract()
            .map_err(|e| figment_error(&origin, e))?;
        Self::validate(raw, &origin, base_dir)
    }

    fn validate(raw: RawConfig, origin: &str, base: &Path) -> Result<Self, ConfigError> {
        let mut v = Validator {
            base,
            problems: Vec::new(),
        };
        let mut providers = Registry::builtin();
        if let Some(dir) = &raw.server.providers_dir
            && let Err(e) = providers.load_dir(&base.join(dir))
        {
            v.problem("server.providers_dir", e.to_string());
        }

        let listen = raw.server.listen.parse().unwrap_or_else(|_| {
            v.problem(
                "server.listen",
                format!(
                    "`{}` is not an address like 127.0.0.1:8080",
                    raw.server.listen
                ),
            );
            SocketAddr::from(([127, 0, 0, 1], 8080))
        });
        if raw.server.max_body_bytes == 0 {
            v.problem("server.max_body_bytes", "must be greater than 0".into());
        }
        let admin_token = raw
            .server
            .admin_token
            .as_deref()
            .and_then(|r| v.secret("server.admin_token", r));
        let mut trusted_proxies = Vec::new();
        for (i, t) in raw.server.trusted_proxies.iter().enumerate() {
            match parse_net(t) {
                Ok(n) => trusted_proxies.push(n),
                Err(e) => v.problem(&format!("server.trusted_proxies[{i}]"), e),
            }
        }
        let server = Server {
            trusted_proxies,
            listen,
            max_body_bytes: raw.server.max_body_bytes as usize,
            admin_token,
            log_format: raw.server.log_format,
            log_level: raw.server.log_level,
            request_timeout: raw.server.request_timeout.0,
            shutdown_grace: raw.server.shutdown_grace.0,
        };

        let database = match raw.storage.database_url.as_deref() {
            None => Some(Database::Sqlite("sqlite://hookgate.db".into())),
            Some(r) => match Secret::resolve_optional(r, base) {
                Ok(None) => Some(Database::Sqlite("sqlite://hookgate.db".into())),
                Ok(Some(url)) => Database::parse(url)
                    .map_err(|e| v.problem("storage.database_url", e))
                    .ok(),
                Err(e) => {
                    v.problem("storage.database_url", e.to_string());
                    None
                }
            },
        };
        let redis_url = match raw.storage.redis_url.as_deref() {
            None => None,
            Some(r) => match Secret::resolve_optional(r, base) {
                Ok(Some(url)) => match RedisTopology::parse(url.expose()) {
                    Ok(_) => Some(url),
                    Err(e) => {
                        v.problem("storage.redis_url", e);
                        None
                    }
                },
                Ok(None) => None,
                Err(e) => {
                    v.problem("storage.redis_url", e.to_string());
                    None
                }
            },
        };
        if !valid_name(&raw.storage.key_prefix) {
            v.problem(
                "storage.key_prefix",
                "use letters, digits, `-` and `_`".into(),
            );
        }
        let storage = Storage {
            database: database.unwrap_or(Database::Sqlite("sqlite://hookgate.db".into())),
            redis_url,
            migrate: raw.storage.migrate,
            key_prefix: raw.storage.key_prefix,
            cache_capacity: raw.storage.cache_capacity,
            redis_timeout: raw.storage.redis_timeout.0,
            max_connections: raw.storage.max_connections,
        };
        let dedup = Dedup {
            claim_ttl: raw.dedup.claim_ttl.0,
            cache_ttl: raw.dedup.cache_ttl.0,
            inflight_wait: raw.dedup.inflight_wait.0,
            purge_interval: raw.dedup.purge_interval.0,
            stats_flush_interval: raw.dedup.stats_flush_interval.0,
        };
        if dedup.claim_ttl < Duration::from_millis(100) {
            v.problem("dedup.claim_ttl", "must be at least 100ms".into());
        }
        let delivery = Delivery {
            enabled: raw.delivery.enabled,
            max_in_flight: raw.delivery.max_in_flight.max(1),
            poll_interval: raw.delivery.poll_interval.0,
            backoff_base: raw.delivery.backoff_base.0,
            backoff_max: raw.delivery.backoff_max.0,
            lease: raw.delivery.lease.0,
        };

        let mut targets = BTreeMap::new();
        for (name, t) in raw.targets {
            let key = format!("targets.{name}");
            if !valid_name(&name) {
                v.problem(&key, "target names use letters, digits, `-` and `_`".into());
            }
            if !(t.url.starts_with("http://") || t.url.starts_with("https://")) {
                v.problem(
                    &format!("{key}.url"),
                    "must be an http:// or https:// URL".into(),
                );
            }
            if t.max_attempts == 0 {
                v.problem(&format!("{key}.max_attempts"), "must be at least 1".into());
            }
            let signing_key = t.signing_secret.as_deref().and_then(|r| {
                let s = v.secret(&format!("{key}.signing_secret"), r)?;
                Some(SigningKey::standard_webhooks(&s))
            });
            targets.insert(
                name.clone(),
                Arc::new(Target {
                    name,
                    url: t.url,
                    timeout: t.timeout.0,
                    max_attempts: t.max_attempts,
                    signing_key,
                    concurrency: t.concurrency.max(1),
                }),
            );
        }

        let mut sources = BTreeMap::new();
        let mut warnings = Vec::new();
        for (name, s) in raw.sources {
            let key = format!("sources.{name}");
            if !valid_name(&name) {
                v.problem(&key, "source names use letters, digits, `-` and `_`".into());
            }
            let Some(base) = providers.get(&s.provider) else {
                v.problem(
                    &format!("{key}.provider"),
                    format!(
                        "unknown provider `{}` (known: {})",
                        s.provider,
                        providers.names().join(", ")
                    ),
                );
                continue;
            };
            let provider = if s.signature.is_some() || s.event_id.is_some() {
                match base.customized(s.signature.as_ref(), s.event_id.as_ref()) {
                    Ok(p) => Arc::new(p),
                    Err(e) => {
                        let k = if s.signature.is_some() {
                            "signature"
                        } else {
                            "event_id"
                        };
                        v.problem(&format!("{key}.{k}"), e);
                        continue;
                    }
                }
            } else {
                base
            };
            if let Some(why) = &provider.incomplete {
                v.problem(&format!("{key}.signature"), why.clone());
            }
            if s.secrets.is_empty() && provider.needs_secret() {
                v.problem(
                    &format!("{key}.secrets"),
                    "at least one secret is required".into(),
                );
            }
            let mut keys = Vec::new();
            for (i, r) in s.secrets.iter().enumerate() {
                let k = format!("{key}.secrets[{i}]");
                if let Some(secret) = v.secret(&k, r) {
                    match provider.signing_key(&secret) {
                        Ok(sk) => keys.push(sk),
                        Err(e) => v.problem(&k, e),
                    }
                }
            }
            for t in &s.targets {
                if !targets.contains_key(t) {
                    v.problem(
                        &format!("{key}.targets"),
                        format!("unknown target `{t}` (define it under [targets.{t}])"),
                    );
                }
            }
            if provider.needs_public_url() && s.public_url.is_none() {
                v.problem(
                    &format!("{key}.public_url"),
                    format!("provider `{}` signs the URL: set public_url", provider.name),
                );
            }
            let mut allow_ips = Vec::new();
            for (i, a) in s.allow_ips.iter().enumerate() {
                match parse_net(a) {
                    Ok(n) => allow_ips.push(n),
                    Err(e) => v.problem(&format!("{key}.allow_ips[{i}]"), e),
                }
            }
            if provider.needs_allow_ips() && s.allow_ips.is_empty() {
                v.problem(
                    &format!("{key}.allow_ips"),
                    format!(
                        "provider `{}` sends unsigned requests: list the provider's addresses in allow_ips",
                        provider.name
                    ),
                );
            }
            let paypal = match (&s.paypal, provider.signature.scheme) {
                (Some(p), Scheme::Paypal) => v.paypal(&format!("{key}.paypal"), p),
                (None, Scheme::Paypal) => {
                    v.problem(
                        &format!("{key}.paypal"),
                        "set [sources.<name>.paypal] webhook_id".into(),
                    );
                    None
                }
                (Some(_), _) => {
                    v.problem(
                        &format!("{key}.paypal"),
                        format!("provider `{}` is not PayPal", provider.name),
                    );
                    None
                }
                (None, _) => None,
            };
            let plaid = match (&s.plaid, provider.signature.scheme) {
                (Some(p), Scheme::Plaid) => v.plaid(&format!("{key}.plaid"), p),
                (None, Scheme::Plaid) => {
                    v.problem(
                        &format!("{key}.plaid"),
                        "set [sources.<name>.plaid] client_id and secret (or pin keys)".into(),
                    );
                    None
                }
                (Some(_), _) => {
                    v.problem(
                        &format!("{key}.plaid"),
                        format!("provider `{}` is not Plaid", provider.name),
                    );
                    None
                }
                (None, _) => None,
            };
            let braintree = match (&s.braintree, provider.signature.scheme) {
                (Some(b), Scheme::Braintree) => braintree::Settings::new(b.public_key.clone())
                    .map_err(|e| v.problem(&format!("{key}.braintree.public_key"), e))
                    .ok(),
                (None, Scheme::Braintree) => {
                    warnings.push(format!(
                        "`{key}.braintree.public_key` is unset: Braintree's bt_challenge GET gets 404"
                    ));
                    None
                }
                (Some(_), _) => {
                    v.problem(
                        &format!("{key}.braintree"),
                        format!("provider `{}` is not Braintree", provider.name),
                    );
                    None
                }
                (None, _) => None,
            };
            sources.insert(
                name.clone(),
                Arc::new(Source {
                    allow_ips,
                    paypal,
                    plaid,
                    braintree,
                    tolerance: s.tolerance.map_or(provider.default_tolerance(), |d| d.0),
                    name,
                    provider,
                    keys,
                    dedup_window: s.dedup_window.0,
                    targets: s.targets,
                    public_url: s.public_url,
                }),
            );
        }

        if v.problems.is_empty() {
            Ok(Self {
                origin: origin.to_owned(),
                server,
                storage,
                dedup,
                delivery,
                sources,
                targets,
                providers,
                warnings,
            })
        } else {
            Err(ConfigError {
                origin: origin.to_owned(),
                problems: v.problems,
            })
        }
    }

    /// The cache TTL for a source: never longer than its dedup window, so the
    /// cache cannot call an id a duplicate after the ledger forgot it.
    pub fn cache_ttl(&self, source: &Source) -> Duration {
        self.dedup.cache_ttl.min(source.dedup_window)
    }
}

struct Validator<'a> {
    base: &'a Path,
    problems: Vec<(String, String)>,
}

impl Validator<'_> {
    fn problem(&mut self, key: &str, msg: String) {
        self.problems.push((key.to_owned(), msg));
    }

    fn paypal(&mut self, key: &str, raw: &raw::RawPaypal) -> Option<Arc<paypal::Settings>> {
        let webhook_id = self.secret(&format!("{key}.webhook_id"), &raw.webhook_id)?;
        let cert = match &raw.cert {
            Some(r) => Some(self.secret(&format!("{key}.cert"), r)?),
            None => None,
        };
        paypal::Settings::new(
            webhook_id.expose().to_owned(),
            cert.as_ref().map(Secret::expose),
            raw.cert_hosts.clone(),
        )
        .map(Arc::new)
        .map_err(|e| self.problem(key, e))
        .ok()
    }

    fn plaid(&mut self, key: &str, raw: &raw::RawPlaid) -> Option<Arc<plaid_keys::Settings>> {
        let environment = plaid_keys::Environment::parse(&raw.environment)
            .map_err(|e| self.problem(&format!("{key}.environment"), e))
            .ok()?;
        let client_id = match &raw.client_id {
            Some(r) => Some(self.secret(&format!("{key}.client_id"), r)?),
            None => None,
        };
        let secret = match &raw.secret {
            Some(r) => Some(self.secret(&format!("{key}.secret"), r)?),
            None => None,
        };
        let credentials = match (client_id, secret) {
            (Some(client_id), Some(secret)) => Some(plaid_keys::Credentials { client_id, secret }),
            (None, None) => None,
            (Some(_), None) => {
                self.problem(
                    &format!("{key}.secret"),
                    "set together with client_id".into(),
                );
                return None;
            }
            (None, Some(_)) => {
                self.problem(
                    &format!("{key}.client_id"),
                    "set together with secret".into(),
                );
                return None;
            }
        };
        let mut keys = Vec::new();
        for (i, r) in raw.keys.iter().enumerate() {
            keys.push(
                self.secret(&format!("{key}.keys[{i}]"), r)?
                    .expose()
                    .to_owned(),
            );
        }
        plaid_keys::Settings::new(credentials, environment, &keys, raw.api_base.as_deref())
            .map(Arc::new)
            .map_err(|e| self.problem(key, e))
            .ok()
    }

    fn secret(&mut self, key: &str, reference: &str) -> Option<Secret> {
        Secret::resolve(reference, self.base)
            .map_err(|e| self.problem(key, e.to_string()))
            .ok()
    }
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

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
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

#[cfg(test)]
mod tests;
