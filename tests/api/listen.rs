//! `hookgate listen` and `GET /admin/listen/{source}`: scoped tokens, a
//! byte-exact forward, a listener killed (SIGKILL) and restarted, two
//! listeners on one source.

use crate::both_backends;
use crate::helpers::target::TestTarget;
use crate::helpers::{ADMIN_TOKEN, Backend, Opts, TestApp, eventually, spawn_app};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const LISTEN_TOKEN: &str = "listen-token-0123456789";
const OPS_TOKEN: &str = "ops-token-0123456789abc";

fn opts(backend: Backend) -> Opts {
    let mut o = Opts::new(backend);
    o.extra = format!(
        "[server.tokens.laptop]\nsecret = \"{LISTEN_TOKEN}\"\nscopes = [\"listen\"]\n\n\
         [server.tokens.ops]\nsecret = \"{OPS_TOKEN}\"\nscopes = [\"admin\"]\n"
    );
    // PostgreSQL passes ids settled for statement_timeout + 1 s.
    o.storage_extra = "statement_timeout = \"1s\"".into();
    o
}

/// A `hookgate listen` child process, killed on drop.
struct Listener {
    child: Child,
}

impl Listener {
    fn start(app: &TestApp, to: &TestTarget, state: &std::path::Path, extra: &[&str]) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_hookgate"))
            .args(["listen", "--gateway", &app.url(""), "--source", "stripe"])
            .args(["--forward-to", &to.url, "--state"])
            .arg(state)
            .args(extra)
            .env("HOOKGATE_TOKEN", LISTEN_TOKEN)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("hookgate listen starts");
        Self { child }
    }

    fn kill9(&mut self) {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill").args(["-9", &pid]).status();
        assert!(ok.is_ok_and(|s| s.success()), "kill -9 {pid}");
        let _ = self.child.wait();
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The event ids a target got, in arrival order.
fn ids(t: &TestTarget) -> Vec<String> {
    t.received()
        .iter()
        .map(|r| r.headers["hookgate-event-id"].to_str().unwrap().to_owned())
        .collect()
}

/// Posts each event as a provider would: a 503 (a slow shared database)
/// is retried.
async fn post_all(app: &TestApp, ids: &[String]) {
    for id in ids {
        let mut status = 0;
        for _ in 0..10 {
            status = app.post_stripe(id).await.status().as_u16();
            if status != 503 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(status, 200, "{id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_needs_the_listen_scope() {
    let app = spawn_app(opts(Backend::Embedded)).await;
    let url = app.url("/admin/listen/stripe");
    let get = |token: Option<&'static str>| {
        let mut r = app.client.get(&url);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };
    assert_eq!(get(None).await.unwrap().status(), 401);
    assert_eq!(
        get(Some("wrong-token-0123456789")).await.unwrap().status(),
        401
    );
    // A valid token without the scope: 403, named.
    let r = get(Some(OPS_TOKEN)).await.unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.text().await.unwrap().contains("listen"));
    // The listen token opens the stream, and nothing else.
    let r = get(Some(LISTEN_TOKEN)).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/x-ndjson");
    drop(r);
    let stats = app
        .client
        .get(app.url("/stats"))
        .bearer_auth(LISTEN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(stats.status(), 403);
    // The named admin token and the old single token both reach /stats.
    for t in [OPS_TOKEN, ADMIN_TOKEN] {
        let r = app
            .client
            .get(app.url("/stats"))
            .bearer_auth(t)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    // Unknown sources and bad cursors are refused by name.
    let r = app
        .client
        .get(app.url("/admin/listen/nope"))
        .bearer_auth(LISTEN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = app
        .client
        .get(app.url("/admin/listen/stripe?from=yesterday"))
        .bearer_auth(LISTEN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}

async fn forwards_byte_exact_with_headers_and_resigns(backend: Backend) {
    let app = spawn_app(opts(backend)).await;
    let local = TestTarget::start().await;
    let dir = tempfile::tempdir().unwrap();
    // Odd bytes and spacing that any re-serialization would change.
    let body = "{\"id\":\"evt_exact\",  \"type\":\"charge.succeeded\",\"data\":{\"object\":{\"id\":\"ch_1\",\"n\":1.50}},\"x\":\"\\u00e9\"}\n";
    assert_eq!(app.post_stripe_body(body.as_bytes()).await.status(), 200);
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let _l = Listener::start(
        &app,
        &local,
        &dir.path().join("s.json"),
        &["--from", "0", "--resign", secret],
    );
    assert!(eventually(Duration::from_secs(20), || async { local.count() >= 1 }).await);
    let got = &local.received()[0];
    assert_eq!(&got.body[..], body.as_bytes(), "byte-exact");
    let h = &got.headers;
    assert_eq!(h["hookgate-event-id"], "evt_exact");
    assert_eq!(h["hookgate-source"], "stripe");
    assert_eq!(h["hookgate-event-type"], "charge.succeeded");
    assert!(
        h.contains_key("stripe-signature"),
        "provider headers: {h:?}"
    );
    assert_eq!(h["content-type"], "application/json");
    // The Standard Webhooks signature verifies with the local secret.
    let id = h["webhook-id"].to_str().unwrap();
    let ts: i64 = h["webhook-timestamp"].to_str().unwrap().parse().unwrap();
    let key = hookgate::primitives::crypto::SigningKey::standard_webhooks(
        &hookgate::primitives::secret::Secret::new(secret),
    );
    let want = hookgate::target::http::standard_signature(key.bytes(), id, ts, body.as_bytes());
    assert_eq!(h["webhook-signature"].to_str().unwrap(), want);
    // Listening never changes delivery state.
    let stats = app.stats().await;
    assert_eq!(stats["sources"]["stripe"]["delivered"], 0, "{stats}");
}

async fn a_killed_listener_resumes_exactly_once_in_order(backend: Backend) {
    let app = spawn_app(opts(backend)).await;
    let local = TestTarget::start().await;
    // Slow enough that the kill lands mid-stream.
    local.hang(Some(Duration::from_millis(30)));
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let first: Vec<String> = (0..40).map(|i| format!("evt_k{i:03}")).collect();
    post_all(&app, &first).await;
    let mut l = Listener::start(&app, &local, &state, &["--from", "0"]);
    assert!(
        eventually(Duration::from_secs(30), || async { local.count() >= 10 }).await,
        "{}",
        local.count()
    );
    // The kill lands while a forward is in flight: the local app holds
    // the next request (it never answers it), so that event is not acked.
    local.hang(Some(Duration::from_secs(20)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    l.kill9();
    local.hang(None);
    let at_kill = local.count();
    assert!(at_kill < first.len(), "killed mid-stream ({at_kill})");
    // Events arrive while it is down; the restart has no --from.
    let second: Vec<String> = (0..10).map(|i| format!("evt_k1{i:02}")).collect();
    post_all(&app, &second).await;
    // A local app that fails once: retried, not skipped.
    local.plan(&[503]);
    let _l = Listener::start(&app, &local, &state, &[]);
    let all: Vec<String> = first.iter().chain(&second).cloned().collect();
    assert!(
        eventually(Duration::from_secs(30), || async {
            local.received().iter().filter(|r| r.status == 200).count() >= all.len()
        })
        .await,
        "{:?}",
        ids(&local)
    );
    let delivered: Vec<String> = local
        .received()
        .iter()
        .filter(|r| r.status == 200)
        .map(|r| r.headers["hookgate-event-id"].to_str().unwrap().to_owned())
        .collect();
    assert_eq!(delivered, all, "every event once, in order");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        local.received().iter().filter(|r| r.status == 200).count(),
        all.len(),
        "nothing more"
    );
}

async fn two_listeners_both_get_everything(backend: Backend) {
    let app = spawn_app(opts(backend)).await;
    let (a, b) = (TestTarget::start().await, TestTarget::start().await);
    let dir = tempfile::tempdir().unwrap();
    let before: Vec<String> = (0..5).map(|i| format!("evt_t{i}")).collect();
    post_all(&app, &before).await;
    let _la = Listener::start(&app, &a, &dir.path().join("a.json"), &["--from", "1h"]);
    let _lb = Listener::start(&app, &b, &dir.path().join("b.json"), &["--from", "1h"]);
    // And live ones, while both listen.
    let live: Vec<String> = (5..12).map(|i| format!("evt_t{i}")).collect();
    post_all(&app, &live).await;
    let all: Vec<String> = before.iter().chain(&live).cloned().collect();
    for t in [&a, &b] {
        assert!(
            eventually(Duration::from_secs(30), || async { t.count() >= all.len() }).await,
            "{:?}",
            ids(t)
        );
        assert_eq!(ids(t), all);
    }
}

both_backends!(
    forwards_byte_exact_with_headers_and_resigns,
    a_killed_listener_resumes_exactly_once_in_order,
    two_listeners_both_get_everything,
);
