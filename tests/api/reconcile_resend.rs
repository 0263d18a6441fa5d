//! Reconciliation by resend (GitHub, PayPal): deliveries the gateway never
//! accepted are asked for again, arrive signed through the normal path, and
//! are then marked recovered.

use crate::both_backends;
use crate::helpers::fake_resend::*;
use crate::helpers::*;
use std::collections::HashSet;
use std::time::Duration;

const GH_TOKEN: &str = "ghp_reconcileTestToken0123456789";
const PP_CLIENT: &str = "AVpp-client-id";
const PP_SECRET: &str = "EPpp-client-secret-never-printed";

/// The event ids `GET /admin/events` lists for `source` with
/// `recovered=<recovered>`.
async fn listed(app: &TestApp, source: &str, recovered: bool) -> HashSet<String> {
    let path = format!("/admin/events?source={source}&recovered={recovered}&limit=500");
    let page: serde_json::Value = serde_json::from_str(&app.admin_text(&path).await).unwrap();
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert_eq!(e["recovered"], recovered, "{e}");
            e["event_id"].as_str().unwrap().to_owned()
        })
        .collect()
}

/// The run marks exactly the `resent` events recovered (soon after they
/// arrived); the ones that `arrived` by themselves stay unmarked.
async fn assert_marked(
    app: &TestApp,
    source: &str,
    resent: &HashSet<String>,
    arrived: &HashSet<String>,
) {
    let marked = eventually(Duration::from_secs(10), || async {
        listed(app, source, true).await == *resent
    })
    .await;
    assert!(marked, "{:?}", listed(app, source, true).await);
    assert_eq!(listed(app, source, false).await, *arrived);
}

/// 20 deliveries at GitHub, newest first, and those never accepted here:
/// 5 (one GitHub saw fail with 503); one received event was also
/// redelivered (the newest entry).
fn gh_deliveries() -> (Vec<GhDelivery>, HashSet<usize>) {
    let now = now();
    let mut deliveries: Vec<GhDelivery> = (0..20)
        .map(|i| GhDelivery {
            id: 9000 + 20 - i,
            guid: hookgate::primitives::token::random_uuid(),
            delivered_at: now - 60 - 10 * i,
            status_code: if i == 3 { 503 } else { 200 },
            redelivery: false,
            body: format!(
                r#"{{"action":"opened","issue":{{"number":{i}}},"repository":{{"id":1296269}}}}"#
            ),
        })
        .collect();
    let missing: HashSet<usize> = [3, 6, 11, 15, 19].into();
    let again = GhDelivery {
        id: 9100,
        redelivery: true,
        delivered_at: now - 30,
        ..deliveries[0].clone()
    };
    deliveries.insert(0, again);
    (deliveries, missing)
}

/// The gateway receives all but the `missing` deliveries of `fake`, then
/// restarts with reconciliation (`credential`: the table's `api_key` line
/// and, for an App, its `app_id`) and must have exactly those redelivered,
/// accepted through verification and delivered once.
async fn missing_deliveries_are_redelivered_and_verified(
    backend: Backend,
    fake: FakeGitHub,
    deliveries: Vec<GhDelivery>,
    missing: HashSet<usize>,
    credential: &str,
) {
    fake.rate_limit_call(1);
    let target = TestTarget::start().await;
    let mut opts = Opts::new(backend);
    opts.extra = format!(
        "[targets.t]\nurl = \"{}\"\n[sources.gh]\nprovider = \"github\"\nsecrets = [\"{GITHUB_SECRET}\"]\ntargets = [\"t\"]\n",
        target.url
    );
    let first = spawn_app(opts.clone()).await;
    for (i, d) in deliveries.iter().skip(1).enumerate() {
        if !missing.contains(&i) {
            let h = signers::github(GITHUB_SECRET, &d.guid, d.body.as_bytes());
            assert_eq!(first.post("gh", &h, d.body.as_bytes()).await.status(), 200);
        }
    }
    assert!(eventually(Duration::from_secs(20), || async { target.count() == 15 }).await);
    let db = first.stop().await;

    // Act: a gateway with reconciliation starts on the same ledger.
    opts.extra.push_str(&format!(
        "[sources.gh.reconcile]\n{credential}hook = \"{}\"\napi_base = \"{}\"\ninterval = \"1h\"\n",
        fake.hook(),
        fake.url
    ));
    let app = spawn_on(opts, db, unique_prefix()).await;
    fake.set_gateway(&app.url(""));

    // Assert: exactly the five were redelivered (the newest delivery of
    // each), accepted through verification, and delivered once.
    assert!(eventually(Duration::from_secs(20), || async { target.count() >= 20 }).await);
    let wanted: HashSet<i64> = deliveries
        .iter()
        .skip(1)
        .enumerate()
        .filter(|(i, _)| missing.contains(i))
        .map(|(_, d)| d.id)
        .collect();
    let asked: HashSet<i64> = fake.redelivered().into_iter().collect();
    assert_eq!(asked, wanted);
    assert_eq!(fake.redelivered().len(), 5);
    let calls: Vec<u16> = fake.list_calls().iter().map(|c| c.1).collect();
    // The 403 was GitHub's rate limit, waited out, not a bad key.
    assert_eq!(calls, [200, 403, 200, 200], "{:?}", fake.list_calls());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let counts = target.sends_per_id();
    assert_eq!(counts.len(), 20);
    assert!(counts.values().all(|&n| n == 1), "{counts:?}");
    assert!(
        eventually(Duration::from_secs(5), || async {
            let s = app.stats().await;
            let gh = &s["sources"]["gh"];
            gh["unique"] == 20 && gh["recovered"] == 5 && gh["rejected"] == 0
        })
        .await,
        "{}",
        app.stats().await
    );
    // The five that came because reconciliation asked are marked recovered
    // (the run marks them once they arrived); the fifteen that arrived by
    // themselves are not.
    let resent: HashSet<String> = deliveries
        .iter()
        .skip(1)
        .enumerate()
        .filter(|(i, _)| missing.contains(i))
        .map(|(_, d)| d.guid.clone())
        .collect();
    let arrived: HashSet<String> = deliveries
        .iter()
        .skip(1)
        .map(|d| d.guid.clone())
        .filter(|g| !resent.contains(g))
        .collect();
    assert_marked(&app, "gh", &resent, &arrived).await;
}

async fn github_deliveries_we_never_accepted_are_redelivered_and_verified(backend: Backend) {
    let (deliveries, missing) = gh_deliveries();
    let fake = FakeGitHub::start("gh", GH_TOKEN, GITHUB_SECRET, deliveries.clone()).await;
    let credential = format!("api_key = \"{GH_TOKEN}\"\n");
    missing_deliveries_are_redelivered_and_verified(
        backend,
        fake,
        deliveries,
        missing,
        &credential,
    )
    .await;
}

/// The binary with `config_text` as its config file and `env` set:
/// (success, stdout, stderr).
fn cli(config_text: &str, env: &[(&str, &str)], args: &[&str]) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hookgate.toml");
    std::fs::write(&path, config_text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .arg("--config")
        .arg(&path)
        .args(args)
        .current_dir(dir.path())
        .env_remove("DATABASE_URL")
        .env_remove("REDIS_URL")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The test App's private key (a throwaway, tests/fixtures/github-app).
const APP_KEY_PEM: &str = include_str!("../fixtures/github-app/app-key.pem");
/// Another key, which GitHub refuses for this App.
const OTHER_KEY_PEM: &str = include_str!("../fixtures/github-app/other-key.pem");
const APP_CLIENT_ID: &str = "Iv23liHookgateTest01";

async fn github_app_deliveries_we_never_accepted_are_redelivered_and_verified(backend: Backend) {
    let (deliveries, missing) = gh_deliveries();
    let key = public_key(APP_KEY_PEM);
    let fake =
        FakeGitHub::start_app("gh", APP_CLIENT_ID, key, GITHUB_SECRET, deliveries.clone()).await;
    let credential = format!(
        "api_key = \"file:{}/tests/fixtures/github-app/app-key.pem\"\napp_id = \"{APP_CLIENT_ID}\"\n",
        env!("CARGO_MANIFEST_DIR")
    );
    missing_deliveries_are_redelivered_and_verified(
        backend,
        fake,
        deliveries,
        missing,
        &credential,
    )
    .await;
}

async fn a_wrong_app_key_is_a_clear_credential_error_and_never_printed(backend: Backend) {
    let (deliveries, _) = gh_deliveries();
    let key = public_key(APP_KEY_PEM);
    let fake = FakeGitHub::start_app("gh", APP_CLIENT_ID, key, GITHUB_SECRET, deliveries).await;
    let mut opts = Opts::new(backend);
    // The wrong key inline in the config, where a leak would be easiest.
    opts.extra = format!(
        "[sources.gh]\nprovider = \"github\"\nsecrets = [\"{GITHUB_SECRET}\"]\n\
         [sources.gh.reconcile]\napi_key = '''{OTHER_KEY_PEM}'''\napp_id = \"{APP_CLIENT_ID}\"\n\
         hook = \"{}\"\napi_base = \"{}\"\n",
        fake.hook(),
        fake.url
    );
    let db = TestDb::create(backend).await;
    let config = opts.toml(&db, &unique_prefix(), "127.0.0.1:0");
    let key_lines: Vec<&str> = OTHER_KEY_PEM.lines().filter(|l| l.len() == 64).collect();
    assert!(key_lines.len() > 20);
    let shows_key = |text: &str| {
        text.contains("PRIVATE KEY") || key_lines.iter().any(|l| text.contains(&l[..24]))
    };

    // check-config shows the App, never its key.
    let (ok, out, err) = cli(&config, &[], &["check-config"]);
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("hook=app/hook app_id={APP_CLIENT_ID}")),
        "{out}"
    );
    assert!(!shows_key(&out) && !shows_key(&err), "{out}\n{err}");

    // A run: GitHub refuses the JWT. A clear error and a non-zero exit;
    // neither the key nor the JWT in the output, debug logs included.
    let (ok, out, err) = cli(
        &config,
        &[("RUST_LOG", "debug,sqlx=warn")],
        &["reconcile", "--source", "gh", "--since", "1h"],
    );
    assert!(!ok, "{out}");
    assert!(
        err.contains("the github API refused the credential (HTTP 401)"),
        "{err}"
    );
    assert!(!shows_key(&out) && !shows_key(&err), "{out}\n{err}");
    assert!(!err.contains("eyJ"), "a JWT was printed: {err}");
    assert_eq!(fake.list_calls(), [(None, 401)]);
    assert!(fake.redelivered().is_empty());
}

async fn paypal_events_we_never_received_are_resent_and_verified(backend: Backend) {
    let now = now();
    let event = |i: i64, created: i64| {
        let id = format!("WH-{}-{i:02}", hookgate::primitives::token::random_hex());
        PpEvent {
            json: paypal_event(&id, created),
            id,
            create_time: created,
        }
    };
    // Twelve events older than the default grace (10 minutes)...
    let events: Vec<PpEvent> = (0..12).map(|i| event(i, now - 1200 - 30 * i)).collect();
    // ...and one created a minute ago, which PayPal is still delivering: it
    // is not asked for, though it never arrived.
    let young = event(99, now - 60);
    let missing: HashSet<usize> = [0, 5, 9].into();
    let fake = FakePayPal::start(
        "pp",
        PP_CLIENT,
        PP_SECRET,
        "WH-HTTP",
        [vec![young.clone()], events.clone()].concat(),
        crate::providers::paypal::paypal_headers,
    )
    .await;
    fake.rate_limit_call(1);
    let target = TestTarget::start().await;
    let mut opts = Opts::new(backend);
    opts.extra = format!(
        "[targets.t]\nurl = \"{}\"\n[sources.pp]\nprovider = \"paypal\"\ntargets = [\"t\"]\n\
         [sources.pp.paypal]\nwebhook_id = \"WH-HTTP\"\ncert = \"file:tests/fixtures/paypal/test-cert.pem\"\n",
        target.url
    );
    let first = spawn_app(opts.clone()).await;
    let cert =
        "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-1d93a270";
    for (i, e) in events.iter().enumerate() {
        if !missing.contains(&i) {
            let h =
                crate::providers::paypal::paypal_headers("WH-HTTP", cert, now, e.json.as_bytes());
            assert_eq!(first.post("pp", &h, e.json.as_bytes()).await.status(), 200);
        }
    }
    assert!(eventually(Duration::from_secs(20), || async { target.count() == 9 }).await);
    let db = first.stop().await;

    opts.extra.push_str(&format!(
        "[sources.pp.reconcile]\napi_key = \"{PP_CLIENT}:{PP_SECRET}\"\napi_base = \"{}\"\ninterval = \"1h\"\n",
        fake.url
    ));
    let app = spawn_on(opts, db, unique_prefix()).await;
    fake.set_gateway(&app.url(""));

    assert!(eventually(Duration::from_secs(20), || async { target.count() >= 12 }).await);
    let wanted: HashSet<String> = events
        .iter()
        .enumerate()
        .filter(|(i, _)| missing.contains(i))
        .map(|(_, e)| e.id.clone())
        .collect();
    assert_eq!(fake.resent().into_iter().collect::<HashSet<_>>(), wanted);
    assert_eq!(fake.resent().len(), 3);
    assert!(!fake.resent().contains(&young.id));
    assert_eq!(fake.list_calls(), [200, 429, 200, 200]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let counts = target.sends_per_id();
    assert_eq!(counts.len(), 12);
    assert!(counts.values().all(|&n| n == 1), "{counts:?}");
    assert!(
        eventually(Duration::from_secs(5), || async {
            let s = app.stats().await;
            let pp = &s["sources"]["pp"];
            pp["unique"] == 12 && pp["recovered"] == 3 && pp["rejected"] == 0
        })
        .await,
        "{}",
        app.stats().await
    );
    assert!(!app.stats().await.to_string().contains(PP_SECRET));
    let resent: HashSet<String> = wanted;
    let arrived: HashSet<String> = events
        .iter()
        .map(|e| e.id.clone())
        .filter(|id| !resent.contains(id))
        .collect();
    assert_marked(&app, "pp", &resent, &arrived).await;
}

both_backends!(
    github_deliveries_we_never_accepted_are_redelivered_and_verified,
    github_app_deliveries_we_never_accepted_are_redelivered_and_verified,
    a_wrong_app_key_is_a_clear_credential_error_and_never_printed,
    paypal_events_we_never_received_are_resent_and_verified,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_deliveries_older_than_the_window_are_not_redelivered() {
    // Arrange: none of these reached us; ten deliveries of the last hour
    // and ten of two hours ago, newest first. GitHub's list has no time
    // filter (`per_page`, `cursor`, `redelivery` only:
    // https://docs.github.com/en/rest/repos/webhooks#list-deliveries-for-a-repository-webhook),
    // so the fake lists them all and the run must stop at the window.
    let now = now();
    let deliveries: Vec<GhDelivery> = (0..20)
        .map(|i| GhDelivery {
            id: 7000 + 20 - i,
            guid: hookgate::primitives::token::random_uuid(),
            delivered_at: if i < 10 {
                now - 60 - 10 * i
            } else {
                now - 7200 - 10 * i
            },
            status_code: 503,
            redelivery: false,
            body: format!(r#"{{"action":"opened","issue":{{"number":{i}}}}}"#),
        })
        .collect();
    let fake = FakeGitHub::start("gh", GH_TOKEN, GITHUB_SECRET, deliveries.clone()).await;
    let target = TestTarget::start().await;
    let mut opts = Opts::new(Backend::Embedded);
    opts.extra = format!(
        "[targets.t]\nurl = \"{}\"\n[sources.gh]\nprovider = \"github\"\nsecrets = [\"{GITHUB_SECRET}\"]\ntargets = [\"t\"]\n\
         [sources.gh.reconcile]\napi_key = \"{GH_TOKEN}\"\nhook = \"{}\"\napi_base = \"{}\"\ninterval = \"1h\"\nlookback = \"1h\"\n",
        target.url,
        fake.hook(),
        fake.url
    );

    // Act: the gateway's first scheduled run.
    let app = spawn_app(opts).await;
    fake.set_gateway(&app.url(""));

    // Assert: the ten recent ones were redelivered and accepted; none of
    // the old ones, and the list was not read past the window (page one
    // holds deliveries 0-7, page two reaches the old ones at 10).
    assert!(
        eventually(Duration::from_secs(20), || async {
            let s = app.stats().await;
            s["sources"]["gh"]["reconcile_last_success"].is_string()
        })
        .await,
        "{}",
        app.stats().await
    );
    let wanted: HashSet<i64> = deliveries.iter().take(10).map(|d| d.id).collect();
    assert_eq!(
        fake.redelivered().into_iter().collect::<HashSet<_>>(),
        wanted
    );
    assert_eq!(fake.list_calls().len(), 2, "{:?}", fake.list_calls());
    assert!(eventually(Duration::from_secs(20), || async { target.count() >= 10 }).await);
    for d in &deliveries[10..] {
        assert_eq!(app.rows("gh", &d.guid).await, 0, "{} was recovered", d.id);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(target.count(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_paypal_secret_is_a_clear_error_and_is_never_printed() {
    // Arrange: PayPal's token call refuses the app's `client_id:secret`
    // with 401 (https://developer.paypal.com/api/rest/authentication/).
    let fake = FakePayPal::start(
        "pp",
        PP_CLIENT,
        PP_SECRET,
        "WH-HTTP",
        vec![],
        crate::providers::paypal::paypal_headers,
    )
    .await;
    let wrong = "EPpp-WRONG-secret-never_print_me";
    let basic = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(format!("{PP_CLIENT}:{wrong}"))
    };
    let cert = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/paypal/test-cert.pem"
    );
    let mut opts = Opts::new(Backend::Embedded);
    opts.extra = format!(
        "[sources.pp]\nprovider = \"paypal\"\n[sources.pp.paypal]\nwebhook_id = \"WH-HTTP\"\n\
         cert = \"file:{cert}\"\n[sources.pp.reconcile]\napi_key = \"{PP_CLIENT}:{wrong}\"\n\
         interval = \"1s\"\napi_base = \"{}\"\n",
        fake.url
    );
    let db = TestDb::create(Backend::Embedded).await;
    let config = opts.toml(&db, &unique_prefix(), "127.0.0.1:0");
    let leaks =
        |text: &str| text.contains(wrong) || text.contains("never_print") || text.contains(&basic);

    // The CLI: a clear error, non-zero exit, the secret nowhere.
    let (ok, out, err) = crate::reconcile::cli(&config, &["reconcile", "--source", "pp"]);
    assert!(!ok, "{out}");
    assert!(
        err.contains("the paypal API refused the credential (HTTP 401)"),
        "{err}"
    );
    assert!(!leaks(&out) && !leaks(&err), "{out}\n{err}");
    assert_eq!(fake.token_calls(), [401]);
    assert!(fake.list_calls().is_empty());

    // A serving gateway: logged once, counted, in /stats, never the secret.
    let (stats, text) =
        crate::reconcile::serve_until(&opts, &db, || async { fake.token_calls().len() >= 3 }).await;
    let s = &stats["sources"]["pp"];
    let last_error = s["reconcile_last_error"].as_str().unwrap_or_default();
    assert!(
        last_error.contains("paypal API refused the credential (HTTP 401)"),
        "{s}"
    );
    assert!(s["reconcile_failed_runs"].as_i64().unwrap() >= 2, "{s}");
    assert!(!leaks(&text), "{text}");
    assert_eq!(
        text.matches("reconciliation run failed").count(),
        1,
        "{text}"
    );
    assert!(!leaks(&stats.to_string()));
    assert!(fake.resent().is_empty());
}
