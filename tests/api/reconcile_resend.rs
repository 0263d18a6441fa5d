//! Reconciliation by resend (GitHub, PayPal): deliveries the gateway never
//! accepted are asked for again, and arrive signed through the normal path.

use crate::helpers::fake_resend::*;
use crate::helpers::*;
use std::collections::HashSet;
use std::time::Duration;

const GH_TOKEN: &str = "ghp_reconcileTestToken0123456789";
const PP_CLIENT: &str = "AVpp-client-id";
const PP_SECRET: &str = "EPpp-client-secret-never-printed";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_deliveries_we_never_accepted_are_redelivered_and_verified() {
    // Arrange: 20 deliveries at GitHub, newest first; 5 never accepted here
    // (one GitHub saw fail with 503), one received event also redelivered.
    let now = now();
    let mut deliveries: Vec<GhDelivery> = (0..20)
        .map(|i| GhDelivery {
            id: 9000 + 20 - i,
            guid: uuid::Uuid::new_v4().to_string(),
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
    let fake = FakeGitHub::start("gh", GH_TOKEN, GITHUB_SECRET, deliveries.clone()).await;
    fake.rate_limit_call(1);
    let target = TestTarget::start().await;
    let mut opts = Opts::new(Backend::Production);
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
        "[sources.gh.reconcile]\napi_key = \"{GH_TOKEN}\"\nhook = \"{}\"\napi_base = \"{}\"\ninterval = \"1h\"\n",
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paypal_events_we_never_received_are_resent_and_verified() {
    let now = now();
    let events: Vec<PpEvent> = (0..12)
        .map(|i| {
            let id = format!("WH-{}-{i:02}", uuid::Uuid::new_v4().simple());
            PpEvent {
                json: paypal_event(&id, now - 120 - 30 * i),
                id,
                create_time: now - 120 - 30 * i,
            }
        })
        .collect();
    let missing: HashSet<usize> = [0, 5, 9].into();
    let fake = FakePayPal::start(
        "pp",
        PP_CLIENT,
        PP_SECRET,
        "WH-HTTP",
        events.clone(),
        crate::providers::paypal::paypal_headers,
    )
    .await;
    fake.rate_limit_call(1);
    let target = TestTarget::start().await;
    let mut opts = Opts::new(Backend::Embedded);
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
}
