//! The config file as written: serde structs with `deny_unknown_fields`.
//!
//! This file is the config reference: every field has its doc and its
//! default (a scheme's own `[sources.<name>.<scheme>]` table is documented
//! in its file under `verify/schemes/`). Validation into typed values
//! happens in `config/validate.rs`.

use crate::primitives::duration::Dur;
use crate::verify::schemes::{braintree, paypal, plaid};
use crate::verify::spec::{EventIdSpec, OneOrMany, SignatureOverrides, SplitSetting};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub server: RawServer,
    #[serde(default)]
    pub storage: RawStorage,
    #[serde(default)]
    pub dedup: RawDedup,
    #[serde(default)]
    pub delivery: RawDelivery,
    /// One entry per provider endpoint, served at `POST /webhooks/<name>`.
    #[serde(default)]
    pub sources: BTreeMap<String, RawSource>,
    /// Internal HTTP endpoints that receive forwarded events.
    #[serde(default)]
    pub targets: BTreeMap<String, RawTarget>,
    /// Internal APIs behind the Idempotency-Key proxy, served at
    /// `/api/<name>/…`; the table is documented in `config/apis.rs`.
    #[serde(default)]
    pub apis: BTreeMap<String, super::apis::RawApi>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawServer {
    /// Address to listen on. Default `127.0.0.1:8080` (the Docker image sets `0.0.0.0:8080`).
    pub listen: String,
    /// Largest accepted request body; larger requests get 413. Default 1 MiB.
    pub max_body_bytes: u64,
    /// Bearer token for `/stats` and `/admin/*` (secret: `env:`, `file:` or literal).
    /// Unset: those endpoints answer 401 to everyone.
    pub admin_token: Option<String>,
    /// `human` (default) or `json` log lines.
    pub log_format: LogFormat,
    /// Default log filter when `RUST_LOG` is unset. Default `info`.
    pub log_level: String,
    /// Extra provider definitions (`*.toml`), loaded after the built-in ones;
    /// a file with a built-in name replaces it. Relative to the config file.
    pub providers_dir: Option<PathBuf>,
    /// Whole-request deadline for `POST /webhooks/*`. Default 30s.
    pub request_timeout: Dur,
    /// On SIGTERM: how long in-flight requests and deliveries may take to finish. Default 30s.
    pub shutdown_grace: Dur,
    /// Reverse proxies (addresses or CIDR blocks) whose `X-Forwarded-For` is
    /// believed when a source checks `allow_ips`. Default: none (the TCP peer
    /// is the client).
    pub trusted_proxies: Vec<String>,
    /// A second address for `/stats`, `/admin/*`, `/metrics` and `/readyz`.
    /// When set, the public `listen` port no longer serves them. Default unset.
    pub admin_listen: Option<String>,
    /// Most open client connections (each listener); further clients wait
    /// in the kernel's accept queue. Default 1024.
    pub max_connections: usize,
    /// Time a client has to send a request's headers; on HTTP/1 it also
    /// bounds how long a kept-alive connection may sit idle. Default 10s.
    pub header_read_timeout: Dur,
    /// HTTP/2: a connection that does not answer a keep-alive ping within
    /// this time (pings are sent after this much idle time) is closed. Default 60s.
    pub idle_timeout: Dur,
}

impl Default for RawServer {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".into(),
            max_body_bytes: 1024 * 1024,
            admin_token: None,
            log_format: LogFormat::Human,
            log_level: "info".into(),
            providers_dir: None,
            request_timeout: Dur(Duration::from_secs(30)),
            shutdown_grace: Dur(Duration::from_secs(30)),
            trusted_proxies: Vec::new(),
            admin_listen: None,
            max_connections: 1024,
            header_read_timeout: Dur(Duration::from_secs(10)),
            idle_timeout: Dur(Duration::from_secs(60)),
        }
    }
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Human,
    Json,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawStorage {
    /// `postgres://…` or `sqlite://…`. Unset (or `env:X` with X unset, or
    /// `DATABASE_URL` unset) → `sqlite://hookgate.db` in the working directory.
    pub database_url: Option<String>,
    /// `redis://…` / `rediss://…` (one server), `redis+sentinel://host:26379,…/<master>[?db=N]`
    /// or `redis+cluster://host:7000,…`. Unset → in-process cache (single replica only).
    pub redis_url: Option<String>,
    /// Apply migrations when `serve` starts. Default true.
    pub migrate: bool,
    /// Namespace of every Redis key (`<prefix>:v1:<source>:<event id>`). Default `hookgate`.
    pub key_prefix: String,
    /// Largest number of ids the in-process cache holds. Default 100,000
    /// (about 80 MB: ~0.8 KB of memory per id, measured).
    pub cache_capacity: u64,
    /// Deadline of one Redis command before dedup falls back to the ledger. Default 250ms.
    pub redis_timeout: Dur,
    /// Database connections in the pool. Default 10 (SQLite: 4).
    pub max_connections: Option<u32>,
    /// Longest wait for one ledger write or read on the request and delivery
    /// paths before it fails (webhook: 503 + `Retry-After`). PostgreSQL also
    /// gets it as the server-side `statement_timeout`. Default 5s.
    pub statement_timeout: Dur,
}

impl Default for RawStorage {
    fn default() -> Self {
        Self {
            database_url: None,
            redis_url: None,
            migrate: true,
            key_prefix: "hookgate".into(),
            cache_capacity: 100_000,
            redis_timeout: Dur(Duration::from_millis(250)),
            max_connections: None,
            statement_timeout: Dur(Duration::from_secs(5)),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawDedup {
    /// How long a pending claim lives if its owner dies before committing. Default 30s.
    pub claim_ttl: Dur,
    /// How long the cache remembers a finished id (capped at the source's
    /// `dedup_window`). Default 24h.
    pub cache_ttl: Dur,
    /// How long a copy waits for the in-flight original before answering 409. Default 2s.
    pub inflight_wait: Dur,
    /// How often expired ledger rows are purged. Default 1h.
    pub purge_interval: Dur,
    /// How often per-instance counters are added to the ledger's stats table. Default 1s.
    pub stats_flush_interval: Dur,
}

impl Default for RawDedup {
    fn default() -> Self {
        Self {
            claim_ttl: Dur(Duration::from_secs(30)),
            cache_ttl: Dur(Duration::from_secs(86_400)),
            inflight_wait: Dur(Duration::from_secs(2)),
            purge_interval: Dur(Duration::from_secs(3600)),
            stats_flush_interval: Dur(Duration::from_secs(1)),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawDelivery {
    /// Run delivery workers in this process. Default true.
    pub enabled: bool,
    /// Most deliveries in flight at once in this process, all targets together,
    /// counted from the send until the attempt's record committed. Default 256.
    pub max_in_flight: usize,
    /// Fallback poll interval (a local commit or NOTIFY wakes workers at once). Default 1s.
    pub poll_interval: Dur,
    /// First retry delay before jitter; doubles per attempt. Default 1s.
    pub backoff_base: Dur,
    /// Largest retry delay (also caps a target's Retry-After). Default 1h.
    pub backoff_max: Dur,
    /// How long a claimed delivery stays leased to a worker before another may take it. Default 2m.
    pub lease: Dur,
}

impl Default for RawDelivery {
    fn default() -> Self {
        Self {
            enabled: true,
            max_in_flight: 256,
            poll_interval: Dur(Duration::from_secs(1)),
            backoff_base: Dur(Duration::from_secs(1)),
            backoff_max: Dur(Duration::from_secs(3600)),
            lease: Dur(Duration::from_secs(120)),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSource {
    /// Name of a provider definition (built in, or from `server.providers_dir`).
    pub provider: String,
    /// Verification secrets; several = rotation, any may match.
    #[serde(default)]
    pub secrets: Vec<String>,
    /// Timestamp window for timestamped schemes. Default: the provider's (usually 5m).
    pub tolerance: Option<Dur>,
    /// How long an event id counts as seen. Default 7d.
    #[serde(default = "default_window")]
    pub dedup_window: Dur,
    /// Also a duplicate: a body already seen under another event id within
    /// `dedup_window` (for providers whose event id is not signed; see
    /// docs/design.md "Dedup by body"). Default false.
    #[serde(default)]
    pub dedup_by_body: bool,
    /// Names of `[targets.*]` that receive this source's events.
    #[serde(default)]
    pub targets: Vec<String>,
    /// The URL the provider was given, for schemes that sign the URL.
    pub public_url: Option<String>,
    /// Client addresses / CIDR blocks allowed to post to this source (any
    /// provider). Empty = everyone. Required for unsigned providers (YooKassa).
    #[serde(default)]
    pub allow_ips: Vec<String>,
    /// Replaces fields of the provider's `[signature]` (required by the
    /// generic `hmac` provider; `header`/`query` of `bearer`).
    pub signature: Option<SignatureOverrides>,
    /// Replaces the provider's `[event_id]` rule.
    pub event_id: Option<EventIdSpec>,
    /// The token a provider's URL-verification handshake carries (Meta's
    /// `hub.verify_token`, chosen by you in the provider's dashboard):
    /// `env:`, `file:` or a literal. Required by providers whose handshake
    /// has one; a wrong token is refused with 403.
    pub verify_token: Option<String>,
    /// Admit a batch body's items one by one, each an event with its own
    /// id: `true` / `false` turn the provider's `[split]` on or off (its
    /// default applies when unset), `"json:/items"` names the array for a
    /// provider without one (each item's id is then its hash).
    pub split: Option<SplitSetting>,
    /// Replaces (or, for the generic providers, supplies) where the event
    /// type is: a locator, or a list whose values are joined with `.`.
    /// Routing (`events`) matches on it.
    pub event_type: Option<OneOrMany>,
    // The schemes' own tables; each is documented (and checked) in its
    // scheme's file under `verify/schemes/`.
    /// PayPal: webhook id and certificate settings.
    pub paypal: Option<paypal::Raw>,
    /// Plaid: API credentials for fetching verification keys, or pinned keys.
    pub plaid: Option<plaid::Raw>,
    /// Braintree: the public key, for answering the `bt_challenge` GET.
    pub braintree: Option<braintree::Raw>,
    /// Reconciliation against the provider's API (stripe, github, paypal);
    /// the table is documented in `config/reconcile.rs`. Off when absent.
    pub reconcile: Option<super::reconcile::RawReconcile>,
}

fn default_window() -> Dur {
    Dur(Duration::from_secs(7 * 86_400))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTarget {
    /// `http` (default): events are POSTed to `url`. `redis-stream`: one
    /// `XADD` per event to `stream` on the Redis server at `url`. `nats`:
    /// one JetStream publish per event to `subject`. `rabbitmq`: one
    /// confirmed publish per event to `exchange` with `routing_key`.
    #[serde(default)]
    pub kind: TargetKind,
    /// `http://` or `https://` URL events are POSTed to; for a broker
    /// kind, the broker: `redis://[user:password@]host:port/db` or
    /// `rediss://…` (redis-stream), `nats://[user:password@]host:port` or
    /// `tls://…` (nats), `amqp://user:password@host:port/<vhost>` or
    /// `amqps://…` (rabbitmq; the default vhost `/` is `%2f`).
    pub url: String,
    /// `redis-stream`: the stream's name; `{source}` and `{type}` are
    /// filled in (`untyped` for an event without a type). Required.
    pub stream: Option<String>,
    /// `redis-stream`: `XADD … MAXLEN ~ <maxlen>` (approximate trim).
    /// Default: no trim.
    pub maxlen: Option<u64>,
    /// `redis-stream`: how long a sent event's marker key lives, so a
    /// resend after a crash adds nothing. Must exceed `delivery.lease`.
    /// Default 10m.
    pub duplicate_window: Option<Dur>,
    /// `nats`: the subject events are published to; `{source}` and `{type}`
    /// are filled in. A JetStream stream must capture it. Required.
    pub subject: Option<String>,
    /// `rabbitmq`: the exchange events are published to; `""` is the
    /// default exchange (the routing key is then a queue name). Required.
    pub exchange: Option<String>,
    /// `rabbitmq`: the routing key; `{source}` and `{type}` are filled in.
    /// Required (may be `""` only with a named exchange, e.g. a fanout).
    pub routing_key: Option<String>,
    /// Deadline of one delivery attempt (for a broker: connecting when
    /// needed, publishing and the broker's acknowledgement). Default 10s.
    #[serde(default = "default_target_timeout")]
    pub timeout: Dur,
    /// Attempts before a delivery is dead. Default 12.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// Optional secret (Standard Webhooks `whsec_<base64>` or raw) to sign forwards.
    pub signing_secret: Option<String>,
    /// Most requests (or publishes) in flight to this target at once; a slot
    /// is free again as soon as the target answered. Default 32.
    #[serde(default = "default_target_concurrency")]
    pub concurrency: usize,
    /// Forward the credential headers the source authenticates with
    /// (`Authorization`, a bearer/token scheme's header). Default false:
    /// they are stripped before the event is stored unless a target of the
    /// source sets this.
    #[serde(default)]
    pub forward_credentials: bool,
    /// Forward the client's `X-Forwarded-*`, `Forwarded` and `X-Real-IP`
    /// headers. Default false (stripped before storing, like credentials).
    #[serde(default)]
    pub forward_proxy_headers: bool,
    /// Most deliveries per second (`"200/s"`) or per minute (`"600/m"`)
    /// sent to the target by all replicas together (a bucket in the
    /// ledger); the backlog waits in the outbox.
    /// Default: no cap.
    pub rate: Option<String>,
    /// Event types this target receives: globs over the provider's event
    /// type (`"invoice.*"`; `*` also spans dots, `?` is one character).
    /// Default: every event, typed or not. An event of no type never
    /// matches a list.
    pub events: Option<Vec<String>>,
    /// Locator = value pairs the event must all match to come here, e.g.
    /// `{ "json:/data/object/currency" = "eur" }` (header, json, form or
    /// query locators; values are strings, integers or booleans compared
    /// as text). Default: no filter.
    #[serde(default)]
    pub filter: BTreeMap<String, FilterValue>,
    /// Per-object ordering: a locator (as in `filter`, e.g.
    /// `"json:/data/object/id"`) whose value is the event's ordering key.
    /// Deliveries with the same key go one at a time, in received order;
    /// different keys stay parallel. An event where the locator finds
    /// nothing (or an empty value) is delivered unordered. Such a target
    /// gets no hand-off lane (its rows are always claimed). See
    /// docs/design.md "Ordering". Default: unordered.
    pub order_by: Option<String>,
}

/// Where a target's deliveries go.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum TargetKind {
    #[default]
    Http,
    RedisStream,
    Nats,
    Rabbitmq,
}

/// A `filter` value: TOML strings, integers and booleans compare with the
/// located value's text (`12`, `true`).
#[derive(Debug, Deserialize, Clone)]
#[serde(untagged)]
pub enum FilterValue {
    Text(String),
    Integer(i64),
    Boolean(bool),
}

impl FilterValue {
    pub fn text(&self) -> String {
        match self {
            Self::Text(s) => s.clone(),
            Self::Integer(i) => i.to_string(),
            Self::Boolean(b) => b.to_string(),
        }
    }
}

fn default_target_timeout() -> Dur {
    Dur(Duration::from_secs(10))
}
fn default_max_attempts() -> u32 {
    12
}
fn default_target_concurrency() -> usize {
    // 8 slots capped one target near 4,000/s on loopback while a slot was
    // held until the attempt's record; 32 keeps up with ingest.
    32
}
