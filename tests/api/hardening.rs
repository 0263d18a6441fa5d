//! Issue #14 "Hardening": what an unauthenticated client cannot make the
//! gateway do, and what leaves the gateway.

use crate::helpers::*;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads from `stream` until `needle` shows up, the peer closes, or `wait` passes.
async fn read_until(stream: &mut TcpStream, needle: &str, wait: Duration) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + wait;
    while !String::from_utf8_lossy(&got).contains(needle) {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anonymous_large_chunked_post_to_admin_replay_gets_401_before_its_body_is_read() {
    let app = spawn_app(Opts::new(Backend::Embedded)).await;
    let mut s = TcpStream::connect(app.addr).await.unwrap();
    // Announces an endless chunked body and sends only its first chunk: a
    // server that read the body before checking the token would wait here.
    let head = "POST /admin/replay HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                Transfer-Encoding: chunked\r\n\r\n";
    let mut first = head.as_bytes().to_vec();
    first.extend_from_slice(format!("{:x}\r\n", 1024).as_bytes());
    first.extend_from_slice(&[b' '; 1024]);
    first.extend_from_slice(b"\r\n");
    // The server may answer and close before this write completes.
    let _ = s.write_all(&first).await;
    let started = Instant::now();
    let answer = read_until(&mut s, "\r\n\r\n", Duration::from_secs(3)).await;
    // Either the 401 arrived, or the connection was closed after it (a
    // close with our unread chunk in its buffer is a reset, which may
    // discard the answer on our side). Both mean the server did not wait
    // for the rest of the body; a server reading it would do neither.
    assert!(
        answer.starts_with("HTTP/1.1 401")
            || (answer.is_empty() && started.elapsed() < Duration::from_secs(2)),
        "answered while the client is still streaming: {answer:?}"
    );
    // The same request through a client that reads the answer: 401.
    let res = app
        .client
        .post(app.url("/admin/replay"))
        .body(vec![b' '; 1024])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authenticated_admin_body_over_64_kib_gets_413() {
    let app = spawn_app(Opts::new(Backend::Embedded)).await;
    assert_eq!(replay(&app, vec![b' '; 65 * 1024]).await, 413);
    assert_eq!(replay(&app, b"{}".to_vec()).await, 200);
}

/// `POST /admin/replay` with the token on the public port; the status.
async fn replay(app: &TestApp, body: Vec<u8>) -> u16 {
    app.client
        .post(app.url("/admin/replay"))
        .bearer_auth(ADMIN_TOKEN)
        .body(body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_tokens_that_share_a_prefix_or_differ_in_length_are_refused() {
    let app = spawn_app(Opts::new(Backend::Embedded)).await;
    let longer = format!("{ADMIN_TOKEN}x");
    for token in ["", "test", &ADMIN_TOKEN[..ADMIN_TOKEN.len() - 1], &longer] {
        let res = app
            .client
            .get(app.url("/stats"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 401, "{token:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_connections_trickling_headers_do_not_delay_a_valid_webhook() {
    let app = spawn_app(Opts::new(Backend::Embedded)).await;
    let mut slow = Vec::new();
    for _ in 0..300 {
        let mut s = TcpStream::connect(app.addr).await.unwrap();
        s.write_all(b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nX-Slow: a")
            .await
            .unwrap();
        slow.push(s);
    }
    // Keep trickling one byte per connection while the webhook is posted.
    let trickle = tokio::spawn(async move {
        for _ in 0..20 {
            for s in &mut slow {
                let _ = s.write_all(b"a").await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        slow
    });
    let started = Instant::now();
    let res = app.post_stripe("evt_beside_slow_clients").await;
    assert_eq!(res.status(), 200);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "took {:?}",
        started.elapsed()
    );
    drop(trickle.await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_finishes_its_headers_is_disconnected() {
    let mut opts = Opts::new(Backend::Embedded);
    opts.server_extra = "header_read_timeout = \"300ms\"".into();
    let app = spawn_app(opts).await;
    let mut s = TcpStream::connect(app.addr).await.unwrap();
    s.write_all(b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    // The server answers 408 or just closes; either way the read ends.
    let _ = read_until(&mut s, "\u{0}never", Duration::from_secs(5)).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "connection held for {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_max_connections_wait_until_one_closes() {
    let mut opts = Opts::new(Backend::Embedded);
    // One client may use both slots here: this is about the total.
    opts.server_extra = "max_connections = 2\nmax_connections_per_client = 2".into();
    let app = spawn_app(opts).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(app.addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        assert!(
            read_until(&mut s, "ok", Duration::from_secs(2))
                .await
                .contains("200")
        );
        held.push(s); // kept alive: still counts
    }
    let mut third = TcpStream::connect(app.addr).await.unwrap();
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let early = read_until(&mut third, "200", Duration::from_millis(400)).await;
    assert!(early.is_empty(), "served beyond the cap: {early:?}");
    drop(held.pop());
    let later = read_until(&mut third, "200", Duration::from_secs(3)).await;
    assert!(later.contains("200"), "{later:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_admin_listen_the_admin_routes_move_off_the_public_port() {
    let mut opts = Opts::new(Backend::Embedded);
    opts.admin_listen = true;
    let app = spawn_app(opts).await;
    let admin = app.admin_addr.unwrap();
    let get = |url: String| app.client.get(url).bearer_auth(ADMIN_TOKEN).send();
    for path in ["/stats", "/metrics", "/readyz"] {
        let public = get(app.url(path)).await.unwrap();
        assert_eq!(public.status(), 404, "public {path}");
        let private = get(format!("http://{admin}{path}")).await.unwrap();
        assert_eq!(private.status(), 200, "admin {path}");
    }
    assert_eq!(replay(&app, b"{}".to_vec()).await, 404);
    assert_eq!(get(app.url("/healthz")).await.unwrap().status(), 200);
    assert_eq!(app.post_stripe("evt_public_port").await.status(), 200);
}

/// A bearer source with two targets: `trusting` forwards credentials and
/// proxy headers, `plain` does not.
async fn bearer_app(b: Backend) -> (TestApp, TestTarget, TestTarget) {
    let (trusting, plain) = (TestTarget::start().await, TestTarget::start().await);
    let mut opts = Opts::new(b);
    opts.extra = format!(
        r#"
[sources.api]
provider = "bearer"
secrets = ["tok-123"]
targets = ["trusting", "plain"]

[sources.api_plain]
provider = "bearer"
secrets = ["tok-123"]
targets = ["plain"]

[targets.trusting]
url = "{}"
forward_credentials = true
forward_proxy_headers = true

[targets.plain]
url = "{}"
"#,
        trusting.url, plain.url
    );
    (spawn_app(opts).await, trusting, plain)
}

async fn post_bearer(app: &TestApp, source: &str, id: &str) -> reqwest::Response {
    app.client
        .post(app.url(&format!("/webhooks/{source}")))
        .header("authorization", "Bearer tok-123")
        .header("idempotency-key", id)
        .header("x-forwarded-for", "203.0.113.9")
        .header("connection", "keep-alive, x-hop")
        .header("x-hop", "hop value")
        .header("x-name", "Zoë Ålvarez".as_bytes())
        .body("{}")
        .send()
        .await
        .unwrap()
}

async fn credentials_are_stripped_unless_a_target_opts_in(b: Backend) {
    let (app, trusting, plain) = bearer_app(b).await;
    assert_eq!(post_bearer(&app, "api", "e1").await.status(), 200);
    assert_eq!(post_bearer(&app, "api_plain", "e2").await.status(), 200);
    assert!(
        eventually(Duration::from_secs(10), || async {
            plain.count() == 2 && trusting.count() == 1
        })
        .await
    );
    let t = &trusting.received()[0];
    assert_eq!(t.headers["authorization"], "Bearer tok-123");
    assert_eq!(t.headers["x-forwarded-for"], "203.0.113.9");
    for r in plain.received() {
        assert!(r.headers.get("authorization").is_none());
        assert!(r.headers.get("x-forwarded-for").is_none());
        assert!(r.headers.get("x-hop").is_none(), "named by Connection");
        assert_eq!(r.headers["x-name"].as_bytes(), "Zoë Ålvarez".as_bytes());
    }
    // The source nobody forwards credentials for never stored them.
    let stored = stored_headers(&app, "api_plain", "e2").await;
    assert!(
        !stored.to_ascii_lowercase().contains("authorization"),
        "{stored}"
    );
    assert!(!stored.contains("tok-123"), "{stored}");
}

async fn stored_headers(app: &TestApp, source: &str, id: &str) -> String {
    use sqlx::Connection;
    let sql = format!(
        "SELECT headers FROM hookgate_events WHERE source = '{source}' AND event_id = '{id}'"
    );
    if app.db.url.starts_with("postgres") {
        let mut c = sqlx::PgConnection::connect(&app.db.url).await.unwrap();
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_one(&mut c)
            .await
            .unwrap()
    } else {
        let mut c = sqlx::SqliteConnection::connect(&app.db.url).await.unwrap();
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_one(&mut c)
            .await
            .unwrap()
    }
}

crate::both_backends!(credentials_are_stripped_unless_a_target_opts_in);
