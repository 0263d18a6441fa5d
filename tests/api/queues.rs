//! Queue targets through the same outbox: Redis Streams. Each test uses its
//! own stream name (under its unique key prefix) and removes it at the end.

use crate::helpers::process::{RedisServer, kill_and_resend, send_while_recording_is_blocked};
use crate::helpers::*;
use std::collections::HashMap;
use std::time::Duration;

crate::both_backends!(a_redis_stream_gets_the_exact_body_and_the_metadata_fields);

const WAIT: Duration = Duration::from_secs(30);

/// Options whose `stripe` source publishes to a redis-stream target `q`.
fn stream_opts(b: Backend, url: &str, stream: &str, keys: &str) -> Opts {
    let mut opts = Opts::new(b);
    opts.stripe_targets = vec!["q".into()];
    opts.extra = format!(
        "[targets.q]\nkind = \"redis-stream\"\nurl = \"{url}\"\nstream = \"{stream}\"\n{keys}\n"
    );
    opts
}

type Entry = HashMap<String, Vec<u8>>;

/// Every entry of `stream` on the server at `url`, oldest first.
async fn entries(url: &str, stream: &str) -> Vec<Entry> {
    let Ok(client) = redis::Client::open(url) else {
        return vec![];
    };
    let Ok(mut c) = client.get_multiplexed_async_connection().await else {
        return vec![];
    };
    let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(stream)
        .arg("-")
        .arg("+")
        .query_async(&mut c)
        .await
        .unwrap_or_default();
    reply
        .ids
        .into_iter()
        .map(|id| {
            id.map
                .into_iter()
                .map(|(k, v)| (k, redis::from_redis_value(v).unwrap_or_default()))
                .collect()
        })
        .collect()
}

async fn drop_keys(url: &str, pattern: &str) {
    let client = redis::Client::open(url).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query_async(&mut c)
        .await
        .unwrap();
    if !keys.is_empty() {
        let _: () = redis::cmd("DEL")
            .arg(keys)
            .query_async(&mut c)
            .await
            .unwrap();
    }
}

fn text(e: &Entry, field: &str) -> String {
    String::from_utf8(e[field].clone()).unwrap()
}

/// How many entries each event id has.
fn per_id(entries: &[Entry]) -> HashMap<String, usize> {
    let mut n = HashMap::new();
    for e in entries {
        *n.entry(text(e, "event_id")).or_default() += 1;
    }
    n
}

async fn a_redis_stream_gets_the_exact_body_and_the_metadata_fields(b: Backend) {
    let prefix = unique_prefix();
    let url = redis_url();
    let mut opts = stream_opts(
        b,
        &url,
        &format!("{prefix}:hooks:{{source}}"),
        "maxlen = 1000",
    );
    opts.poll_interval = "30s";
    let app = spawn_app(opts).await;
    let stream = format!("{prefix}:hooks:stripe");

    // Odd bytes on purpose: whitespace, key order and non-ASCII survive.
    let body =
        "{ \"id\" : \"evt_q1\", \"type\":\"invoice.paid\",\n \"note\":\"caf\u{e9} \u{2713}\" }  "
            .as_bytes()
            .to_vec();
    let r = app.post_stripe_body(&body).await;
    assert_eq!(dedup_header(&r), "new");
    let arrived = eventually(WAIT, || async { entries(&url, &stream).await.len() == 1 }).await;
    assert!(arrived, "one entry in {stream}");
    // A duplicate is not published again.
    app.post_stripe_body(&body).await;
    let delivered = eventually(WAIT, || async {
        app.stats().await["sources"]["stripe"]["delivered"] == 1
    })
    .await;
    assert!(delivered, "{}", app.stats().await);
    let all = entries(&url, &stream).await;
    assert_eq!(all.len(), 1);
    let e = &all[0];
    assert_eq!(e["body"], body, "the provider's exact bytes");
    assert_eq!(text(e, "source"), "stripe");
    assert_eq!(text(e, "event_id"), "evt_q1");
    assert_eq!(text(e, "type"), "invoice.paid");
    let headers: serde_json::Value = serde_json::from_slice(&e["headers"]).unwrap();
    assert_eq!(headers["hookgate-event-id"], "evt_q1");
    assert_eq!(headers["hookgate-source"], "stripe");
    assert_eq!(headers["hookgate-attempt"], "1");
    assert_eq!(headers["hookgate-event-type"], "invoice.paid");
    assert!(headers["stripe-signature"].is_string(), "{headers}");
    drop_keys(&url, &format!("{prefix}:*")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_keeps_events_pending_and_they_arrive_after_it_returns() {
    let mut server = RedisServer::start().await;
    let url = server.url();
    let opts = stream_opts(
        Backend::Production,
        &url,
        "hooks:{source}",
        "timeout = \"1s\"",
    );
    let app = spawn_app(opts).await;
    server.kill();

    let ids = app.ingest_while_target_is_away("evt_out", 20, 0).await;

    server.restart().await;
    let all = eventually(WAIT, || async {
        entries(&url, "hooks:stripe").await.len() >= 20
    })
    .await;
    assert!(all, "{:?}", per_id(&entries(&url, "hooks:stripe").await));
    let n = per_id(&entries(&url, "hooks:stripe").await);
    assert!(ids.iter().all(|id| n.get(id) == Some(&1)), "{n:?}");
}

/// The Redis Streams form of faults.rs'
/// `a_kill_between_sent_and_recorded_resends_the_whole_batch`: every event
/// is added, the gateway is killed before any attempt is recorded, and the
/// next gateway's resends must add nothing: each acknowledged id is in the
/// stream exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acked_event_is_in_the_stream_exactly_once_across_a_kill_9() {
    const N: usize = 24;
    let db = TestDb::create(Backend::Production).await;
    let prefix = unique_prefix();
    let url = redis_url();
    let stream = format!("{prefix}:hooks");
    let keys = format!("concurrency = {N}\ntimeout = \"1s\"");
    let mut opts = stream_opts(Backend::Production, &url, &stream, &keys);
    opts.lease = "6s";
    let ids: Vec<String> = (0..N).map(|i| format!("evt_once_{i}")).collect();
    let (first, blocker) = send_while_recording_is_blocked(&opts, &db, &prefix, &ids).await;
    let sent = eventually(WAIT, || async { entries(&url, &stream).await.len() == N }).await;
    assert!(sent, "every event was added before the kill");
    let _second = kill_and_resend(first, blocker, &opts, &db, &prefix, N).await;
    let n = per_id(&entries(&url, &stream).await);
    assert_eq!(n.len(), N, "{n:?}");
    assert!(n.values().all(|&c| c == 1), "an id was added twice: {n:?}");
    drop_keys(&url, &format!("{prefix}:*")).await;
}

/// `maxlen` trims the stream as it grows (`XADD … MAXLEN ~ n`): Redis
/// trims whole internal nodes only (https://redis.io/docs/latest/commands/xadd/,
/// "Capped streams"), so the length stays above `n` but far below what was
/// added, and the newest entries are the ones kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maxlen_trims_the_stream_keeping_the_newest_entries() {
    const N: usize = 250;
    let prefix = unique_prefix();
    let url = redis_url();
    let stream = format!("{prefix}:capped");
    let app = spawn_app(stream_opts(
        Backend::Production,
        &url,
        &stream,
        "maxlen = 10",
    ))
    .await;
    for i in 0..N {
        let r = app.post_stripe(&format!("evt_cap_{i:03}")).await;
        assert_eq!(dedup_header(&r), "new");
    }
    let delivered = eventually(WAIT, || async {
        app.stats().await["sources"]["stripe"]["delivered"] == N
    })
    .await;
    assert!(delivered, "{}", app.stats().await);
    let kept = entries(&url, &stream).await;
    assert!(
        (10..N - 100).contains(&kept.len()),
        "{} entries kept of {N} added with maxlen 10",
        kept.len()
    );
    let ids: Vec<String> = kept.iter().map(|e| text(e, "event_id")).collect();
    assert!(
        ids.iter().any(|id| id == "evt_cap_249"),
        "the newest entry is kept: {ids:?}"
    );
    assert!(
        !ids.iter().any(|id| id == "evt_cap_000"),
        "the oldest is trimmed"
    );
    drop_keys(&url, &format!("{prefix}:*")).await;
}
