//! Faults, each with throwaway pieces this test starts and stops by PID:
//! a redis-server, a cuttable proxy in front of Postgres, gateway processes.
//! The shared Postgres and Redis are never stopped.

use crate::helpers::db::pg_addr;
use crate::helpers::process::{ChaosProxy, Gateway, RedisServer, post_to};
use crate::helpers::*;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

async fn readyz(app: &TestApp) -> (u16, serde_json::Value) {
    let r = app.client.get(app.url("/readyz")).send().await.unwrap();
    let s = r.status().as_u16();
    (
        s,
        serde_json::from_slice(&r.bytes().await.unwrap()).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_keeps_dedup_exact_and_readiness_degraded_until_it_returns() {
    let mut redis = RedisServer::start().await;
    let mut opts = Opts::new(Backend::Production);
    opts.redis_url = Some(redis.url());
    let app = spawn_app(opts).await;
    assert_eq!(dedup_header(&app.post_stripe("evt_r1").await), "new");

    redis.kill();
    assert_eq!(readyz(&app).await.1["status"], "degraded");
    assert_eq!(readyz(&app).await.0, 200);
    let r = app.post_stripe("evt_r2").await;
    assert_eq!((r.status().as_u16(), dedup_header(&r)), (200, "new".into()));
    for id in ["evt_r1", "evt_r2"] {
        let r = app.post_stripe(id).await;
        assert_eq!(
            (r.status().as_u16(), dedup_header(&r)),
            (200, "duplicate".into()),
            "{id}"
        );
    }
    // Concurrent copies with no cache: the ledger's unique key decides.
    let app = Arc::new(app);
    let mut tasks = vec![];
    for _ in 0..20 {
        let app = app.clone();
        tasks.push(tokio::spawn(async move {
            dedup_header(&app.post_stripe("evt_r3").await)
        }));
    }
    let mut new = 0;
    for t in tasks {
        if t.await.unwrap() == "new" {
            new += 1;
        }
    }
    assert_eq!(new, 1);
    assert_eq!(app.rows("stripe", "evt_r3").await, 1);

    redis.restart().await;
    let back = eventually(Duration::from_secs(10), || async {
        readyz(&app).await.1["status"] == "ready"
    })
    .await;
    assert!(back, "readiness recovers when Redis returns");
    assert_eq!(dedup_header(&app.post_stripe("evt_r2").await), "duplicate");
    assert_eq!(dedup_header(&app.post_stripe("evt_r4").await), "new");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_unreachable_is_503_with_nothing_written_and_the_retry_is_new() {
    let proxy = ChaosProxy::start(pg_addr()).await;
    let db = TestDb::create(Backend::Production).await;
    let mut opts = Opts::new(Backend::Production);
    opts.database_url = Some(proxy.url(db.name()));
    let app = spawn_on(opts, db, unique_prefix()).await;
    assert_eq!(dedup_header(&app.post_stripe("evt_pg_ok").await), "new");

    proxy.cut();
    // The proxy drops open connections within 20 ms.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = app.post_stripe("evt_pg_down").await;
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "5");
    assert_eq!(readyz(&app).await.0, 503);
    // The claim was released: an immediate retry is not told "in flight".
    let again = app.post_stripe("evt_pg_down").await;
    assert_eq!(again.status(), 503);

    proxy.restore();
    let ok = eventually(Duration::from_secs(10), || async {
        app.post_stripe("evt_pg_down").await.status() == 200
    })
    .await;
    assert!(ok, "accepted after recovery");
    assert_eq!(app.rows("stripe", "evt_pg_down").await, 1);
    assert_eq!(
        dedup_header(&app.post_stripe("evt_pg_down").await),
        "duplicate"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_claim_and_commit_lets_the_retry_through_after_claim_ttl() {
    let proxy = ChaosProxy::start(pg_addr()).await;
    let db = TestDb::create(Backend::Production).await;
    let prefix = unique_prefix();
    let mut opts = Opts::new(Backend::Production);
    // Long enough for the second gateway to start inside it.
    opts.claim_ttl = "4s";
    opts.inflight_wait = "200ms";
    opts.database_url = Some(proxy.url(db.name()));
    let mut first = Gateway::start(&opts, &db, &prefix).await;

    // The database hangs: the request claims the id, then waits in the
    // ledger. (Closing the pool's connections instead could fail the write
    // at once: a 503 that releases the claim before the kill.)
    proxy.hang();
    let client = reqwest::Client::new();
    let url = first.url("/webhooks/stripe");
    let c = client.clone();
    let pending = tokio::spawn(async move { post_to(&c, &url, "evt_crash").await });
    // Kill only once the claim is really in Redis (the request is then
    // waiting in the hung ledger).
    let claimed = eventually(Duration::from_secs(30), || async {
        !redis_keys(&prefix).await.is_empty()
    })
    .await;
    assert!(claimed, "the request claimed the event id");
    first.kill9();
    assert!(
        pending.await.unwrap().is_err(),
        "the killed gateway never acknowledged"
    );
    proxy.restore();

    let second = Gateway::start(&opts, &db, &prefix).await;
    let url = second.url("/webhooks/stripe");
    let send = || post_to(&client, &url, "evt_crash");
    // Within claim_ttl the dead process's claim still stands.
    let early = send().await.unwrap();
    assert_eq!(early.status(), 409);
    assert!(early.headers().contains_key("retry-after"));
    tokio::time::sleep(Duration::from_millis(4100)).await;
    let late = send().await.unwrap();
    assert_eq!(late.status(), 200);
    assert_eq!(late.headers()["hookgate-dedup"], "new");
}

/// The answer goes out at COMMIT and the cache's `done` mark after it
/// (docs/design.md, "Changes to the design", item 7). A SIGKILL in between
/// leaves the claim `pending` in the cache: a provider retry then waits on
/// it (409 while it stands) and, once it expired, the ledger answers
/// `duplicate`. One `new` and one stored event, whatever the timing. The
/// gateway reaches its throwaway Redis through a proxy that holds the mark
/// back (frozen) and then drops it with the connection (cut).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_between_the_commit_and_the_done_mark_leaves_one_new_event() {
    let redis = RedisServer::start().await;
    let proxy = ChaosProxy::start(([127, 0, 0, 1], redis.port).into()).await;
    let db = TestDb::create(Backend::Production).await;
    let prefix = unique_prefix();
    let mut opts = Opts::new(Backend::Production);
    opts.redis_url = Some(format!("redis://127.0.0.1:{}", proxy.port));
    // Long enough for the restart below to happen inside it.
    opts.claim_ttl = "4s";
    opts.inflight_wait = "200ms";
    let mut first = Gateway::start(&opts, &db, &prefix).await;
    // The cache itself, read directly (not through the proxy).
    let cache = redis::Client::open(redis.url()).unwrap();
    let claim = || {
        let cache = cache.clone();
        let pattern = format!("{prefix}:*");
        async move {
            let mut c = cache.get_multiplexed_async_connection().await.ok()?;
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(&pattern)
                .query_async(&mut c)
                .await
                .ok()?;
            let key = keys.into_iter().next()?;
            redis::cmd("GET")
                .arg(&key)
                .query_async::<Option<String>>(&mut c)
                .await
                .ok()?
        }
    };

    // The ledger waits on this lock: the request has claimed, not committed.
    let mut blocker = db.lock_table("hookgate_events").await;
    let client = reqwest::Client::new();
    let url = first.url("/webhooks/stripe");
    let c = client.clone();
    let answered = tokio::spawn(async move { post_to(&c, &url, "evt_mark").await });
    let claimed = eventually(Duration::from_secs(10), || async {
        claim().await.is_some_and(|v| v.starts_with("pending:"))
    })
    .await;
    assert!(claimed, "the request claimed the event id");
    // Nothing more reaches the cache; then the commit goes through: the
    // answer goes out, the `done` mark is held in the proxy.
    proxy.freeze();
    sqlx::query("ROLLBACK").execute(&mut blocker).await.unwrap();
    let r = answered.await.unwrap().unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["hookgate-dedup"], "new");
    first.kill9();
    // Drop the held mark with its connection, then let new ones through.
    proxy.cut();
    tokio::time::sleep(Duration::from_millis(200)).await;
    proxy.restore();
    let left = claim().await.unwrap_or_default();
    assert!(
        left.starts_with("pending:"),
        "the mark never came: {left:?}"
    );

    let second = Gateway::start(&opts, &db, &prefix).await;
    let url = second.url("/webhooks/stripe");
    let send = || post_to(&client, &url, "evt_mark");
    let early = send().await.unwrap();
    assert_eq!(early.status(), 409, "the dead process's claim still stands");
    tokio::time::sleep(Duration::from_millis(4100)).await;
    let late = send().await.unwrap();
    assert_eq!(late.status(), 200);
    assert_eq!(late.headers()["hookgate-dedup"], "duplicate");
    let stored: i64 =
        sqlx::query_scalar("SELECT count(*) FROM hookgate_events WHERE event_id = 'evt_mark'")
            .fetch_one(&mut blocker)
            .await
            .unwrap();
    assert_eq!(stored, 1, "one stored event");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateway_processes_share_one_ledger_and_deliver_each_event_once() {
    let target = TestTarget::start().await;
    let db = TestDb::create(Backend::Production).await;
    let prefix = unique_prefix();
    let opts = Opts::forwarding_to(Backend::Production, "sink", &target, "concurrency = 16");
    let a = Gateway::start(&opts, &db, &prefix).await;
    let b = Gateway::start(&opts, &db, &prefix).await;
    let urls = [a.url("/webhooks/stripe"), b.url("/webhooks/stripe")];
    let client = reqwest::Client::new();

    // 100 copies of one event, alternating between the replicas.
    let mut tasks = vec![];
    for i in 0..100 {
        let (client, url) = (client.clone(), urls[i % 2].clone());
        tasks.push(tokio::spawn(async move {
            let r = post_to(&client, &url, "evt_spread").await.unwrap();
            (
                r.status().as_u16(),
                r.headers().get("hookgate-dedup").cloned(),
            )
        }));
    }
    let mut new = 0;
    for t in tasks {
        let (status, dedup) = t.await.unwrap();
        assert!(status == 200 || status == 409, "status {status}");
        if dedup.is_some_and(|d| d == "new") {
            new += 1;
        }
    }
    assert_eq!(new, 1);

    // 1,000 distinct events spread over both replicas (workers in both).
    let sem = Arc::new(tokio::sync::Semaphore::new(32));
    let mut tasks = vec![];
    for i in 0..1000 {
        let (client, url, sem) = (client.clone(), urls[i % 2].clone(), sem.clone());
        tasks.push(tokio::spawn(async move {
            let _p = sem.acquire().await.unwrap();
            post_to(&client, &url, &format!("evt_many_{i}"))
                .await
                .unwrap()
                .status()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    let all = eventually(Duration::from_secs(60), || async { target.count() >= 1001 }).await;
    assert!(all, "all events delivered ({} so far)", target.count());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let ids: Vec<String> = target
        .received()
        .iter()
        .map(|r| r.headers["hookgate-event-id"].to_str().unwrap().to_owned())
        .collect();
    let unique: HashSet<_> = ids.iter().collect();
    assert_eq!(ids.len(), 1001, "no event was sent twice");
    assert_eq!(unique.len(), 1001);
}

crate::both_backends!(a_gateway_killed_mid_load_loses_no_acknowledged_event);

async fn a_gateway_killed_mid_load_loses_no_acknowledged_event(b: Backend) {
    let target = TestTarget::start().await;
    // The target is slow, so deliveries are still pending at the kill.
    target.hang(Some(Duration::from_millis(300)));
    let db = TestDb::create(b).await;
    let prefix = unique_prefix();
    let mut opts = Opts::forwarding_to(b, "sink", &target, "concurrency = 2");
    opts.claim_ttl = "1s";
    let mut gw = Gateway::start(&opts, &db, &prefix).await;
    let url = gw.url("/webhooks/stripe");
    let client = reqwest::Client::new();

    let acked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = vec![];
    for i in 0..300 {
        let (client, url, acked) = (client.clone(), url.clone(), acked.clone());
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(i * 2)).await;
            let id = format!("evt_kill_{i}");
            if let Ok(r) = post_to(&client, &url, &id).await
                && r.status() == 200
            {
                acked.lock().unwrap().push(id);
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    gw.kill9();
    for t in tasks {
        t.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(
        !acked.is_empty(),
        "some events were acknowledged before the kill"
    );
    assert!(
        target.count() < acked.len(),
        "deliveries were still pending at the kill"
    );

    target.hang(None);
    let _restarted = Gateway::start(&opts, &db, &prefix).await;
    let delivered = || {
        target
            .received()
            .iter()
            .map(|r| r.headers["hookgate-event-id"].to_str().unwrap().to_owned())
            .collect::<HashSet<_>>()
    };
    let ok = eventually(Duration::from_secs(60), || async {
        acked.iter().all(|id| delivered().contains(id))
    })
    .await;
    let missing: Vec<_> = acked
        .iter()
        .filter(|id| !delivered().contains(*id))
        .collect();
    assert!(ok, "acknowledged but never delivered: {missing:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_and_exits_cleanly() {
    let target = TestTarget::start().await;
    let db = TestDb::create(Backend::Production).await;
    let opts = Opts::forwarding_to(Backend::Production, "sink", &target, "");
    let mut gw = Gateway::start(&opts, &db, &unique_prefix()).await;
    let client = reqwest::Client::new();
    let r = post_to(&client, &gw.url("/webhooks/stripe"), "evt_term")
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(eventually(Duration::from_secs(10), || async { target.count() == 1 }).await);
    let status = gw.terminate();
    assert!(status.success(), "exit status {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_releases_unfinished_deliveries_to_other_workers() {
    let target = TestTarget::start().await;
    target.hang(Some(Duration::from_secs(60)));
    let db = TestDb::create(Backend::Production).await;
    let prefix = unique_prefix();
    let mut opts = Opts::forwarding_to(Backend::Production, "sink", &target, "timeout = \"50s\"");
    opts.lease = "120s";
    opts.shutdown_grace = "1s";
    let mut first = Gateway::start(&opts, &db, &prefix).await;
    let client = reqwest::Client::new();
    let r = post_to(&client, &first.url("/webhooks/stripe"), "evt_handover")
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        eventually(Duration::from_secs(10), || async {
            target.times().len() == 1
        })
        .await
    );

    let stopping = std::time::Instant::now();
    assert!(first.terminate().success());
    assert!(stopping.elapsed() < Duration::from_secs(10), "grace is 1s");

    // Without the release, the row would stay leased for 120s.
    target.hang(None);
    let _second = Gateway::start(&opts, &db, &prefix).await;
    let handed_over = eventually(Duration::from_secs(15), || async { target.count() == 1 }).await;
    assert!(
        handed_over,
        "the released delivery was taken by another worker"
    );
}

/// Attempt outcomes are group-committed: a batch of attempts is "sent" (the
/// target answered 2xx) before it is "recorded". A SIGKILL in between must
/// make every event of the batch go out again once the leases expire, never
/// count it delivered. The test holds a lock on `hookgate_attempts` so the
/// recording of the whole batch is stuck at the moment of the kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_between_sent_and_recorded_resends_the_whole_batch() {
    use sqlx::Connection;
    const N: usize = 24;
    let target = TestTarget::start().await;
    let db = TestDb::create(Backend::Production).await;
    let prefix = unique_prefix();
    // A short lease so the resend comes soon; the target's timeout stays
    // the 5 s below it that config validation asks for.
    let keys = format!("concurrency = {N}\ntimeout = \"1s\"");
    let mut opts = Opts::forwarding_to(Backend::Production, "sink", &target, &keys);
    opts.lease = "6s";
    let mut first = Gateway::start(&opts, &db, &prefix).await;

    // Nothing can be recorded while this transaction holds the lock.
    let mut blocker = db.lock_table("hookgate_attempts").await;

    let client = reqwest::Client::new();
    let url = first.url("/webhooks/stripe");
    let ids: Vec<String> = (0..N).map(|i| format!("evt_batch_{i}")).collect();
    for id in &ids {
        let r = post_to(&client, &url, id).await.unwrap();
        assert_eq!(r.status(), 200);
    }
    let per_id = || target.sends_per_id();
    let sent = eventually(Duration::from_secs(15), || async { per_id().len() == N }).await;
    assert!(sent, "every event was sent ({} of {N})", per_id().len());
    first.kill9();
    let at_kill = per_id();
    sqlx::query("ROLLBACK").execute(&mut blocker).await.unwrap();

    // Nothing of the batch was recorded: every delivery is still pending.
    let (pending, attempts): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM hookgate_deliveries
                 WHERE state = 'pending' AND attempts = 0),
                (SELECT count(*) FROM hookgate_attempts)",
    )
    .fetch_one(&mut blocker)
    .await
    .unwrap();
    assert_eq!((pending, attempts), (N as i64, 0));

    let _second = Gateway::start(&opts, &db, &prefix).await;
    let resent = eventually(Duration::from_secs(30), || async {
        let n = per_id();
        ids.iter().all(|id| n.get(id) > at_kill.get(id))
    })
    .await;
    assert!(
        resent,
        "every event of the batch is sent again: {:?}",
        per_id()
    );
    let delivered = eventually(Duration::from_secs(15), || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM hookgate_deliveries WHERE state = 'delivered'",
        )
        .fetch_one(&mut sqlx::PgConnection::connect(&db.url).await.unwrap())
        .await
        .unwrap();
        n == N as i64
    })
    .await;
    assert!(delivered, "the resends were recorded");
}

/// A rolling deploy with two targets: at SIGTERM the idle target's loop
/// stops at once, while the slow target's attempts are still in flight. The
/// idle loop must not give back the slow target's leases (they share the
/// process's lease token), or the replica that stays up takes those rows
/// and sends them a second time while the first answers are still coming.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_two_targets_and_deliveries_in_flight_sends_nothing_twice() {
    const N: usize = 5;
    let slow = TestTarget::start().await;
    slow.hang(Some(Duration::from_secs(3)));
    let quick = TestTarget::start().await;
    let db = TestDb::create(Backend::Production).await;
    let prefix = unique_prefix();
    let mut opts = Opts::new(Backend::Production);
    opts.stripe_targets = vec!["slow".into(), "quick".into()];
    opts.extra = format!(
        "[targets.slow]\nurl = \"{}\"\ntimeout = \"10s\"\n[targets.quick]\nurl = \"{}\"\n",
        slow.url, quick.url
    );
    opts.lease = "30s";
    opts.shutdown_grace = "10s";
    let mut first = Gateway::start(&opts, &db, &prefix).await;
    let client = reqwest::Client::new();
    for i in 0..N {
        let r = post_to(
            &client,
            &first.url("/webhooks/stripe"),
            &format!("evt_roll_{i}"),
        )
        .await
        .unwrap();
        assert_eq!(r.status(), 200);
    }
    let all_out = eventually(Duration::from_secs(10), || async {
        quick.count() == N && slow.times().len() == N
    })
    .await;
    assert!(all_out, "quick got every event and slow is answering them");

    // The replica that stays up polls every 200 ms for rows it may take.
    let _second = Gateway::start(&opts, &db, &prefix).await;
    assert!(first.terminate().success());
    // Long enough for the slow answers to be recorded and for the second
    // replica to have polled many times.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let per_id = slow.sends_per_id();
    assert_eq!(per_id.len(), N, "{per_id:?}");
    assert!(per_id.values().all(|n| *n == 1), "sent twice: {per_id:?}");
    assert_eq!(quick.count(), N);
}

/// A request claims its id in Redis; before its ledger write commits,
/// another request's Redis call times out and flags the cache down. The
/// committed event must still turn its claim into `done`: otherwise every
/// copy finds the claim pending, waits and gets 409 until `claim_ttl`
/// instead of a 2xx duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_owned_before_the_cache_was_flagged_down_still_becomes_done() {
    let redis = RedisServer::start().await;
    let mut opts = Opts::new(Backend::Production);
    opts.redis_url = Some(redis.url());
    opts.claim_ttl = "30s";
    opts.inflight_wait = "1s";
    let app = Arc::new(spawn_app(opts).await);

    // Hold the ledger so the owner's write waits after its claim.
    let mut blocker = app.db.lock_table("hookgate_events").await;
    let owner = {
        let app = app.clone();
        tokio::spawn(async move { app.post_stripe("evt_owned").await.status().as_u16() })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;

    // A hung Redis: the next request's claim times out and flags the cache.
    redis.freeze(true);
    let other = {
        let app = app.clone();
        tokio::spawn(async move { app.post_stripe("evt_other").await.status().as_u16() })
    };
    tokio::time::sleep(Duration::from_millis(800)).await;
    redis.freeze(false);
    sqlx::query("ROLLBACK").execute(&mut blocker).await.unwrap();
    assert_eq!(owner.await.unwrap(), 200);
    assert_eq!(other.await.unwrap(), 200);

    // Let the once-a-second probe of a flagged cache come due.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let copy = app.post_stripe("evt_owned").await;
    assert_eq!(
        (copy.status().as_u16(), dedup_header(&copy)),
        (200, "duplicate".into())
    );
}

/// A gateway whose throwaway Redis sits behind a proxy, its connection up
/// and in use (one event stored).
async fn app_with_redis_behind_a_proxy() -> (RedisServer, ChaosProxy, TestApp) {
    let redis = RedisServer::start().await;
    let proxy = ChaosProxy::start(([127, 0, 0, 1], redis.port).into()).await;
    let mut opts = Opts::new(Backend::Production);
    opts.redis_url = Some(format!("redis://127.0.0.1:{}", proxy.port));
    let app = spawn_app(opts).await;
    assert_eq!(app.post_stripe("evt_warm").await.status(), 200);
    (redis, proxy, app)
}

/// Redis goes silent mid-connection (a frozen proxy: the socket stays open,
/// no byte comes back). The gateway's own deadline (`redis_timeout`, 300 ms
/// here) is the only one on a Redis call: the client library's response
/// timeout is off (docs/design.md, "Fourteenth pass"). So a request still
/// gets its answer within about that time, decided by the ledger, and once
/// Redis answers again the provider's retry is a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_stops_answering_costs_a_request_no_more_than_its_timeout() {
    let (_redis, proxy, app) = app_with_redis_behind_a_proxy().await;

    proxy.freeze();
    let started = std::time::Instant::now();
    let first = app.post_stripe("evt_silent").await;
    let took = started.elapsed();
    assert_eq!(
        (first.status().as_u16(), dedup_header(&first)),
        (200, "new".into())
    );
    assert!(
        took < Duration::from_millis(1500),
        "a silent Redis held the request for {took:?}"
    );

    proxy.restore();
    let retry = eventually(Duration::from_secs(5), || async {
        let r = app.post_stripe("evt_silent").await;
        r.status() == 200 && dedup_header(&r) == "duplicate"
    })
    .await;
    assert!(retry, "the retry was answered as a duplicate");
    assert_eq!(app.rows("stripe", "evt_silent").await, 1);
}

/// The Standalone connection to Redis goes silent for good (a route lost
/// under it: nothing comes back, nothing closes), while new connections get
/// through. The first call to time out on it replaces the connection, so
/// the gateway is back on its cache within a probe or two instead of
/// answering from the ledger until the kernel gives up on the socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_connection_silent_for_good_is_replaced_after_a_timeout() {
    let (redis, proxy, app) = app_with_redis_behind_a_proxy().await;

    proxy.silence_open();
    let during = app.post_stripe("evt_during").await;
    assert_eq!(
        (during.status().as_u16(), dedup_header(&during)),
        (200, "new".into())
    );

    // Redis itself, read directly: a new event's id reaches it again.
    let direct = redis::Client::open(redis.url()).unwrap();
    let mut n = 0;
    let back = eventually(Duration::from_secs(5), || {
        n += 1;
        let id = format!("evt_after_{n}");
        let direct = direct.clone();
        let app = &app;
        async move {
            assert_eq!(app.post_stripe(&id).await.status(), 200);
            let Ok(mut c) = direct.get_multiplexed_async_connection().await else {
                return false;
            };
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("*{id}*"))
                .query_async(&mut c)
                .await
                .unwrap_or_default();
            !keys.is_empty()
        }
    })
    .await;
    assert!(back, "claims never reached Redis again");
}
