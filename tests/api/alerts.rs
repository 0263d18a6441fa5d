//! Alerts without Prometheus (`[alerts.*]`): each condition fires once and
//! clears once at a loopback sink, signed (HTTP) or as Slack's `{"text"}`;
//! replicas on one ledger send one alert, not two; a sink that is down
//! gets the alert when it is back. The alert state's compare-and-set on
//! both backends.

use crate::both_backends;
use crate::helpers::fake_stripe::FakeStripe;
use crate::helpers::process::{Gateway, post_to};
use crate::helpers::*;
use hookgate::primitives::time::Millis;
use hookgate::store::alert_state::Episode;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

both_backends!(
    each_condition_fires_once_and_clears_once,
    a_sink_that_is_down_gets_the_alert_when_it_is_back,
    the_alert_state_moves_by_compare_and_set,
    reconciliation_failing_fires_once_and_clears_once,
);

const WAIT: Duration = Duration::from_secs(20);

/// The sink's signing secret and its key bytes.
const SINK_SECRET: &str = "whsec_aG9va2dhdGUtYWxlcnQta2V5LTEyMzQ1Ng==";
const SINK_KEY: &[u8] = b"hookgate-alert-key-123456";

/// `[alerting]` and `[alerts.ops]` toward `sink`, signed.
fn http_sink(sink: &TestTarget, extra: &str) -> String {
    format!(
        "[alerting]\ninterval = \"100ms\"\n\n[alerts.ops]\nurl = \"{}\"\nsigning_secret = \"{SINK_SECRET}\"\n{extra}\n",
        sink.url
    )
}

/// A target `name` at `t` with `keys`.
fn target(name: &str, t: &TestTarget, keys: &str) -> String {
    format!("[targets.{name}]\nurl = \"{}\"\n{keys}\n", t.url)
}

/// The alerts `sink` answered 2xx, as JSON.
fn delivered(sink: &TestTarget) -> Vec<Value> {
    sink.received()
        .into_iter()
        .filter(|r| r.status < 300)
        .map(|r| serde_json::from_slice(&r.body).expect("an alert is JSON"))
        .collect()
}

/// How many times each (key, episode, state) was delivered.
fn told(sink: &TestTarget) -> BTreeMap<(String, i64, String), usize> {
    let mut n = BTreeMap::new();
    for a in delivered(sink) {
        let k = (
            a["key"].as_str().unwrap().to_owned(),
            a["episode"].as_i64().unwrap(),
            a["state"].as_str().unwrap().to_owned(),
        );
        *n.entry(k).or_default() += 1;
    }
    n
}

fn has(sink: &TestTarget, key: &str, state: &str) -> bool {
    delivered(sink)
        .iter()
        .any(|a| a["key"] == key && a["state"] == state)
}

/// Checks the Standard Webhooks signature of every request `sink` got,
/// with an HMAC written from the spec (helpers::signers), not hookgate's.
fn assert_signed(sink: &TestTarget) {
    for r in sink.received() {
        let h = |n: &str| r.headers[n].to_str().unwrap().to_owned();
        let (id, ts) = (h("webhook-id"), h("webhook-timestamp"));
        let ts: i64 = ts.parse().unwrap();
        assert!((now() - ts).abs() < 300, "a fresh timestamp");
        let expected = signers::standard(SINK_KEY, &id, ts, &r.body);
        assert_eq!(h("webhook-signature"), expected[2].1, "signature verifies");
        assert_eq!(h("content-type"), "application/json");
    }
}

async fn each_condition_fires_once_and_clears_once(b: Backend) {
    let (sink, billing, ledger) = (
        TestTarget::start().await,
        TestTarget::start().await,
        TestTarget::start().await,
    );
    billing.always(Some(503));
    ledger.always(Some(500));
    let mut opts = Opts::new(b);
    opts.stripe_targets = vec!["billing".into(), "ledger".into()];
    opts.silent_after = Some(("github".into(), "2s".into()));
    opts.extra = [
        target("billing", &billing, ""),
        target("ledger", &ledger, "max_attempts = 1"),
        http_sink(
            &sink,
            "target_failing_after = \"300ms\"\nverification_failures = 2\nverification_window = \"3s\"",
        ),
    ]
    .concat();
    let app = spawn_app(opts).await;

    // Twenty events: billing keeps failing, each of ledger's is dead at once.
    for i in 0..20 {
        assert_eq!(app.post_stripe(&format!("evt_a{i}")).await.status(), 200);
    }
    // Github's one event; silent from now on.
    let body = br#"{"zen":"alerts"}"#;
    let h = signers::github(GITHUB_SECRET, "gh-alert-1", body);
    assert_eq!(app.post("github", &h, body).await.status(), 200);
    // Three forged requests: above the two allowed per window.
    for i in 0..3 {
        let body = stripe_body(&format!("evt_forged{i}"));
        let h = signers::stripe("whsec_not_the_secret", now(), &body);
        assert_eq!(app.post("stripe", &h, &body).await.status(), 401);
    }

    let keys = [
        "ops/target_failing/billing",
        "ops/dead_letters/ledger",
        "ops/verification_failures/stripe",
        "ops/source_silent/github",
    ];
    let fired = eventually(WAIT, || async {
        keys.iter().all(|k| has(&sink, k, "firing"))
    })
    .await;
    assert!(fired, "every condition fired: {:?}", told(&sink));
    let dead = delivered(&sink)
        .into_iter()
        .find(|a| a["key"] == keys[1])
        .unwrap();
    assert!(
        dead["summary"]
            .as_str()
            .unwrap()
            .contains("dead deliveries"),
        "{dead}"
    );
    assert_eq!(dead["type"], "alert.fired");
    assert_eq!(dead["condition"], "dead_letters");
    assert_eq!(dead["subject"], "ledger");

    // Recovery: billing answers, ledger's dead letters are replayed to a
    // ledger that answers, github sends again; the forgeries stop and age
    // out of their window.
    billing.always(None);
    ledger.always(None);
    let replay = app
        .client
        .post(app.url("/admin/replay"))
        .bearer_auth(ADMIN_TOKEN)
        .body(r#"{"source":"stripe"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(replay.status(), 200);
    let h = signers::github(GITHUB_SECRET, "gh-alert-2", body);
    assert_eq!(app.post("github", &h, body).await.status(), 200);
    let cleared = eventually(WAIT, || async {
        keys.iter().all(|k| has(&sink, k, "cleared"))
    })
    .await;
    assert!(cleared, "every condition cleared: {:?}", told(&sink));

    // Many ticks later: still one fire and one clear of each, episode 1.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let n = told(&sink);
    for k in keys {
        for state in ["firing", "cleared"] {
            assert_eq!(
                n.get(&(k.to_owned(), 1, state.to_owned())),
                Some(&1),
                "{k} {state}: {n:?}"
            );
        }
        // Github may turn silent again (a new episode); nothing else does.
        if k != keys[3] {
            assert!(!n.keys().any(|(key, e, _)| key == k && *e > 1), "{n:?}");
        }
    }
    assert_signed(&sink);
    app.stop().await;
}

async fn a_sink_that_is_down_gets_the_alert_when_it_is_back(b: Backend) {
    let (sink, ledger) = (TestTarget::start().await, TestTarget::start().await);
    sink.always(Some(503));
    ledger.always(Some(500));
    let mut opts = Opts::new(b);
    opts.stripe_targets = vec!["ledger".into()];
    opts.extra = [
        target("ledger", &ledger, "max_attempts = 1"),
        http_sink(&sink, "conditions = [\"dead_letters\"]"),
    ]
    .concat();
    let app = spawn_app(opts.clone()).await;
    app.post_stripe("evt_down").await;

    // The sink refuses: the alert is retried, the same message each time.
    assert!(eventually(WAIT, || async { sink.count() >= 3 }).await);
    let ids: Vec<String> = sink
        .received()
        .iter()
        .map(|r| r.headers["webhook-id"].to_str().unwrap().to_owned())
        .collect();
    assert!(
        ids.iter().all(|i| *i == ids[0]),
        "one alert retried: {ids:?}"
    );
    assert!(delivered(&sink).is_empty());

    // The gateway stops while the alert waits; the sink comes back; a new
    // process on the same ledger delivers it (the condition still holds,
    // and is not told again).
    let prefix = app.prefix.clone();
    let db = app.stop().await;
    sink.always(None);
    let app = spawn_on(opts, db, prefix).await;
    assert!(eventually(WAIT, || async { !delivered(&sink).is_empty() }).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got = delivered(&sink);
    assert_eq!(got.len(), 1, "delivered once: {got:?}");
    assert_eq!(got[0]["key"], "ops/dead_letters/ledger");
    assert_eq!(got[0]["episode"], 1);
    assert_signed(&sink);
    app.stop().await;
}

async fn the_alert_state_moves_by_compare_and_set(b: Backend) {
    let mut opts = Opts::new(b);
    opts.delivery = false;
    let app = spawn_app(opts).await;
    let store = app.state.store.alert_state.clone();
    let now = Millis(1_000);
    assert!(store.episodes().await.unwrap().is_empty());
    let none = Episode::default();
    let fired = Episode {
        number: 1,
        firing: true,
        changed_at: now,
    };
    let cleared = Episode {
        firing: false,
        ..fired
    };
    assert!(store.transition("k", none, fired, now).await.unwrap());
    assert!(
        !store.transition("k", none, fired, now).await.unwrap(),
        "a second replica's move from the same state loses"
    );
    assert_eq!(
        store.episodes().await.unwrap(),
        vec![("k".to_owned(), fired)]
    );
    assert!(!store.transition("k", cleared, fired, now).await.unwrap());
    let later = Millis(2_000);
    assert!(store.transition("k", fired, cleared, later).await.unwrap());
    let got = store.episodes().await.unwrap();
    assert_eq!(got[0].1.number, 1);
    assert!(!got[0].1.firing);
    assert_eq!(got[0].1.changed_at, later);
    // Another key is its own row.
    assert!(store.transition("k2", none, fired, now).await.unwrap());
    assert_eq!(store.episodes().await.unwrap().len(), 2);
    app.stop().await;
}

/// Slack: `{"text": …}` and nothing else, one readable line per change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slack_sink_gets_one_text_line_per_change() {
    let (slack, ledger) = (TestTarget::start().await, TestTarget::start().await);
    ledger.always(Some(500));
    let mut opts = Opts::new(Backend::Embedded);
    opts.stripe_targets = vec!["ledger".into()];
    opts.extra = format!(
        "{}[alerting]\ninterval = \"100ms\"\n\n[alerts.team]\nslack = \"{}\"\nconditions = [\"dead_letters\"]\n",
        target("ledger", &ledger, "max_attempts = 1"),
        slack.url
    );
    let app = spawn_app(opts).await;
    app.post_stripe("evt_slack").await;
    assert!(eventually(WAIT, || async { slack.count() == 1 }).await);
    let r = &slack.received()[0];
    assert_eq!(r.headers["content-type"], "application/json");
    assert!(
        r.headers.get("webhook-signature").is_none(),
        "Slack is not signed"
    );
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    let fields: Vec<&String> = body.as_object().unwrap().keys().collect();
    assert_eq!(fields, ["text"], "{body}");
    let text = body["text"].as_str().unwrap();
    assert!(
        text.starts_with(
            ":rotating_light: *FIRING* `dead_letters` target ledger has 1 dead deliveries"
        ),
        "{text}"
    );
    assert!(text.contains("hookgate alert `team` · ledger"), "{text}");
    app.stop().await;
}

/// Two gateway processes on one PostgreSQL see the same dead letters at
/// the same ticks: the sink gets one alert and one clear, not two of each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_send_one_alert_not_two() {
    let (sink, ledger) = (TestTarget::start().await, TestTarget::start().await);
    ledger.always(Some(500));
    let mut opts = Opts::new(Backend::Production);
    opts.stripe_targets = vec!["ledger".into()];
    opts.extra = [
        target("ledger", &ledger, "max_attempts = 1"),
        http_sink(&sink, "conditions = [\"dead_letters\"]").replace("100ms", "50ms"),
    ]
    .concat();
    let db = TestDb::create(Backend::Production).await;
    let prefix = unique_prefix();
    let (one, two) = (
        Gateway::start(&opts, &db, &prefix).await,
        Gateway::start(&opts, &db, &prefix).await,
    );
    let client = reqwest::Client::new();
    for i in 0..10 {
        let url = if i % 2 == 0 { &one } else { &two }.url("/webhooks/stripe");
        assert_eq!(
            post_to(&client, &url, &format!("evt_r{i}"))
                .await
                .unwrap()
                .status(),
            200
        );
    }
    let key = "ops/dead_letters/ledger";
    assert!(eventually(WAIT, || async { has(&sink, key, "firing") }).await);
    ledger.always(None);
    let replay = client
        .post(one.url("/admin/replay"))
        .bearer_auth(ADMIN_TOKEN)
        .body(r#"{"source":"stripe"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(replay.status(), 200);
    assert!(eventually(WAIT, || async { has(&sink, key, "cleared") }).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let n = told(&sink);
    assert_eq!(
        n.into_iter().collect::<Vec<_>>(),
        vec![
            ((key.to_owned(), 1, "cleared".to_owned()), 1),
            ((key.to_owned(), 1, "firing".to_owned()), 1),
        ]
    );
    assert_eq!(sink.count(), 2, "no second send of either");
    assert_signed(&sink);
    drop((one, two));
}

async fn reconciliation_failing_fires_once_and_clears_once(b: Backend) {
    const KEY: &str = "rk_test_alerts_reconcile_51Hx9";
    let fake = FakeStripe::start(KEY, "alerts", 3).await;
    fake.fail_from(Some(0));
    let sink = TestTarget::start().await;
    let mut opts = Opts::new(b);
    opts.extra = format!(
        "[sources.stripe.reconcile]\napi_key = \"{KEY}\"\ninterval = \"1s\"\n\
         lookback = \"2d\"\napi_base = \"{}\"\n\n{}",
        fake.url,
        http_sink(&sink, "conditions = [\"reconcile_failing\"]")
    );
    let app = spawn_app(opts).await;
    let key = "ops/reconcile_failing/stripe";
    assert!(eventually(WAIT, || async { has(&sink, key, "firing") }).await);
    let fired = delivered(&sink).remove(0);
    assert!(
        fired["summary"]
            .as_str()
            .unwrap()
            .contains("reconciliation of source stripe failing"),
        "{fired}"
    );
    // Failing runs go on: still one alert.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(delivered(&sink).len(), 1, "{:?}", told(&sink));
    fake.fail_from(None);
    assert!(eventually(WAIT, || async { has(&sink, key, "cleared") }).await);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let n = told(&sink);
    assert_eq!(n.len(), 2, "{n:?}");
    assert!(n.values().all(|&c| c == 1), "{n:?}");
    assert_signed(&sink);
    app.stop().await;
}
