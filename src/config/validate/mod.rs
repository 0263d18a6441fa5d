//! Validation of a [`RawConfig`] into a [`Config`], one section at a time.
//!
//! Rule: every problem is collected (not just the first) under the key path
//! it came from, in file order; no message carries a secret value. What a
//! scheme's own `[sources.<name>.<scheme>]` table means is checked by that
//! scheme (`verify::source::settings_from`), not here.

use super::raw::{self, RawConfig};
use super::redis_url::RedisTopology;
use super::{Config, ConfigError, Database, Dedup, Delivery, Needs, Server, Storage};
use crate::primitives::secret::Secret;
use crate::target::route::{Rule, parse_order_by};
use crate::target::{Check, Target};
use crate::verify::registry::Registry;
use crate::verify::schemes::Cover;
use crate::verify::source::Resolve;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

mod alerts;
mod sources;

/// Shortest `admin_token` accepted.
const MIN_ADMIN_TOKEN_CHARS: usize = 16;
use sources::{nets, sources, withhold};

/// Checks every section of `raw`; `base` anchors `file:` secrets and
/// `providers_dir`.
pub(super) fn config(
    raw: RawConfig,
    origin: &str,
    base: &Path,
    needs: Needs,
) -> Result<Config, ConfigError> {
    let mut v = Validator {
        base,
        needs,
        problems: Vec::new(),
        warnings: Vec::new(),
    };
    let mut providers = Registry::builtin();
    if let Some(dir) = &raw.server.providers_dir
        && let Err(e) = providers.load_dir(&base.join(dir))
    {
        v.problem("server.providers_dir", e.to_string());
    }
    let server = server(raw.server, &mut v);
    let storage = storage(raw.storage, &mut v);
    let dedup = dedup(raw.dedup, &mut v);
    let traces = traces(raw.telemetry, &mut v);
    let refused = refused(raw.refused, &mut v);
    let delivery = delivery(raw.delivery, &mut v);
    let mut targets = targets(raw.targets, &delivery, &mut v);
    let mut raw_sources = raw.sources;
    let reconcile = reconcile(&mut raw_sources, &providers, &mut v);
    let sources = sources(raw_sources, &providers, &targets, &mut v);
    withhold(&sources, &mut targets);
    // After the sources: no source may route its events to a sink's target.
    let alerts = alerts::alerts(raw.alerts, raw.alerting, &delivery, &mut targets, &mut v);
    let targets = targets
        .into_iter()
        .map(|(name, t)| (name, Arc::new(t)))
        .collect();
    let apis = super::apis::validate(raw.apis, server.max_body_bytes, valid_name, &mut v.problems);
    if !apis.is_empty() && server.admin_listen.is_none() {
        // Proxied pages are served from the public listener's origin; the
        // console keeps the admin token in that origin's storage. Refusing
        // to start is louder than serving the admin routes nowhere.
        v.problem(
            "server.admin_listen",
            "required when [apis.*] is set: the console and admin routes must not share \
             an origin with proxied answers (e.g. admin_listen = \"127.0.0.1:9090\")"
                .into(),
        );
    }
    for (name, api) in &apis {
        if api.max_body_bytes > server.max_buffered_body_bytes_per_client {
            v.problem(
                &format!("apis.{name}.max_body_bytes"),
                "must not exceed server.max_buffered_body_bytes_per_client".into(),
            );
        }
    }
    operator_warnings(&server, &sources, &targets, &mut v);

    if v.problems.is_empty() {
        Ok(Config {
            origin: origin.to_owned(),
            path: None,
            digest: String::new(),
            server,
            storage,
            dedup,
            delivery,
            sources,
            targets,
            apis,
            reconcile,
            traces,
            refused,
            alerts,
            providers,
            warnings: v.warnings,
        })
    } else {
        Err(ConfigError {
            origin: origin.to_owned(),
            problems: v.problems,
        })
    }
}

/// Settings that load but are probably not what the operator meant.
fn operator_warnings(
    server: &Server,
    sources: &BTreeMap<String, Arc<crate::verify::source::Source>>,
    targets: &BTreeMap<String, Arc<Target>>,
    v: &mut Validator<'_>,
) {
    // A type read from outside the signature is the sender's to choose:
    // replayed with made-up types, each one would make its own stream,
    // subject or routing key at the broker.
    for s in sources.values() {
        let signed = crate::verify::signedness::of_source(s);
        let Some(fact) = signed.event_type.filter(|f| f.cover != Cover::Signed) else {
            continue;
        };
        for t in s.targets.iter().filter_map(|n| targets.get(n)) {
            if let Some(template) = t.kind.named_by_type() {
                v.warning(format!(
                    "`targets.{}` names by `{{type}}` (`{template}`), and `sources.{}` reads its event type from {}: \
                     anyone replaying a signed request with made-up types makes a new name each time; \
                     name by `{{source}}` or route by type instead",
                    t.name,
                    s.name,
                    fact.weakest.join(", ")
                ));
            }
        }
    }
    for s in sources.values().filter(|s| s.targets.is_empty()) {
        v.warning(format!(
            "`sources.{}.targets` is empty: its events are verified, deduplicated and stored, but forwarded nowhere",
            s.name
        ));
    }
    // A command on the ledger alone may have left an unresolved token unset.
    if server.admin_token.is_none() && v.needs == Needs::Everything {
        v.warning(
            "`server.admin_token` is not set: /stats, /admin/* and the console's API refuse every request"
                .into(),
        );
    }
}

/// Takes each source's `reconcile` table out of `raw` and validates it
/// (the source itself is checked by `sources`).
fn reconcile(
    raw: &mut BTreeMap<String, raw::RawSource>,
    providers: &Registry,
    v: &mut Validator<'_>,
) -> BTreeMap<String, Arc<super::reconcile::Reconcile>> {
    let mut out = BTreeMap::new();
    for (name, s) in raw.iter_mut() {
        let Some(r) = s.reconcile.take() else {
            continue;
        };
        // A customised provider keeps its base's name; an unknown one is
        // reported by `sources`.
        let Some(provider) = providers.get(&s.provider) else {
            continue;
        };
        let mut problems = Vec::new();
        let mut secrets = Vec::new();
        let validated = super::reconcile::validate(
            name,
            &provider.name,
            r,
            &mut |k, reference| {
                let got = Secret::resolve(reference, v.base);
                match got {
                    Ok(s) => Some(s),
                    Err(_) if v.needs == Needs::Ledger => None,
                    Err(e) => {
                        secrets.push((k.to_owned(), e.to_string()));
                        None
                    }
                }
            },
            &mut |k, msg| problems.push((k.to_owned(), msg)),
        );
        for (k, msg) in secrets.into_iter().chain(problems) {
            v.problem(&k, msg);
        }
        if let Some(r) = validated {
            out.insert(name.clone(), Arc::new(r));
        }
    }
    out
}

fn server(raw: raw::RawServer, v: &mut Validator<'_>) -> Server {
    let listen = raw.listen.parse().unwrap_or_else(|_| {
        v.problem(
            "server.listen",
            format!("`{}` is not an address like 127.0.0.1:8080", raw.listen),
        );
        SocketAddr::from(([127, 0, 0, 1], 8080))
    });
    if raw.max_body_bytes == 0 {
        v.problem("server.max_body_bytes", "must be greater than 0".into());
    }
    let admin_token = raw
        .admin_token
        .as_deref()
        .and_then(|r| v.secret("server.admin_token", r));
    if admin_token
        .as_ref()
        .is_some_and(|t| t.expose().chars().count() < MIN_ADMIN_TOKEN_CHARS)
    {
        // The length only, never the value.
        v.problem(
            "server.admin_token",
            format!(
                "must be at least {MIN_ADMIN_TOKEN_CHARS} characters (e.g. `openssl rand -hex 32`): \
                 a short token can be guessed"
            ),
        );
    }
    let tokens = tokens(&raw.tokens, admin_token.is_some(), v);
    let trusted_proxies = nets(&raw.trusted_proxies, "server.trusted_proxies", v);
    let admin_listen = raw.admin_listen.as_deref().and_then(|a| {
        let parsed = a.parse::<SocketAddr>().map_err(|_| {
            v.problem(
                "server.admin_listen",
                format!("`{a}` is not an address like 127.0.0.1:9090"),
            )
        });
        let addr = parsed.ok()?;
        if addr == listen && addr.port() != 0 {
            v.problem(
                "server.admin_listen",
                "must differ from server.listen".into(),
            );
        }
        Some(addr)
    });
    if raw.max_connections == 0 {
        v.problem("server.max_connections", "must be at least 1".into());
    }
    if let Err(e) = tracing_subscriber::EnvFilter::try_new(&raw.log_level) {
        v.problem(
            "server.log_level",
            format!("`{}` is not a log filter: {e}", raw.log_level),
        );
    }
    let max_connections_per_client = match raw.max_connections_per_client {
        Some(0) => {
            v.problem(
                "server.max_connections_per_client",
                "must be at least 1".into(),
            );
            1
        }
        Some(n) => n.min(raw.max_connections.max(1)),
        None => (raw.max_connections / 8).max(1),
    };
    for (key, d) in [
        ("server.request_timeout", raw.request_timeout.0),
        ("server.header_read_timeout", raw.header_read_timeout.0),
        ("server.keep_alive_timeout", raw.keep_alive_timeout.0),
        ("server.idle_timeout", raw.idle_timeout.0),
    ] {
        v.positive(key, d);
    }
    let tls = match (&raw.tls_cert, &raw.tls_key) {
        (None, None) => None,
        (Some(cert), Some(key)) => {
            let (cert, key) = (v.base.join(cert), v.base.join(key));
            for (k, f) in [("server.tls_cert", &cert), ("server.tls_key", &key)] {
                if !f.is_file() {
                    v.problem(k, format!("file `{}` not found", f.display()));
                }
            }
            Some(super::Tls { cert, key })
        }
        (Some(_), None) => {
            v.problem("server.tls_key", "required with server.tls_cert".into());
            None
        }
        (None, Some(_)) => {
            v.problem("server.tls_cert", "required with server.tls_key".into());
            None
        }
    };
    if raw.max_buffered_body_bytes == 0 {
        v.problem(
            "server.max_buffered_body_bytes",
            "must be greater than 0".into(),
        );
    }
    if raw.max_buffered_answer_bytes == 0 {
        v.problem(
            "server.max_buffered_answer_bytes",
            "must be greater than 0".into(),
        );
    }
    let per_client_body = raw
        .max_buffered_body_bytes_per_client
        .unwrap_or((raw.max_buffered_body_bytes / 4).max(raw.max_body_bytes))
        .min(raw.max_buffered_body_bytes);
    // A body of the largest accepted size must fit in one client's share,
    // or no such body could ever be read.
    if per_client_body < raw.max_body_bytes {
        v.problem(
            "server.max_buffered_body_bytes_per_client",
            format!(
                "must be at least server.max_body_bytes ({}), and so must server.max_buffered_body_bytes",
                raw.max_body_bytes
            ),
        );
    }
    Server {
        tls,
        admin_listen,
        max_connections: raw.max_connections,
        max_connections_per_client,
        header_read_timeout: raw.header_read_timeout.0,
        keep_alive_timeout: raw.keep_alive_timeout.0,
        idle_timeout: raw.idle_timeout.0,
        max_buffered_body_bytes: raw.max_buffered_body_bytes as usize,
        max_buffered_body_bytes_per_client: per_client_body as usize,
        max_buffered_answer_bytes: raw.max_buffered_answer_bytes as usize,
        protect_metrics: raw.protect_metrics,
        trusted_proxies,
        listen,
        max_body_bytes: raw.max_body_bytes as usize,
        admin_token,
        tokens,
        log_format: raw.log_format,
        log_level: raw.log_level,
        request_timeout: raw.request_timeout.0,
        shutdown_grace: raw.shutdown_grace.0,
    }
}

/// `[server.tokens.<name>]`: names of letters, digits, `-` and `_`; at
/// least one known scope; secrets as long as `admin_token`'s and distinct
/// from every other token's (compared, never shown).
fn tokens(
    raw: &BTreeMap<String, raw::RawToken>,
    has_admin_token: bool,
    v: &mut Validator<'_>,
) -> Vec<super::AdminToken> {
    let mut out: Vec<super::AdminToken> = Vec::new();
    for (name, t) in raw {
        let key = format!("server.tokens.{name}");
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            v.problem(&key, "a token name is letters, digits, `-` and `_`".into());
        }
        if has_admin_token && name == super::DEFAULT_TOKEN_NAME {
            v.problem(
                &key,
                format!(
                    "`{}` is the name of server.admin_token; choose another name",
                    super::DEFAULT_TOKEN_NAME
                ),
            );
        }
        let mut scopes = Vec::new();
        for s in &t.scopes {
            match super::Scope::parse(s) {
                Some(sc) if !scopes.contains(&sc) => scopes.push(sc),
                Some(_) => {}
                None => v.problem(
                    &format!("{key}.scopes"),
                    format!("unknown scope `{s}` (known: admin, listen)"),
                ),
            }
        }
        if t.scopes.is_empty() {
            v.problem(
                &format!("{key}.scopes"),
                "name at least one scope (admin, listen)".into(),
            );
        }
        let Some(secret) = v.secret(&format!("{key}.secret"), &t.secret) else {
            continue;
        };
        if secret.expose().chars().count() < MIN_ADMIN_TOKEN_CHARS {
            v.problem(
                &format!("{key}.secret"),
                format!("must be at least {MIN_ADMIN_TOKEN_CHARS} characters: a short token can be guessed"),
            );
        }
        if out.iter().any(|o| o.secret.expose() == secret.expose()) {
            v.problem(
                &format!("{key}.secret"),
                "is the same as another token's: each token needs its own secret".into(),
            );
        }
        out.push(super::AdminToken {
            name: name.clone(),
            secret,
            scopes,
        });
    }
    out
}

fn storage(raw: raw::RawStorage, v: &mut Validator<'_>) -> Storage {
    let base = v.base;
    let default = || Database::parse(Secret::new("sqlite://hookgate.db"), base).ok();
    let database = match raw.database_url.as_deref() {
        None => default(),
        Some(r) => match Secret::resolve_optional(r, v.base) {
            Ok(None) => default(),
            Ok(Some(url)) => Database::parse(url, v.base)
                .map_err(|e| v.problem("storage.database_url", e))
                .ok(),
            Err(e) => {
                v.problem("storage.database_url", e.to_string());
                None
            }
        },
    };
    let redis_url = match raw.redis_url.as_deref() {
        None => None,
        Some(r) => match Secret::resolve_optional(r, v.base) {
            Ok(Some(url)) => match RedisTopology::parse(url.expose()) {
                Ok(_) => Some(url),
                Err(e) => {
                    v.problem("storage.redis_url", e);
                    None
                }
            },
            Ok(None) => None,
            // Commands on the ledger alone never open the cache.
            Err(_) if v.needs == Needs::Ledger => None,
            Err(e) => {
                v.problem("storage.redis_url", e.to_string());
                None
            }
        },
    };
    if !valid_name(&raw.key_prefix) {
        v.problem(
            "storage.key_prefix",
            "use letters, digits, `-` and `_`".into(),
        );
    }
    v.positive("storage.statement_timeout", raw.statement_timeout.0);
    Storage {
        database: database.unwrap_or(Database::Sqlite("sqlite://hookgate.db".into())),
        redis_url,
        migrate: raw.migrate,
        key_prefix: raw.key_prefix,
        cache_capacity: raw.cache_capacity,
        near_cache_capacity: raw.near_cache_capacity,
        redis_timeout: raw.redis_timeout.0,
        max_connections: raw.max_connections,
        statement_timeout: raw.statement_timeout.0,
    }
}

fn dedup(raw: raw::RawDedup, v: &mut Validator<'_>) -> Dedup {
    let dedup = Dedup {
        claim_ttl: raw.claim_ttl.0,
        cache_ttl: raw.cache_ttl.0,
        inflight_wait: raw.inflight_wait.0,
        purge_interval: raw.purge_interval.0,
        stats_flush_interval: raw.stats_flush_interval.0,
    };
    if dedup.claim_ttl < Duration::from_millis(100) {
        v.problem("dedup.claim_ttl", "must be at least 100ms".into());
    }
    // Redis refuses `PX 0`; a zero interval would spin.
    for (key, d) in [
        ("dedup.cache_ttl", dedup.cache_ttl),
        ("dedup.purge_interval", dedup.purge_interval),
        ("dedup.stats_flush_interval", dedup.stats_flush_interval),
    ] {
        v.positive(key, d);
    }
    dedup
}

/// Largest `refused.body_cap`: a refused body is kept for re-verification,
/// not as an archive; the request itself is bounded by `max_body_bytes`.
const MAX_REFUSED_BODY_CAP: usize = 16 * 1024 * 1024;

/// `[refused]`: the refused-request log.
fn refused(raw: raw::RawRefused, v: &mut Validator<'_>) -> super::Refused {
    v.positive("refused.keep", raw.keep.0);
    if raw.max_rows < 1 {
        v.problem("refused.max_rows", "must be at least 1".into());
    }
    if raw.body_cap == 0 || raw.body_cap > MAX_REFUSED_BODY_CAP {
        v.problem(
            "refused.body_cap",
            format!("must be 1..={MAX_REFUSED_BODY_CAP} bytes"),
        );
    }
    super::Refused {
        enabled: raw.enabled,
        keep: raw.keep.0,
        max_rows: raw.max_rows,
        capture_body: raw.capture_body,
        body_cap: raw.body_cap,
    }
}

/// `[telemetry]`: traces when `otlp_endpoint` is set. The endpoint is an
/// http(s) URL without credentials (a collector's token goes in
/// `OTEL_EXPORTER_OTLP_TRACES_HEADERS`, which the exporter reads), so it
/// can be printed and logged.
fn traces(raw: raw::RawTelemetry, v: &mut Validator<'_>) -> Option<super::Traces> {
    if !(0.0..=1.0).contains(&raw.sample_ratio) {
        v.problem(
            "telemetry.sample_ratio",
            "must be between 0 and 1 (0.01 traces one webhook in a hundred)".into(),
        );
    }
    if raw.service_name.trim().is_empty() {
        v.problem("telemetry.service_name", "must not be empty".into());
    }
    if raw.max_queued_spans == 0 {
        v.problem("telemetry.max_queued_spans", "must be at least 1".into());
    }
    v.positive("telemetry.export_interval", raw.export_interval.0);
    v.positive("telemetry.export_timeout", raw.export_timeout.0);
    let endpoint = raw.otlp_endpoint?;
    let endpoint = match crate::traces::endpoint(&endpoint) {
        Ok(url) => url,
        Err(e) => {
            v.problem("telemetry.otlp_endpoint", e);
            return None;
        }
    };
    Some(super::Traces {
        endpoint,
        sample_ratio: raw.sample_ratio,
        service_name: raw.service_name,
        max_queued_spans: raw.max_queued_spans,
        export_interval: raw.export_interval.0,
        export_timeout: raw.export_timeout.0,
    })
}

fn delivery(raw: raw::RawDelivery, v: &mut Validator<'_>) -> Delivery {
    for (key, d) in [
        ("delivery.poll_interval", raw.poll_interval.0),
        ("delivery.backoff_base", raw.backoff_base.0),
        ("delivery.backoff_max", raw.backoff_max.0),
        ("delivery.lease", raw.lease.0),
        ("delivery.heartbeat", raw.heartbeat.0),
        ("delivery.retry_for", raw.retry_for.0),
    ] {
        v.positive(key, d);
    }
    // A process stops sending a delivery one heartbeat before its lease
    // could run out; with three heartbeats to a lease, one renewal may fail
    // and the next still comes before that point.
    if raw.heartbeat.0.saturating_mul(LEASE_HEARTBEATS) > raw.lease.0 {
        v.problem(
            "delivery.heartbeat",
            format!(
                "must be at most a third of delivery.lease ({}): a process stops sending one \
                 heartbeat before its leases run out, so a shorter ratio leaves no renewal to \
                 spare (raise delivery.lease or lower delivery.heartbeat)",
                humantime::format_duration(raw.lease.0)
            ),
        );
    }
    if raw.backoff_max.0 < raw.backoff_base.0 {
        v.problem(
            "delivery.backoff_max",
            "must not be shorter than delivery.backoff_base".into(),
        );
    }
    Delivery {
        enabled: raw.enabled,
        max_in_flight: raw.max_in_flight.max(1),
        poll_interval: raw.poll_interval.0,
        backoff_base: raw.backoff_base.0,
        backoff_max: raw.backoff_max.0,
        lease: raw.lease.0,
        heartbeat: raw.heartbeat.0,
        retry_for: raw.retry_for.0,
        permanent_statuses: raw.permanent_statuses,
    }
}

/// Heartbeats a lease must last at least (`delivery.heartbeat`).
pub const LEASE_HEARTBEATS: u32 = 3;

fn targets(
    raw: BTreeMap<String, raw::RawTarget>,
    delivery: &Delivery,
    v: &mut Validator<'_>,
) -> BTreeMap<String, Target> {
    let mut targets = BTreeMap::new();
    for (name, t) in raw {
        let key = format!("targets.{name}");
        if !valid_name(&name) {
            v.problem(&key, "target names use letters, digits, `-` and `_`".into());
        }
        let kind = t.kinds.validate(
            t.kind,
            &t.url,
            &mut Check {
                key: &key,
                lease: delivery.lease,
                resolve: v,
            },
        );
        let rate = t.rate.as_deref().and_then(|r| {
            parse_rate(r)
                .map_err(|e| v.problem(&format!("{key}.rate"), e))
                .ok()
        });
        if t.max_attempts == Some(0) {
            v.problem(&format!("{key}.max_attempts"), "must be at least 1".into());
        }
        let retry_for = t.retry_for.map_or(delivery.retry_for, |d| d.0);
        v.positive(&format!("{key}.retry_for"), retry_for);
        let permanent_statuses = t
            .permanent_statuses
            .clone()
            .unwrap_or_else(|| delivery.permanent_statuses.clone());
        if let Some(s) = permanent_statuses
            .iter()
            .find(|s| !(300..=599).contains(*s))
        {
            v.problem(
                &format!("{key}.permanent_statuses"),
                format!("{s} is not a failure status (300-599)"),
            );
        }
        v.positive(&format!("{key}.timeout"), t.timeout.0);
        if t.concurrency.is_some() && t.max_concurrency.is_some() {
            v.problem(
                &format!("{key}.max_concurrency"),
                "is the adaptive limit's ceiling; with a fixed `concurrency` set, remove one of them"
                    .into(),
            );
        }
        let filter = t.filter.iter().map(|(k, v)| (k.clone(), v.text()));
        let rule = Rule::parse(t.events.clone(), filter).unwrap_or_else(|e| {
            let field = if e.starts_with("filter") {
                "filter"
            } else {
                "events"
            };
            v.problem(&format!("{key}.{field}"), e);
            Rule::default()
        });
        let order_by = t.order_by.as_deref().and_then(|o| {
            parse_order_by(o)
                .map_err(|e| v.problem(&format!("{key}.order_by"), e))
                .ok()
        });
        targets.insert(
            name.clone(),
            Target {
                name,
                url: t.url,
                timeout: t.timeout.0,
                retry: crate::target::RetryPolicy {
                    retry_for,
                    permanent_statuses,
                    max_attempts: t.max_attempts,
                    backoff_base: delivery.backoff_base,
                    backoff_max: delivery.backoff_max,
                },
                concurrency: t
                    .concurrency
                    .or(t.max_concurrency)
                    .unwrap_or(DEFAULT_MAX_CONCURRENCY)
                    .max(1),
                adaptive: t.concurrency.is_none(),
                forward_credentials: t.forward_credentials,
                forward_proxy_headers: t.forward_proxy_headers,
                withheld: BTreeMap::new(),
                rule,
                kind,
                rate,
                order_by,
            },
        );
    }
    targets
}

/// The adaptive in-flight limit's ceiling when a target sets neither
/// `concurrency` nor `max_concurrency`: high enough that a fast target is
/// never held back by it on loopback (the limit itself grows only while
/// it is used and the target keeps up), within `delivery.max_in_flight`'s
/// default, which bounds all targets together.
pub const DEFAULT_MAX_CONCURRENCY: usize = 256;

/// `"200/s"` or `"600/m"` as deliveries per second.
fn parse_rate(text: &str) -> Result<f64, String> {
    let bad = || format!("`{text}` is not a rate like \"200/s\" or \"600/m\"");
    let (n, unit) = text.trim().split_once('/').ok_or_else(bad)?;
    let n: u32 = n.trim().parse().map_err(|_| bad())?;
    let per = match unit.trim() {
        "s" => 1.0,
        "m" => 60.0,
        _ => return Err(bad()),
    };
    if n == 0 {
        return Err("must be at least 1 per interval".into());
    }
    Ok(f64::from(n) / per)
}

/// A name for a target, an API or the key prefix: letters, digits, `-`
/// and `_`, at most 64 bytes.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Collects problems and warnings; resolves secrets relative to `base`.
struct Validator<'a> {
    base: &'a Path,
    /// [`Needs::Ledger`]: a secret that does not resolve is left unset.
    needs: Needs,
    problems: Vec<(String, String)>,
    warnings: Vec<String>,
}

impl Validator<'_> {
    /// A duration that means nothing (or spins, or makes Redis refuse a
    /// `PX 0`) when zero.
    fn positive(&mut self, key: &str, d: Duration) {
        if d.is_zero() {
            self.problem(key, "must be greater than 0".into());
        }
    }
}

impl Resolve for Validator<'_> {
    fn secret(&mut self, key: &str, reference: &str) -> Option<Secret> {
        match Secret::resolve(reference, self.base) {
            Ok(s) => Some(s),
            Err(_) if self.needs == Needs::Ledger => None,
            Err(e) => {
                self.problem(key, e.to_string());
                None
            }
        }
    }

    fn problem(&mut self, key: &str, msg: String) {
        self.problems.push((key.to_owned(), msg));
    }

    fn warning(&mut self, msg: String) {
        self.warnings.push(msg);
    }
}
