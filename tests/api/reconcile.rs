//! Reconciliation against a loopback Stripe API (`helpers::fake_stripe`):
//! events the provider has and the gateway never received are recovered
//! once, through the same dedup path as webhooks.

use crate::both_backends;
use crate::helpers::fake_stripe::{FakeEvent, FakeStripe};
use crate::helpers::*;
use hookgate::config::reconcile::{ApiKind, Reconcile};
use hookgate::primitives::secret::Secret;
use hookgate::primitives::time::Millis;
use hookgate::reconcile::{LEASE, ReconcileError, Reconciler, RunOptions};
use hookgate::store::reconcile::{Checkpoint, Lease};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

const KEY: &str = "rk_test_reconcile_key_51Hx9";

/// `[sources.stripe.reconcile]` pointing at `fake`.
fn reconcile_table(fake: &FakeStripe, key: &str, interval: &str) -> String {
    format!(
        "[sources.stripe.reconcile]\napi_key = \"{key}\"\ninterval = \"{interval}\"\n\
         lookback = \"2d\"\napi_base = \"{}\"\n",
        fake.url
    )
}

/// Options with the stripe source forwarding to `target`.
fn with_target(backend: Backend, target: &TestTarget) -> Opts {
    let mut opts = Opts::new(backend);
    opts.stripe_targets = vec!["t".into()];
    opts.extra = format!("[targets.t]\nurl = \"{}\"\n", target.url);
    opts
}

/// POSTs each event's exact JSON as a signed webhook, 16 at a time.
async fn post_all(app: &TestApp, bodies: Vec<String>) {
    let app = Arc::new((app.client.clone(), app.url("/webhooks/stripe")));
    for chunk in bodies.chunks(16) {
        let mut set = tokio::task::JoinSet::new();
        for body in chunk {
            let (client, url) = (app.0.clone(), app.1.clone());
            let body = body.clone().into_bytes();
            set.spawn(async move {
                let mut req = client.post(url).header("content-type", "application/json");
                for (k, v) in signers::stripe(STRIPE_SECRET, now(), &body) {
                    req = req.header(k, v);
                }
                let res = req.body(body).send().await.unwrap();
                assert_eq!(res.status(), 200);
            });
        }
        while let Some(r) = set.join_next().await {
            r.unwrap();
        }
    }
}

/// The CLI with `config_text` written to a temporary config file.
pub(crate) fn cli(config_text: &str, args: &[&str]) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hookgate.toml");
    std::fs::write(&path, config_text).unwrap();
    let mut all = vec!["--config", path.to_str().unwrap()];
    all.extend_from_slice(args);
    crate::cli::hookgate(&all, dir.path())
}

/// Runs `hookgate serve` as a child process on `opts` and `db`, with debug
/// logs, until `ready` holds; returns its `/stats` then and its log. Ends
/// only the process it started, by its id.
pub(crate) async fn serve_until<F, Fut>(
    opts: &Opts,
    db: &TestDb,
    mut ready: F,
) -> (serde_json::Value, String)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hookgate.toml");
    let port = process::free_port();
    std::fs::write(
        &path,
        opts.toml(db, &unique_prefix(), &format!("127.0.0.1:{port}")),
    )
    .unwrap();
    let log = dir.path().join("log.txt");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .arg("--config")
        .arg(&path)
        .arg("serve")
        .env("RUST_LOG", "debug,sqlx=warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let was_ready = eventually(Duration::from_secs(20), &mut ready).await;
    let url = format!("http://127.0.0.1:{port}/stats");
    let stats = serde_json::from_str(&admin_get(&reqwest::Client::new(), &url).await).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(was_ready, "{text}");
    (stats, text)
}

/// A reconciler for the `stripe` source against `fake`, on `app`'s own
/// dedup and ledger (the app itself does not reconcile).
fn reconciler(app: &TestApp, fake: &FakeStripe) -> Reconciler {
    let mut config = (*app.state.config()).clone();
    config.reconcile.insert(
        "stripe".into(),
        Arc::new(Reconcile {
            source: "stripe".into(),
            kind: ApiKind::Stripe,
            api_key: Secret::new(KEY),
            interval: Duration::from_secs(3600),
            lookback: Duration::from_secs(86_400),
            grace: Duration::from_secs(600),
            api_base: fake.url.clone(),
            hook: None,
            app: None,
        }),
    );
    Reconciler {
        config: Arc::new(config),
        dedup: app.state.dedup.clone(),
        store: app.state.store.reconcile.clone(),
        wake: app.state.wake.clone(),
        client: Reconciler::http_client(),
        retry: Default::default(),
        stop: Default::default(),
    }
}

/// An unscheduled run over the last day, as the CLI makes one.
fn a_day_by_hand() -> RunOptions {
    RunOptions {
        window: Duration::from_secs(86_400),
        dry_run: false,
        scheduled: false,
    }
}

/// The CLI table's row as (found, already, recovered, failed).
fn row(out: &str) -> (u64, u64, u64, u64) {
    let cells: Vec<u64> = out
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .map(|c| c.parse().unwrap())
        .collect();
    (cells[0], cells[1], cells[2], cells[3])
}

async fn admin_events(app: &TestApp, query: &str) -> serde_json::Value {
    admin_events_path(app, &format!("/admin/events?{query}")).await
}

async fn admin_events_path(app: &TestApp, path: &str) -> serde_json::Value {
    app.client
        .get(app.url(path))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .map(|b| serde_json::from_slice(&b).unwrap())
        .unwrap()
}

async fn recovers_exactly_the_events_that_never_arrived(backend: Backend) {
    // Arrange: 1,000 events at the provider; 37 of them never reached us.
    let fake = FakeStripe::start(KEY, "k", 1000).await;
    let target = TestTarget::start().await;
    let opts = with_target(backend, &target);
    let app = spawn_app(opts.clone()).await;
    let events = fake.events();
    let missing: HashSet<String> = events
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 27 == 5)
        .map(|(_, e)| e.id.clone())
        .collect();
    assert_eq!(missing.len(), 37);
    let arrived: Vec<String> = events
        .iter()
        .filter(|e| !missing.contains(&e.id))
        .map(|e| e.json.clone())
        .collect();
    post_all(&app, arrived).await;
    assert!(eventually(Duration::from_secs(60), || async { target.count() == 963 }).await);

    // Act: one run from the command line, on the same ledger and cache.
    let mut cli_opts = opts.clone();
    cli_opts.extra.push_str(&reconcile_table(&fake, KEY, "1h"));
    let config = cli_opts.toml(&app.db, &app.prefix, "127.0.0.1:0");
    let (ok, out, err) = cli(
        &config,
        &["reconcile", "--source", "stripe", "--since", "2d"],
    );

    // Assert: exactly the 37 recovered, each delivered once, as the API
    // returned it and marked recovered; the 963 untouched.
    assert!(ok, "{out}\n{err}");
    assert_eq!(row(&out), (1000, 963, 37, 0), "{out}");
    assert!(out.contains("recovered") && !out.contains("would"), "{out}");
    assert!(eventually(Duration::from_secs(30), || async { target.count() == 1000 }).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let counts = target.sends_per_id();
    assert_eq!(counts.len(), 1000);
    assert!(
        counts.values().all(|&n| n == 1),
        "an event was delivered twice"
    );
    let json_of: HashMap<&str, &str> = events
        .iter()
        .map(|e| (e.id.as_str(), e.json.as_str()))
        .collect();
    for r in target.received() {
        let id = r.headers["hookgate-event-id"].to_str().unwrap();
        let recovered = r
            .headers
            .get("hookgate-recovered")
            .map(|v| v.to_str().unwrap());
        assert_eq!(r.body.as_ref(), json_of[id].as_bytes(), "body of {id}");
        if missing.contains(id) {
            assert_eq!(recovered, Some("true"), "{id}");
        } else {
            assert_eq!(recovered, None, "{id}");
        }
    }
    let page = admin_events(&app, "source=stripe&recovered=true&limit=100").await;
    let listed: HashSet<String> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert_eq!(e["recovered"], true);
            e["event_id"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(listed, missing);
    let one = missing.iter().next().unwrap();
    let rec = admin_events_path(&app, &format!("/admin/events/stripe/{one}")).await;
    assert_eq!(rec["recovered"], true, "{rec}");
    let received = events.iter().find(|e| !missing.contains(&e.id)).unwrap();
    let rec = admin_events_path(&app, &format!("/admin/events/stripe/{}", received.id)).await;
    assert_eq!(rec["recovered"], false, "{rec}");
    let stats = app.stats().await;
    assert_eq!(stats["sources"]["stripe"]["received"], 963);
}

async fn a_webhook_and_its_recovered_copy_at_the_same_moment_are_delivered_once(backend: Backend) {
    let fake = FakeStripe::start(KEY, "race", 40).await;
    let target = TestTarget::start().await;
    let app = spawn_app(with_target(backend, &target)).await;
    // A reconciler on the running gateway's own dedup and ledger.
    let r = reconciler(&app, &fake);
    let opts = a_day_by_hand();
    let bodies: Vec<String> = fake.events().into_iter().map(|e| e.json).collect();

    // Every webhook is sent while the run admits the same events.
    let (report, ()) = tokio::join!(r.run("stripe", opts), post_all(&app, bodies));
    let report = report.unwrap().unwrap();

    assert_eq!(report.found, 40);
    assert_eq!(report.already + report.recovered, 40, "{report:?}");
    assert!(eventually(Duration::from_secs(20), || async { target.count() >= 40 }).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let counts = target.sends_per_id();
    assert_eq!(counts.len(), 40);
    assert!(counts.values().all(|&n| n == 1), "{counts:?}");
    // One `new` per event, whichever copy won: the webhooks' new ones
    // (`unique`) and the run's recovered ones add up to 40.
    let s = app.stats().await;
    let unique = s["sources"]["stripe"]["unique"].as_u64().unwrap();
    assert_eq!(unique + report.recovered, 40, "{report:?} {s}");
}

async fn dry_run_reports_and_changes_nothing(backend: Backend) {
    let fake = FakeStripe::start(KEY, "dry", 12).await;
    let target = TestTarget::start().await;
    let opts = with_target(backend, &target);
    let app = spawn_app(opts.clone()).await;
    let arrived: Vec<String> = fake.events().into_iter().skip(4).map(|e| e.json).collect();
    post_all(&app, arrived).await;
    assert!(eventually(Duration::from_secs(20), || async { target.count() == 8 }).await);

    let mut cli_opts = opts.clone();
    cli_opts.extra.push_str(&reconcile_table(&fake, KEY, "1h"));
    let config = cli_opts.toml(&app.db, &app.prefix, "127.0.0.1:0");
    let (ok, out, err) = cli(&config, &["reconcile", "--source", "stripe", "--dry-run"]);

    assert!(ok, "{out}\n{err}");
    assert!(out.contains("would recover"), "{out}");
    assert_eq!(row(&out), (12, 8, 4, 0), "{out}");
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(target.count(), 8, "a dry run delivered something");
    for e in fake.events().iter().take(4) {
        assert_eq!(app.rows("stripe", &e.id).await, 0, "{} was written", e.id);
    }
    let stats = app.stats().await;
    assert_eq!(stats["sources"]["stripe"]["unique"], 8);
    let statuses = app.state.store.reconcile.statuses().await.unwrap();
    assert!(
        statuses.is_empty(),
        "a dry run took the lease: {statuses:?}"
    );
}

async fn events_older_than_the_window_are_not_recovered(backend: Backend) {
    // Arrange: none of these reached us; ten were created in the last hour
    // (past the grace), ten three hours ago. Stripe filters the list on
    // `created[gte]` (https://docs.stripe.com/api/events/list), and so does
    // the fake.
    let now = now();
    let recent: Vec<FakeEvent> = (0..10)
        .map(|i| FakeEvent::new(&format!("evt_win_new_{i:02}"), now - 1200 - i))
        .collect();
    let old: Vec<FakeEvent> = (0..10)
        .map(|i| FakeEvent::new(&format!("evt_win_old_{i:02}"), now - 3 * 3600 - i))
        .collect();
    let fake = FakeStripe::with_events(KEY, [recent.clone(), old.clone()].concat()).await;
    let target = TestTarget::start().await;
    let opts = with_target(backend, &target);
    let app = spawn_app(opts.clone()).await;

    // Act: a run over the last hour (the configured lookback is 2d).
    let mut cli_opts = opts.clone();
    cli_opts.extra.push_str(&reconcile_table(&fake, KEY, "1h"));
    let config = cli_opts.toml(&app.db, &app.prefix, "127.0.0.1:0");
    let before = crate::helpers::now();
    let (ok, out, err) = cli(
        &config,
        &["reconcile", "--source", "stripe", "--since", "1h"],
    );
    let after = crate::helpers::now();

    // Assert: the window started an hour back; only the recent ten were
    // found and recovered, the old ones never written nor delivered.
    assert!(ok, "{out}\n{err}");
    assert_eq!(row(&out), (10, 0, 10, 0), "{out}");
    let gte = fake.calls()[0].created_gte.expect("created[gte] sent");
    assert!(
        (before - 3600..=after - 3600).contains(&gte),
        "{gte} {before}"
    );
    for e in &old {
        assert_eq!(app.rows("stripe", &e.id).await, 0, "{} was written", e.id);
    }
    for e in &recent {
        assert_eq!(app.rows("stripe", &e.id).await, 1, "{} is missing", e.id);
    }
    assert!(eventually(Duration::from_secs(20), || async { target.count() >= 10 }).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent: HashSet<String> = target.sends_per_id().into_keys().collect();
    let wanted: HashSet<String> = recent.iter().map(|e| e.id.clone()).collect();
    assert_eq!(sent, wanted);
}

/// The grace: an event created a minute ago is the provider's to deliver
/// and is left alone; the same event, an hour old and still missing, is
/// recovered by the next run.
async fn an_event_younger_than_the_grace_is_left_to_the_provider(backend: Backend) {
    // Arrange: one event, created a minute ago, never received.
    let id = format!("evt_grace_{}", hookgate::primitives::token::random_hex());
    let fake = FakeStripe::with_events(KEY, vec![FakeEvent::new(&id, now() - 60)]).await;
    let target = TestTarget::start().await;
    let app = spawn_app(with_target(backend, &target)).await;
    let r = reconciler(&app, &fake);
    let opts = a_day_by_hand();

    // Act + assert: the run lists it but leaves it to Stripe.
    let report = r.run("stripe", opts).await.unwrap().unwrap();
    assert_eq!(
        (report.found, report.recovered, report.deferred),
        (1, 0, 1),
        "{report:?}"
    );
    assert_eq!(app.rows("stripe", &id).await, 0, "recovered while young");

    // The same event an hour old, still missing: the next run recovers it.
    fake.set_events(vec![FakeEvent::new(&id, now() - 3600)]);
    let report = r.run("stripe", opts).await.unwrap().unwrap();
    assert_eq!(
        (report.found, report.recovered, report.deferred),
        (1, 1, 0),
        "{report:?}"
    );
    assert_eq!(app.rows("stripe", &id).await, 1);
    assert!(eventually(Duration::from_secs(20), || async { target.count() == 1 }).await);
    let r0 = &target.received()[0];
    assert_eq!(r0.headers["hookgate-recovered"], "true");
}

/// `start` with `now` and a lease of one second (`until = now + 1000`).
fn lease(owner: &str, now: i64) -> Lease<'_> {
    Lease {
        source: "stripe",
        owner,
        now: Millis(now),
        until: Millis(now + 1000),
        next_run_at: Millis(now),
        force: true,
    }
}

async fn a_lease_is_renewed_by_its_owner_and_by_no_one_else(backend: Backend) {
    let app = spawn_app(Opts::new(backend)).await;
    let store = &app.state.store.reconcile;
    let cursor = Checkpoint {
        since: Millis(0),
        cursor: "evt_x".into(),
    };

    // `a` runs until 11_000 and renews to 15_000.
    assert!(store.start(&lease("a", 10_000)).await.unwrap().is_some());
    assert!(store.renew("stripe", "a", Millis(15_000)).await.unwrap());
    // Past the first `until`, before the renewed one: still a's.
    assert!(store.start(&lease("b", 12_000)).await.unwrap().is_none());
    // A stranger renews nothing, and moves nothing.
    assert!(!store.renew("stripe", "b", Millis(60_000)).await.unwrap());
    assert!(
        !store
            .save_cursor("stripe", "b", &cursor, Millis(60_000))
            .await
            .unwrap()
    );
    // Past 15_000 the lease is free: `b` takes it (until 16_001)...
    assert!(store.start(&lease("b", 15_001)).await.unwrap().is_some());
    // ...and `a`'s renewals find it lost, without touching b's.
    assert!(!store.renew("stripe", "a", Millis(90_000)).await.unwrap());
    assert!(
        !store
            .save_cursor("stripe", "a", &cursor, Millis(90_000))
            .await
            .unwrap()
    );
    assert!(store.start(&lease("c", 16_000)).await.unwrap().is_none());
    assert!(
        store
            .save_cursor("stripe", "b", &cursor, Millis(20_000))
            .await
            .unwrap()
    );
}

/// A run whose lease another replica took while a page was on its way
/// stops at its next renewal instead of going on.
async fn a_run_that_lost_its_lease_stops(backend: Backend, scheduled: bool) {
    // Arrange: three pages (100, 100, 50); the second is held 1.5 s.
    let fake = FakeStripe::start(KEY, "lost", 250).await;
    fake.delay_call(1, Duration::from_millis(1500));
    let app = spawn_app(Opts::new(backend)).await;
    let r = reconciler(&app, &fake);
    let opts = RunOptions {
        window: Duration::from_secs(86_400),
        dry_run: false,
        scheduled,
    };
    let run = tokio::spawn(async move { r.run("stripe", opts).await });

    // Act: while page two is on its way, the lease is past (as seen from a
    // replica whose clock is beyond it) and that replica takes it.
    assert!(eventually(Duration::from_secs(20), || async { fake.holding() }).await);
    let store = &app.state.store.reconcile;
    let later = Millis::now() + LEASE + Duration::from_secs(1);
    let thief = Lease {
        source: "stripe",
        owner: "thief",
        now: later,
        until: later + LEASE,
        next_run_at: later,
        force: true,
    };
    assert!(store.start(&thief).await.unwrap().is_some());

    // Assert: the run stops with the lease error after page two; the third
    // page is never asked for, and the thief's lease is left alone.
    let result = run.await.unwrap();
    match result {
        Err(ReconcileError::LeaseLost) => {}
        other => panic!("{other:?}"),
    }
    let text = ReconcileError::LeaseLost.to_string();
    assert!(text.contains("lease over mid-run"), "{text}");
    assert_eq!(fake.calls().len(), 2, "{:?}", fake.calls());
    let events = fake.events();
    for e in &events[200..] {
        assert_eq!(app.rows("stripe", &e.id).await, 0, "{} was recovered", e.id);
    }
    let other = Lease {
        owner: "other",
        now: Millis::now() + LEASE + Duration::from_secs(10),
        ..thief
    };
    assert!(store.start(&other).await.unwrap().is_none());
}

async fn an_unscheduled_run_that_lost_its_lease_stops(backend: Backend) {
    a_run_that_lost_its_lease_stops(backend, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_run_that_lost_its_lease_stops() {
    a_run_that_lost_its_lease_stops(Backend::Embedded, true).await;
}

/// The ids `GET /admin/events?source=stripe&recovered=true` lists.
async fn marked(app: &TestApp) -> HashSet<String> {
    admin_events(app, "source=stripe&recovered=true&limit=100").await["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_id"].as_str().unwrap().to_owned())
        .collect()
}

async fn only_events_received_after_their_resend_request_are_marked(backend: Backend) {
    let app = spawn_app(Opts::new(backend)).await;
    let store = &app.state.store.reconcile;
    let day = Duration::from_secs(86_400);
    // Arrived by itself before anyone asked.
    assert_eq!(app.post_stripe("evt_mark_before").await.status(), 200);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let asked = Millis::now();
    for id in ["evt_mark_before", "evt_mark_after", "evt_mark_late"] {
        store
            .resend_requested("stripe", id, asked, asked + day)
            .await
            .unwrap();
    }
    // A resend whose mark expires before its event arrives.
    store
        .resend_requested(
            "stripe",
            "evt_mark_gone",
            asked,
            asked + Duration::from_millis(1),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(app.post_stripe("evt_mark_after").await.status(), 200);

    // The one that came after its request is marked; the one that came
    // before is not (and its mark is dropped); the late one waits.
    let applied = store
        .apply_resends("stripe", Millis::now(), asked)
        .await
        .unwrap();
    assert_eq!((applied.marked, applied.waiting), (1, 1), "{applied:?}");
    assert_eq!(
        marked(&app).await,
        HashSet::from(["evt_mark_after".to_owned()])
    );

    // Asked again later: the first request's time still counts.
    let again = Millis::now() + Duration::from_secs(3600);
    store
        .resend_requested("stripe", "evt_mark_late", again, again + day)
        .await
        .unwrap();
    for id in ["evt_mark_late", "evt_mark_gone", "evt_mark_before"] {
        assert_eq!(app.post_stripe(id).await.status(), 200);
    }
    let applied = store
        .apply_resends("stripe", Millis::now(), Millis(0))
        .await
        .unwrap();
    // Nothing is left behind: applied, moot and expired marks are gone.
    assert_eq!((applied.marked, applied.waiting), (1, 0), "{applied:?}");
    let want: HashSet<String> = ["evt_mark_after", "evt_mark_late"]
        .map(str::to_owned)
        .into();
    assert_eq!(marked(&app).await, want);
}

both_backends!(
    recovers_exactly_the_events_that_never_arrived,
    a_webhook_and_its_recovered_copy_at_the_same_moment_are_delivered_once,
    dry_run_reports_and_changes_nothing,
    events_older_than_the_window_are_not_recovered,
    an_event_younger_than_the_grace_is_left_to_the_provider,
    a_lease_is_renewed_by_its_owner_and_by_no_one_else,
    an_unscheduled_run_that_lost_its_lease_stops,
    only_events_received_after_their_resend_request_are_marked,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_in_the_middle_of_pagination_is_resumed_and_nothing_is_skipped() {
    let fake = FakeStripe::start(KEY, "rl", 250).await;
    fake.rate_limit_call(1);
    let target = TestTarget::start().await;
    let mut opts = with_target(Backend::Production, &target);
    // A signing target: recovered events carry the gateway's own signature.
    opts.extra
        .push_str(&format!("signing_secret = \"{SW_SECRET}\"\n"));
    opts.extra.push_str(&reconcile_table(&fake, KEY, "1h"));

    let app = spawn_app(opts).await;

    assert!(eventually(Duration::from_secs(30), || async { target.count() >= 250 }).await);
    let calls = fake.calls();
    let statuses: Vec<u16> = calls.iter().map(|c| c.status).collect();
    assert_eq!(statuses, [200, 429, 200, 200], "{calls:?}");
    // The retry asked for the same page, after the Retry-After second.
    assert_eq!(calls[1].starting_after, calls[2].starting_after);
    assert!(calls[2].at - calls[1].at >= Duration::from_millis(950));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let counts = target.sends_per_id();
    assert_eq!(counts.len(), 250);
    assert!(counts.values().all(|&n| n == 1));
    for r in target.received() {
        let value = |n: &str| r.headers[n].to_str().unwrap().to_owned();
        let ts: i64 = value("webhook-timestamp").parse().unwrap();
        let expected = signers::standard(SW_KEY, &value("webhook-id"), ts, &r.body);
        assert_eq!(value("webhook-signature"), expected[2].1);
        assert_eq!(value("hookgate-recovered"), "true");
        assert!(r.headers.get("stripe-signature").is_none());
    }
    let stats = app.stats().await;
    let s = &stats["sources"]["stripe"];
    assert!(
        eventually(Duration::from_secs(5), || async {
            app.stats().await["sources"]["stripe"]["recovered"] == 250
        })
        .await,
        "{s}"
    );
    assert!(s["reconcile_last_run"].is_string(), "{s}");
    assert!(s["reconcile_last_error"].is_null(), "{s}");
    let metrics = app.admin_text("/metrics").await;
    assert!(
        metrics.contains("hookgate_reconcile_last_success_timestamp_seconds{source=\"stripe\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("hookgate_reconcile_runs_total{source=\"stripe\",outcome=\"ok\"}"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_run_a_source_once_per_interval() {
    let fake = FakeStripe::start(KEY, "two", 3).await;
    let mut opts = Opts::new(Backend::Production);
    opts.extra.push_str(&reconcile_table(&fake, KEY, "1s"));
    let a = spawn_app(opts.clone()).await;
    let b = spawn_on(opts, a.db.clone(), a.prefix.clone()).await;

    tokio::time::sleep(Duration::from_millis(4500)).await;

    // A run is one list call here (3 events, one page).
    let starts: Vec<std::time::Instant> = fake.calls().iter().map(|c| c.at).collect();
    assert!((3..=6).contains(&starts.len()), "{} runs", starts.len());
    for w in starts.windows(2) {
        assert!(
            w[1] - w[0] >= Duration::from_millis(900),
            "two runs {:?} apart",
            w[1] - w[0]
        );
    }
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_gateway_resumes_reconciliation_from_the_checkpoint() {
    // Arrange: the third page fails, so the first replica stops after two.
    let fake = FakeStripe::start(KEY, "ckpt", 300).await;
    fake.fail_from(Some(2));
    let target = TestTarget::start().await;
    let mut opts = with_target(Backend::Production, &target);
    opts.extra.push_str(&reconcile_table(&fake, KEY, "1s"));
    let app = spawn_app(opts.clone()).await;
    assert!(
        eventually(Duration::from_secs(20), || async {
            !app.stats().await["sources"]["stripe"]["reconcile_last_error"].is_null()
        })
        .await
    );
    let db = app.stop().await;
    let before = fake.calls();
    let cursor = before[1].starting_after.clone();
    assert!(before.iter().take(2).all(|c| c.status == 200), "{before:?}");

    // Act: the provider recovers and a new process starts on the same ledger.
    fake.fail_from(None);
    let app = spawn_on(opts, db, unique_prefix()).await;

    // Assert: it continued after page two, in the same window.
    assert!(eventually(Duration::from_secs(20), || async { target.count() >= 300 }).await);
    let calls = fake.calls();
    let first_after_restart = calls[before.len()..]
        .iter()
        .find(|c| c.status == 200)
        .unwrap()
        .clone();
    let page_two_last = {
        let events = fake.events();
        events[199].id.clone()
    };
    assert_eq!(
        first_after_restart.starting_after.as_deref(),
        Some(page_two_last.as_str())
    );
    assert_ne!(first_after_restart.starting_after, cursor);
    assert_eq!(first_after_restart.created_gte, before[0].created_gte);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let counts = target.sends_per_id();
    assert_eq!(counts.len(), 300);
    assert!(counts.values().all(|&n| n == 1));
    drop(app);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_api_key_is_a_clear_error_and_the_key_is_never_printed() {
    let fake = FakeStripe::start(KEY, "key", 5).await;
    let wrong = "rk_test_WRONG_never_print_me_7Qz";
    let mut opts = Opts::new(Backend::Embedded);
    opts.extra.push_str(&reconcile_table(&fake, wrong, "1s"));
    let db = TestDb::create(Backend::Embedded).await;
    let config = opts.toml(&db, &unique_prefix(), "127.0.0.1:0");

    // The CLI: a clear error, non-zero exit.
    let (ok, out, err) = cli(&config, &["reconcile", "--source", "stripe"]);
    assert!(!ok, "{out}");
    assert!(err.contains("refused the credential (HTTP 401)"), "{err}");
    assert!(!out.contains(wrong) && !err.contains(wrong), "{out}\n{err}");
    assert!(!err.contains("never_print"), "{err}");

    // A serving gateway: the failure is logged once, counted, and visible
    // in /stats, never with the key.
    let (stats, text) = serve_until(&opts, &db, || async { fake.calls().len() >= 3 }).await;
    let s = &stats["sources"]["stripe"];
    let last_error = s["reconcile_last_error"].as_str().unwrap_or_default();
    assert!(last_error.contains("HTTP 401"), "{s}");
    assert!(s["reconcile_failed_runs"].as_i64().unwrap() >= 2, "{s}");
    assert!(
        !text.contains(wrong) && !text.contains("never_print"),
        "{text}"
    );
    let logged = text.matches("reconciliation run failed").count();
    assert_eq!(logged, 1, "{text}");
    assert!(!stats.to_string().contains(wrong));
}
