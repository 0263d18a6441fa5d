//! The Idempotency-Key proxy (`/api/{name}/…`, docs/idempotency.md) on both
//! backends, in front of a real loopback upstream that counts its calls.

use crate::both_backends;
use crate::helpers::db::pg_addr;
use crate::helpers::process::{ChaosProxy, Gateway, RedisServer};
use crate::helpers::*;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
struct Inner {
    calls: AtomicUsize,
    /// Calls per idempotency key.
    per_key: Mutex<HashMap<String, usize>>,
    /// Statuses to answer, in order; empty = 201.
    plan: Mutex<VecDeque<u16>>,
    delay: Mutex<Option<Duration>>,
    /// Every request's URI and headers, in order.
    seen: Mutex<Vec<(String, HeaderMap)>>,
}

/// An upstream API on loopback: answers every path with a JSON echo that
/// names the call number, so two answers from two calls always differ.
#[derive(Clone)]
struct Upstream {
    url: String,
    inner: Arc<Inner>,
}

impl Upstream {
    async fn start() -> Self {
        let inner = Arc::new(Inner::default());
        let app = Router::new().fallback(answer).with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, inner }
    }
    fn calls(&self) -> usize {
        self.inner.calls.load(Ordering::SeqCst)
    }
    fn calls_for(&self, key: &str) -> usize {
        *self.inner.per_key.lock().unwrap().get(key).unwrap_or(&0)
    }
    fn plan(&self, statuses: &[u16]) {
        self.inner.plan.lock().unwrap().extend(statuses);
    }
    fn delay(&self, d: Option<Duration>) {
        *self.inner.delay.lock().unwrap() = d;
    }
    /// URI and headers of the last request the upstream saw.
    fn last(&self) -> (String, HeaderMap) {
        self.inner
            .seen
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a request")
    }
}

async fn answer(
    State(inner): State<Arc<Inner>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, HeaderMap, String) {
    let n = inner.calls.fetch_add(1, Ordering::SeqCst) + 1;
    inner
        .seen
        .lock()
        .unwrap()
        .push((uri.to_string(), headers.clone()));
    if let Some(k) = headers.get("idempotency-key") {
        let k = k.to_str().unwrap().to_owned();
        *inner.per_key.lock().unwrap().entry(k).or_default() += 1;
    }
    let delay = *inner.delay.lock().unwrap();
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    let status = inner.plan.lock().unwrap().pop_front().unwrap_or(201);
    let mut out = HeaderMap::new();
    out.insert("content-type", "application/json".parse().unwrap());
    out.insert("x-call", n.to_string().parse().unwrap());
    out.insert("location", format!("/orders/{n}").parse().unwrap());
    out.insert("set-cookie", "sid=upstream-session".parse().unwrap());
    let doc = serde_json::json!({
        "call": n,
        "method": method.as_str(),
        "uri": uri.to_string(),
        "body": String::from_utf8_lossy(&body),
    });
    (StatusCode::from_u16(status).unwrap(), out, doc.to_string())
}

/// `[apis.pay]` (scoped by `X-User-ID`) and `[apis.strict]` (key required).
fn apis_toml(upstream: &str, lock_ttl: &str, timeout: &str) -> String {
    format!(
        r#"
[apis.pay]
upstream = "{upstream}/v1"
methods = ["POST", "PATCH"]
scope = "header:X-User-ID"
ttl = "1h"
lock_ttl = "{lock_ttl}"
timeout = "{timeout}"
inflight_wait = "5s"

[apis.strict]
upstream = "{upstream}"
required = true
lock_ttl = "{lock_ttl}"
timeout = "{timeout}"
"#
    )
}

fn opts(backend: Backend, upstream: &Upstream) -> Opts {
    let mut o = Opts::new(backend);
    o.extra = apis_toml(&upstream.url, "5s", "3s");
    o.delivery = false;
    // Required with [apis.*]: the console must not share the proxy's origin.
    o.admin_listen = true;
    o
}

/// Status, `Idempotency-Replayed`, `Retry-After`, body.
type Answer = (u16, bool, Option<String>, String);

async fn send(
    client: &reqwest::Client,
    url: &str,
    key: Option<&str>,
    user: &str,
    body: &str,
) -> Answer {
    let mut req = client
        .post(url)
        .header("content-type", "application/json")
        .header("x-user-id", user);
    if let Some(k) = key {
        req = req.header("idempotency-key", k);
    }
    let r = req
        .body(body.to_owned())
        .send()
        .await
        .expect("request sent");
    answer_of(r).await
}

async fn answer_of(r: reqwest::Response) -> Answer {
    let status = r.status().as_u16();
    let replayed = r
        .headers()
        .get("idempotency-replayed")
        .is_some_and(|v| v == "true");
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, replayed, retry, r.text().await.unwrap())
}

impl TestApp {
    async fn pay(&self, key: &str, body: &str) -> Answer {
        let url = self.url("/api/pay/orders?x=1");
        send(&self.client, &url, Some(key), "u1", body).await
    }
}

async fn concurrent_copies_reach_the_upstream_once(backend: Backend) {
    let up = Upstream::start().await;
    up.delay(Some(Duration::from_millis(300)));
    let app = Arc::new(spawn_app(opts(backend, &up)).await);
    let mut tasks = vec![];
    for _ in 0..200 {
        let app = app.clone();
        tasks.push(tokio::spawn(async move {
            app.pay("k-conc", r#"{"amount":100}"#).await
        }));
    }
    let mut answers = vec![];
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    assert_eq!(up.calls(), 1, "the upstream was called exactly once");
    let ok: Vec<&Answer> = answers.iter().filter(|a| a.0 == 201).collect();
    let first = &ok.iter().find(|a| !a.1).expect("one first answer").3;
    for a in &answers {
        match a.0 {
            201 => assert_eq!(&a.3, first, "every client gets the same body"),
            409 => assert_eq!(a.2.as_deref(), Some("1"), "409 carries Retry-After"),
            s => panic!("unexpected status {s}: {}", a.3),
        }
    }
    assert_eq!(
        ok.iter().filter(|a| !a.1).count(),
        1,
        "one unreplayed answer"
    );
    assert!(
        ok.len() > 100,
        "most waited and were replayed: {}",
        ok.len()
    );
    let stats = app.stats().await;
    assert_eq!(stats["apis"]["pay"]["first_calls"], 1);
    assert_eq!(
        stats["apis"]["pay"]["replays"].as_i64().unwrap() as usize,
        ok.len() - 1
    );
}

async fn a_completed_key_is_replayed_and_survives_a_restart(backend: Backend) {
    let up = Upstream::start().await;
    let app = spawn_app(opts(backend, &up)).await;
    let first = app.pay("k-restart", "{}").await;
    assert_eq!((first.0, first.1), (201, false));
    assert!(first.3.contains(r#""uri":"/v1/orders?x=1""#), "{}", first.3);
    let again = app.pay("k-restart", "{}").await;
    assert_eq!((again.0, again.1, &again.3), (201, true, &first.3));
    // Allow-listed headers are replayed; the rest are not.
    let r = app
        .client
        .post(app.url("/api/pay/orders?x=1"))
        .header("x-user-id", "u1")
        .header("idempotency-key", "k-restart")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["location"], "/orders/1");
    assert!(r.headers().get("x-call").is_none());

    let (opts, prefix) = (app.opts.clone(), app.prefix.clone());
    let db = app.stop().await;
    let app = spawn_on(opts, db, prefix).await;
    let after = app.pay("k-restart", "{}").await;
    assert_eq!((after.0, after.1, &after.3), (201, true, &first.3));
    assert_eq!(up.calls(), 1);
}

async fn a_different_request_under_the_same_key_conflicts(backend: Backend) {
    let up = Upstream::start().await;
    let app = spawn_app(opts(backend, &up)).await;
    let first = app.pay("k-conflict", r#"{"amount":1}"#).await;
    assert_eq!(first.0, 201);
    let other = app.pay("k-conflict", r#"{"amount":2}"#).await;
    assert_eq!(other.0, 409);
    assert!(other.3.contains("idempotency_key_reused"), "{}", other.3);
    // Another path under the same key is a different request too.
    let url = app.url("/api/pay/refunds");
    let path = send(
        &app.client,
        &url,
        Some("k-conflict"),
        "u1",
        r#"{"amount":1}"#,
    )
    .await;
    assert_eq!(path.0, 409);
    assert_eq!(up.calls(), 1, "the upstream was not called again");
    let still = app.pay("k-conflict", r#"{"amount":1}"#).await;
    assert_eq!((still.0, still.1, &still.3), (201, true, &first.3));
    assert_eq!(app.stats().await["apis"]["pay"]["conflicts"], 2);
}

async fn an_upstream_5xx_is_not_stored_and_the_retry_runs_again(backend: Backend) {
    let up = Upstream::start().await;
    up.plan(&[500]);
    let app = spawn_app(opts(backend, &up)).await;
    let failed = app.pay("k-500", "{}").await;
    assert_eq!((failed.0, failed.1), (500, false));
    let retry = app.pay("k-500", "{}").await;
    assert_eq!((retry.0, retry.1), (201, false));
    assert_eq!(up.calls(), 2);
    let third = app.pay("k-500", "{}").await;
    assert_eq!((third.0, third.1, &third.3), (201, true, &retry.3));
    assert_eq!(up.calls(), 2, "the second answer was stored");
    assert_eq!(app.stats().await["apis"]["pay"]["upstream_errors"], 1);
}

async fn scopes_methods_and_required_keys(backend: Backend) {
    let up = Upstream::start().await;
    let app = spawn_app(opts(backend, &up)).await;
    let url = app.url("/api/pay/orders");
    let a = send(&app.client, &url, Some("same"), "alice", "{}").await;
    let b = send(&app.client, &url, Some("same"), "bob", "{}").await;
    assert_eq!((a.0, a.1, b.0, b.1), (201, false, 201, false));
    assert_ne!(a.3, b.3, "two subjects, two calls");
    assert_eq!(up.calls(), 2);
    // A keyed request without the scope header cannot be namespaced.
    let r = app
        .client
        .post(&url)
        .header("idempotency-key", "same")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);

    // GET and PUT are not covered: passed through every time.
    for _ in 0..2 {
        let r = app
            .client
            .get(app.url("/api/pay/orders/1?expand=a"))
            .header("idempotency-key", "same")
            .header("x-user-id", "alice")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        assert!(r.headers().get("idempotency-replayed").is_none());
        assert!(
            r.text()
                .await
                .unwrap()
                .contains(r#""uri":"/v1/orders/1?expand=a""#)
        );
    }
    assert_eq!(up.calls(), 4);
    // No key on an optional API: forwarded as is.
    send(&app.client, &url, None, "alice", "{}").await;
    send(&app.client, &url, None, "alice", "{}").await;
    assert_eq!(up.calls(), 6);

    let strict = app.url("/api/strict/x");
    let r = send(&app.client, &strict, None, "alice", "{}").await;
    assert_eq!(r.0, 400);
    assert!(r.3.contains("invalid_idempotency_key"), "{}", r.3);
    let r = send(&app.client, &strict, Some(&"x".repeat(300)), "alice", "{}").await;
    assert_eq!(r.0, 400);
    assert_eq!(up.calls(), 6);
    let big = "x".repeat(app.opts.max_body_bytes + 1);
    // Its own client: the 413 closes the connection without reading the body.
    let r = send(&reqwest::Client::new(), &strict, Some("big"), "alice", &big).await;
    assert_eq!(r.0, 413);
    assert_eq!(up.calls(), 6);
    let stats = app.stats().await;
    assert_eq!(stats["apis"]["pay"]["passthrough"], 4);
    assert_eq!(stats["apis"]["strict"]["bad_requests"], 3);
}

/// Sends `request` (raw HTTP/1.1 text, sent as is so no client normalises
/// its path) to `addr`; the status code.
async fn raw_status(addr: std::net::SocketAddr, request: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got)).await;
    let text = String::from_utf8_lossy(&got);
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("{text}"))
}

/// Issue #32: the rest of the path was appended as text and the URL parser
/// resolved its dots, reaching outside the base path (even another API's).
async fn paths_that_could_leave_the_base_path_are_refused(backend: Backend) {
    let up = Upstream::start().await;
    let app = spawn_app(opts(backend, &up)).await;
    for path in [
        "/api/pay/../secret",
        "/api/pay/%2e%2e/secret",
        "/api/pay/%2E%2E/%2e%2e/admin",
        "/api/pay/.%2e/secret",
        "/api/pay/%2e./secret",
        "/api/pay/orders/./x",
        "/api/pay/%252e%252e/secret",
        "/api/pay/a%2fb",
        "/api/pay/a%5Cb",
        "/api/pay/a\\..\\b",
        "/api/pay/%c0%ae%c0%ae/secret",
    ] {
        for method in ["GET", "POST"] {
            let req = format!(
                "{method} {path} HTTP/1.1\r\nHost: x\r\nX-User-ID: u1\r\nIdempotency-Key: k-{method}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
            );
            assert_eq!(raw_status(app.addr, &req).await, 400, "{method} {path}");
        }
    }
    assert_eq!(up.calls(), 0, "no refused path reached the upstream");
    // Ordinary paths keep their encoding and stay under the base path.
    let req =
        "GET /api/pay/orders/a%20b/...x?q=%2F HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert_eq!(raw_status(app.addr, req).await, 201);
    assert_eq!(up.last().0, "/v1/orders/a%20b/...x?q=%2F");
    // Counted by the proxy: all but the raw `\` path, which hyper itself
    // refuses (400) before routing.
    assert_eq!(app.stats().await["apis"]["pay"]["bad_requests"], 20);
}

/// POSTs `{}` under key `key` as user u1 with `auth` as Authorization.
async fn as_caller(app: &TestApp, key: &str, auth: Option<&str>) -> Answer {
    let mut req = app
        .client
        .post(app.url("/api/pay/orders"))
        .header("x-user-id", "u1")
        .header("idempotency-key", key);
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    answer_of(req.body("{}").send().await.unwrap()).await
}

/// Issue #32: a stored 201 was replayed to a request with no credentials,
/// and `scope = "header:X"` alone trusted whatever the client sent.
async fn a_stored_answer_is_replayed_only_to_the_same_credentials(backend: Backend) {
    let up = Upstream::start().await;
    let app = spawn_app(opts(backend, &up)).await;
    let first = as_caller(&app, "k-cred", Some("Bearer alice")).await;
    assert_eq!((first.0, first.1), (201, false));
    let again = as_caller(&app, "k-cred", Some("Bearer alice")).await;
    assert_eq!((again.0, again.1, &again.3), (201, true, &first.3));
    for other in [None, Some("Bearer mallory"), Some("bearer alice")] {
        let a = as_caller(&app, "k-cred", other).await;
        assert!(!a.1, "{other:?} got alice's stored answer");
        assert_ne!(a.3, first.3, "{other:?}");
    }
    assert_eq!(up.calls(), 4);
    // The credential is forwarded unchanged; the ledger holds only a digest.
    assert_eq!(up.last().1["authorization"], "bearer alice");
}

/// Issue #32: an anonymous 401 under a guessable key poisoned it for 24 h;
/// 404 and 405 are not stored by default either.
async fn credential_refusals_and_404_are_not_stored(backend: Backend) {
    let up = Upstream::start().await;
    let app = spawn_app(opts(backend, &up)).await;
    for (i, status) in [401u16, 403, 407, 404, 405].into_iter().enumerate() {
        up.plan(&[status]);
        let key = format!("k-{status}");
        let refused = as_caller(&app, &key, Some("Bearer t")).await;
        assert_eq!((refused.0, refused.1), (status, false));
        let retry = as_caller(&app, &key, Some("Bearer t")).await;
        assert_eq!((retry.0, retry.1), (201, false), "{status} was stored");
        assert_eq!(up.calls(), 2 * (i + 1));
    }
    // Other 4xx answers are still decisions, stored and replayed.
    up.plan(&[422]);
    assert_eq!(as_caller(&app, "k-422", None).await.0, 422);
    let replayed = as_caller(&app, "k-422", None).await;
    assert_eq!((replayed.0, replayed.1), (422, true));
}

/// Issue #32: a 6,000-character scope header made PostgreSQL refuse the
/// index row, answered as 503 "storage unavailable".
async fn a_6000_character_scope_header_is_stored_and_replayed(backend: Backend) {
    let up = Upstream::start().await;
    let app = spawn_app(opts(backend, &up)).await;
    let url = app.url("/api/pay/orders");
    let user = "u".repeat(6000);
    let first = send(&app.client, &url, Some("k-long"), &user, "{}").await;
    assert_eq!((first.0, first.1), (201, false), "{}", first.3);
    let again = send(&app.client, &url, Some("k-long"), &user, "{}").await;
    assert_eq!((again.0, again.1, &again.3), (201, true, &first.3));
    assert_eq!(up.calls(), 1);
}

/// Issue #32: proxied pages shared the console's origin with the upstream's
/// Content-Type and Set-Cookie, and no CSP or nosniff.
async fn proxied_answers_are_sandboxed_and_drop_set_cookie(backend: Backend) {
    let up = Upstream::start().await;
    let mut o = opts(backend, &up);
    o.extra.push_str(&format!(
        "\n[apis.cookies]\nupstream = \"{}\"\nforward_set_cookie = true\nreplay_headers = [\"set-cookie\"]\n",
        up.url
    ));
    let app = spawn_app(o).await;
    let check = |r: &reqwest::Response, cookie: bool| {
        let h = r.headers();
        assert_eq!(h["content-security-policy"], "sandbox");
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert_eq!(h.get("set-cookie").is_some(), cookie, "{h:?}");
    };
    let post = |path: &str| {
        app.client
            .post(app.url(path))
            .header("x-user-id", "u1")
            .header("idempotency-key", "k-csp")
            .body("{}")
            .send()
    };
    let first = post("/api/pay/page").await.unwrap();
    check(&first, false);
    let replay = post("/api/pay/page").await.unwrap();
    assert_eq!(replay.headers()["idempotency-replayed"], "true");
    check(&replay, false);
    let pass = app
        .client
        .get(app.url("/api/pay/page"))
        .send()
        .await
        .unwrap();
    check(&pass, false);
    // An API that opts in keeps the cookie (on the first call and replays).
    check(&post("/api/cookies/page").await.unwrap(), true);
    check(&post("/api/cookies/page").await.unwrap(), true);
}

/// Issue #32: client-sent X-Forwarded-* reached the upstream untouched and
/// hookgate added none of its own.
async fn forwarding_headers_from_untrusted_peers_are_replaced(backend: Backend) {
    let up = Upstream::start().await;
    let forged = |r: reqwest::RequestBuilder| {
        r.header("x-forwarded-for", "203.0.113.9")
            .header("x-forwarded-host", "evil.example")
            .header("x-forwarded-proto", "https")
            .header("forwarded", "for=203.0.113.9")
            .header("x-real-ip", "203.0.113.9")
    };
    let app = spawn_app(opts(backend, &up)).await;
    forged(app.client.get(app.url("/api/pay/x")))
        .send()
        .await
        .unwrap();
    let (_, h) = up.last();
    assert_eq!(h["x-forwarded-for"], "127.0.0.1");
    assert_eq!(h["x-forwarded-host"], app.addr.to_string());
    assert_eq!(h["x-forwarded-proto"], "http");
    assert!(h.get("forwarded").is_none() && h.get("x-real-ip").is_none());

    // From a trusted proxy they are kept, and the peer is appended.
    let mut o = opts(backend, &up);
    o.server_extra = "trusted_proxies = [\"127.0.0.1/32\"]".into();
    let app = spawn_app(o).await;
    forged(app.client.get(app.url("/api/pay/x")))
        .send()
        .await
        .unwrap();
    let (_, h) = up.last();
    assert_eq!(h["x-forwarded-for"], "203.0.113.9, 127.0.0.1");
    assert_eq!(h["x-forwarded-host"], "evil.example");
    assert_eq!(h["forwarded"], "for=203.0.113.9");
}

/// Issue #32: the console (holding the admin token in its origin's
/// storage) shared an origin with proxied pages.
async fn the_console_and_admin_routes_are_not_on_the_proxys_origin(backend: Backend) {
    let up = Upstream::start().await;
    let app = spawn_app(opts(backend, &up)).await;
    for path in ["/console/", "/stats", "/admin/events"] {
        let public = app
            .client
            .get(app.url(path))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(public.status(), 404, "{path} on the proxy's origin");
        let admin = app
            .client
            .get(app.admin_url(path))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(admin.status(), 200, "{path} on admin_listen");
    }
}

both_backends!(
    paths_that_could_leave_the_base_path_are_refused,
    a_stored_answer_is_replayed_only_to_the_same_credentials,
    credential_refusals_and_404_are_not_stored,
    a_6000_character_scope_header_is_stored_and_replayed,
    proxied_answers_are_sandboxed_and_drop_set_cookie,
    forwarding_headers_from_untrusted_peers_are_replaced,
    the_console_and_admin_routes_are_not_on_the_proxys_origin,
    concurrent_copies_reach_the_upstream_once,
    a_completed_key_is_replayed_and_survives_a_restart,
    a_different_request_under_the_same_key_conflicts,
    an_upstream_5xx_is_not_stored_and_the_retry_runs_again,
    scopes_methods_and_required_keys,
    a_killed_gateway_blocks_its_key_only_until_lock_ttl,
    expired_keys_are_purged_and_then_run_again,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_mid_run_still_calls_the_upstream_once_per_key() {
    let up = Upstream::start().await;
    up.delay(Some(Duration::from_millis(100)));
    let mut redis = RedisServer::start().await;
    let mut o = opts(Backend::Production, &up);
    o.redis_url = Some(redis.url());
    let app = Arc::new(spawn_app(o).await);
    let run = |round: usize| {
        let mut tasks = vec![];
        for k in 0..10 {
            for _ in 0..5 {
                let app = app.clone();
                tasks.push(tokio::spawn(async move {
                    app.pay(&format!("k-{round}-{k}"), "{}").await.0
                }));
            }
        }
        tasks
    };
    let before = run(0);
    tokio::time::sleep(Duration::from_millis(50)).await;
    redis.kill();
    let after = run(1);
    for t in before.into_iter().chain(after) {
        let s = t.await.unwrap();
        assert!(s == 201 || s == 409, "status {s}");
    }
    for round in 0..2 {
        for k in 0..10 {
            let key = format!("k-{round}-{k}");
            assert_eq!(up.calls_for(&key), 1, "{key}");
            // Every key is now answered from the row.
            let r = app.pay(&key, "{}").await;
            assert_eq!((r.0, r.1), (201, true), "{key}");
        }
    }
    assert_eq!(up.calls(), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down_is_503_and_the_upstream_is_not_called() {
    let up = Upstream::start().await;
    let proxy = ChaosProxy::start(pg_addr()).await;
    let db = TestDb::create(Backend::Production).await;
    let mut o = opts(Backend::Production, &up);
    o.database_url = Some(proxy.url(db.name()));
    let app = spawn_on(o, db, unique_prefix()).await;
    assert_eq!(app.pay("k-pg-ok", "{}").await.0, 201);

    proxy.cut();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = app.pay("k-pg-down", "{}").await;
    assert_eq!((r.0, r.2.as_deref()), (503, Some("5")));
    assert_eq!(up.calls(), 1, "the upstream was not called");
    // The cache claim was released: the next try is not "in flight".
    assert_eq!(app.pay("k-pg-down", "{}").await.0, 503);

    proxy.restore();
    let ok = eventually(Duration::from_secs(10), || async {
        app.pay("k-pg-down", "{}").await.0 == 201
    })
    .await;
    assert!(ok, "accepted after recovery");
    assert_eq!(up.calls_for("k-pg-down"), 1);
}

async fn a_killed_gateway_blocks_its_key_only_until_lock_ttl(backend: Backend) {
    let up = Upstream::start().await;
    up.delay(Some(Duration::from_secs(30)));
    let db = TestDb::create(backend).await;
    let prefix = unique_prefix();
    let mut o = opts(backend, &up);
    o.extra = apis_toml(&up.url, "2s", "1500ms");
    let mut first = Gateway::start(&o, &db, &prefix).await;
    let client = reqwest::Client::new();
    let url = first.url("/api/pay/orders");
    let c = client.clone();
    let pending = tokio::spawn(async move {
        c.post(url)
            .header("x-user-id", "u1")
            .header("idempotency-key", "k-kill")
            .body("{}")
            .send()
            .await
    });
    let reached = eventually(Duration::from_secs(10), || async { up.calls() == 1 }).await;
    assert!(reached, "the first call reached the upstream");
    first.kill9();
    assert!(
        pending.await.unwrap().is_err(),
        "the killed gateway never answered"
    );
    up.delay(None);

    let second = Gateway::start(&o, &db, &prefix).await;
    let url = second.url("/api/pay/orders");
    let early = send(&client, &url, Some("k-kill"), "u1", "{}").await;
    let started = std::time::Instant::now();
    if early.0 == 201 {
        // Only possible once lock_ttl passed while the second gateway started.
        assert_eq!(up.calls(), 2);
    } else {
        assert_eq!((early.0, early.2.as_deref()), (409, Some("1")));
        let ok = eventually(Duration::from_secs(10), || async {
            send(&client, &url, Some("k-kill"), "u1", "{}").await.0 == 201
        })
        .await;
        assert!(ok, "the retry ran after lock_ttl ({:?})", started.elapsed());
        assert_eq!(up.calls(), 2, "exactly one more upstream call");
    }
    let replay = send(&client, &url, Some("k-kill"), "u1", "{}").await;
    assert_eq!((replay.0, replay.1), (201, true));
}

async fn expired_keys_are_purged_and_then_run_again(backend: Backend) {
    let up = Upstream::start().await;
    let mut o = opts(backend, &up);
    o.extra.push_str(&format!(
        "\n[apis.short]\nupstream = \"{}\"\nttl = \"300ms\"\nlock_ttl = \"3s\"\ntimeout = \"2s\"\n",
        up.url
    ));
    let app = spawn_app(o).await;
    let url = app.url("/api/short/x");
    assert!(!send(&app.client, &url, Some("k-exp"), "u", "{}").await.1);
    assert!(
        send(&app.client, &url, Some("k-exp"), "u", "{}").await.1,
        "replayed within ttl"
    );
    let key = hookgate::proxy::key::namespaced(
        &app.state.config().apis["short"],
        &reqwest::header::HeaderMap::new(),
        "k-exp".into(),
    )
    .unwrap();
    // purge_interval is 200ms in the test config.
    let purged = eventually(Duration::from_secs(5), || async {
        app.state.store.idempotency.lookup(&key).await.unwrap()
            == hookgate::store::idempotency::Begin::Vanished
    })
    .await;
    assert!(purged, "the expired key was purged");
    let again = send(&app.client, &url, Some("k-exp"), "u", "{}").await;
    assert_eq!((again.0, again.1), (201, false));
    assert_eq!(up.calls(), 2);
}
