//! The config file as written: serde structs with `deny_unknown_fields`.
//!
//! This file is the config reference: every field has its doc and its
//! default (a scheme's own `[sources.<name>.<scheme>]` table is documented
//! in its file under `verify/schemes/`, a target kind's own keys in its
//! file under `target/`). Validation into typed values happens in
//! `config/validate/`.

use crate::primitives::duration::Dur;
use crate::target::{KindName, RawKinds};
use crate::verify::schemes::{braintree, paypal, plaid, sns};
use crate::verify::spec::{EventIdSpec, OneOrMany, SignatureOverrides, SplitSetting};
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;
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
    /// Traces (OpenTelemetry over OTLP); docs/operations.md, "Traces".
    #[serde(default)]
    pub telemetry: RawTelemetry,
    /// The refused-request log; docs/operations.md, "Refused requests".
    #[serde(default)]
    pub refused: RawRefused,
    /// Alert sinks (Slack, or signed JSON over HTTP) and the conditions
    /// each is told about; the table is documented in `config/alerts.rs`
    /// and docs/operations.md "Alert sinks".
    #[serde(default)]
    pub alerts: BTreeMap<String, super::alerts::RawAlert>,
    /// How often alert conditions are evaluated (`config/alerts.rs`).
    #[serde(default)]
    pub alerting: super::alerts::RawAlerting,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawRefused {
    /// Whether refused requests are logged at all. Default true.
    pub enabled: bool,
    /// How long a refused request is kept. Default 7d.
    pub keep: Dur,
    /// Most refused requests kept; the oldest go first. Default 10000.
    pub max_rows: i64,
    /// Whether the body is stored (needed to re-verify). Default false.
    pub capture_body: bool,
    /// Most body bytes stored per request. Default 64 KiB.
    pub body_cap: usize,
}

impl Default for RawRefused {
    fn default() -> Self {
        Self {
            enabled: true,
            keep: Dur(Duration::from_secs(7 * 86_400)),
            max_rows: 10_000,
            capture_body: false,
            body_cap: 64 * 1024,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawTelemetry {
    /// The OTLP/HTTP collector traces are exported to (protobuf), e.g.
    /// `http://127.0.0.1:4318`; `/v1/traces` is added unless the path
    /// already ends with it. Unset (default): no traces, and no cost.
    pub otlp_endpoint: Option<String>,
    /// Share of webhooks traced, 0 to 1, decided from the trace id (so
    /// every replica decides alike for one event). Default 1.
    pub sample_ratio: f64,
    /// The `service.name` of every span. Default `hookgate`.
    pub service_name: String,
    /// Finished spans waiting for export, at most; beyond it a span is
    /// dropped and counted (`hookgate_trace_spans_dropped_total`). Default 2048.
    pub max_queued_spans: usize,
    /// How long the exporter waits after a span before sending a batch. Default 1s.
    pub export_interval: Dur,
    /// Deadline of one export request. Default 10s.
    pub export_timeout: Dur,
}

impl Default for RawTelemetry {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            sample_ratio: 1.0,
            service_name: "hookgate".into(),
            max_queued_spans: 2048,
            export_interval: Dur(Duration::from_secs(1)),
            export_timeout: Dur(Duration::from_secs(10)),
        }
    }
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
    /// Most open connections from one client address (an IPv4 address, an
    /// IPv6 /64), each listener; a further one is closed at once. Peers in
    /// `trusted_proxies` are exempt. Default: an eighth of `max_connections`.
    pub max_connections_per_client: Option<usize>,
    /// Time a client has to send a request's headers, from the first byte
    /// (or from the connection's start); an HTTP/2 connection with no open
    /// stream is closed after it too. Default 10s.
    pub header_read_timeout: Dur,
    /// HTTP/1: how long a kept-alive connection may wait, with nothing
    /// arriving, for its next request. Default 75s.
    pub keep_alive_timeout: Dur,
    /// HTTP/2: a connection that does not answer a keep-alive ping within
    /// this time (pings are sent after this much idle time) is closed. Default 60s.
    pub idle_timeout: Dur,
    /// Serve HTTPS: the certificate chain (PEM, leaf first), relative to the
    /// config file. Both listeners use it. Re-read on reload, so a renewed
    /// certificate needs no restart. Default unset (plain HTTP).
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM: PKCS#8, PKCS#1 or SEC1) of `tls_cert`.
    pub tls_key: Option<PathBuf>,
    /// Request bodies held in memory at once, all requests together (read
    /// before verification, or before the proxy forwards them); beyond it
    /// a request is answered 503 + `Retry-After`. Default 64 MiB.
    pub max_buffered_body_bytes: u64,
    /// The part of `max_buffered_body_bytes` one client address may hold.
    /// Default a quarter of it; at least the largest `max_body_bytes`.
    pub max_buffered_body_bytes_per_client: Option<u64>,
    /// Upstream answers the Idempotency-Key proxy holds in memory at once
    /// to store them (answers it does not store are streamed); beyond it
    /// 503 + `Retry-After`. Default 64 MiB.
    pub max_buffered_answer_bytes: u64,
    /// Put `/metrics` and `/readyz` behind `admin_token` too. Default false.
    pub protect_metrics: bool,
    /// Named bearer tokens (`[server.tokens.<name>]`), each with its scopes,
    /// besides `admin_token` (which acts as a token named `admin` with the
    /// `admin` and `listen` scopes). The name is what the audit log records. Default none.
    pub tokens: BTreeMap<String, RawToken>,
}

/// `[server.tokens.<name>]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawToken {
    /// The bearer token (secret: `env:`, `file:` or literal; at least 16 characters).
    pub secret: String,
    /// `admin` (stats, events, replay, reload, the console's API) and/or
    /// `listen` (`GET /admin/listen/<source>`, for `hookgate listen`; not
    /// implied by `admin`, as the stream carries unredacted headers).
    pub scopes: Vec<String>,
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
            max_connections_per_client: None,
            header_read_timeout: Dur(Duration::from_secs(10)),
            keep_alive_timeout: Dur(Duration::from_secs(75)),
            idle_timeout: Dur(Duration::from_secs(60)),
            tls_cert: None,
            tls_key: None,
            max_buffered_body_bytes: 64 * 1024 * 1024,
            max_buffered_body_bytes_per_client: None,
            max_buffered_answer_bytes: 64 * 1024 * 1024,
            protect_metrics: false,
            tokens: BTreeMap::new(),
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
    /// With Redis: most `done` ids this process marked kept in process, so
    /// their copies are answered without a round trip (`dedup::near`). 0 = none.
    /// Default 20,000 (about 8 MB: ~0.4 KB of memory per id, measured).
    pub near_cache_capacity: u64,
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
            near_cache_capacity: 20_000,
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
    /// How long a delivery's lease runs without a renewal: a process that
    /// dies (or stops renewing) loses its deliveries to the other workers
    /// this long after its last renewal at most. Renewed every `heartbeat`
    /// while the process holds the row, so an attempt may take longer than
    /// this. At least three heartbeats. Default 10s.
    pub lease: Dur,
    /// How often a delivering process renews the leases of every delivery it
    /// holds (one statement for them all). It stops sending a delivery one
    /// heartbeat before that delivery's lease could run out unrenewed.
    /// Default 2s.
    pub heartbeat: Dur,
    /// How long a delivery is retried, from when its event was received: a
    /// failed attempt whose next retry would fall later is the last (the
    /// final retry is made at the window's end), then the delivery is dead.
    /// A target may set its own. Default 3d (Stripe retries for three days).
    pub retry_for: Dur,
    /// HTTP statuses with which a target says "never send this again": the
    /// delivery is dead at once, without retries. A target may set its own
    /// list. Default `[410]` (Gone).
    pub permanent_statuses: Vec<u16>,
}

impl Default for RawDelivery {
    fn default() -> Self {
        Self {
            enabled: true,
            max_in_flight: 256,
            poll_interval: Dur(Duration::from_secs(1)),
            backoff_base: Dur(Duration::from_secs(1)),
            backoff_max: Dur(Duration::from_secs(3600)),
            lease: Dur(Duration::from_secs(10)),
            heartbeat: Dur(Duration::from_secs(2)),
            retry_for: Dur(DEFAULT_RETRY_FOR),
            permanent_statuses: vec![410],
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
    /// How long this source may go without an accepted event before it
    /// counts as silent (the `source silent` alert and metric). Unset: never.
    pub silent_after: Option<Dur>,
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
    /// Replaces (or supplies) where the id of the provider object the event
    /// is about is (`"json:/data/object/id"`): stored with each event and
    /// searched by `GET /admin/events?object=…` and the console.
    pub object_id: Option<String>,
    // The schemes' own tables; each is documented (and checked) in its
    // scheme's file under `verify/schemes/`.
    /// PayPal: webhook id and certificate settings.
    pub paypal: Option<paypal::Raw>,
    /// Plaid: API credentials for fetching verification keys, or pinned keys.
    pub plaid: Option<plaid::Raw>,
    /// Braintree: the public key, for answering the `bt_challenge` GET.
    pub braintree: Option<braintree::Raw>,
    /// Amazon SNS: the accepted topics and subscription confirmation.
    pub sns: Option<sns::Raw>,
    /// Reconciliation against the provider's API (stripe, github, paypal);
    /// the table is documented in `config/reconcile.rs`. Off when absent.
    pub reconcile: Option<super::reconcile::RawReconcile>,
}

fn default_window() -> Dur {
    Dur(Duration::from_secs(7 * 86_400))
}

/// One `[targets.<name>]` table. The keys every kind takes are here; the
/// keys only one kind takes (`signing_secret`, `stream`, `subject`, …) are
/// documented and read in that kind's file under `target/`. An unknown key
/// is refused, as everywhere else.
#[derive(Debug)]
pub struct RawTarget {
    /// `http` (default): events are POSTed to `url`. `redis-stream`: one
    /// `XADD` per event to `stream` on the Redis server at `url`. `nats`:
    /// one JetStream publish per event to `subject`. `rabbitmq`: one
    /// confirmed publish per event to `exchange` with `routing_key`.
    pub kind: KindName,
    /// `http://` or `https://` URL events are POSTed to; for a broker
    /// kind, the broker: `redis://[user:password@]host:port/db` or
    /// `rediss://…` (redis-stream), `nats://[user:password@]host:port` or
    /// `tls://…` (nats), `amqp://user:password@host:port/<vhost>` or
    /// `amqps://…` (rabbitmq; the default vhost `/` is `%2f`). Required.
    pub url: String,
    /// Each kind's own keys, as written.
    pub kinds: RawKinds,
    /// Deadline of one delivery attempt (for a broker: connecting when
    /// needed, publishing and the broker's acknowledgement). Default 10s.
    pub timeout: Dur,
    /// This target's retry window (see `delivery.retry_for`). Default: that.
    pub retry_for: Option<Dur>,
    /// This target's permanent-failure statuses (see
    /// `delivery.permanent_statuses`). Default: that list.
    pub permanent_statuses: Option<Vec<u16>>,
    /// Optional cap on attempts, below the window: a delivery is dead after
    /// this many even inside `retry_for`. Default unset (the window decides).
    pub max_attempts: Option<u32>,
    /// Most requests (or publishes) in flight to this target at once, fixed;
    /// a slot is free again as soon as the target answered. Default unset:
    /// the limit adapts (deliver::limit), up to `max_concurrency`.
    pub concurrency: Option<usize>,
    /// The adaptive limit's ceiling, when `concurrency` is unset. Default 256.
    pub max_concurrency: Option<usize>,
    /// Forward the credential headers the source authenticates with
    /// (`Authorization`, a bearer/token scheme's header). Default false:
    /// they are stripped before the event is stored unless a target of the
    /// source sets this.
    pub forward_credentials: bool,
    /// Forward the client's `X-Forwarded-*`, `Forwarded` and `X-Real-IP`
    /// headers. Default false (stripped before storing, like credentials).
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

/// The keys every target takes, in the order an unknown-key error lists
/// them (before the kinds' own keys).
const TARGET_KEYS: &[&str] = &[
    "kind",
    "url",
    "timeout",
    "retry_for",
    "permanent_statuses",
    "max_attempts",
    "concurrency",
    "max_concurrency",
    "forward_credentials",
    "forward_proxy_headers",
    "rate",
    "events",
    "filter",
    "order_by",
];

impl<'de> Deserialize<'de> for RawTarget {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(TargetTable)
    }
}

/// Reads a target table key by key: a common key into its field, any
/// other into the kind that claims it ([`RawKinds::take`]).
struct TargetTable;

impl<'de> Visitor<'de> for TargetTable {
    type Value = RawTarget;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a target table")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawTarget, A::Error> {
        let mut url = None;
        let mut t = RawTarget {
            kind: KindName::default(),
            url: String::new(),
            kinds: RawKinds::default(),
            timeout: Dur(Duration::from_secs(10)),
            retry_for: None,
            permanent_statuses: None,
            max_attempts: None,
            concurrency: None,
            max_concurrency: None,
            forward_credentials: false,
            forward_proxy_headers: false,
            rate: None,
            events: None,
            filter: BTreeMap::new(),
            order_by: None,
        };
        while let Some(key) = map.next_key_seed(TargetKey)? {
            match key.as_str() {
                "kind" => t.kind = map.next_value()?,
                "url" => url = Some(map.next_value()?),
                "timeout" => t.timeout = map.next_value()?,
                "retry_for" => t.retry_for = map.next_value()?,
                "permanent_statuses" => t.permanent_statuses = map.next_value()?,
                "max_attempts" => t.max_attempts = map.next_value()?,
                "concurrency" => t.concurrency = Some(map.next_value()?),
                "max_concurrency" => t.max_concurrency = Some(map.next_value()?),
                "forward_credentials" => t.forward_credentials = map.next_value()?,
                "forward_proxy_headers" => t.forward_proxy_headers = map.next_value()?,
                "rate" => t.rate = map.next_value()?,
                "events" => t.events = map.next_value()?,
                "filter" => t.filter = map.next_value()?,
                "order_by" => t.order_by = map.next_value()?,
                // `TargetKey` let it through: one kind takes it.
                kind_key => {
                    t.kinds.take(kind_key, &mut map)?;
                }
            }
        }
        t.url = url.ok_or_else(|| de::Error::missing_field("url"))?;
        Ok(t)
    }
}

/// A target table's key, refused (with the list of valid keys) when it is
/// neither a common key nor any kind's.
struct TargetKey;

impl<'de> DeserializeSeed<'de> for TargetKey {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        static EXPECTED: OnceLock<Vec<&'static str>> = OnceLock::new();
        let expected = EXPECTED.get_or_init(|| {
            TARGET_KEYS
                .iter()
                .copied()
                .chain(RawKinds::keys())
                .collect()
        });
        let key = String::deserialize(d)?;
        if expected.contains(&key.as_str()) {
            return Ok(key);
        }
        Err(de::Error::unknown_field(&key, expected))
    }
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

/// `delivery.retry_for`'s default: three days.
pub const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(3 * 86_400);
