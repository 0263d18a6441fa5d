//! `kind = "redis-stream"`: one `XADD` per event, with fields `body` (the
//! provider's exact bytes), `source`, `event_id`, `type` and `headers`
//! (a JSON object: provider headers and `hookgate-*` metadata).
//!
//! Exactly once per event within `duplicate_window`: the `XADD` runs in a
//! Lua script together with a marker key
//! (`<stream>:hookgate-sent:<source>:<event id>`), so a resend after a crash
//! between Redis' answer and the attempt's record (the lease ran out, another
//! worker sends again) finds the marker and adds nothing. Redis runs a
//! script atomically, so there is no window between the check and the add.
//! See https://redis.io/docs/latest/develop/interact/programmability/eval-intro/
//! and https://redis.io/docs/latest/commands/xadd/.
//!
//! Rule: the entry and its marker are written by one script, so a resend
//! adds nothing; every error is shown with the URL's password redacted.

use super::kind::{
    Check, Endpoint, KindDef, Message, RawKeys, Sent, check_template, render, set_keys,
};
use crate::primitives::duration::{Dur, show};
use crate::primitives::url::redact_in;
use redis::aio::ConnectionManager;
use redis::{Client, Script};
use serde::de::MapAccess;
use std::time::Duration;
use tokio::sync::OnceCell;

/// `kind = "redis-stream"`.
pub struct RedisStreamKind;

/// The keys only a redis-stream target takes.
#[derive(Debug, Default)]
pub struct Raw {
    /// The stream's name; `{source}` and `{type}` are filled in (`untyped`
    /// for an event without a type). Required.
    pub stream: Option<String>,
    /// `XADD … MAXLEN ~ <maxlen>` (approximate trim). Default: no trim.
    pub maxlen: Option<u64>,
    /// How long a sent event's marker key lives, so a resend after a crash
    /// adds nothing. Must exceed `delivery.lease`. Default 10m.
    pub duplicate_window: Option<Dur>,
}

impl RawKeys for Raw {
    const KEYS: &'static [&'static str] = &["stream", "maxlen", "duplicate_window"];

    fn take<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "stream" => self.stream = Some(map.next_value()?),
            "maxlen" => self.maxlen = Some(map.next_value()?),
            "duplicate_window" => self.duplicate_window = Some(map.next_value()?),
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn set(&self) -> Vec<&'static str> {
        set_keys([
            ("stream", self.stream.is_some()),
            ("maxlen", self.maxlen.is_some()),
            ("duplicate_window", self.duplicate_window.is_some()),
        ])
    }
}

#[derive(Debug, Clone)]
pub struct Spec {
    /// Stream name template (`{source}`, `{type}`).
    pub stream: String,
    pub maxlen: Option<u64>,
    pub duplicate_window: Duration,
}

/// How long a redis-stream target remembers a sent event by default.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(600);

impl KindDef for RedisStreamKind {
    const NAME: &'static str = "redis-stream";
    type Raw = Raw;
    type Spec = Spec;
    type Sink = RedisStream;

    fn check_url(url: &str) -> Result<(), String> {
        super::kind::needs_scheme(Self::NAME, &["redis://", "rediss://"], url)
    }

    fn validate(raw: Raw, check: &mut Check<'_>) -> Spec {
        let stream = raw.stream.clone().unwrap_or_default();
        if raw.stream.is_none() {
            check.problem(
                "stream",
                "a redis-stream target needs `stream` (e.g. \"hooks:{source}\")".into(),
            );
        } else if let Err(e) = check_template(&stream) {
            check.problem("stream", e);
        }
        if raw.maxlen == Some(0) {
            check.problem("maxlen", "must be at least 1".into());
        }
        let duplicate_window = raw.duplicate_window.map_or(DUPLICATE_WINDOW, |d| d.0);
        if duplicate_window <= check.lease {
            let lease = show(check.lease);
            check.problem(
                "duplicate_window",
                format!(
                    "must be longer than delivery.lease ({lease}): a resend after a crash \
                     comes once the lease has run out"
                ),
            );
        }
        Spec {
            stream,
            maxlen: raw.maxlen,
            duplicate_window,
        }
    }

    fn named_by_type(spec: &Spec) -> Option<&str> {
        Some(spec.stream.as_str()).filter(|t| t.contains("{type}"))
    }

    fn describe(spec: &Spec) -> String {
        format!(
            " kind=redis-stream stream={} maxlen={} duplicate_window={}",
            spec.stream,
            spec.maxlen.map_or("-".to_owned(), |n| n.to_string()),
            show(spec.duplicate_window)
        )
    }

    fn sink(spec: &Spec, _: &reqwest::Client) -> RedisStream {
        RedisStream::new(spec.clone())
    }

    async fn send(sink: &RedisStream, to: &Endpoint<'_>, message: &Message<'_>) -> Sent {
        sink.send(to, message).await
    }
}

/// KEYS[1] = stream, KEYS[2] = marker; ARGV[1] = marker lifetime (ms),
/// ARGV[2] = approximate MAXLEN ('' = none), ARGV[3..] = field, value, …
/// Returns 1 when added, 0 when the marker said it already was.
const ADD_ONCE: &str = r"
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
local args = {'XADD', KEYS[1]}
if ARGV[2] ~= '' then
  table.insert(args, 'MAXLEN'); table.insert(args, '~'); table.insert(args, ARGV[2])
end
table.insert(args, '*')
for i = 3, #ARGV do table.insert(args, ARGV[i]) end
redis.call(unpack(args))
redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
return 1
";

pub struct RedisStream {
    spec: Spec,
    script: Script,
    /// Built on first use; the manager reconnects by itself after an outage.
    conn: OnceCell<ConnectionManager>,
}

impl RedisStream {
    fn new(spec: Spec) -> Self {
        Self {
            spec,
            script: Script::new(ADD_ONCE),
            conn: OnceCell::new(),
        }
    }

    async fn conn(&self, target: &Endpoint<'_>) -> Result<ConnectionManager, String> {
        self.conn
            .get_or_try_init(|| async {
                let client = Client::open(target.url)
                    .map_err(|e| redact_in(&format!("bad redis URL: {e}"), target.url))?;
                let config = redis::aio::ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(target.timeout))
                    .set_response_timeout(Some(target.timeout))
                    .set_number_of_retries(1);
                ConnectionManager::new_lazy_with_config(client, config)
                    .map_err(|e| redact_in(&format!("redis: {e}"), target.url))
            })
            .await
            .cloned()
    }

    async fn send(&self, target: &Endpoint<'_>, d: &Message<'_>) -> Sent {
        let mut conn = match self.conn(target).await {
            Ok(c) => c,
            Err(error) => return Sent::retry(error),
        };
        let stream = render(&self.spec.stream, d);
        let marker = format!("{stream}:hookgate-sent:{}:{}", d.source, d.event_id);
        let mut headers = serde_json::Map::new();
        for (name, value) in d.broker_headers() {
            match headers.get_mut(name) {
                Some(serde_json::Value::String(v)) => {
                    v.push_str(", ");
                    v.push_str(value);
                }
                _ => {
                    headers.insert(name.to_owned(), value.into());
                }
            }
        }
        let headers = serde_json::Value::Object(headers).to_string();
        let mut inv = self.script.key(&stream);
        inv.key(&marker)
            .arg(self.spec.duplicate_window.as_millis() as u64)
            .arg(self.spec.maxlen.map(|n| n.to_string()).unwrap_or_default())
            .arg("body")
            .arg(&d.body[..])
            .arg("source")
            .arg(d.source)
            .arg("event_id")
            .arg(d.event_id)
            .arg("type")
            .arg(d.event_type.unwrap_or(""))
            .arg("headers")
            .arg(headers);
        match inv.invoke_async::<i64>(&mut conn).await {
            Ok(_) => Sent::Delivered { status: None },
            Err(e) => Sent::retry(redact_in(&format!("redis: {e}"), target.url)),
        }
    }
}
