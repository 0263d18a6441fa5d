//! Test harness: the real gateway on a loopback port, a fresh Postgres
//! database (or SQLite file) per test, a unique Redis key prefix per test,
//! and recording targets. Logs stay quiet unless `TEST_LOG` is set.

pub mod db;
pub mod fake_resend;
pub mod fake_stripe;
pub mod pg_server;
pub mod process;
pub mod signers;
pub mod target;
pub mod topology;

use hookgate::app::App;
use hookgate::config::Config;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub use db::TestDb;
pub use target::TestTarget;

pub const ADMIN_TOKEN: &str = "test-admin-token";
pub const STRIPE_SECRET: &str = "whsec_test_stripe_secret";
pub const GITHUB_SECRET: &str = "gh-test-secret";
/// Standard Webhooks secret; its key bytes are `hookgate-test-key-123456` (24 bytes).
pub const SW_SECRET: &str = "whsec_aG9va2dhdGUtdGVzdC1rZXktMTIzNDU2";
pub const SW_KEY: &[u8] = b"hookgate-test-key-123456";
pub const SHOPIFY_SECRET: &str = "shpss_test_secret";

pub fn redis_url() -> String {
    std::env::var("HOOKGATE_TEST_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// Which deployment a contract test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// PostgreSQL + Redis (production).
    Production,
    /// SQLite + in-process cache (embedded default).
    Embedded,
}

/// Knobs of a test gateway; `Default` gives the four built-in sources
/// (no targets) on fast timings.
#[derive(Clone)]
pub struct Opts {
    pub backend: Backend,
    /// Extra TOML appended (more `[sources.*]` / `[targets.*]`).
    pub extra: String,
    /// Targets of the built-in `stripe` source.
    pub stripe_targets: Vec<String>,
    pub claim_ttl: &'static str,
    pub inflight_wait: &'static str,
    pub max_body_bytes: usize,
    pub delivery: bool,
    /// Override the database URL (fault tests point it at a proxy).
    pub database_url: Option<String>,
    /// Override the Redis URL (fault tests point it at a throwaway server).
    pub redis_url: Option<String>,
    pub poll_interval: &'static str,
    pub lease: &'static str,
    /// `delivery.heartbeat`; `None` keeps the default.
    pub heartbeat: Option<&'static str>,
    pub shutdown_grace: &'static str,
    /// Largest retry delay (also caps Retry-After).
    pub backoff_max: &'static str,
    /// Serve the admin routes on a second loopback port (`TestApp::admin_addr`).
    pub admin_listen: bool,
    /// Extra lines in `[server]`.
    pub server_extra: String,
    /// Extra lines in `[storage]`.
    pub storage_extra: String,
    /// `(source, duration)`: `silent_after` on one of the built-in sources.
    pub silent_after: Option<(String, String)>,
    /// Extra environment of the gateway process (`Gateway::start` only).
    pub env: Vec<(String, String)>,
}

impl Opts {
    /// Options whose `stripe` source forwards to one HTTP target, `name` at
    /// `target`, with the extra target keys `keys` (TOML lines).
    pub fn forwarding_to(backend: Backend, name: &str, target: &TestTarget, keys: &str) -> Self {
        let mut opts = Self::new(backend);
        opts.stripe_targets = vec![name.to_owned()];
        opts.extra = format!("[targets.{name}]\nurl = \"{}\"\n{keys}\n", target.url);
        opts
    }

    pub fn new(backend: Backend) -> Self {
        Self {
            backend,
            extra: String::new(),
            stripe_targets: vec![],
            claim_ttl: "5s",
            inflight_wait: "2s",
            max_body_bytes: 64 * 1024,
            delivery: true,
            database_url: None,
            redis_url: None,
            poll_interval: "200ms",
            // Above the default target timeout (10s) plus the lease margin.
            lease: "20s",
            heartbeat: None,
            shutdown_grace: "5s",
            backoff_max: "200ms",
            admin_listen: false,
            server_extra: String::new(),
            storage_extra: String::new(),
            silent_after: None,
            env: vec![],
        }
    }

    /// The config file text for `db` and Redis key prefix `prefix`.
    pub fn toml(&self, db: &TestDb, prefix: &str, listen: &str) -> String {
        let db_url = self.database_url.clone().unwrap_or_else(|| db.url.clone());
        let redis = match (&self.redis_url, self.backend) {
            (Some(u), _) => format!("redis_url = \"{u}\""),
            (None, Backend::Production) => format!("redis_url = \"{}\"", redis_url()),
            (None, Backend::Embedded) => String::new(),
        };
        let targets = self
            .stripe_targets
            .iter()
            .map(|t| format!("\"{t}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let text = format!(
            r#"
[server]
listen = "{listen}"
admin_token = "{ADMIN_TOKEN}"
max_body_bytes = {max_body}
shutdown_grace = "{shutdown_grace}"
{admin_listen}
{server_extra}

[storage]
database_url = "{db_url}"
{redis}
key_prefix = "{prefix}"
redis_timeout = "300ms"
{storage_extra}

[dedup]
claim_ttl = "{claim_ttl}"
cache_ttl = "10m"
purge_interval = "200ms"
inflight_wait = "{inflight_wait}"
stats_flush_interval = "200ms"

[delivery]
enabled = {delivery}
poll_interval = "{poll_interval}"
backoff_base = "20ms"
backoff_max = "{backoff_max}"
lease = "{lease}"
{heartbeat}

[sources.stripe]
provider = "stripe"
secrets = ["{STRIPE_SECRET}"]
targets = [{targets}]

[sources.github]
provider = "github"
secrets = ["{GITHUB_SECRET}"]

[sources.svix]
provider = "standard-webhooks"
secrets = ["{SW_SECRET}"]

[sources.shopify]
provider = "shopify"
secrets = ["{SHOPIFY_SECRET}"]

{extra}
"#,
            max_body = self.max_body_bytes,
            claim_ttl = self.claim_ttl,
            inflight_wait = self.inflight_wait,
            delivery = self.delivery,
            poll_interval = self.poll_interval,
            lease = self.lease,
            heartbeat = self
                .heartbeat
                .map(|h| format!("heartbeat = \"{h}\""))
                .unwrap_or_default(),
            shutdown_grace = self.shutdown_grace,
            backoff_max = self.backoff_max,
            extra = self.extra,
            admin_listen = if self.admin_listen {
                "admin_listen = \"127.0.0.1:0\""
            } else {
                ""
            },
            // Every test client connects from 127.0.0.1: unless a test is
            // about the per-client cap, it may use every slot.
            server_extra = if self.server_extra.contains("max_connections") {
                self.server_extra.clone()
            } else {
                format!("max_connections_per_client = 1024\n{}", self.server_extra)
            },
            storage_extra = self.storage_extra,
        );
        match &self.silent_after {
            Some((source, d)) => text.replacen(
                &format!("[sources.{source}]\n"),
                &format!("[sources.{source}]\nsilent_after = \"{d}\"\n"),
                1,
            ),
            None => text,
        }
    }
}

/// A gateway running in this test process.
pub struct TestApp {
    pub addr: SocketAddr,
    /// The admin listener, when `Opts::admin_listen`.
    pub admin_addr: Option<SocketAddr>,
    pub client: reqwest::Client,
    pub db: TestDb,
    pub prefix: String,
    pub opts: Opts,
    stop: CancellationToken,
    handle: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    pub state: hookgate::state::AppState,
}

pub fn init_logs() {
    if std::env::var_os("TEST_LOG").is_some() {
        hookgate::telemetry::init_logs(hookgate::config::raw::LogFormat::Human, "debug");
    }
}

pub async fn spawn_app(opts: Opts) -> TestApp {
    let db = TestDb::create(opts.backend).await;
    spawn_on(opts, db, unique_prefix()).await
}

pub fn unique_prefix() -> String {
    format!("hgtest-{}", hookgate::primitives::token::random_hex())
}

/// Starts a gateway on an existing database and key prefix (a second
/// replica, or a restart).
pub async fn spawn_on(opts: Opts, db: TestDb, prefix: String) -> TestApp {
    init_logs();
    let text = opts.toml(&db, &prefix, "127.0.0.1:0");
    let config = Config::from_toml_str(&text, Path::new(".")).expect("test config is valid");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let admin = if opts.admin_listen {
        Some(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap())
    } else {
        None
    };
    let admin_addr = admin.as_ref().map(|l| l.local_addr().unwrap());
    let app = App::build(config).await.expect("app builds");
    let state = app.state().clone();
    let stop = CancellationToken::new();
    let handle = tokio::spawn(app.run_with_admin(listener, admin, stop.clone()));
    TestApp {
        addr,
        admin_addr,
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap(),
        db,
        prefix,
        opts,
        stop,
        handle: Some(handle),
        state,
    }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// POSTs `body` with `headers` to `/webhooks/<source>`.
    pub async fn post(
        &self,
        source: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> reqwest::Response {
        let mut req = self
            .client
            .post(self.url(&format!("/webhooks/{source}")))
            .header("content-type", "application/json");
        for (k, v) in headers {
            req = req.header(k.as_str(), v.as_str());
        }
        req.body(body.to_vec()).send().await.expect("request sent")
    }

    /// A Stripe event with id `id`, freshly signed now.
    pub async fn post_stripe(&self, id: &str) -> reqwest::Response {
        self.post_stripe_body(&stripe_body(id)).await
    }

    /// `body` to the `stripe` source, signed now with the right secret.
    /// A queue target `q` is unreachable: sends `n` events named
    /// `<prefix>_<i>` (each answered 200: ingest does not depend on the
    /// broker), then checks they all wait (pending or retrying, none dead,
    /// still `delivered_before` delivered) after `q`'s attempts failed.
    /// Returns the ids.
    pub async fn ingest_while_target_is_away(
        &self,
        prefix: &str,
        n: usize,
        delivered_before: i64,
    ) -> Vec<String> {
        let ids: Vec<String> = (0..n).map(|i| format!("{prefix}_{i}")).collect();
        for id in &ids {
            let r = self.post_stripe(id).await;
            assert_eq!(r.status(), 200, "ingest does not depend on the broker");
        }
        let waiting = eventually(Duration::from_secs(30), || async {
            let s = &self.stats().await["sources"]["stripe"];
            s["pending"].as_i64().unwrap_or(0) + s["retrying"].as_i64().unwrap_or(0) == n as i64
        })
        .await;
        assert!(waiting, "{}", self.stats().await);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let s = self.stats().await;
        let stripe = &s["sources"]["stripe"];
        assert_eq!(stripe["delivered"], delivered_before, "{s}");
        assert_eq!(stripe["dead"], 0, "{s}");
        let failed = stripe["targets"]["q"]["failed_attempts"]
            .as_i64()
            .unwrap_or(0);
        assert!(failed > 0, "attempts failed while the broker was away: {s}");
        ids
    }

    pub async fn post_stripe_body(&self, body: &[u8]) -> reqwest::Response {
        let h = signers::stripe(STRIPE_SECRET, now(), body);
        self.post("stripe", &h, body).await
    }

    /// `path` on the admin listener when there is one, else on the public one.
    pub fn admin_url(&self, path: &str) -> String {
        match self.admin_addr {
            Some(a) => format!("http://{a}{path}"),
            None => self.url(path),
        }
    }

    pub async fn stats(&self) -> serde_json::Value {
        self.client
            .get(self.admin_url("/stats"))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .map(|b| serde_json::from_slice(&b).expect("stats are JSON"))
            .unwrap()
    }

    /// The body of `GET path` with the admin token (`/metrics`, `/admin/…`).
    pub async fn admin_text(&self, path: &str) -> String {
        admin_get(&self.client, &self.url(path)).await
    }

    /// The value of one series in /metrics, e.g.
    /// `hookgate_unrouted_total{source="stripe"}` (0 before it exists). The
    /// recorder is process-wide: parallel tests add to series they share.
    pub async fn metric_value(&self, series: &str) -> u64 {
        let metrics = self.admin_text("/metrics").await;
        let prefix = format!("{series} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Rows in the ledger for one event.
    pub async fn rows(&self, source: &str, event_id: &str) -> i64 {
        self.state
            .store
            .event_log
            .event_count(source, event_id)
            .await
            .unwrap()
    }

    /// Stops the server (graceful) and waits for it.
    pub async fn stop(mut self) -> TestDb {
        self.stop.cancel();
        if let Some(h) = self.handle.take() {
            h.await.unwrap().unwrap();
        }
        self.db.clone()
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

pub fn stripe_body(id: &str) -> Vec<u8> {
    format!(r#"{{"id":"{id}","object":"event","type":"charge.succeeded","data":{{"object":{{"id":"ch_1"}}}}}}"#)
        .into_bytes()
}

pub fn dedup_header(res: &reqwest::Response) -> String {
    res.headers()
        .get("hookgate-dedup")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// Polls `check` every 20 ms until it is true or `timeout` passes.
pub async fn eventually<F, Fut>(timeout: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The body of `GET url` with the admin token.
pub async fn admin_get(client: &reqwest::Client, url: &str) -> String {
    client
        .get(url)
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The keys under `prefix` in the shared Redis (this test's only).
pub async fn redis_keys(prefix: &str) -> Vec<String> {
    let client = redis::Client::open(redis_url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query_async(&mut c)
        .await
        .unwrap()
}

/// The values of the keys under `prefix` in the shared Redis.
pub async fn redis_values(prefix: &str) -> Vec<String> {
    let keys = redis_keys(prefix).await;
    if keys.is_empty() {
        return Vec::new();
    }
    let client = redis::Client::open(redis_url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let values: Vec<Option<String>> = redis::cmd("MGET")
        .arg(&keys)
        .query_async(&mut c)
        .await
        .unwrap();
    values.into_iter().flatten().collect()
}

/// Deletes the keys under `prefix` (only this test's: the shared Redis is
/// not ours to flush).
pub async fn del_redis_keys(prefix: &str) {
    let keys = redis_keys(prefix).await;
    if keys.is_empty() {
        return;
    }
    let client = redis::Client::open(redis_url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("DEL")
        .arg(&keys)
        .query_async(&mut c)
        .await
        .unwrap();
}
