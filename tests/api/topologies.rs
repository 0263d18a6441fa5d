//! The claim cache on Sentinel and on Cluster, each against throwaway
//! redis-server processes this test starts and kills by PID.

use crate::helpers::topology::{Cluster, SentinelSet, cli};
use crate::helpers::*;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

async fn ready(app: &TestApp) -> bool {
    let r = app.client.get(app.url("/readyz")).send().await.unwrap();
    let v: serde_json::Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    v["status"] == "ready"
}

/// The cached value of `id` on the server at `port` (`done:…`, or "").
fn cached(app: &TestApp, port: u16, id: &str) -> String {
    let key = format!("{}:v1:stripe:{id}", app.prefix);
    cli(port, &["GET", &key]).trim().to_owned()
}

/// Posts `id` and records the answer; panics on a second `new`.
async fn post(app: &TestApp, news: &mut HashMap<String, u32>, id: &str) -> String {
    let r = app.post_stripe(id).await;
    assert_eq!(r.status().as_u16(), 200, "{id}");
    let d = dedup_header(&r);
    if d == "new" {
        let n = news.entry(id.to_owned()).or_default();
        *n += 1;
        assert_eq!(*n, 1, "two `new` answers for {id}");
    }
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_moves_claims_to_the_new_master_and_dedup_stays_exact() {
    let mut set = SentinelSet::start().await;
    let mut opts = Opts::new(Backend::Production);
    opts.redis_url = Some(set.url());
    let app = spawn_app(opts).await;
    let mut news = HashMap::new();

    assert_eq!(post(&app, &mut news, "evt_s1").await, "new");
    assert_eq!(post(&app, &mut news, "evt_s1").await, "duplicate");
    assert!(cached(&app, set.master.port, "evt_s1").starts_with("done:"));
    assert!(ready(&app).await);

    let old = set.master.port;
    set.master.kill();
    // Keep traffic flowing through the failover: every id new once, then duplicate.
    let start = Instant::now();
    let mut i = 0;
    while set.master_port() != Some(set.replica.port) {
        assert!(start.elapsed() < Duration::from_secs(20), "no failover");
        let id = format!("evt_s_during_{i}");
        assert_eq!(post(&app, &mut news, &id).await, "new");
        assert_eq!(post(&app, &mut news, &id).await, "duplicate");
        assert_eq!(post(&app, &mut news, "evt_s1").await, "duplicate");
        i += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let back = eventually(Duration::from_secs(10), || ready(&app)).await;
    assert!(back, "readiness returns after the failover");

    // Claims land on the promoted replica, without a restart (once dedup's
    // one-probe-per-second sees the cache answer again).
    let new = set.replica.port;
    assert_ne!(new, old);
    let mut n = 0;
    loop {
        let id = format!("evt_s_after_{n}");
        assert_eq!(post(&app, &mut news, &id).await, "new");
        assert_eq!(post(&app, &mut news, &id).await, "duplicate");
        if cached(&app, new, &id).starts_with("done:") {
            break;
        }
        assert!(n < 50, "claims never reached the new master");
        n += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for j in 0..i {
        let id = format!("evt_s_during_{j}");
        assert_eq!(post(&app, &mut news, &id).await, "duplicate", "{id}");
    }
    assert_eq!(post(&app, &mut news, "evt_s1").await, "duplicate");
    assert_eq!(app.rows("stripe", "evt_s1").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_routes_each_claim_to_its_slot_and_dedup_is_exact() {
    let cluster = Cluster::start().await;
    let mut opts = Opts::new(Backend::Production);
    opts.redis_url = Some(cluster.url());
    let app = Arc::new(spawn_app(opts).await);
    let mut news = HashMap::new();
    assert!(ready(&app).await);

    let ids: Vec<String> = (0..40).map(|i| format!("evt_c_{i}")).collect();
    for id in &ids {
        assert_eq!(post(&app, &mut news, id).await, "new", "{id}");
    }
    for id in &ids {
        assert_eq!(post(&app, &mut news, id).await, "duplicate", "{id}");
    }
    // Each key sits on the node owning its slot, and all three got some.
    for node in &cluster.nodes {
        let keys = cli(node.port, &["KEYS", &format!("{}:*", app.prefix)]);
        assert!(keys.lines().count() > 0, "no keys on node {}", node.port);
    }
    for id in &ids {
        let on: Vec<_> = cluster
            .nodes
            .iter()
            .filter(|n| cached(&app, n.port, id).starts_with("done:"))
            .collect();
        assert_eq!(on.len(), 1, "{id} cached on exactly one node");
    }

    let mut tasks = vec![];
    for _ in 0..50 {
        let app = app.clone();
        tasks.push(tokio::spawn(async move {
            dedup_header(&app.post_stripe("evt_c_race").await)
        }));
    }
    let mut new = 0;
    for t in tasks {
        if t.await.unwrap() == "new" {
            new += 1;
        }
    }
    assert_eq!(new, 1);
    assert_eq!(app.rows("stripe", "evt_c_race").await, 1);
    assert!(ready(&app).await);
}
