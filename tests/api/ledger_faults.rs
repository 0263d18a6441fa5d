//! The ledger misbehaving without failing outright (issue #14): a
//! PostgreSQL whose connections go silent mid-statement, and a batch holding
//! one row the database refuses. Each test uses its own database and proxy.

use crate::helpers::db::pg_addr;
use crate::helpers::process::ChaosProxy;
use crate::helpers::*;
use sqlx::Connection;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Event ids the target received.
fn delivered(target: &TestTarget) -> HashSet<String> {
    target
        .received()
        .iter()
        .map(|r| r.headers["hookgate-event-id"].to_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_postgres_gets_503_within_bounded_time_and_recovers_without_restart() {
    let target = TestTarget::start().await;
    let proxy = ChaosProxy::start(pg_addr()).await;
    let db = TestDb::create(Backend::Production).await;
    let mut opts = Opts::forwarding_to(Backend::Production, "sink", &target, "");
    opts.database_url = Some(proxy.url(db.name()));
    opts.storage_extra = "statement_timeout = \"1s\"".into();
    let app = Arc::new(spawn_on(opts, db, unique_prefix()).await);
    assert_eq!(dedup_header(&app.post_stripe("evt_before").await), "new");
    let sent = eventually(Duration::from_secs(10), || async {
        delivered(&target).contains("evt_before")
    })
    .await;
    assert!(sent, "delivered before the hang");

    // Every connection to the database stays open and silent.
    proxy.freeze();
    for round in 0..2 {
        let mut tasks = vec![];
        for i in 0..20 {
            let app = app.clone();
            tasks.push(tokio::spawn(async move {
                let started = Instant::now();
                let r = app.post_stripe(&format!("evt_hang_{i}")).await;
                let retry_after = r.headers().contains_key("retry-after");
                (r.status().as_u16(), retry_after, started.elapsed())
            }));
        }
        for t in tasks {
            let (status, retry_after, took) = t.await.unwrap();
            // Within statement_timeout (1s) plus slack; request_timeout is 30s.
            assert_eq!(status, 503, "round {round}");
            assert!(retry_after, "round {round}");
            assert!(took < Duration::from_secs(3), "round {round}: {took:?}");
        }
    }
    // The second round re-sent the first round's ids and was not told
    // "in flight": every request's ledger wait ended and released its claim.

    proxy.restore();
    let back = eventually(Duration::from_secs(15), || async {
        app.post_stripe("evt_after").await.status() == 200
    })
    .await;
    assert!(back, "accepted again once the database answers");
    assert_eq!(app.rows("stripe", "evt_before").await, 1);
    assert_eq!(
        dedup_header(&app.post_stripe("evt_before").await),
        "duplicate"
    );
    // A request answered 503 may still have been committed when the held
    // bytes went through: its retry is accepted either way, and stored once.
    assert_eq!(app.post_stripe("evt_hang_0").await.status(), 200);
    assert_eq!(app.rows("stripe", "evt_hang_0").await, 1);
    let sent = eventually(Duration::from_secs(15), || async {
        delivered(&target).contains("evt_after")
    })
    .await;
    assert!(sent, "delivery did not wedge");
}

/// A connection of the test's own to the gateway's database, to refuse
/// some rows and to hold the events table.
enum Db {
    Pg(sqlx::PgConnection),
    Sqlite(sqlx::SqliteConnection),
}

impl Db {
    async fn open(url: &str) -> Self {
        if url.starts_with("postgres") {
            Self::Pg(sqlx::PgConnection::connect(url).await.unwrap())
        } else {
            Self::Sqlite(sqlx::SqliteConnection::connect(url).await.unwrap())
        }
    }

    async fn run(&mut self, sql: &'static str) {
        match self {
            Self::Pg(c) => sqlx::raw_sql(sql).execute(c).await.map(|_| ()),
            Self::Sqlite(c) => sqlx::raw_sql(sql).execute(c).await.map(|_| ()),
        }
        .unwrap();
    }

    /// A real database-side refusal of ids starting `evt_poison`.
    async fn refuse_poison(&mut self) {
        match self {
            Self::Pg(_) => {
                self.run(
                    "ALTER TABLE hookgate_events ADD CONSTRAINT hgtest_refuse_poison
                     CHECK (event_id NOT LIKE 'evt_poison%')",
                )
                .await
            }
            Self::Sqlite(_) => {
                self.run(
                    "CREATE TRIGGER hgtest_refuse_poison BEFORE INSERT ON hookgate_events
                     WHEN NEW.event_id LIKE 'evt_poison%'
                     BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
                )
                .await
            }
        }
    }

    /// Blocks the gateway's event writes until [`Db::release`].
    async fn hold_events(&mut self) {
        match self {
            Self::Pg(_) => {
                self.run("BEGIN; LOCK TABLE hookgate_events IN SHARE MODE")
                    .await
            }
            Self::Sqlite(_) => self.run("BEGIN IMMEDIATE").await,
        }
    }

    async fn release(&mut self) {
        self.run("COMMIT").await;
    }
}

/// Posts `id` in a task; the task returns the status.
fn post(app: &Arc<TestApp>, id: &str) -> tokio::task::JoinHandle<u16> {
    let (app, id) = (app.clone(), id.to_owned());
    tokio::spawn(async move { app.post_stripe(&id).await.status().as_u16() })
}

/// Waits until `n` of the gateway's writers wait on the held table
/// (PostgreSQL), or a moment (SQLite shows no waiters).
async fn writers_blocked(app: &TestApp, n: i64) {
    if app.opts.backend == Backend::Embedded {
        tokio::time::sleep(Duration::from_millis(500)).await;
        return;
    }
    let watch = sqlx::PgPool::connect(&app.db.url).await.unwrap();
    let blocked = eventually(Duration::from_secs(5), || {
        let watch = watch.clone();
        async move {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            .fetch_one(&watch)
            .await
            .unwrap();
            waiting >= n
        }
    })
    .await;
    assert!(blocked, "{n} writers wait on the held table");
}

crate::both_backends!(
    one_refused_row_fails_only_its_own_event_not_the_rest_of_its_batch,
    a_request_cut_while_its_event_waits_for_the_ledger_gives_its_claim_back,
);

/// The owned section runs in the request's task (src/dedup/mod.rs,
/// `OpenClaim`): a request cut while its event waits for the ledger (here
/// by `request_timeout`; a client hanging up is the same drop) gives its
/// claim back at once, not after `claim_ttl` or the ledger's own deadline,
/// and the event is stored once whether or not its write went through.
async fn a_request_cut_while_its_event_waits_for_the_ledger_gives_its_claim_back(b: Backend) {
    let mut opts = Opts::new(b);
    opts.claim_ttl = "60s";
    opts.server_extra = "request_timeout = \"1s\"".into();
    // The ledger would wait this long on the held table before failing.
    opts.storage_extra = "statement_timeout = \"30s\"".into();
    let app = Arc::new(spawn_app(opts).await);
    let mut db = Db::open(&app.db.url).await;
    db.hold_events().await;
    let cut = post(&app, "evt_cut");
    writers_blocked(&app, 1).await;
    assert_eq!(cut.await.unwrap(), 503, "cut by request_timeout");

    // While the table is still held, the id is free in the cache again: at
    // once, not when the ledger gives up (statement_timeout on PostgreSQL,
    // SQLite's 5 s busy timeout, src/store/sqlite/mod.rs).
    let key = format!("{}:v1:stripe:evt_cut", app.prefix);
    let cache = app.state.dedup.cache().clone();
    let free = eventually(Duration::from_secs(2), || {
        let (cache, key) = (cache.clone(), key.clone());
        async move {
            let probe = cache.claim(&key, "probe", Duration::from_secs(60)).await;
            let owned = matches!(probe, Ok(hookgate::dedup::cache::Claim::Owned));
            if owned {
                cache.release(&key, "probe").await.unwrap();
            }
            owned
        }
    })
    .await;
    assert!(free, "the cut request released its claim");

    db.release().await;
    // The write that was under way commits (or not): the copy is accepted
    // without waiting for a claim, and the event is stored once.
    let copy = app.post_stripe("evt_cut").await;
    assert_eq!(copy.status(), 200);
    assert!(["new", "duplicate"].contains(&dedup_header(&copy).as_str()));
    assert_eq!(app.rows("stripe", "evt_cut").await, 1);
}

async fn one_refused_row_fails_only_its_own_event_not_the_rest_of_its_batch(b: Backend) {
    let target = TestTarget::start().await;
    let app = Arc::new(spawn_app(Opts::forwarding_to(b, "sink", &target, "")).await);
    let mut db = Db::open(&app.db.url).await;
    db.refuse_poison().await;

    // Occupy the writer (one on both backends, app.rs) on the held table
    // with a plug, so the events sent next queue up and form ONE batch.
    db.hold_events().await;
    let plug = post(&app, "evt_plug_0");
    writers_blocked(&app, 1).await;
    let good: Vec<String> = (0..5).map(|i| format!("evt_good_{i}")).collect();
    let mut batch: Vec<_> = good.iter().map(|id| post(&app, id)).collect();
    batch.push(post(&app, "evt_poison_1"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    db.release().await;

    assert_eq!(plug.await.unwrap(), 200);
    let poison = batch.pop().unwrap();
    for (id, t) in good.iter().zip(batch) {
        assert_eq!(t.await.unwrap(), 200, "{id}");
    }
    assert_eq!(poison.await.unwrap(), 503);
    assert_eq!(app.rows("stripe", "evt_poison_1").await, 0);
    let all = eventually(Duration::from_secs(15), || async {
        let sent = delivered(&target);
        good.iter().all(|id| sent.contains(id))
    })
    .await;
    assert!(all, "the rest of the batch is delivered");
}

/// Pooled connections are not pinged on every checkout (one round trip
/// less before each ledger write), but one that sat idle is
/// (src/store/postgres/mod.rs, `pool_options`): after the database dropped
/// every connection of a quiet gateway (a restart, an operator's
/// `pg_terminate_backend`), the next event is stored at the first try.
/// The gateway's own background writes (stats every 200 ms, purge) also
/// meet dropped connections and the pool discards those, so the pool is
/// first grown well beyond what they can use up before the event comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_the_database_dropped_in_a_quiet_moment_are_replaced_before_use() {
    let mut opts = Opts::new(Backend::Production);
    opts.storage_extra = "max_connections = 30".into();
    let app = Arc::new(spawn_app(opts).await);
    assert_eq!(dedup_header(&app.post_stripe("evt_before").await), "new");
    let mut reads = tokio::task::JoinSet::new();
    for _ in 0..24 {
        let app = app.clone();
        reads.spawn(async move { app.rows("stripe", "evt_before").await });
    }
    while let Some(n) = reads.join_next().await {
        assert_eq!(n.unwrap(), 1);
    }
    let mut admin = sqlx::PgConnection::connect(&app.db.url).await.unwrap();
    let dropped: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()
         ) t",
    )
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert!(dropped >= 10, "the pool had grown: {dropped} connections");
    // Longer than PING_AFTER_IDLE.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = app.post_stripe("evt_after").await;
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    assert_eq!(app.rows("stripe", "evt_after").await, 1);
}
