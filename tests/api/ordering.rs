//! Per-object ordering (issue #11): a target with `order_by` gets the
//! deliveries of one key one at a time, in the gateway's received order
//! (the stored sequence), while keys stay parallel; a dead delivery blocks
//! its key only until it is dead, and shows how many overtook it.

use crate::both_backends;
use crate::helpers::process::Gateway;
use crate::helpers::*;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

both_backends!(a_dead_event_blocks_only_its_key_and_shows_who_overtook_it);

/// A Stripe event `id` about object `key`.
fn event(id: &str, key: &str) -> Vec<u8> {
    format!(
        r#"{{"id":"{id}","object":"event","type":"customer.updated","data":{{"object":{{"id":"{key}"}}}}}}"#
    )
    .into_bytes()
}

/// An ordered target named `ordered` for the stripe source.
fn opts(b: Backend, target: &TestTarget, max_attempts: u32) -> Opts {
    let mut opts = Opts::new(b);
    opts.stripe_targets = vec!["ordered".into()];
    opts.extra = format!(
        "[targets.ordered]\nurl = \"{}\"\norder_by = \"json:/data/object/id\"\n\
         max_attempts = {max_attempts}\nconcurrency = 32\n",
        target.url
    );
    opts
}

/// Posts every `(id, key)` with at most `parallel` requests at once,
/// spread over `apps` in turn; every one must be `new`.
async fn send_all(apps: &[Arc<TestApp>], events: &[(String, String)], parallel: usize) {
    let gate = Arc::new(Semaphore::new(parallel));
    let mut set = JoinSet::new();
    for (i, (id, key)) in events.iter().enumerate() {
        let permit = gate.clone().acquire_owned().await.unwrap();
        let app = apps[i % apps.len()].clone();
        let body = event(id, key);
        let id = id.clone();
        set.spawn(async move {
            let r = app.post_stripe_body(&body).await;
            drop(permit);
            assert_eq!(r.status().as_u16(), 200, "{id}");
            assert_eq!(dedup_header(&r), "new", "{id}");
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
}

/// Every stripe event's delivery to `ordered`, from the events API:
/// event id → the delivery's JSON (state, order_key, order_seq, …).
async fn deliveries(app: &TestApp) -> HashMap<String, Value> {
    deliveries_via(async |path: String| app.admin_text(&path).await).await
}

/// [`deliveries`], read through any admin `GET` (a gateway process's too).
async fn deliveries_via(get: impl AsyncFn(String) -> String) -> HashMap<String, Value> {
    let mut out = HashMap::new();
    let mut cursor = String::new();
    loop {
        let text = get(format!(
            "/admin/events?source=stripe&limit=200&cursor={cursor}"
        ))
        .await;
        let page: Value = serde_json::from_str(&text).expect("events page");
        for e in page["items"].as_array().unwrap() {
            let d = e["deliveries"]
                .as_array()
                .unwrap()
                .iter()
                .find(|d| d["target"] == "ordered")
                .cloned()
                .unwrap_or(Value::Null);
            out.insert(e["event_id"].as_str().unwrap().to_owned(), d);
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = c.to_owned(),
            None => return out,
        }
    }
}

/// The event ids the target answered 2xx, in the order it got them.
fn delivered_in_order(t: &TestTarget) -> Vec<String> {
    t.received()
        .iter()
        .filter(|r| r.status < 300)
        .map(|r| r.headers["hookgate-event-id"].to_str().unwrap().to_owned())
        .collect()
}

/// Checks that every key's successful deliveries reached the target in
/// strictly increasing stored sequence, that the sequence of each key is
/// 1..=n (received order, no gaps) and that every event was delivered.
fn assert_received_order(
    t: &TestTarget,
    stored: &HashMap<String, Value>,
    events: &[(String, String)],
) {
    let mut per_key: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for id in delivered_in_order(t) {
        let d = &stored[&id];
        let key = d["order_key"].as_str().expect("ordered row").to_owned();
        per_key
            .entry(key)
            .or_default()
            .push(d["order_seq"].as_i64().unwrap());
    }
    let mut expected: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, key) in events {
        *expected.entry(key.as_str()).or_default() += 1;
    }
    assert_eq!(per_key.len(), expected.len(), "every key delivered");
    for (key, seqs) in &per_key {
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "key {key} delivered out of received order: {seqs:?}"
        );
        let n = expected[key.as_str()] as i64;
        assert_eq!(
            *seqs,
            (1..=n).collect::<Vec<_>>(),
            "key {key}: every event, once, in order"
        );
    }
    for (id, _) in events {
        assert_eq!(stored[id]["state"], "delivered", "{id}: {}", stored[id]);
    }
}

/// 1,000 events over 20 keys, sent concurrently to two replicas sharing
/// one PostgreSQL outbox; the target fails ~20 % of attempts at random.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keys_are_delivered_in_received_order_across_two_replicas_with_random_failures() {
    let target = TestTarget::start().await;
    target.fail_ratio(0.2);
    // A little work per request, so overlapping keys are visible.
    target.hang(Some(Duration::from_millis(2)));
    let opts = opts(Backend::Production, &target, 60);
    let a = Arc::new(spawn_app(opts.clone()).await);
    let b = Arc::new(spawn_on(opts, a.db.clone(), a.prefix.clone()).await);
    let events: Vec<(String, String)> = (0..1000)
        .map(|i| (format!("evt_ord_{i:04}"), format!("obj_{:02}", i % 20)))
        .collect();
    let started = Instant::now();
    send_all(&[a.clone(), b.clone()], &events, 32).await;
    let all = eventually(Duration::from_secs(120), || async {
        let stats = a.stats().await;
        stats["sources"]["stripe"]["targets"]["ordered"]["pending"] == 0
            && stats["sources"]["stripe"]["targets"]["ordered"]["retrying"] == 0
            && delivered_in_order(&target).len() >= events.len()
    })
    .await;
    let took = started.elapsed();
    assert!(all, "not all delivered: {}", a.stats().await);
    let stored = deliveries(&a).await;
    assert_eq!(stored.len(), events.len());
    assert_received_order(&target, &stored, &events);
    // Keys went in parallel: one key is never in flight twice (checked
    // above), so more than one request at once means several keys.
    let peak = target.peak_in_flight();
    assert!(
        peak > 1,
        "keys were not delivered in parallel (peak {peak})"
    );
    let failed = target.received().iter().filter(|r| r.status >= 300).count();
    assert!(failed > 0, "the target failed some attempts");
    eprintln!("ordering: 1000 events, {failed} failed attempts, peak {peak} in flight, {took:?}");
}

/// The embedded backend (SQLite, one process): the same rule, a few keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_delivered_in_received_order_on_the_embedded_backend() {
    let target = TestTarget::start().await;
    target.fail_ratio(0.2);
    target.hang(Some(Duration::from_millis(2)));
    let app = Arc::new(spawn_app(opts(Backend::Embedded, &target, 60)).await);
    let events: Vec<(String, String)> = (0..200)
        .map(|i| (format!("evt_ord_e{i:03}"), format!("obj_{}", i % 4)))
        .collect();
    send_all(std::slice::from_ref(&app), &events, 16).await;
    let all = eventually(Duration::from_secs(60), || async {
        let stats = app.stats().await;
        stats["sources"]["stripe"]["pending"] == 0
            && stats["sources"]["stripe"]["retrying"] == 0
            && delivered_in_order(&target).len() >= events.len()
    })
    .await;
    assert!(all, "not all delivered: {}", app.stats().await);
    let stored = deliveries(&app).await;
    assert_received_order(&target, &stored, &events);
    assert!(target.peak_in_flight() > 1, "keys in parallel");
}

/// Key `obj_0`'s third event fails until dead: every other key is
/// delivered meanwhile, `obj_0` moves on once it is dead, and the dead
/// delivery says how many overtook it (events API and `/stats`). A replay
/// sends it at the back of its key.
async fn a_dead_event_blocks_only_its_key_and_shows_who_overtook_it(b: Backend) {
    let target = TestTarget::start().await;
    let poison = "evt_dead_obj0_2";
    target.poison(poison);
    // Every failure waits a second before its retry: the key stays blocked
    // for ~6 s while the other keys finish.
    target.retry_after(Some(1));
    let mut o = opts(b, &target, 7);
    o.backoff_max = "1s";
    let app = Arc::new(spawn_app(o).await);
    let mut events = Vec::new();
    for n in 0..10 {
        for k in 0..5 {
            events.push((format!("evt_dead_obj{k}_{n}"), format!("obj_{k}")));
        }
    }
    // One request at a time: the sequence of each key is its index.
    send_all(std::slice::from_ref(&app), &events, 1).await;
    let others = |t: &TestTarget| {
        delivered_in_order(t)
            .iter()
            .filter(|id| !id.starts_with("evt_dead_obj0_"))
            .count()
    };
    let done = eventually(Duration::from_secs(20), || async { others(&target) == 40 }).await;
    assert!(done, "other keys delivered: {}", others(&target));
    // Meanwhile obj_0 is stuck behind its poison event: the events after it
    // have not been sent, and the poison is not dead yet.
    let stored = deliveries(&app).await;
    assert_ne!(
        stored[poison]["state"], "dead",
        "the others did not wait for the dead: {}",
        stored[poison]
    );
    let sent: Vec<String> = target
        .received()
        .iter()
        .map(|r| r.headers["hookgate-event-id"].to_str().unwrap().to_owned())
        .filter(|id| id.starts_with("evt_dead_obj0_"))
        .collect();
    assert!(
        sent.iter()
            .all(|id| id == "evt_dead_obj0_0" || id == "evt_dead_obj0_1" || id == poison),
        "nothing after the failing event was sent: {sent:?}"
    );

    // Dead after 7 attempts; then the key moves on, in order.
    // (The target logs a request before the gateway records its answer:
    // wait for the records too.)
    let moved = eventually(Duration::from_secs(20), || async {
        let stats = app.stats().await;
        delivered_in_order(&target).len() == 49
            && stats["sources"]["stripe"]["pending"] == 0
            && stats["sources"]["stripe"]["retrying"] == 0
    })
    .await;
    assert!(
        moved,
        "the key moved on after the dead: {:?}",
        delivered_in_order(&target)
    );
    let stored = deliveries(&app).await;
    assert_eq!(stored[poison]["state"], "dead");
    assert_eq!(stored[poison]["attempts"], 7);
    let ok: Vec<(String, String)> = events
        .iter()
        .filter(|(id, _)| id != poison)
        .cloned()
        .collect();
    let obj0: Vec<i64> = delivered_in_order(&target)
        .iter()
        .filter(|id| id.starts_with("evt_dead_obj0_"))
        .map(|id| stored[id]["order_seq"].as_i64().unwrap())
        .collect();
    assert_eq!(
        obj0,
        [1, 2, 4, 5, 6, 7, 8, 9, 10],
        "obj_0 in order, without its dead event"
    );
    for (id, _) in &ok {
        assert_eq!(stored[id]["state"], "delivered", "{id}");
    }
    // The dead event: overtaken by the 7 events of its key after it.
    assert_eq!(stored[poison]["order_key"], "obj_0");
    assert_eq!(stored[poison]["order_seq"], 3);
    assert_eq!(stored[poison]["overtaken_by"], 7, "{}", stored[poison]);
    let detail: Value = serde_json::from_str(
        &app.admin_text(&format!("/admin/events/stripe/{poison}"))
            .await,
    )
    .unwrap();
    let d = &detail["deliveries"][0];
    assert_eq!(d["overtaken_by"], 7, "event detail: {detail}");
    let stats = app.stats().await;
    let t = &stats["sources"]["stripe"]["targets"]["ordered"];
    assert_eq!(t["overtaken_by"], 7, "{stats}");
    assert_eq!(t["dead"], 1, "{stats}");

    // Replay: the event goes to the back of its key and is delivered.
    target.cure();
    let r = app
        .client
        .post(app.url("/admin/replay"))
        .bearer_auth(ADMIN_TOKEN)
        .header("content-type", "application/json")
        .body(serde_json::json!({ "source": "stripe", "event_id": poison }).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let replayed = eventually(Duration::from_secs(20), || async {
        let stats = app.stats().await;
        delivered_in_order(&target).len() == 50
            && stats["sources"]["stripe"]["pending"] == 0
            && stats["sources"]["stripe"]["retrying"] == 0
    })
    .await;
    assert!(replayed, "the replayed event was delivered");
    let stored = deliveries(&app).await;
    assert_eq!(stored[poison]["state"], "delivered");
    assert_eq!(
        stored[poison]["order_seq"], 11,
        "back of its key: {}",
        stored[poison]
    );
    assert_eq!(stored[poison]["overtaken_by"], Value::Null);
    let stats = app.stats().await;
    assert_eq!(
        stats["sources"]["stripe"]["targets"]["ordered"]["overtaken_by"], 0,
        "{stats}"
    );
}

/// Ordering survives a kill -9 (issue #11: "correct under several replicas
/// and restarts"). A gateway process is killed while it delivers; the next
/// one, on the same outbox, takes the killed one's leased rows once their
/// lease ran out. A delivery the target answered but the killed process
/// never recorded is sent again, right away, before its key's next event:
/// per key, what the target gets never goes back, and with repeats
/// removed it is every event, once, in received order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_stay_in_received_order_across_a_kill_9_and_restart() {
    const EVENTS: usize = 240;
    const KEYS: usize = 8;
    let target = TestTarget::start().await;
    target.fail_ratio(0.1);
    // Slow enough that the kill lands mid-delivery.
    target.hang(Some(Duration::from_millis(250)));
    let db = TestDb::create(Backend::Production).await;
    let prefix = unique_prefix();
    let mut o = opts(Backend::Production, &target, 60);
    // A short lease (the next process waits it out), so a short attempt timeout.
    o.lease = "8s";
    o.extra.push_str("timeout = \"2s\"\n");
    o.backoff_max = "1s";
    let mut first = Gateway::start(&o, &db, &prefix).await;
    let client = reqwest::Client::new();
    let events: Vec<(String, String)> = (0..EVENTS)
        .map(|i| (format!("evt_rs_{i:03}"), format!("obj_{}", i % KEYS)))
        .collect();
    // One at a time, so each key's received order is its send order.
    for (id, key) in &events {
        let body = event(id, key);
        let ts = now();
        let mut req = client
            .post(first.url("/webhooks/stripe"))
            .body(body.clone());
        for (k, v) in signers::stripe(STRIPE_SECRET, ts, &body) {
            req = req.header(k, v);
        }
        let r = req.send().await.unwrap();
        assert_eq!(dedup_header(&r), "new", "{id}");
    }
    let some = eventually(Duration::from_secs(20), || async {
        delivered_in_order(&target).len() >= EVENTS / 4
    })
    .await;
    assert!(some, "deliveries started before the kill");
    first.kill9();
    let at_kill = delivered_in_order(&target).len();
    assert!(at_kill < EVENTS, "the kill came before the end ({at_kill})");

    let second = Gateway::start(&o, &db, &prefix).await;
    let all = eventually(Duration::from_secs(90), || async {
        let stats: Value = serde_json::from_str(&second.admin_text("/stats").await).unwrap();
        let t = &stats["sources"]["stripe"]["targets"]["ordered"];
        t["pending"] == 0 && t["retrying"] == 0 && t["delivered"].as_i64() >= Some(1)
    })
    .await;
    let stored = deliveries_via(async |path: String| second.admin_text(&path).await).await;
    assert!(all, "not all delivered after the restart");
    assert_eq!(stored.len(), EVENTS);
    for (id, _) in &events {
        assert_eq!(stored[id]["state"], "delivered", "{id}: {}", stored[id]);
    }
    let mut per_key: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for id in delivered_in_order(&target) {
        let d = &stored[&id];
        per_key
            .entry(d["order_key"].as_str().unwrap().to_owned())
            .or_default()
            .push(d["order_seq"].as_i64().unwrap());
    }
    assert_eq!(per_key.len(), KEYS);
    let mut repeats = 0;
    for (key, seqs) in &per_key {
        assert!(
            seqs.windows(2).all(|w| w[0] <= w[1]),
            "key {key} went back after the restart: {seqs:?}"
        );
        let mut once = seqs.clone();
        once.dedup();
        repeats += seqs.len() - once.len();
        let n = (EVENTS / KEYS) as i64;
        assert_eq!(once, (1..=n).collect::<Vec<_>>(), "key {key}");
    }
    eprintln!("ordering across kill -9: {at_kill} delivered before, {repeats} sent again");
}
