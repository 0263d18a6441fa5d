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

use super::sink::{Sent, message_headers, redact, render};
use crate::config::{RedisStreamSpec, Target};
use crate::store::DueDelivery;
use redis::aio::ConnectionManager;
use redis::{Client, Script};
use tokio::sync::OnceCell;

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
    spec: RedisStreamSpec,
    script: Script,
    /// Built on first use; the manager reconnects by itself after an outage.
    conn: OnceCell<ConnectionManager>,
}

impl RedisStream {
    pub fn new(spec: RedisStreamSpec) -> Self {
        Self {
            spec,
            script: Script::new(ADD_ONCE),
            conn: OnceCell::new(),
        }
    }

    async fn conn(&self, target: &Target) -> Result<ConnectionManager, String> {
        self.conn
            .get_or_try_init(|| async {
                let client = Client::open(target.url.as_str())
                    .map_err(|e| redact(&format!("bad redis URL: {e}"), &target.url))?;
                let config = redis::aio::ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(target.timeout))
                    .set_response_timeout(Some(target.timeout))
                    .set_number_of_retries(1);
                ConnectionManager::new_lazy_with_config(client, config)
                    .map_err(|e| redact(&format!("redis: {e}"), &target.url))
            })
            .await
            .cloned()
    }

    pub async fn send(&self, target: &Target, d: &DueDelivery, attempt: i32) -> Sent {
        let mut conn = match self.conn(target).await {
            Ok(c) => c,
            Err(error) => {
                return Sent::Retry {
                    status: None,
                    error,
                    retry_after: None,
                };
            }
        };
        let stream = render(&self.spec.stream, d);
        let marker = format!("{stream}:hookgate-sent:{}:{}", d.source, d.event_id);
        let mut headers = serde_json::Map::new();
        for (name, value) in message_headers(target, d, attempt) {
            match headers.get_mut(&name) {
                Some(serde_json::Value::String(v)) => {
                    v.push_str(", ");
                    v.push_str(&value);
                }
                _ => {
                    headers.insert(name, value.into());
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
            .arg(&d.source)
            .arg("event_id")
            .arg(&d.event_id)
            .arg("type")
            .arg(d.event_type.as_deref().unwrap_or(""))
            .arg("headers")
            .arg(headers);
        match inv.invoke_async::<i64>(&mut conn).await {
            Ok(_) => Sent::Delivered { status: None },
            Err(e) => Sent::Retry {
                status: None,
                error: redact(&format!("redis: {e}"), &target.url),
                retry_after: None,
            },
        }
    }
}
