//! Issue #32 "Hardening, second round", availability: one client without a
//! secret must not stop webhook intake (idle HTTP/2 connections, trickling
//! bodies, memory), nor guess the admin token quickly; kept-alive HTTP/1
//! connections have their own idle limit.

use crate::helpers::process;
use crate::helpers::*;
use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// A TCP connection to `to` from the loopback address `from`.
async fn connect_from(from: &str, to: SocketAddr) -> std::io::Result<TcpStream> {
    let s = TcpSocket::new_v4()?;
    s.bind(SocketAddr::new(from.parse().unwrap(), 0))?;
    s.connect(to).await
}

/// A client whose connections come from the loopback address `from`.
fn client_from(from: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(from.parse::<IpAddr>().unwrap())
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// An HTTP/2 connection that opens no stream and answers the server's
/// pings (hyper's client does); resolves when the server closes it.
async fn idle_h2(to: SocketAddr) -> Option<tokio::task::JoinHandle<Instant>> {
    let stream = connect_from("127.0.0.1", to).await.ok()?;
    let (sender, conn) = hyper::client::conn::http2::handshake::<_, _, Empty<Bytes>>(
        TokioExecutor::new(),
        TokioIo::new(stream),
    )
    .await
    .ok()?;
    Some(tokio::spawn(async move {
        let _keep = sender;
        let _ = conn.await;
        Instant::now()
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http2_connections_and_trickling_api_bodies_from_one_address_do_not_stop_webhooks_from_another()
 {
    let upstream = TestTarget::start().await;
    let mut opts = Opts::new(Backend::Embedded);
    opts.server_extra = "max_connections = 64\nheader_read_timeout = \"1s\"\n\
                         request_timeout = \"3s\"\nidle_timeout = \"500ms\"\n"
        .into();
    opts.extra = format!("[apis.pay]\nupstream = \"{}\"\n", upstream.url);
    opts.admin_listen = true;
    let app = spawn_app(opts).await;

    // 1,000 idle HTTP/2 connections from 127.0.0.1.
    let opened = Instant::now();
    let mut idle = Vec::new();
    for chunk in 0..10 {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..100 {
            set.spawn(idle_h2(app.addr));
        }
        while let Some(c) = set.join_next().await {
            if let Some(handle) = c.unwrap() {
                idle.push(handle);
            }
        }
        let _ = chunk;
    }
    // 100 `/api` bodies trickling from the same address, one byte at a time.
    let mut trickle = tokio::task::JoinSet::new();
    for _ in 0..100 {
        let addr = app.addr;
        trickle.spawn(async move {
            let Ok(mut s) = connect_from("127.0.0.1", addr).await else {
                return;
            };
            let head = "POST /api/pay/x HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n";
            if s.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            for _ in 0..100 {
                if s.write_all(b"a").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }

    // A valid webhook from another address is answered at once.
    let body = stripe_body("evt_beside_an_idle_flood");
    let mut req = client_from("127.0.0.2")
        .post(app.url("/webhooks/stripe"))
        .header("content-type", "application/json");
    for (k, v) in signers::stripe(STRIPE_SECRET, now(), &body) {
        req = req.header(k, v);
    }
    let started = Instant::now();
    let res = req.body(body).send().await.expect("webhook answered");
    let took = started.elapsed();
    assert_eq!(res.status(), 200);
    assert!(took < Duration::from_secs(1), "webhook took {took:?}");

    // Every idle connection the gateway accepted is closed within the
    // header timeout (1 s) plus the close grace (1 s), with a margin for
    // a loaded machine; the rest were refused at once.
    assert!(!idle.is_empty(), "some idle connections were accepted");
    for handle in idle {
        let closed = tokio::time::timeout(Duration::from_secs(10), handle)
            .await
            .expect("idle HTTP/2 connection closed by the gateway")
            .unwrap();
        let lived = closed - opened;
        assert!(
            lived < Duration::from_secs(6),
            "idle connection lived {lived:?}"
        );
    }
    trickle.abort_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gets_only_its_share_of_the_connection_slots() {
    let mut opts = Opts::new(Backend::Embedded);
    opts.server_extra = "max_connections = 16\nmax_connections_per_client = 4\n".into();
    let app = spawn_app(opts).await;
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(connect_from("127.0.0.1", app.addr).await.unwrap());
    }
    // The first four are served; the gateway closes the others at once.
    let mut open = 0;
    for s in &mut held {
        let _ = s
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await;
        let mut buf = [0u8; 256];
        match tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 && buf.starts_with(b"HTTP/1.1 200") => open += 1,
            _ => {}
        }
    }
    assert_eq!(open, 4);
    let res = client_from("127.0.0.3")
        .get(app.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_http1_connection_outlives_the_header_timeout_and_not_its_own_limit() {
    let mut opts = Opts::new(Backend::Embedded);
    opts.server_extra = "header_read_timeout = \"500ms\"\nkeep_alive_timeout = \"2s\"\n".into();
    let app = spawn_app(opts).await;
    let mut s = TcpStream::connect(app.addr).await.unwrap();
    let get = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    s.write_all(get).await.unwrap();
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    // Idle for three header timeouts: still open, and served again.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    s.write_all(get).await.unwrap();
    let n = s.read(&mut buf).await.unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "kept-alive connection was closed"
    );
    // Then idle past the keep-alive limit: closed by the gateway.
    let idle_from = Instant::now();
    let n = tokio::time::timeout(Duration::from_secs(6), s.read(&mut buf))
        .await
        .expect("closed within the keep-alive limit")
        .unwrap_or(0);
    assert_eq!(n, 0);
    let lived = idle_from.elapsed();
    assert!(
        lived >= Duration::from_millis(1800) && lived < Duration::from_secs(4),
        "closed after {lived:?}"
    );
    // Headers that stop arriving still get only the header timeout.
    let mut slow = TcpStream::connect(app.addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost")
        .await
        .unwrap();
    let started = Instant::now();
    let _ = tokio::time::timeout(Duration::from_secs(5), slow.read(&mut buf)).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "slow headers held {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_readyz_can_be_put_behind_the_admin_token() {
    let mut opts = Opts::new(Backend::Embedded);
    opts.server_extra = "protect_metrics = true\n".into();
    let app = spawn_app(opts).await;
    for path in ["/metrics", "/readyz"] {
        let anon = app.client.get(app.url(path)).send().await.unwrap();
        assert_eq!(anon.status(), 401, "{path}");
        let ok = app
            .client
            .get(app.url(path))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(ok.status(), 200, "{path}");
    }
    assert_eq!(
        app.client
            .get(app.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_wrong_admin_tokens_from_one_address_are_throttled() {
    let app = spawn_app(Opts::new(Backend::Embedded)).await;
    let guesser = client_from("127.0.0.4");
    let max = hookgate::primitives::throttle::MAX_BAD_TOKENS;
    for i in 0..max {
        let res = guesser
            .get(app.url("/stats"))
            .bearer_auth(format!("guess-{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 401, "#{i}");
    }
    // Even the right token waits now, from that address.
    let res = guesser
        .get(app.url("/stats"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 429);
    assert!(res.headers().contains_key("retry-after"));
    // Another address is not affected.
    let res = client_from("127.0.0.5")
        .get(app.url("/stats"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
}

/// Resident memory of process `pid` in bytes (`VmRSS` in `/proc/PID/status`).
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// A request body fed by the test, chunk by chunk; it never ends while
/// its sender is held.
struct Fed(tokio::sync::mpsc::Receiver<Bytes>);

impl hyper::body::Body for Fed {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|c| c.map(|b| Ok(hyper::body::Frame::data(b))))
    }
}

/// Budget and share of the flood test; the constant is what the process
/// holds besides the bodies (its own baseline, HTTP/2 buffers, allocator
/// slack), documented in docs/operations.md ("Security model").
const FLOOD_BUDGET: u64 = 40 * 1024 * 1024;
const RSS_CONSTANT: u64 = 128 * 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_body_http2_flood_declaring_10_gib_stays_within_the_body_budget() {
    let mb = 1024 * 1024;
    let mut opts = Opts::new(Backend::Embedded);
    opts.max_body_bytes = 8 * mb;
    opts.server_extra = format!(
        "max_buffered_body_bytes = {FLOOD_BUDGET}\nmax_buffered_body_bytes_per_client = {}\n\
         request_timeout = \"20s\"\n",
        8 * mb
    );
    let db = TestDb::create(Backend::Embedded).await;
    let gw = process::Gateway::start(&opts, &db, &unique_prefix()).await;
    let pid = gw.pid();
    let before = rss(pid);

    // 4 addresses x 10 connections x 32 streams, each declaring 8 MiB
    // (10 GiB in all), sending 256 KiB and then nothing more.
    let mut feeders = Vec::new();
    let mut answers = tokio::task::JoinSet::new();
    let mut declared: u64 = 0;
    for a in 0..4 {
        let from = format!("127.0.0.{}", 11 + a);
        for _ in 0..10 {
            let stream = connect_from(&from, gw.addr).await.unwrap();
            let (sender, conn) = hyper::client::conn::http2::handshake::<_, _, Fed>(
                TokioExecutor::new(),
                TokioIo::new(stream),
            )
            .await
            .unwrap();
            tokio::spawn(conn);
            for _ in 0..32 {
                let (tx, rx) = tokio::sync::mpsc::channel(4);
                let req = http::Request::post(format!("http://{}/webhooks/stripe", gw.addr))
                    .header("content-length", (8 * mb).to_string())
                    .body(Fed(rx))
                    .unwrap();
                declared += 8 * mb as u64;
                let mut s = sender.clone();
                answers.spawn(async move {
                    s.ready().await.ok()?;
                    let res = s.send_request(req).await.ok()?;
                    Some(res.status().as_u16())
                });
                feeders.push(tokio::spawn(async move {
                    for _ in 0..16 {
                        if tx.send(Bytes::from(vec![b'x'; 16 * 1024])).await.is_err() {
                            break;
                        }
                    }
                    // Held: the body never ends.
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    drop(tx);
                }));
            }
        }
    }
    assert_eq!(declared, 10 * 1024 * mb as u64);
    // Watch the gateway's memory while the flood arrives.
    let mut peak = 0;
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        peak = peak.max(rss(pid));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A webhook from another address is still taken.
    let body = stripe_body("evt_beside_a_body_flood");
    let mut req = client_from("127.0.0.2")
        .post(gw.url("/webhooks/stripe"))
        .header("content-type", "application/json");
    for (k, v) in signers::stripe(STRIPE_SECRET, now(), &body) {
        req = req.header(k, v);
    }
    let status = req.body(body).send().await.unwrap().status();
    let mut refused = 0;
    while let Ok(Some(r)) =
        tokio::time::timeout(Duration::from_millis(10), answers.join_next()).await
    {
        if r.ok().flatten() == Some(503) {
            refused += 1;
        }
    }
    eprintln!(
        "RSS before {} MiB, peak {} MiB; {refused} streams answered 503 so far",
        before / mb as u64,
        peak / mb as u64
    );
    assert!(
        peak <= FLOOD_BUDGET + RSS_CONSTANT,
        "peak RSS {} MiB over budget {} MiB + constant {} MiB",
        peak / mb as u64,
        FLOOD_BUDGET / mb as u64,
        RSS_CONSTANT / mb as u64
    );
    assert_eq!(status, 200);
    assert!(refused > 0, "over the budget, streams are answered 503");
    answers.abort_all();
    for f in feeders {
        f.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickling_api_body_is_cut_off_at_the_request_timeout() {
    let upstream = TestTarget::start().await;
    let mut opts = Opts::new(Backend::Embedded);
    opts.server_extra = "request_timeout = \"1s\"\n".into();
    opts.extra = format!("[apis.pay]\nupstream = \"{}\"\n", upstream.url);
    opts.admin_listen = true;
    let app = spawn_app(opts).await;
    let mut s = TcpStream::connect(app.addr).await.unwrap();
    s.write_all(b"POST /api/pay/x HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while started.elapsed() < Duration::from_secs(5) {
        // One byte every 100 ms: never idle, never done.
        let _ = s.write_all(b"a").await;
        if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(100), s.read(&mut buf)).await
        {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            if got.windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 408"), "{text:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(upstream.count(), 0);
}
