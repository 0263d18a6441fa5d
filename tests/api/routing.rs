//! Routes: each target receives only the event types (and filtered
//! events) it subscribes to; an event nobody wants is stored and counted.

use crate::both_backends;
use crate::helpers::*;
use std::time::Duration;

both_backends!(
    invoice_events_go_to_billing_and_disputes_to_risk_only,
    a_filter_on_a_body_field_selects_the_events_a_target_gets,
    an_event_no_target_wants_is_stored_counted_unrouted_and_sent_nowhere,
    github_events_are_routed_by_event_and_action,
);

const WAIT: Duration = Duration::from_secs(15);

fn event(id: &str, kind: &str, currency: &str) -> Vec<u8> {
    format!(
        r#"{{"id":"{id}","object":"event","type":"{kind}","data":{{"object":{{"id":"o_1","currency":"{currency}"}}}}}}"#
    )
    .into_bytes()
}

fn target(name: &str, t: &TestTarget, extra: &str) -> String {
    format!("[targets.{name}]\nurl = \"{}\"\n{extra}\n", t.url)
}

fn ids(t: &TestTarget) -> Vec<String> {
    let mut ids: Vec<String> = t
        .received()
        .iter()
        .map(|r| r.headers["hookgate-event-id"].to_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

async fn invoice_events_go_to_billing_and_disputes_to_risk_only(b: Backend) {
    let (billing, risk) = (TestTarget::start().await, TestTarget::start().await);
    let mut opts = Opts::new(b);
    opts.stripe_targets = vec!["billing".into(), "risk".into()];
    opts.extra = target("billing", &billing, r#"events = ["invoice.*"]"#)
        + &target(
            "risk",
            &risk,
            r#"events = ["charge.dispute.*", "radar.early_fraud_warning.created"]"#,
        );
    let app = spawn_app(opts).await;
    for (id, kind) in [
        ("evt_r1", "invoice.paid"),
        ("evt_r2", "invoice.payment_failed"),
        ("evt_r3", "charge.dispute.created"),
        ("evt_r4", "radar.early_fraud_warning.created"),
        ("evt_r5", "charge.succeeded"),
    ] {
        let r = app.post_stripe_body(&event(id, kind, "eur")).await;
        assert_eq!(dedup_header(&r), "new");
    }
    let done = eventually(WAIT, || async { billing.count() == 2 && risk.count() == 2 }).await;
    assert!(done, "billing {:?} risk {:?}", ids(&billing), ids(&risk));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(ids(&billing), ["evt_r1", "evt_r2"]);
    assert_eq!(ids(&risk), ["evt_r3", "evt_r4"]);
    let stats = app.stats().await;
    let s = &stats["sources"]["stripe"];
    assert_eq!(s["unique"], 5, "{stats}");
    assert_eq!(
        s["unrouted"], 1,
        "charge.succeeded matched no route: {stats}"
    );
    assert_eq!(
        s["pending"], 0,
        "no delivery row for unmatched targets: {stats}"
    );
    // A duplicate adds to no type; the types are what was stored.
    let r = app
        .post_stripe_body(&event("evt_r1", "invoice.paid", "eur"))
        .await;
    assert_eq!(dedup_header(&r), "duplicate");
    let by_type = &app.stats().await["sources"]["stripe"]["unique_by_type"];
    assert_eq!(
        *by_type,
        serde_json::json!({
            "invoice.paid": 1,
            "invoice.payment_failed": 1,
            "charge.dispute.created": 1,
            "radar.early_fraud_warning.created": 1,
            "charge.succeeded": 1,
        }),
        "{stats}"
    );
}

async fn a_filter_on_a_body_field_selects_the_events_a_target_gets(b: Backend) {
    let (eu, all) = (TestTarget::start().await, TestTarget::start().await);
    let mut opts = Opts::new(b);
    opts.stripe_targets = vec!["eu".into(), "all".into()];
    opts.extra = target(
        "eu",
        &eu,
        r#"filter = { "json:/data/object/currency" = "eur" }"#,
    ) + &target("all", &all, "");
    let app = spawn_app(opts).await;
    app.post_stripe_body(&event("evt_f1", "invoice.paid", "eur"))
        .await;
    app.post_stripe_body(&event("evt_f2", "invoice.paid", "usd"))
        .await;
    app.post_stripe_body(&stripe_body("evt_f3")).await;
    let done = eventually(WAIT, || async { all.count() == 3 && eu.count() == 1 }).await;
    assert!(done, "eu {:?} all {:?}", ids(&eu), ids(&all));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(ids(&eu), ["evt_f1"]);
    assert_eq!(app.stats().await["sources"]["stripe"]["unrouted"], 0);
}

async fn an_event_no_target_wants_is_stored_counted_unrouted_and_sent_nowhere(b: Backend) {
    let t = TestTarget::start().await;
    let mut opts = Opts::new(b);
    opts.stripe_targets = vec!["billing".into()];
    opts.extra = target("billing", &t, r#"events = ["invoice.*"]"#);
    let app = spawn_app(opts).await;
    const UNROUTED: &str = "hookgate_unrouted_total{source=\"stripe\"}";
    let unrouted_before = app.metric_value(UNROUTED).await;
    let body = event("evt_u1", "customer.created", "eur");
    let r = app.post_stripe_body(&body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(dedup_header(&r), "new");
    // Stored: a copy is a duplicate, and the ledger holds the row.
    assert_eq!(
        dedup_header(&app.post_stripe_body(&body).await),
        "duplicate"
    );
    assert_eq!(app.rows("stripe", "evt_u1").await, 1);
    let counted = eventually(WAIT, || async {
        app.stats().await["sources"]["stripe"]["unrouted"] == 1
    })
    .await;
    assert!(counted, "{}", app.stats().await);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(t.count(), 0);
    let stats = app.stats().await;
    let s = &stats["sources"]["stripe"];
    assert_eq!(s["unrouted"], 1, "{stats}");
    assert_eq!(s["pending"], 0, "{stats}");
    assert_eq!(s["delivered"], 0, "{stats}");
    // The series exists from start-up (a handle per source), so its count
    // is checked: at least ours (the recorder is process-wide, parallel
    // tests may add theirs; the exact count is /stats' job).
    assert!(app.metric_value(UNROUTED).await > unrouted_before);
}

/// GitHub's type is the event plus the payload's action (providers/github.toml):
/// `issues.*` takes opened and closed issues, never a push.
async fn github_events_are_routed_by_event_and_action(b: Backend) {
    let issues = TestTarget::start().await;
    let mut opts = Opts::new(b);
    opts.extra = format!(
        "[sources.gh_routed]\nprovider = \"github\"\nsecrets = [\"{GITHUB_SECRET}\"]\n\
         targets = [\"issues\"]\n{}",
        target("issues", &issues, r#"events = ["issues.*"]"#)
    );
    let app = spawn_app(opts).await;
    for (guid, event, body) in [
        (
            "d-1",
            "issues",
            r#"{"action":"opened","issue":{"number":1}}"#,
        ),
        ("d-2", "push", r#"{"ref":"refs/heads/main"}"#),
        (
            "d-3",
            "issues",
            r#"{"action":"closed","issue":{"number":1}}"#,
        ),
        ("d-4", "pull_request", r#"{"action":"opened","number":2}"#),
    ] {
        let mut h = signers::github(GITHUB_SECRET, guid, body.as_bytes());
        h.retain(|(k, _)| k != "X-GitHub-Event");
        h.push(("X-GitHub-Event".into(), event.into()));
        let r = app.post("gh_routed", &h, body.as_bytes()).await;
        assert_eq!(dedup_header(&r), "new");
    }
    let done = eventually(WAIT, || async { issues.count() == 2 }).await;
    assert!(done, "issues got {}", issues.count());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got: Vec<String> = issues
        .received()
        .iter()
        .map(|r| r.headers["x-github-delivery"].to_str().unwrap().to_owned())
        .collect();
    let mut got = got;
    got.sort();
    assert_eq!(got, ["d-1", "d-3"]);
    let stats = app.stats().await;
    let s = &stats["sources"]["gh_routed"];
    assert_eq!(s["unrouted"], 2, "{stats}");
    assert_eq!(
        s["unique_by_type"],
        serde_json::json!({"issues.opened": 1, "issues.closed": 1, "push": 1, "pull_request.opened": 1}),
        "{stats}"
    );
}
