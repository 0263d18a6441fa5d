//! Delivery from the outbox to real loopback targets, on both backends.

use crate::both_backends;
use crate::helpers::*;
use std::time::{Duration, Instant};

both_backends!(
    one_event_two_targets_each_get_it_once_with_identical_bytes,
    failures_are_retried_and_every_attempt_is_recorded,
    a_dead_delivery_is_replayed_once_after_the_target_recovers,
    forwards_carry_a_standard_webhooks_signature_of_the_gateway,
    a_hanging_target_does_not_delay_a_healthy_one,
    a_targets_retry_after_is_honoured,
    a_recovered_target_gets_its_retrying_backlog_at_once,
    new_events_reach_an_idle_target_by_hand_off_without_a_claim,
    a_target_never_has_more_than_its_concurrency_in_flight,
    a_busy_target_takes_its_next_round_by_hand_off,
    an_adaptive_limit_grows_on_a_fast_target_and_falls_on_an_overloaded_one,
);

const WAIT: Duration = Duration::from_secs(15);

fn targets_toml(targets: &[(&str, &TestTarget, &str)]) -> String {
    targets
        .iter()
        .map(|(name, t, extra)| format!("[targets.{name}]\nurl = \"{}\"\n{extra}\n", t.url))
        .collect()
}

async fn one_event_two_targets_each_get_it_once_with_identical_bytes(b: Backend) {
    let (billing, ledger) = (TestTarget::start().await, TestTarget::start().await);
    let mut opts = Opts::new(b);
    // Polling alone would take 30s: a fast delivery proves the commit woke the worker.
    opts.poll_interval = "30s";
    opts.stripe_targets = vec!["billing".into(), "ledger".into()];
    opts.extra = targets_toml(&[("billing", &billing, ""), ("ledger", &ledger, "")]);
    let app = spawn_app(opts).await;

    // Odd bytes on purpose: whitespace and key order must survive untouched.
    let body = b"{ \"id\" : \"evt_fwd_1\",\n  \"object\":\"event\" }  ".to_vec();
    let sent = Instant::now();
    let r = app.post_stripe_body(&body).await;
    assert_eq!(dedup_header(&r), "new");
    assert!(
        eventually(WAIT, || async {
            billing.count() == 1 && ledger.count() == 1
        })
        .await
    );
    let latency = sent.elapsed();
    assert!(
        latency < Duration::from_secs(3),
        "first delivery took {latency:?}"
    );

    // A duplicate is never forwarded again.
    app.post_stripe_body(&body).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    for t in [&billing, &ledger] {
        let got = t.received();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].body.as_ref(), body.as_slice());
        let h = &got[0].headers;
        assert_eq!(h["hookgate-event-id"], "evt_fwd_1");
        assert_eq!(h["hookgate-source"], "stripe");
        assert_eq!(h["hookgate-attempt"], "1");
        assert_eq!(h["content-type"], "application/json");
        assert!(
            h.contains_key("stripe-signature"),
            "provider headers are forwarded"
        );
        assert_ne!(h["host"], app.addr.to_string());
    }
    let stats = app.stats().await;
    let eventually_delivered = eventually(WAIT, || async {
        app.stats().await["sources"]["stripe"]["delivered"] == 2
    })
    .await;
    assert!(eventually_delivered, "{stats}");
}

async fn failures_are_retried_and_every_attempt_is_recorded(b: Backend) {
    let t = TestTarget::start().await;
    t.plan(&[500, 500, 500]);
    let opts = Opts::forwarding_to(b, "flaky", &t, "max_attempts = 6");
    let app = spawn_app(opts).await;
    app.post_stripe("evt_flaky").await;

    let done = eventually(WAIT, || async {
        app.stats().await["sources"]["stripe"]["delivered"] == 1
    })
    .await;
    assert!(done, "delivered after retries");
    let attempts = app
        .state
        .store
        .console
        .attempts("stripe", "evt_flaky", "flaky")
        .await
        .unwrap();
    let statuses: Vec<_> = attempts.iter().map(|a| a.status).collect();
    assert_eq!(statuses, vec![Some(500), Some(500), Some(500), Some(200)]);
    assert_eq!(attempts.last().unwrap().attempt, 4);
    let got = t.received();
    assert_eq!(got.len(), 4);
    assert_eq!(got[3].headers["hookgate-attempt"], "4");
}

async fn a_dead_delivery_is_replayed_once_after_the_target_recovers(b: Backend) {
    let t = TestTarget::start().await;
    t.always(Some(503));
    let opts = Opts::forwarding_to(b, "down", &t, "max_attempts = 3");
    let app = spawn_app(opts).await;
    app.post_stripe("evt_dead").await;

    let dead = eventually(WAIT, || async {
        app.stats().await["sources"]["stripe"]["dead"] == 1
    })
    .await;
    assert!(dead, "dead after max_attempts");
    assert_eq!(t.count(), 3);

    // The CLI replays too; a filter that matches nothing replays nothing.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("hookgate.toml");
    std::fs::write(&cfg, app.opts.toml(&app.db, &app.prefix, "127.0.0.1:0")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .arg("--config")
        .arg(&cfg)
        .args(["replay", "--source", "stripe", "--event-id", "evt_other"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("replayed 0 "));

    t.always(None);
    let replay = app
        .client
        .post(app.url("/admin/replay"))
        .bearer_auth(ADMIN_TOKEN)
        .body(r#"{"source":"stripe"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(replay.status(), 200);
    assert_eq!(replay.text().await.unwrap(), r#"{"replayed":1}"#);
    assert!(eventually(WAIT, || async { t.count() == 4 }).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(t.count(), 4, "delivered exactly once after replay");
    let s = &app.stats().await["sources"]["stripe"];
    assert_eq!(s["dead"], 0);
    assert_eq!(s["delivered"], 1);

    let unauth = app
        .client
        .post(app.url("/admin/replay"))
        .send()
        .await
        .unwrap();
    assert_eq!(unauth.status(), 401);
}

async fn forwards_carry_a_standard_webhooks_signature_of_the_gateway(b: Backend) {
    let t = TestTarget::start().await;
    // Key bytes "hookgate-test-key-123456", the Standard Webhooks way.
    let opts = Opts::forwarding_to(
        b,
        "signed",
        &t,
        &format!("signing_secret = \"{SW_SECRET}\""),
    );
    let app = spawn_app(opts).await;
    app.post_stripe("evt_signed").await;
    assert!(eventually(WAIT, || async { t.count() == 1 }).await);

    let got = &t.received()[0];
    let h = |n: &str| got.headers[n].to_str().unwrap().to_owned();
    let (id, ts) = (
        h("webhook-id"),
        h("webhook-timestamp").parse::<i64>().unwrap(),
    );
    // Recompute with the test's own signer (independent of the gateway).
    let expected = signers::standard(SW_KEY, &id, ts, &got.body);
    assert_eq!(h("webhook-signature"), expected[2].1);
    assert!((now() - ts).abs() < 60);
    assert!(id.starts_with("msg_") && !id.contains('.'));
}

async fn a_hanging_target_does_not_delay_a_healthy_one(b: Backend) {
    let (slow, fast) = (TestTarget::start().await, TestTarget::start().await);
    slow.hang(Some(Duration::from_secs(30)));
    let mut opts = Opts::new(b);
    opts.lease = "30s";
    opts.stripe_targets = vec!["slow".into(), "fast".into()];
    opts.extra = targets_toml(&[
        ("slow", &slow, "timeout = \"20s\"\nconcurrency = 2"),
        ("fast", &fast, ""),
    ]);
    let app = spawn_app(opts).await;
    let started = Instant::now();
    for i in 0..10 {
        let r = app.post_stripe(&format!("evt_hang_{i}")).await;
        assert_eq!(
            r.status(),
            200,
            "ingest is not slowed by the hanging target"
        );
    }
    assert!(eventually(WAIT, || async { fast.count() == 10 }).await);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "healthy target got all events in {:?}",
        started.elapsed()
    );
    assert_eq!(slow.count(), 0);
}

async fn a_targets_retry_after_is_honoured(b: Backend) {
    let t = TestTarget::start().await;
    t.plan(&[429]);
    t.retry_after(Some(1));
    let mut opts = Opts::forwarding_to(b, "busy", &t, "");
    opts.backoff_max = "5s";
    let app = spawn_app(opts).await;
    app.post_stripe("evt_busy").await;
    assert!(eventually(WAIT, || async { t.count() == 2 }).await);
    let times = t.times();
    let gap = times[1] - times[0];
    // backoff_base is 20ms in tests: only Retry-After explains a 1s gap.
    assert!(gap >= Duration::from_millis(900), "retried after {gap:?}");
}

/// Backoff must not leave a recovered target idle: once an attempt succeeds
/// after the target was down, the deliveries waiting out their backoff are
/// due at once.
async fn a_recovered_target_gets_its_retrying_backlog_at_once(b: Backend) {
    let t = TestTarget::start().await;
    // Down for the first four events, asking for a 20 s pause each time.
    t.plan(&[503, 503, 503, 503]);
    t.retry_after(Some(20));
    let mut opts = Opts::forwarding_to(b, "sink", &t, "");
    opts.backoff_max = "30s";
    let app = spawn_app(opts).await;
    for i in 0..4 {
        app.post_stripe(&format!("evt_down_{i}")).await;
    }
    assert!(eventually(WAIT, || async { t.count() == 4 }).await);
    // Back: a new event goes through, and the four follow it right away
    // instead of 20 s later.
    let back = Instant::now();
    app.post_stripe("evt_back").await;
    assert!(
        eventually(WAIT, || async { t.count() == 9 }).await,
        "{} requests",
        t.count()
    );
    assert!(
        back.elapsed() < Duration::from_secs(8),
        "backlog took {:?}",
        back.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_on_one_replica_wakes_the_workers_of_another() {
    let t = TestTarget::start().await;
    let mut ingest_only = Opts::new(Backend::Production);
    ingest_only.stripe_targets = vec!["sink".into()];
    ingest_only.extra = targets_toml(&[("sink", &t, "")]);
    ingest_only.delivery = false;
    let mut worker = ingest_only.clone();
    worker.delivery = true;
    worker.poll_interval = "30s";

    let a = spawn_app(ingest_only).await;
    let b = spawn_on(worker, a.db.clone(), a.prefix.clone()).await;
    // Let b's LISTEN connection come up (a local connect; generous for a busy CI).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let sent = Instant::now();
    assert_eq!(a.post_stripe("evt_notify").await.status(), 200);
    assert!(eventually(Duration::from_secs(10), || async { t.count() == 1 }).await);
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "took {:?}",
        sent.elapsed()
    );
    drop(b);
}

/// The hand-off (docs/design.md "Delivery"): a new event's delivery is
/// leased at commit and handed to the loop, so an idle target gets it
/// without a claim query, and `/metrics` counts it.
async fn new_events_reach_an_idle_target_by_hand_off_without_a_claim(b: Backend) {
    let t = TestTarget::start().await;
    let name = &metrics_name("handoff", b);
    let mut opts = Opts::forwarding_to(b, name, &t, "concurrency = 4");
    opts.poll_interval = "30s";
    let app = spawn_app(opts).await;
    for i in 0..3 {
        let r = app.post_stripe(&format!("evt_handoff_{i}")).await;
        assert_eq!(dedup_header(&r), "new");
    }
    assert!(eventually(WAIT, || async { t.count() == 3 }).await);
    assert_eq!(handed_off(&app, name).await, 3);
    let recorded = eventually(WAIT, || async {
        app.stats().await["sources"]["stripe"]["delivered"] == 3
    })
    .await;
    assert!(recorded, "{}", app.stats().await);
}

/// A slot comes back when the target answers, before the attempt's record
/// commits (deliver::Sending): hand-offs and claims together still never
/// send more than `concurrency` requests to a target at once, and every
/// event arrives once.
async fn a_target_never_has_more_than_its_concurrency_in_flight(b: Backend) {
    let t = TestTarget::start().await;
    t.hang(Some(Duration::from_millis(60)));
    let name = &metrics_name("narrow", b);
    let opts = Opts::forwarding_to(b, name, &t, "concurrency = 3");
    let app = std::sync::Arc::new(spawn_app(opts).await);
    // More events at once than the lane has slots: the first ones go by
    // hand-off, the rest are claimed from the outbox.
    let mut posts = tokio::task::JoinSet::new();
    for i in 0..24 {
        let app = app.clone();
        posts.spawn(async move { app.post_stripe(&format!("evt_narrow_{i}")).await.status() });
    }
    while let Some(status) = posts.join_next().await {
        assert_eq!(status.unwrap(), 200);
    }
    delivered_each_once(&app, &t, 24).await;
    let peak = t.peak_in_flight();
    assert!(
        peak <= 3,
        "{peak} requests in flight to a target of concurrency 3"
    );
    assert!(
        peak >= 2,
        "the target's slots were used in parallel ({peak})"
    );
    // Both paths ran: some rows were handed off, the others claimed.
    let handed = handed_off(&app, name).await;
    assert!((1..24).contains(&handed), "{handed} of 24 handed off");
}

/// A target name of this test's own: metrics are process-wide in this test
/// binary, and both backends' variants of a test run in it.
fn metrics_name(stem: &str, b: Backend) -> String {
    match b {
        Backend::Production => format!("{stem}_pg"),
        Backend::Embedded => format!("{stem}_sqlite"),
    }
}

/// `hookgate_delivery_handoffs_total` of `target` (0 before the first).
async fn handed_off(app: &TestApp, target: &str) -> u64 {
    app.metric_value(&format!(
        "hookgate_delivery_handoffs_total{{target=\"{target}\"}}"
    ))
    .await
}

/// Waits until `n` events reached `t` and /stats counts them delivered,
/// then checks that each arrived once.
async fn delivered_each_once(app: &TestApp, t: &TestTarget, n: usize) {
    assert!(eventually(WAIT, || async { t.count() >= n }).await);
    let delivered = eventually(WAIT, || async {
        app.stats().await["sources"]["stripe"]["delivered"] == n
    })
    .await;
    assert!(delivered, "{}", app.stats().await);
    assert_eq!(t.count(), n, "each event once");
}

/// A lane holds two rounds of the target's `concurrency` (deliver::lanes::
/// LANE_DEPTH): while a full round is being sent, the next round's rows are
/// handed off too (leased at commit, waiting in the lane for a target slot)
/// instead of paying a claim; only what comes after them is claimed. The
/// target still never has more than `concurrency` requests at once.
async fn a_busy_target_takes_its_next_round_by_hand_off(b: Backend) {
    let t = TestTarget::start().await;
    // Long enough that all five posts land while the first round hangs.
    t.hang(Some(Duration::from_millis(1000)));
    let name = &metrics_name("rounds", b);
    let opts = Opts::forwarding_to(b, name, &t, "concurrency = 2");
    let app = spawn_app(opts).await;
    let posted = Instant::now();
    for i in 0..5 {
        let r = app.post_stripe(&format!("evt_rounds_{i}")).await;
        assert_eq!(dedup_header(&r), "new");
    }
    assert!(
        posted.elapsed() < Duration::from_millis(900),
        "the posts must land while the first round hangs"
    );
    delivered_each_once(&app, &t, 5).await;
    let peak = t.peak_in_flight();
    assert!(
        peak <= 2,
        "{peak} requests in flight to a target of concurrency 2"
    );
    // Two rounds of two handed off; the fifth event found the lane full.
    assert_eq!(handed_off(&app, name).await, 4);
}

/// In a fresh process (the real binary, not this test binary's shared
/// recorder), the delivery loops' metrics reach `/metrics`: their handles
/// are made after the recorder is installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_gateway_process_exports_its_delivery_metrics() {
    use crate::helpers::process::{Gateway, post_to};
    let t = TestTarget::start().await;
    let db = TestDb::create(Backend::Production).await;
    let opts = Opts::forwarding_to(Backend::Production, "sink", &t, "");
    let gw = Gateway::start(&opts, &db, &unique_prefix()).await;
    let r = post_to(
        &reqwest::Client::new(),
        &gw.url("/webhooks/stripe"),
        "evt_metrics_1",
    )
    .await;
    assert_eq!(r.unwrap().status(), 200);
    assert!(eventually(WAIT, || async { t.count() == 1 }).await);
    let line = "hookgate_delivery_attempts_total{target=\"sink\",outcome=\"delivered\"} 1";
    let exported = eventually(WAIT, || async {
        gw.admin_text("/metrics").await.contains(line)
    })
    .await;
    assert!(exported, "/metrics has `{line}`");
}

/// Posts `n` events (`prefix`_0..) 16 at a time; each must be acked.
async fn post_many(app: &std::sync::Arc<TestApp>, prefix: &str, n: usize) {
    let mut posts = tokio::task::JoinSet::new();
    for i in 0..n {
        let app = app.clone();
        let id = format!("{prefix}_{i}");
        posts.spawn(async move { app.post_stripe(&id).await.status() });
        if posts.len() >= 16 {
            assert_eq!(posts.join_next().await.unwrap().unwrap(), 200);
        }
    }
    while let Some(status) = posts.join_next().await {
        assert_eq!(status.unwrap(), 200);
    }
}

/// A target without `concurrency` gets an adaptive limit (deliver::limit),
/// counted here at the target itself: with a backlog and a target that
/// keeps up, more requests are in flight at once than the limit's start;
/// once the target answers every request late with a 503, the limit halves
/// each round, and a fresh backlog reaches it only a few at a time.
async fn an_adaptive_limit_grows_on_a_fast_target_and_falls_on_an_overloaded_one(b: Backend) {
    let t = TestTarget::start().await;
    t.hang(Some(Duration::from_millis(20)));
    let opts = Opts::forwarding_to(b, "adaptive", &t, "");
    let app = std::sync::Arc::new(spawn_app(opts).await);
    post_many(&app, "evt_fast", 600).await;
    assert!(eventually(Duration::from_secs(30), || async { t.count() >= 600 }).await);
    let grown = t.peak_in_flight();
    assert!(
        grown >= 2 * hookgate::deliver::limit::START,
        "{grown} in flight at most on a fast target with a backlog"
    );

    // Overloaded: slow, and every answer a 503.
    t.hang(Some(Duration::from_millis(100)));
    t.always(Some(503));
    post_many(&app, "evt_busy", 200).await;
    // A few rounds of failures halve the limit down.
    tokio::time::sleep(Duration::from_secs(2)).await;
    t.reset_peak();
    let before = t.count();
    post_many(&app, "evt_more", 200).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let fallen = t.peak_in_flight();
    assert!(t.count() > before, "the target still gets requests");
    assert!(
        fallen <= 3 && fallen * 4 <= grown,
        "{fallen} in flight on an overloaded target with a backlog (it had {grown})"
    );
}
