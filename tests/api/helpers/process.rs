//! Things a fault test starts and stops by PID itself: gateway processes
//! (the real binary), throwaway redis-servers, and a cuttable TCP proxy in
//! front of the shared Postgres. Shared services are never touched.

use super::{Opts, TestDb};
use std::net::{SocketAddr, TcpListener as StdListener};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

/// A free loopback port (bound, read, released).
pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `hookgate serve` child process.
pub struct Gateway {
    pub addr: SocketAddr,
    /// `http`, or `https` when the config turns TLS on.
    scheme: &'static str,
    child: Child,
    /// The config file the gateway reads (and re-reads on SIGHUP).
    path: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Gateway {
    pub async fn start(opts: &Opts, db: &TestDb, prefix: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        Self::spawn(
            dir,
            |addr| opts.toml(db, prefix, addr),
            &reqwest::Client::new(),
            "http",
            &opts.env,
        )
        .await
    }

    /// Starts with the config `text(listen address)` written in `dir` (which
    /// may hold files the config names), and waits until `client` gets an
    /// answer from `/healthz` over `scheme`.
    pub async fn start_in(
        dir: tempfile::TempDir,
        text: impl FnOnce(&str) -> String,
        client: &reqwest::Client,
        scheme: &'static str,
    ) -> Self {
        Self::spawn(dir, text, client, scheme, &[]).await
    }

    async fn spawn(
        dir: tempfile::TempDir,
        text: impl FnOnce(&str) -> String,
        client: &reqwest::Client,
        scheme: &'static str,
        env: &[(String, String)],
    ) -> Self {
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let path = dir.path().join("hookgate.toml");
        std::fs::write(&path, text(&addr.to_string())).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_hookgate"))
            .arg("--config")
            .arg(&path)
            .arg("serve")
            .env(
                "RUST_LOG",
                if std::env::var_os("TEST_LOG").is_some() {
                    "info"
                } else {
                    "warn"
                },
            )
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("hookgate binary starts");
        let g = Self {
            addr,
            scheme,
            child,
            path,
            _dir: dir,
        };
        let ok = super::eventually(Duration::from_secs(20), || async {
            client
                .get(format!("{scheme}://{addr}/healthz"))
                .send()
                .await
                .is_ok()
        })
        .await;
        assert!(ok, "gateway process did not come up on {addr}");
        g
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{}", self.scheme, self.addr, path)
    }

    /// The directory of the config file (files it names live here).
    pub fn dir(&self) -> &std::path::Path {
        self.path.parent().unwrap()
    }

    /// Replaces the config file's text (applied by the next reload).
    pub fn rewrite_config(&self, text: &str) {
        std::fs::write(&self.path, text).unwrap();
    }

    /// Sends SIGHUP (a reload) to the process.
    pub fn hangup(&self) {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill").args(["-HUP", &pid]).status();
        assert!(ok.is_ok_and(|s| s.success()), "kill -HUP {pid}");
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// The process id (to read its memory from `/proc`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The body of `GET path` with the admin token (`/metrics`, `/stats`).
    pub async fn admin_text(&self, path: &str) -> String {
        super::admin_get(&reqwest::Client::new(), &self.url(path)).await
    }

    /// Freezes (`SIGSTOP`) or thaws (`SIGCONT`) the process by its PID: a
    /// paused or starved replica, its sockets open.
    pub fn freeze(&self, frozen: bool) {
        let pid = self.child.id().to_string();
        let signal = if frozen { "-STOP" } else { "-CONT" };
        let ok = Command::new("kill").args([signal, &pid]).status();
        assert!(ok.is_ok_and(|s| s.success()), "kill {signal} {pid}");
    }

    /// SIGKILL: no graceful anything.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait for a clean exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        self.child.wait().unwrap()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A throwaway redis-server on its own port.
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
}

impl RedisServer {
    pub async fn start() -> Self {
        let mut s = Self {
            port: free_port(),
            child: None,
        };
        s.restart().await;
        s
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts (again) on the same port.
    pub async fn restart(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server is installed");
        self.child = Some(child);
        let port = self.port;
        let up = super::eventually(Duration::from_secs(10), || async move {
            TcpStream::connect(("127.0.0.1", port)).await.is_ok()
        })
        .await;
        assert!(up, "throwaway redis-server did not start");
    }

    /// Freezes (`SIGSTOP`) or thaws (`SIGCONT`) the server by its PID:
    /// connections stay open and calls time out, as with a hung server.
    pub fn freeze(&self, frozen: bool) {
        let pid = self
            .child
            .as_ref()
            .expect("server running")
            .id()
            .to_string();
        let signal = if frozen { "-STOP" } else { "-CONT" };
        let ok = Command::new("kill").args([signal, &pid]).status();
        assert!(ok.is_ok_and(|s| s.success()), "kill {signal} {pid}");
    }

    /// Kills the server by its PID.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A TCP proxy that can be cut: while cut, open connections are dropped
/// and new ones are closed at once, so the client sees the server as down.
/// While stalled, new connections are accepted and then never answered
/// (a hung database). While frozen, every connection, open or new, stays
/// open and silent: no byte is forwarded either way (a blackholed network).
/// Connections silenced ([`ChaosProxy::silence_open`]) stay so for good,
/// while later ones pass (a route lost under one connection).
pub struct ChaosProxy {
    pub port: u16,
    cut: Arc<AtomicBool>,
    stalled: Arc<AtomicBool>,
    frozen: Arc<AtomicBool>,
    generation: Arc<std::sync::atomic::AtomicU64>,
    open: Arc<std::sync::Mutex<Vec<Arc<AtomicBool>>>>,
}

impl ChaosProxy {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let stalled = Arc::new(AtomicBool::new(false));
        let frozen = Arc::new(AtomicBool::new(false));
        let generation = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let open = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (c, st, g) = (cut.clone(), stalled.clone(), generation.clone());
        let (fr, op) = (frozen.clone(), open.clone());
        tokio::spawn(async move {
            loop {
                let Ok((inbound, _)) = listener.accept().await else {
                    return;
                };
                if c.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                if st.load(Ordering::SeqCst) {
                    let st2 = st.clone();
                    tokio::spawn(async move {
                        while st2.load(Ordering::SeqCst) {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        drop(inbound);
                    });
                    continue;
                }
                let born = g.load(Ordering::SeqCst);
                let (c2, g2, fr2) = (c.clone(), g.clone(), fr.clone());
                let silenced = Arc::new(AtomicBool::new(false));
                op.lock().unwrap().push(silenced.clone());
                tokio::spawn(async move {
                    let Ok(out) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let copy = pump(inbound, out, [fr2, silenced]);
                    let watch = async {
                        loop {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            if c2.load(Ordering::SeqCst) || g2.load(Ordering::SeqCst) != born {
                                return;
                            }
                        }
                    };
                    tokio::select! { _ = copy => {}, _ = watch => {} }
                });
            }
        });
        Self {
            port,
            cut,
            stalled,
            frozen,
            generation,
            open,
        }
    }

    /// Silences, for good, every connection open now (no byte either way,
    /// none closed); connections opened later pass.
    pub fn silence_open(&self) {
        for c in self.open.lock().unwrap().iter() {
            c.store(true, Ordering::SeqCst);
        }
    }

    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    pub fn cut(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.cut.store(true, Ordering::SeqCst);
    }

    /// The server hangs: every connection open now goes silent for good
    /// (none closed, no byte either way) and new ones hang without an
    /// answer until [`restore`](Self::restore). A client's pooled
    /// connection then waits, as on a hung server, instead of failing at
    /// once on a closed socket.
    pub fn hang(&self) {
        self.stalled.store(true, Ordering::SeqCst);
        self.silence_open();
    }

    /// Stops forwarding bytes on every connection without closing any:
    /// the database seems to hang mid-statement. `restore` forwards again,
    /// including what was held back.
    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }

    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
        self.stalled.store(false, Ordering::SeqCst);
        self.frozen.store(false, Ordering::SeqCst);
    }
}

/// Copies bytes both ways (as `tokio::io::copy_bidirectional`, an end's
/// EOF shuts the other's write side), but reads and writes nothing while
/// either `frozen` flag is set: the sockets stay open and silent.
async fn pump(a: TcpStream, b: TcpStream, frozen: [Arc<AtomicBool>; 2]) {
    let (ar, aw) = a.into_split();
    let (br, bw) = b.into_split();
    tokio::join!(one_way(ar, bw, frozen.clone()), one_way(br, aw, frozen));
}

async fn one_way(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: [Arc<AtomicBool>; 2],
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let thawed = || async {
        while frozen.iter().any(|f| f.load(Ordering::SeqCst)) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        thawed().await;
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        thawed().await;
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// The first half of a "killed between sent and recorded" test (the form
/// of faults.rs' `a_kill_between_sent_and_recorded_resends_the_whole_batch`
/// for queue targets): starts a gateway, holds a lock on
/// `hookgate_attempts` so no attempt can be recorded, and sends `ids` as
/// signed Stripe events (each answered 200). The caller then waits until
/// the target has them all and calls [`kill_and_resend`].
pub async fn send_while_recording_is_blocked(
    opts: &Opts,
    db: &TestDb,
    prefix: &str,
    ids: &[String],
) -> (Gateway, sqlx::PgConnection) {
    let first = Gateway::start(opts, db, prefix).await;
    let blocker = db.lock_table("hookgate_attempts").await;
    let client = reqwest::Client::new();
    let url = first.url("/webhooks/stripe");
    for id in ids {
        let r = post_to(&client, &url, id).await.unwrap();
        assert_eq!(r.status(), 200, "{id}");
    }
    (first, blocker)
}

/// Sends the Stripe event `id`, signed now, to `url` (a gateway process's
/// `/webhooks/stripe`).
pub async fn post_to(
    client: &reqwest::Client,
    url: &str,
    id: &str,
) -> reqwest::Result<reqwest::Response> {
    let body = super::stripe_body(id);
    let mut req = client.post(url).body(body.clone());
    for (k, v) in &super::signers::stripe(super::STRIPE_SECRET, super::now(), &body) {
        req = req.header(k.as_str(), v.as_str());
    }
    req.send().await
}

/// The second half: kills the first gateway with SIGKILL, checks that none
/// of the `n` deliveries was recorded, starts a second gateway and waits
/// until its resends are all recorded delivered. Keep the returned gateway
/// alive while reading the target.
pub async fn kill_and_resend(
    mut first: Gateway,
    mut blocker: sqlx::PgConnection,
    opts: &Opts,
    db: &TestDb,
    prefix: &str,
    n: usize,
) -> Gateway {
    use sqlx::Connection;
    first.kill9();
    sqlx::query("ROLLBACK").execute(&mut blocker).await.unwrap();
    let pending: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM hookgate_deliveries WHERE state = 'pending' AND attempts = 0",
    )
    .fetch_one(&mut blocker)
    .await
    .unwrap();
    assert_eq!(pending, n as i64, "nothing was recorded before the kill");
    let second = Gateway::start(opts, db, prefix).await;
    let recorded = super::eventually(Duration::from_secs(30), || async {
        let done: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM hookgate_deliveries WHERE state = 'delivered'",
        )
        .fetch_one(&mut sqlx::PgConnection::connect(&db.url).await.unwrap())
        .await
        .unwrap();
        done == n as i64
    })
    .await;
    assert!(recorded, "the resends were made and recorded");
    second
}
