//! RabbitMQ targets through the same outbox, against the shared broker at
//! 127.0.0.1:5672 (guest/guest). Each test declares its own exchange and
//! queue named after its unique prefix and deletes them at the end; the
//! shared broker itself is never stopped (an outage is a `ChaosProxy` cut
//! in front of it).

use crate::helpers::process::{ChaosProxy, kill_and_resend, send_while_recording_is_blocked};
use crate::helpers::*;
use lapin::message::Delivery;
use lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

crate::both_backends!(a_rabbitmq_queue_gets_the_exact_body_the_headers_and_the_properties);

const WAIT: Duration = Duration::from_secs(30);

fn amqp_url() -> String {
    std::env::var("HOOKGATE_TEST_AMQP")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

fn amqp_addr() -> SocketAddr {
    let url = amqp_url();
    let hostport = url.rsplit('@').next().unwrap_or(&url);
    let hostport = hostport.trim_start_matches("amqp://");
    let hostport = hostport.split('/').next().unwrap_or(hostport);
    hostport
        .parse()
        .expect("HOOKGATE_TEST_AMQP is amqp://user:pw@host:port/vhost")
}

/// `amqp_url()` with its host:port replaced by the proxy's.
fn via(proxy: &ChaosProxy) -> String {
    amqp_url().replace(
        &amqp_addr().to_string(),
        &format!("127.0.0.1:{}", proxy.port),
    )
}

/// Options whose `stripe` source publishes to a rabbitmq target `q`.
fn rabbit_opts(b: Backend, url: &str, exchange: &str, routing_key: &str, keys: &str) -> Opts {
    let mut opts = Opts::new(b);
    opts.stripe_targets = vec!["q".into()];
    opts.extra = format!(
        "[targets.q]\nkind = \"rabbitmq\"\nurl = \"{url}\"\nexchange = \"{exchange}\"\n\
         routing_key = \"{routing_key}\"\n{keys}\n"
    );
    opts
}

/// A topic exchange `<prefix>` and a queue `<prefix>` bound to it with
/// `hooks.#`, of this test only; `got` is everything read from the queue.
struct TestQueue {
    _conn: Connection,
    channel: Channel,
    name: String,
    got: Vec<Delivery>,
}

impl TestQueue {
    async fn channel() -> (Connection, Channel) {
        let conn = Connection::connect(&amqp_url(), ConnectionProperties::default())
            .await
            .expect("RabbitMQ on 127.0.0.1:5672 (scripts/test.sh starts it)");
        let channel = conn.create_channel().await.unwrap();
        (conn, channel)
    }

    /// The queue alone (no exchange): for the default exchange.
    async fn queue_only(name: &str) -> Self {
        let (conn, channel) = Self::channel().await;
        // A test that fails before `delete` leaves nothing for long: the
        // broker drops the queue after 10 unused minutes (and the
        // auto-delete exchange with its last binding).
        let mut args = FieldTable::default();
        args.insert("x-expires".into(), AMQPValue::LongUInt(600_000));
        channel
            .queue_declare(name.into(), QueueDeclareOptions::default(), args)
            .await
            .unwrap();
        Self {
            _conn: conn,
            channel,
            name: name.to_owned(),
            got: Vec::new(),
        }
    }

    async fn create(prefix: &str) -> Self {
        let q = Self::queue_only(prefix).await;
        q.channel
            .exchange_declare(
                prefix.into(),
                ExchangeKind::Topic,
                ExchangeDeclareOptions {
                    auto_delete: true,
                    ..ExchangeDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap();
        q.channel
            .queue_bind(
                prefix.into(),
                prefix.into(),
                "hooks.#".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        q
    }

    /// Reads what the queue holds now into `got`.
    async fn drain(&mut self) {
        let opts = BasicGetOptions { no_ack: true };
        while let Ok(Some(m)) = self
            .channel
            .basic_get(self.name.as_str().into(), opts)
            .await
        {
            self.got.push(m.delivery);
        }
    }

    /// Reads until `got` holds at least `n` messages or `WAIT` passes.
    async fn wait_for(&mut self, n: usize) -> bool {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            self.drain().await;
            if self.got.len() >= n {
                return true;
            }
            if tokio::time::Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn delete(self) {
        let name = self.name.as_str();
        let _ = self
            .channel
            .queue_delete(name.into(), QueueDeleteOptions::default())
            .await;
        let _ = self
            .channel
            .exchange_delete(name.into(), ExchangeDeleteOptions::default())
            .await;
    }
}

fn message_id(d: &Delivery) -> String {
    d.properties
        .message_id()
        .as_ref()
        .map(|s| s.as_str().to_owned())
        .unwrap_or_default()
}

fn header(d: &Delivery, name: &str) -> String {
    match d
        .properties
        .headers()
        .as_ref()
        .and_then(|t| t.inner().get(name))
    {
        Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

/// How many messages each `message_id` has.
fn per_id(got: &[Delivery]) -> HashMap<String, usize> {
    let mut n = HashMap::new();
    for d in got {
        *n.entry(message_id(d)).or_default() += 1;
    }
    n
}

/// The `q` delivery of one event as the admin API shows it.
async fn delivery(app: &TestApp, id: &str) -> serde_json::Value {
    let text = app.admin_text(&format!("/admin/events/stripe/{id}")).await;
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    doc["deliveries"][0].clone()
}

async fn a_rabbitmq_queue_gets_the_exact_body_the_headers_and_the_properties(b: Backend) {
    let prefix = unique_prefix();
    let mut queue = TestQueue::create(&prefix).await;
    let mut opts = rabbit_opts(b, &amqp_url(), &prefix, "hooks.{source}.{type}", "");
    opts.poll_interval = "30s";
    let app = spawn_app(opts).await;

    // Odd bytes on purpose: whitespace, key order and non-ASCII survive.
    let body =
        "{ \"id\" : \"evt_r1\", \"type\":\"invoice.paid\",\n \"note\":\"caf\u{e9} \u{2713}\" }  "
            .as_bytes()
            .to_vec();
    let r = app.post_stripe_body(&body).await;
    assert_eq!(dedup_header(&r), "new");
    assert!(queue.wait_for(1).await, "one message in queue {prefix}");
    // A duplicate webhook is not published again.
    app.post_stripe_body(&body).await;
    let delivered = eventually(WAIT, || async {
        app.stats().await["sources"]["stripe"]["delivered"] == 1
    })
    .await;
    assert!(delivered, "{}", app.stats().await);
    queue.drain().await;
    assert_eq!(queue.got.len(), 1);
    let m = &queue.got[0];
    assert_eq!(m.data, body, "the provider's exact bytes");
    assert_eq!(m.routing_key.as_str(), "hooks.stripe.invoice.paid");
    assert_eq!(message_id(m), "evt_r1");
    assert_eq!(*m.properties.delivery_mode(), Some(2), "persistent");
    let kind = m.properties.kind().as_ref().map(|k| k.as_str().to_owned());
    assert_eq!(kind.as_deref(), Some("invoice.paid"));
    let ct = m.properties.content_type().as_ref().map(|c| c.to_string());
    assert_eq!(ct.as_deref(), Some("application/json"));
    assert_eq!(header(m, "hookgate-event-id"), "evt_r1");
    assert_eq!(header(m, "hookgate-source"), "stripe");
    assert_eq!(header(m, "hookgate-attempt"), "1");
    assert_eq!(header(m, "hookgate-event-type"), "invoice.paid");
    assert!(
        header(m, "stripe-signature").starts_with("t="),
        "provider headers too"
    );
    queue.delete().await;
}

/// Through the default exchange to a queue that does not exist yet: the
/// broker returns the message as unroutable (it is `mandatory`), which is
/// a retry saying so; once the queue exists, the backlog goes out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unroutable_publish_is_retried_saying_so_until_a_queue_is_bound() {
    let prefix = unique_prefix();
    let opts = rabbit_opts(
        Backend::Production,
        &amqp_url(),
        "",
        &prefix,
        "timeout = \"2s\"\nmax_attempts = 1000",
    );
    let app = spawn_app(opts).await;
    assert_eq!(app.post_stripe("evt_noroute").await.status(), 200);
    let failed = eventually(WAIT, || async {
        delivery(&app, "evt_noroute").await["attempts"]
            .as_i64()
            .unwrap_or(0)
            >= 2
    })
    .await;
    let d = delivery(&app, "evt_noroute").await;
    assert!(failed, "{d}");
    assert_eq!(d["state"], "retrying", "{d}");
    let error = d["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("unroutable") && error.contains(&prefix),
        "{d}"
    );
    assert!(
        !error.contains("guest"),
        "no credentials in last_error: {d}"
    );

    let mut queue = TestQueue::queue_only(&prefix).await;
    assert!(
        queue.wait_for(1).await,
        "{}",
        delivery(&app, "evt_noroute").await
    );
    let delivered = eventually(WAIT, || async {
        delivery(&app, "evt_noroute").await["state"] == "delivered"
    })
    .await;
    assert!(delivered, "{}", delivery(&app, "evt_noroute").await);
    assert_eq!(message_id(&queue.got[0]), "evt_noroute");
    queue.delete().await;
}

/// A wrong password: every attempt is refused by the broker and retried,
/// and the error never shows the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_rabbitmq_password_is_retried_and_no_error_shows_it() {
    let prefix = unique_prefix();
    let url = amqp_url().replace(":guest@", ":wr0ng-s3cret@");
    assert!(
        url.contains("wr0ng-s3cret"),
        "HOOKGATE_TEST_AMQP uses guest:guest"
    );
    let keys = "timeout = \"2s\"\nmax_attempts = 1000";
    let app = spawn_app(rabbit_opts(Backend::Production, &url, "", &prefix, keys)).await;
    assert_eq!(app.post_stripe("evt_rauth").await.status(), 200);
    let refused = eventually(WAIT, || async {
        delivery(&app, "evt_rauth").await["attempts"]
            .as_i64()
            .unwrap_or(0)
            >= 2
    })
    .await;
    let d = delivery(&app, "evt_rauth").await;
    assert!(refused, "{d}");
    assert_eq!(d["state"], "retrying", "{d}");
    let error = d["last_error"].as_str().unwrap_or_default();
    assert!(error.contains("rabbitmq: cannot connect"), "{d}");
    assert!(!error.contains("wr0ng-s3cret"), "the password leaked: {d}");
}

/// The kill -9 test for RabbitMQ. Every event is confirmed by the broker,
/// the gateway is killed before any attempt is recorded, and the next
/// gateway resends all of them. RabbitMQ has no publish-side dedup, so a
/// resend is a second copy with the same `message_id`: the guarantee is at
/// least once with no loss, and consumers dedupe by `message_id`
/// (docs/design.md, "Broker targets"). The test asserts exactly that, and
/// that the copies are identical, so deduping by `message_id` is safe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acked_event_reaches_the_queue_at_least_once_across_a_kill_9() {
    const N: usize = 24;
    let db = TestDb::create(Backend::Production).await;
    let prefix = unique_prefix();
    let mut queue = TestQueue::create(&prefix).await;
    let keys = format!("concurrency = {N}\ntimeout = \"1s\"");
    let mut opts = rabbit_opts(Backend::Production, &amqp_url(), &prefix, "hooks", &keys);
    opts.lease = "6s";
    let ids: Vec<String> = (0..N).map(|i| format!("evt_ronce_{i}")).collect();
    let (first, blocker) = send_while_recording_is_blocked(&opts, &db, &prefix, &ids).await;
    assert!(
        queue.wait_for(N).await,
        "every event was confirmed before the kill"
    );
    let _second = kill_and_resend(first, blocker, &opts, &db, &prefix, N).await;
    // The resends were confirmed before they were recorded: all are queued.
    tokio::time::sleep(Duration::from_millis(300)).await;
    queue.drain().await;
    let n = per_id(&queue.got);
    assert_eq!(n.len(), N, "no loss: every acked id arrived: {n:?}");
    assert!(ids.iter().all(|id| n.contains_key(id)), "{n:?}");
    let duplicates: usize = n.values().map(|c| c - 1).sum();
    // Each unrecorded attempt was sent again: one copy per id from each
    // gateway, never more.
    assert!(n.values().all(|&c| c <= 2), "{n:?}");
    eprintln!("rabbitmq kill -9: {N} ids, {duplicates} duplicate copies (same message_id)");
    let mut bodies: HashMap<String, &[u8]> = HashMap::new();
    for d in &queue.got {
        let first = bodies.entry(message_id(d)).or_insert(&d.data);
        assert_eq!(*first, &d.data[..], "copies of one id are identical");
    }
    queue.delete().await;
}

/// The broker goes away (a cut proxy in front of the shared broker): ingest
/// goes on, events wait (pending/retrying, none dead, none lost), and they
/// are published once the broker is back, on a new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rabbitmq_outage_keeps_events_pending_and_they_arrive_after_it_returns() {
    let prefix = unique_prefix();
    let mut queue = TestQueue::create(&prefix).await;
    let proxy = ChaosProxy::start(amqp_addr()).await;
    let opts = rabbit_opts(
        Backend::Production,
        &via(&proxy),
        &prefix,
        "hooks.{source}",
        "timeout = \"1s\"\nmax_attempts = 1000",
    );
    let app = spawn_app(opts).await;
    // A first event opens the target's connection, which the cut then breaks.
    app.post_stripe("evt_rout_first").await;
    assert!(queue.wait_for(1).await, "delivered before the outage");

    proxy.cut();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ids = app.ingest_while_target_is_away("evt_rout", 20, 1).await;
    let d = delivery(&app, "evt_rout_0").await;
    let error = d["last_error"].as_str().unwrap_or_default();
    assert!(error.contains("rabbitmq"), "{d}");
    assert!(
        !error.contains("guest"),
        "no credentials in last_error: {d}"
    );
    queue.drain().await;
    assert_eq!(queue.got.len(), 1, "nothing got through the cut");

    proxy.restore();
    assert!(queue.wait_for(21).await, "{:?}", per_id(&queue.got));
    let delivered = eventually(WAIT, || async {
        app.stats().await["sources"]["stripe"]["delivered"] == 21
    })
    .await;
    assert!(delivered, "{}", app.stats().await);
    queue.drain().await;
    let n = per_id(&queue.got);
    // Nothing lost. (A publish whose confirm was cut off would come again
    // under the same message_id: at least once, not exactly once.)
    assert!(ids.iter().all(|id| n.contains_key(id)), "{n:?}");
    queue.delete().await;
}

/// A published message carries the attempt's `traceparent` in its AMQP
/// headers, so a consumer's spans join the webhook's trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rabbitmq_message_carries_the_trace() {
    use crate::traces::{Collector, attr, telemetry, traceparent};
    let (collector, endpoint) = Collector::start().await;
    let prefix = unique_prefix();
    let mut queue = TestQueue::create(&prefix).await;
    let mut opts = rabbit_opts(Backend::Embedded, &amqp_url(), &prefix, "hooks.traced", "");
    opts.extra.push_str(&telemetry(&endpoint, 1.0));
    let app = spawn_app(opts).await;

    assert_eq!(app.post_stripe("evt_amqp_traced").await.status(), 200);

    assert!(queue.wait_for(1).await, "one message in queue {prefix}");
    let sends = collector.wait_for("send hooks.traced", 1).await;
    let send = &sends[0];
    assert_eq!(attr(send, "messaging.system").as_deref(), Some("rabbitmq"));
    let root = collector.wait_for("POST /webhooks/{source}", 1).await;
    assert_eq!(send.trace_id, root[0].trace_id);
    let (trace, parent, flags) = traceparent(&header(&queue.got[0], "traceparent"));
    assert_eq!(trace, hex::encode(&send.trace_id));
    assert_eq!(parent, hex::encode(&send.span_id));
    assert_eq!(flags, "01");
    app.stop().await;
    queue.delete().await;
}
