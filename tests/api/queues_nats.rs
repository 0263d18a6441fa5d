//! NATS JetStream targets through the same outbox, against the shared
//! nats-server (JetStream on) at 127.0.0.1:4222. Each test makes its own
//! stream named after its unique prefix, capturing `<prefix>.>` only, and
//! deletes it at the end; the shared server itself is never stopped (an
//! outage is a `ChaosProxy` cut in front of it).

use crate::helpers::process::{ChaosProxy, kill_and_resend, send_while_recording_is_blocked};
use crate::helpers::*;
use async_nats::jetstream::{self, stream::StorageType};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

crate::both_backends!(a_nats_stream_gets_the_exact_body_the_headers_and_the_msg_id);

const WAIT: Duration = Duration::from_secs(30);

fn nats_url() -> String {
    std::env::var("HOOKGATE_TEST_NATS").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

fn nats_addr() -> SocketAddr {
    let url = nats_url();
    url.trim_start_matches("nats://")
        .parse()
        .expect("HOOKGATE_TEST_NATS is nats://host:port")
}

/// Options whose `stripe` source publishes to a nats target `q`.
fn nats_opts(b: Backend, url: &str, subject: &str, keys: &str) -> Opts {
    let mut opts = Opts::new(b);
    opts.stripe_targets = vec!["q".into()];
    opts.extra =
        format!("[targets.q]\nkind = \"nats\"\nurl = \"{url}\"\nsubject = \"{subject}\"\n{keys}\n");
    opts
}

/// A JetStream stream of this test only: `<prefix>` capturing `<prefix>.>`.
struct TestStream {
    js: jetstream::Context,
    name: String,
}

/// One stored message, as a consumer sees it.
struct Stored {
    subject: String,
    headers: async_nats::HeaderMap,
    payload: Vec<u8>,
}

impl Stored {
    fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .map(|v| v.as_str().to_owned())
            .unwrap_or_default()
    }
}

impl TestStream {
    async fn connect(prefix: &str) -> (jetstream::Context, String) {
        let client = async_nats::connect(nats_url())
            .await
            .expect("nats-server with JetStream on 127.0.0.1:4222 (scripts/test.sh starts it)");
        (jetstream::new(client), prefix.to_owned())
    }

    async fn create(prefix: &str) -> Self {
        let (js, name) = Self::connect(prefix).await;
        js.create_stream(jetstream::stream::Config {
            name: name.clone(),
            subjects: vec![format!("{prefix}.>")],
            storage: StorageType::Memory,
            // Longer than any test's delivery.lease: resends are dropped.
            duplicate_window: Duration::from_secs(600),
            // A test that fails before `delete` leaves no data for long.
            max_age: Duration::from_secs(3600),
            ..Default::default()
        })
        .await
        .expect("stream created");
        Self { js, name }
    }

    /// Every stored message, oldest first.
    async fn messages(&self) -> Vec<Stored> {
        let Ok(mut stream) = self.js.get_stream(&self.name).await else {
            return vec![];
        };
        let Ok(info) = stream.info().await else {
            return vec![];
        };
        let (first, last) = (info.state.first_sequence, info.state.last_sequence);
        let mut out = Vec::new();
        for seq in first..=last {
            if let Ok(m) = stream.get_raw_message(seq).await {
                out.push(Stored {
                    subject: m.subject.to_string(),
                    headers: m.headers,
                    payload: m.payload.to_vec(),
                });
            }
        }
        out
    }

    async fn count(&self) -> u64 {
        match self.js.get_stream(&self.name).await {
            Ok(mut s) => s.info().await.map(|i| i.state.messages).unwrap_or(0),
            Err(_) => 0,
        }
    }

    async fn delete(self) {
        let _ = self.js.delete_stream(&self.name).await;
    }
}

/// How many stored messages each event id has.
fn per_id(messages: &[Stored]) -> HashMap<String, usize> {
    let mut n = HashMap::new();
    for m in messages {
        *n.entry(m.header("hookgate-event-id")).or_default() += 1;
    }
    n
}

/// The `q` delivery of one event as the admin API shows it.
async fn delivery(app: &TestApp, id: &str) -> serde_json::Value {
    delivery_to(app, id, "q").await
}

/// One event's delivery to `target` as the admin API shows it.
async fn delivery_to(app: &TestApp, id: &str, target: &str) -> serde_json::Value {
    let text = app.admin_text(&format!("/admin/events/stripe/{id}")).await;
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    doc["deliveries"]
        .as_array()
        .and_then(|all| all.iter().find(|d| d["target"] == target))
        .cloned()
        .unwrap_or_default()
}

/// A throwaway nats-server (JetStream on) that wants user `app` with
/// password `nats-s3cret`, on its own port; killed by its PID on drop.
struct AuthNats {
    port: u16,
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl AuthNats {
    const PASSWORD: &str = "nats-s3cret";

    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = crate::helpers::process::free_port();
        let child = std::process::Command::new("nats-server")
            .args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .args(["--user", "app", "--pass", Self::PASSWORD, "-js", "-sd"])
            .arg(dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("nats-server is installed (scripts/test.sh installs it)");
        let up = eventually(Duration::from_secs(10), || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        })
        .await;
        assert!(up, "throwaway nats-server did not start");
        Self {
            port,
            child,
            _dir: dir,
        }
    }
}

impl Drop for AuthNats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn a_nats_stream_gets_the_exact_body_the_headers_and_the_msg_id(b: Backend) {
    let prefix = unique_prefix();
    let stream = TestStream::create(&prefix).await;
    let mut opts = nats_opts(b, &nats_url(), &format!("{prefix}.{{source}}.{{type}}"), "");
    opts.poll_interval = "30s";
    let app = spawn_app(opts).await;

    // Odd bytes on purpose: whitespace, key order and non-ASCII survive.
    let body =
        "{ \"id\" : \"evt_n1\", \"type\":\"invoice.paid\",\n \"note\":\"caf\u{e9} \u{2713}\" }  "
            .as_bytes()
            .to_vec();
    let r = app.post_stripe_body(&body).await;
    assert_eq!(dedup_header(&r), "new");
    let arrived = eventually(WAIT, || async { stream.count().await == 1 }).await;
    assert!(arrived, "one message in stream {}", stream.name);
    // A duplicate webhook is not published again.
    app.post_stripe_body(&body).await;
    let delivered = eventually(WAIT, || async {
        app.stats().await["sources"]["stripe"]["delivered"] == 1
    })
    .await;
    assert!(delivered, "{}", app.stats().await);
    let all = stream.messages().await;
    assert_eq!(all.len(), 1);
    let m = &all[0];
    assert_eq!(m.payload, body, "the provider's exact bytes");
    assert_eq!(m.subject, format!("{prefix}.stripe.invoice.paid"));
    assert_eq!(m.header("Nats-Msg-Id"), "stripe:evt_n1");
    assert_eq!(m.header("hookgate-event-id"), "evt_n1");
    assert_eq!(m.header("hookgate-source"), "stripe");
    assert_eq!(m.header("hookgate-attempt"), "1");
    assert_eq!(m.header("hookgate-event-type"), "invoice.paid");
    assert_eq!(m.header("content-type"), "application/json");
    assert!(
        m.header("stripe-signature").starts_with("t="),
        "provider headers too"
    );
    stream.delete().await;
}

/// No stream captures the subject: each attempt is a retry whose error
/// names the subject; once a stream exists, the backlog goes out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_no_stream_captures_is_retried_naming_it_until_a_stream_exists() {
    let prefix = unique_prefix();
    let subject = format!("{prefix}.hooks");
    let opts = nats_opts(
        Backend::Production,
        &nats_url(),
        &subject,
        "timeout = \"2s\"\nmax_attempts = 1000",
    );
    let app = spawn_app(opts).await;
    assert_eq!(app.post_stripe("evt_nostream").await.status(), 200);
    let failed = eventually(WAIT, || async {
        delivery(&app, "evt_nostream").await["attempts"]
            .as_i64()
            .unwrap_or(0)
            >= 2
    })
    .await;
    let d = delivery(&app, "evt_nostream").await;
    assert!(failed, "{d}");
    assert_eq!(d["state"], "retrying", "{d}");
    let error = d["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("no JetStream stream captures subject") && error.contains(&subject),
        "{d}"
    );

    let stream = TestStream::create(&prefix).await;
    let arrived = eventually(WAIT, || async { stream.count().await == 1 }).await;
    assert!(arrived, "{}", delivery(&app, "evt_nostream").await);
    let delivered = eventually(WAIT, || async {
        delivery(&app, "evt_nostream").await["state"] == "delivered"
    })
    .await;
    assert!(delivered, "{}", delivery(&app, "evt_nostream").await);
    stream.delete().await;
}

/// The NATS form of queues.rs' kill -9 test: every event is published and
/// acked, the gateway is killed before any attempt is recorded, and the
/// next gateway resends all of them. JetStream's duplicate window drops
/// each resend by its `Nats-Msg-Id`: every id is stored exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acked_event_is_in_the_stream_exactly_once_across_a_kill_9() {
    const N: usize = 24;
    let db = TestDb::create(Backend::Production).await;
    let prefix = unique_prefix();
    let stream = TestStream::create(&prefix).await;
    let keys = format!("concurrency = {N}\ntimeout = \"1s\"");
    let mut opts = nats_opts(
        Backend::Production,
        &nats_url(),
        &format!("{prefix}.hooks"),
        &keys,
    );
    opts.lease = "6s";
    let ids: Vec<String> = (0..N).map(|i| format!("evt_nonce_{i}")).collect();
    let (first, blocker) = send_while_recording_is_blocked(&opts, &db, &prefix, &ids).await;
    let sent = eventually(WAIT, || async { stream.count().await == N as u64 }).await;
    assert!(sent, "every event was published before the kill");
    let _second = kill_and_resend(first, blocker, &opts, &db, &prefix, N).await;
    let n = per_id(&stream.messages().await);
    assert_eq!(n.len(), N, "{n:?}");
    assert!(n.values().all(|&c| c == 1), "an id was stored twice: {n:?}");
    stream.delete().await;
}

/// The broker goes away (a cut proxy in front of the shared server): ingest
/// goes on, events wait (pending/retrying, none dead, none lost), and they
/// are published once the broker is back, on a new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_outage_keeps_events_pending_and_they_arrive_after_it_returns() {
    let prefix = unique_prefix();
    let stream = TestStream::create(&prefix).await;
    let proxy = ChaosProxy::start(nats_addr()).await;
    let url = format!("nats://127.0.0.1:{}", proxy.port);
    let opts = nats_opts(
        Backend::Production,
        &url,
        &format!("{prefix}.hooks"),
        "timeout = \"1s\"\nmax_attempts = 1000",
    );
    let app = spawn_app(opts).await;
    // A first event opens the target's connection, which the cut then breaks.
    app.post_stripe("evt_nout_first").await;
    let first = eventually(WAIT, || async { stream.count().await == 1 }).await;
    assert!(first, "delivered before the outage");

    proxy.cut();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ids = app.ingest_while_target_is_away("evt_nout", 20, 1).await;
    let d = delivery(&app, "evt_nout_0").await;
    assert!(
        d["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains("nats"),
        "{d}"
    );
    assert_eq!(stream.count().await, 1, "nothing got through the cut");

    proxy.restore();
    let all = eventually(WAIT, || async { stream.count().await >= 21 }).await;
    assert!(all, "{:?}", per_id(&stream.messages().await));
    let delivered = eventually(WAIT, || async {
        app.stats().await["sources"]["stripe"]["delivered"] == 21
    })
    .await;
    assert!(delivered, "{}", app.stats().await);
    let n = per_id(&stream.messages().await);
    assert!(ids.iter().all(|id| n.get(id) == Some(&1)), "{n:?}");
    stream.delete().await;
}

/// A `nats://user:password@…` URL logs in (async-nats takes no credentials
/// from the URL itself: hookgate passes them as options), and a wrong
/// password is retried with an error that never shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_url_with_credentials_logs_in_and_no_error_shows_the_password() {
    let server = AuthNats::start().await;
    let prefix = unique_prefix();
    let addr = format!("127.0.0.1:{}", server.port);
    let client =
        async_nats::ConnectOptions::with_user_and_password("app".into(), AuthNats::PASSWORD.into())
            .connect(addr.as_str())
            .await
            .unwrap();
    let stream = TestStream {
        js: jetstream::new(client),
        name: prefix.clone(),
    };
    stream
        .js
        .create_stream(jetstream::stream::Config {
            name: prefix.clone(),
            subjects: vec![format!("{prefix}.>")],
            storage: StorageType::Memory,
            ..Default::default()
        })
        .await
        .unwrap();
    let good = format!("nats://app:{}@{addr}", AuthNats::PASSWORD);
    let wrong = format!("nats://app:wr0ng-s3cret@{addr}");
    let mut opts = Opts::new(Backend::Production);
    opts.stripe_targets = vec!["q".into(), "bad".into()];
    opts.extra = format!(
        "[targets.q]\nkind = \"nats\"\nurl = \"{good}\"\nsubject = \"{prefix}.ok\"\n\
         [targets.bad]\nkind = \"nats\"\nurl = \"{wrong}\"\nsubject = \"{prefix}.bad\"\n\
         timeout = \"2s\"\nmax_attempts = 1000\n"
    );
    let app = spawn_app(opts).await;
    assert_eq!(app.post_stripe("evt_nauth").await.status(), 200);
    let arrived = eventually(WAIT, || async { stream.count().await == 1 }).await;
    assert!(arrived, "{}", delivery(&app, "evt_nauth").await);
    let refused = eventually(WAIT, || async {
        delivery_to(&app, "evt_nauth", "bad").await["attempts"]
            .as_i64()
            .unwrap_or(0)
            >= 2
    })
    .await;
    let d = delivery_to(&app, "evt_nauth", "bad").await;
    assert!(refused, "{d}");
    assert_eq!(d["state"], "retrying", "{d}");
    let error = d["last_error"].as_str().unwrap_or_default();
    assert!(error.contains("nats: cannot connect"), "{d}");
    assert!(!error.contains("wr0ng-s3cret"), "the password leaked: {d}");
    assert_eq!(stream.messages().await[0].subject, format!("{prefix}.ok"));
    stream.delete().await;
}

/// A broker target keeps the outbox's dead letters and replay (issue #11:
/// "the same retries, backoff, dead letters, replay and stats as HTTP
/// targets"): a publish nothing captures is retried until it is dead,
/// counted dead in `/stats`, and once a stream exists an admin replay
/// publishes it, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_publish_is_replayed_once_a_stream_captures_it() {
    let prefix = unique_prefix();
    let subject = format!("{prefix}.hooks");
    let mut opts = nats_opts(
        Backend::Production,
        &nats_url(),
        &subject,
        "timeout = \"2s\"\nmax_attempts = 2",
    );
    opts.backoff_max = "200ms";
    let app = spawn_app(opts).await;
    assert_eq!(app.post_stripe("evt_nats_dead").await.status(), 200);
    let dead = eventually(WAIT, || async {
        delivery(&app, "evt_nats_dead").await["state"] == "dead"
    })
    .await;
    let d = delivery(&app, "evt_nats_dead").await;
    assert!(dead, "{d}");
    assert_eq!(d["attempts"], 2, "{d}");
    let stats = app.stats().await;
    let q = &stats["sources"]["stripe"]["targets"]["q"];
    assert_eq!(q["dead"], 1, "{stats}");
    assert_eq!(q["delivered"], 0, "{stats}");

    let stream = TestStream::create(&prefix).await;
    let replay = app
        .client
        .post(app.url("/admin/replay"))
        .bearer_auth(ADMIN_TOKEN)
        .body(r#"{"source":"stripe","target":"q"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(replay.status(), 200);
    assert_eq!(replay.text().await.unwrap(), r#"{"replayed":1}"#);
    let delivered = eventually(WAIT, || async {
        delivery(&app, "evt_nats_dead").await["state"] == "delivered"
    })
    .await;
    assert!(delivered, "{}", delivery(&app, "evt_nats_dead").await);
    let messages = stream.messages().await;
    assert_eq!(
        per_id(&messages),
        HashMap::from([("evt_nats_dead".to_owned(), 1)])
    );
    let stats = app.stats().await;
    let q = &stats["sources"]["stripe"]["targets"]["q"];
    assert_eq!(
        (q["dead"].as_i64(), q["delivered"].as_i64()),
        (Some(0), Some(1)),
        "{stats}"
    );
    stream.delete().await;
}

/// A published message carries the attempt's `traceparent` header, so a
/// consumer's spans join the webhook's trace under the `send` span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_message_carries_the_trace() {
    use crate::traces::{Collector, attr, telemetry, traceparent};
    let (collector, endpoint) = Collector::start().await;
    let prefix = unique_prefix();
    let stream = TestStream::create(&prefix).await;
    let subject = format!("{prefix}.stripe");
    let mut opts = nats_opts(Backend::Embedded, &nats_url(), &subject, "");
    opts.extra.push_str(&telemetry(&endpoint, 1.0));
    let app = spawn_app(opts).await;

    assert_eq!(app.post_stripe("evt_nats_traced").await.status(), 200);

    let arrived = eventually(WAIT, || async { stream.count().await == 1 }).await;
    assert!(arrived, "one message in stream {}", stream.name);
    let sends = collector.wait_for(&format!("send {subject}"), 1).await;
    let send = &sends[0];
    assert_eq!(attr(send, "messaging.system").as_deref(), Some("nats"));
    let root = collector.wait_for("POST /webhooks/{source}", 1).await;
    assert_eq!(send.trace_id, root[0].trace_id);
    let m = &stream.messages().await[0];
    let (trace, parent, flags) = traceparent(&m.header("traceparent"));
    assert_eq!(trace, hex::encode(&send.trace_id));
    assert_eq!(parent, hex::encode(&send.span_id));
    assert_eq!(flags, "01");
    app.stop().await;
    stream.delete().await;
}
