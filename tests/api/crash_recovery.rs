//! Crash recovery of leased deliveries (`deliver::lease`): what a killed
//! process held goes out again within one short lease, and the renewals
//! that make the lease short never let two processes send one delivery at
//! once: a frozen replica stops sending what it can no longer vouch for,
//! and a slow request keeps its row for as long as it runs.

use crate::helpers::process::{Gateway, post_to};
use crate::helpers::target::TestTarget;
use crate::helpers::{Backend, Opts, TestDb, eventually, unique_prefix};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// What a crash may cost at most, by the requirement.
const RESUME_WITHIN: Duration = Duration::from_secs(15);

/// Rows of the outbox leased and pending, on either backend.
async fn leased_rows(db: &TestDb) -> i64 {
    const SQL: &str = "SELECT COUNT(*) FROM hookgate_deliveries
                       WHERE state = 'pending' AND lease_token IS NOT NULL";
    if db.url.starts_with("postgres") {
        use sqlx::Connection;
        let mut c = sqlx::PgConnection::connect(&db.url).await.unwrap();
        sqlx::query_scalar(SQL).fetch_one(&mut c).await.unwrap()
    } else {
        use sqlx::Connection;
        let mut c = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
        sqlx::query_scalar(SQL).fetch_one(&mut c).await.unwrap()
    }
}

/// Each id's arrivals at the target after `since`, earliest first.
fn first_after(target: &TestTarget, since: Instant) -> HashMap<String, Instant> {
    let mut out = HashMap::new();
    for (at, id) in target.arrivals() {
        if at >= since {
            out.entry(id).or_insert(at);
        }
    }
    out
}

/// The default lease and heartbeat (10 s, 2 s) and the default poll (1 s):
/// the figures the 15 s promise is made with.
fn default_timings(backend: Backend, target: &TestTarget) -> Opts {
    // Concurrency 4: four requests in flight, four more handed to the lane.
    let keys = "concurrency = 4\ntimeout = \"60s\"";
    let mut opts = Opts::forwarding_to(backend, "sink", target, keys);
    opts.lease = "10s";
    opts.poll_interval = "1s";
    opts
}

/// Sends 4 events (their requests reach the target, which does not answer
/// them), then 4 more (acknowledged, handed to the lane: leased, waiting for
/// a slot); returns every id once all 8 rows are leased.
async fn hold_eight(gw: &Gateway, target: &TestTarget, db: &TestDb, tag: &str) -> Vec<String> {
    let client = reqwest::Client::new();
    let url = gw.url("/webhooks/stripe");
    let ids: Vec<String> = (0..8).map(|i| format!("evt_{tag}_{i}")).collect();
    for id in &ids[..4] {
        assert_eq!(post_to(&client, &url, id).await.unwrap().status(), 200);
    }
    let in_flight = eventually(Duration::from_secs(10), || async {
        target.arrivals().len() == 4
    })
    .await;
    assert!(in_flight, "four requests reached the target");
    for id in &ids[4..] {
        assert_eq!(post_to(&client, &url, id).await.unwrap().status(), 200);
    }
    let leased = eventually(Duration::from_secs(5), || async {
        leased_rows(db).await == 8
    })
    .await;
    assert!(
        leased,
        "all eight rows are leased: {}",
        leased_rows(db).await
    );
    ids
}

/// The slowest resumption among `ids`: from `killed` to each id's first
/// arrival after it; asserts each came within [`RESUME_WITHIN`].
async fn resumed(target: &TestTarget, ids: &[String], killed: Instant) -> Duration {
    let all = eventually(RESUME_WITHIN + Duration::from_secs(5), || async {
        let seen = first_after(target, killed);
        ids.iter().all(|id| seen.contains_key(id))
    })
    .await;
    let seen = first_after(target, killed);
    assert!(all, "every held delivery was sent again: {seen:?}");
    let slowest = ids
        .iter()
        .map(|id| seen[id].duration_since(killed))
        .max()
        .unwrap();
    eprintln!("crash-to-resume: {} ms", slowest.as_millis());
    assert!(
        slowest <= RESUME_WITHIN,
        "held deliveries resumed {slowest:?} after the kill"
    );
    slowest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_resumes_what_a_killed_one_held_within_15s() {
    let target = TestTarget::start().await;
    // Connections are accepted and the requests read, never answered.
    target.hang(Some(Duration::from_secs(120)));
    let db = TestDb::create(Backend::Production).await;
    let prefix = unique_prefix();
    let opts = default_timings(Backend::Production, &target);
    let mut first = Gateway::start(&opts, &db, &prefix).await;
    let ids = hold_eight(&first, &target, &db, "pgkill").await;
    // The other replica is up before the kill and finds nothing to take.
    let _second = Gateway::start(&opts, &db, &prefix).await;
    target.hang(None);

    first.kill9();
    let killed = Instant::now();
    let slowest = resumed(&target, &ids, killed).await;
    // Not a poll's luck: nothing could be taken before the lease ran out
    // (the heartbeat renewed it until the kill).
    assert!(slowest >= Duration::from_secs(5), "{slowest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_embedded_gateway_resumes_what_it_held_within_15s() {
    let target = TestTarget::start().await;
    target.hang(Some(Duration::from_secs(120)));
    let db = TestDb::create(Backend::Embedded).await;
    let prefix = unique_prefix();
    let opts = default_timings(Backend::Embedded, &target);
    let mut first = Gateway::start(&opts, &db, &prefix).await;
    let ids = hold_eight(&first, &target, &db, "sqlkill").await;
    target.hang(None);

    first.kill9();
    let killed = Instant::now();
    let _again = Gateway::start(&opts, &db, &prefix).await;
    resumed(&target, &ids, killed).await;
}

/// A replica frozen (SIGSTOP) for longer than the lease, holding four
/// requests in flight and four handed rows: the other replica takes them
/// all once the lease runs out; thawed, the frozen one sends none of them.
/// The one window left: a request already written before the freeze is
/// still open at the target when the other replica sends the event again
/// (a frozen process cannot withdraw it); only those events arrive twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_replica_sends_nothing_it_held_once_it_thaws() {
    let target = TestTarget::start().await;
    // The first requests are answered after 4 s, while the sender is frozen.
    target.hang(Some(Duration::from_secs(4)));
    let db = TestDb::create(Backend::Production).await;
    let prefix = unique_prefix();
    let keys = "concurrency = 4\ntimeout = \"30s\"";
    let mut opts = Opts::forwarding_to(Backend::Production, "sink", &target, keys);
    opts.lease = "3s";
    opts.heartbeat = Some("500ms");
    let first = Gateway::start(&opts, &db, &prefix).await;
    let ids = hold_eight(&first, &target, &db, "frozen").await;
    first.freeze(true);
    let frozen = Instant::now();
    target.hang(None);
    let _second = Gateway::start(&opts, &db, &prefix).await;
    let taken_over = eventually(Duration::from_secs(15), || async {
        let seen = first_after(&target, frozen);
        ids.iter().all(|id| seen.contains_key(id))
    })
    .await;
    assert!(taken_over, "the other replica sent every held event");
    // The frozen replica's first answers are waiting in its sockets now.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before_thaw = target.arrivals().len();
    first.freeze(false);
    let thawed = Instant::now();
    // Several heartbeats and a poll for the thawed replica to act in.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let late: Vec<_> = target
        .arrivals()
        .into_iter()
        .filter(|(at, _)| *at >= thawed)
        .collect();
    assert!(late.is_empty(), "sent after the thaw: {late:?}");
    assert_eq!(target.arrivals().len(), before_thaw);

    let written_before_freeze: HashSet<String> = target
        .arrivals()
        .into_iter()
        .filter(|(at, _)| *at < frozen)
        .map(|(_, id)| id)
        .collect();
    assert_eq!(written_before_freeze.len(), 4);
    let twice: HashSet<String> = target
        .sends_per_id_arrived()
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(id, _)| id)
        .collect();
    assert!(
        twice.is_subset(&written_before_freeze),
        "only requests written before the freeze arrive twice: {twice:?}"
    );
}

/// A target that answers after 5 s, a PostgreSQL ledger, its Redis prefix,
/// and options forwarding to it with a 3 s lease renewed every 500 ms.
async fn slow_target_short_lease() -> (TestTarget, TestDb, String, Opts) {
    let target = TestTarget::start().await;
    target.hang(Some(Duration::from_secs(5)));
    let db = TestDb::create(Backend::Production).await;
    let mut opts = Opts::forwarding_to(Backend::Production, "sink", &target, "timeout = \"30s\"");
    opts.lease = "3s";
    opts.heartbeat = Some("500ms");
    (target, db, unique_prefix(), opts)
}

/// Posts `n` Stripe events `<tag>_<i>` to `gw`, each acknowledged.
async fn post_n(client: &reqwest::Client, gw: &Gateway, tag: &str, n: usize) {
    for i in 0..n {
        let r = post_to(client, &gw.url("/webhooks/stripe"), &format!("{tag}_{i}")).await;
        assert_eq!(r.unwrap().status(), 200);
    }
}

/// A request that takes longer than the lease keeps its row: the heartbeat
/// renews it, so the other replica, polling every 200 ms, never takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_slower_than_the_lease_is_not_taken_by_another_replica() {
    const N: usize = 3;
    let (target, db, prefix, opts) = slow_target_short_lease().await;
    let first = Gateway::start(&opts, &db, &prefix).await;
    let _second = Gateway::start(&opts, &db, &prefix).await;
    let client = reqwest::Client::new();
    post_n(&client, &first, "evt_slow", N).await;
    let delivered = eventually(Duration::from_secs(20), || async { target.count() == N }).await;
    assert!(delivered, "every slow request was answered");
    // Longer than a lease more, for a late taker to show itself.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let per_id = target.sends_per_id_arrived();
    assert_eq!(per_id.len(), N, "{per_id:?}");
    assert!(per_id.values().all(|n| *n == 1), "sent twice: {per_id:?}");
}

/// The libfaketime preload library, when installed (Debian `libfaketime`;
/// scripts/test.sh installs it).
fn faketime_lib() -> Option<String> {
    let dir = std::fs::read_dir("/usr/lib").ok()?;
    dir.flatten()
        .map(|e| e.path().join("faketime/libfaketime.so.1"))
        .find(|p| p.exists())
        .map(|p| p.display().to_string())
}

/// Replicas on one PostgreSQL ledger keep its clock, not their own: a
/// replica whose wall clock runs 90 s ahead (libfaketime, that process
/// only, monotonic time untouched) neither takes the rows another replica
/// holds leased (their `lease_until` would look long past to its own clock)
/// nor stamps its events 90 s into the future.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_clock_runs_ahead_keeps_the_ledgers_time() {
    const N: usize = 3;
    let lib = faketime_lib().expect("libfaketime is installed (scripts/test.sh)");
    let (target, db, prefix, opts) = slow_target_short_lease().await;
    let first = Gateway::start(&opts, &db, &prefix).await;
    let client = reqwest::Client::new();
    post_n(&client, &first, "evt_held", N).await;
    // The first replica holds all three (the target answers after 5 s).
    let taken = eventually(Duration::from_secs(10), || async {
        target.arrivals().len() == N
    })
    .await;
    assert!(taken, "the first replica sent every event");
    let mut ahead = opts.clone();
    ahead.env = vec![
        ("LD_PRELOAD".into(), lib),
        ("FAKETIME".into(), "+90s".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ];
    let second = Gateway::start(&ahead, &db, &prefix).await;
    let r = post_to(&client, &second.url("/webhooks/stripe"), "evt_from_ahead").await;
    assert_eq!(r.unwrap().status(), 200);
    let delivered = eventually(Duration::from_secs(20), || async {
        target.count() == N + 1
    })
    .await;
    assert!(delivered, "every request was answered");
    // Longer than a lease more, for a late taker to show itself.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let per_id = target.sends_per_id_arrived();
    assert_eq!(per_id.len(), N + 1, "{per_id:?}");
    assert!(per_id.values().all(|n| *n == 1), "sent twice: {per_id:?}");
    // Its event carries the ledger's time, not its own clock's.
    use sqlx::Connection;
    let mut c = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let stamped: i64 = sqlx::query_scalar(
        "SELECT received_at - (extract(epoch FROM clock_timestamp()) * 1000)::int8
         FROM hookgate_events WHERE event_id = 'evt_from_ahead'",
    )
    .fetch_one(&mut c)
    .await
    .unwrap();
    assert!(stamped < 30_000, "stamped {stamped} ms ahead of the ledger");
}
