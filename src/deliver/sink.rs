//! Where a target's deliveries go: one `send` per attempt, whatever the
//! kind, with one answer the loop understands. The outbox around it
//! (leases, retries, backoff, dead letters, replay, stats) is the same for
//! every kind; only this call differs.

use super::{nats, rabbitmq, redis_stream, request};
use crate::config::{Target, TargetKind};
use crate::store::DueDelivery;
use std::time::Duration;

/// What became of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    /// Accepted by the target (HTTP 2xx) or confirmed by the broker.
    Delivered { status: Option<i32> },
    /// Try again after backoff (or the target's `Retry-After`).
    Retry {
        status: Option<i32>,
        error: String,
        retry_after: Option<Duration>,
    },
    /// No retry can succeed (the message cannot even be built): dead now.
    Permanent { status: Option<i32>, error: String },
}

/// One target's way out.
pub enum Sink {
    Http(reqwest::Client),
    RedisStream(redis_stream::RedisStream),
    Nats(nats::Nats),
    RabbitMq(rabbitmq::RabbitMq),
}

impl Sink {
    /// The sink for `target`; brokers are connected lazily, on first use,
    /// and reconnected after an outage (Redis: by the client itself; NATS
    /// and RabbitMQ: a failed publish drops the connection, the next
    /// attempt makes a new one).
    pub fn new(target: &Target, http: &reqwest::Client) -> Self {
        match &target.kind {
            TargetKind::Http => Self::Http(http.clone()),
            TargetKind::RedisStream(spec) => {
                Self::RedisStream(redis_stream::RedisStream::new(spec.clone()))
            }
            TargetKind::Nats(spec) => Self::Nats(nats::Nats::new(spec.clone())),
            TargetKind::RabbitMq(spec) => Self::RabbitMq(rabbitmq::RabbitMq::new(spec.clone())),
        }
    }

    /// One attempt (1-based `attempt`) at unix time `now_secs`.
    pub async fn send(
        &self,
        target: &Target,
        d: &DueDelivery,
        attempt: i32,
        now_secs: i64,
    ) -> Sent {
        match self {
            Self::Http(client) => request::send(client, target, d, attempt, now_secs).await,
            Self::RedisStream(s) => s.send(target, d, attempt).await,
            Self::Nats(s) => s.send(target, d, attempt).await,
            Self::RabbitMq(s) => s.send(target, d, attempt).await,
        }
    }
}

/// The headers a broker message carries: the stored provider headers this
/// target may see, then hookgate's own (`hookgate-event-id`,
/// `hookgate-source`, `hookgate-attempt`, and `hookgate-event-type` when
/// the provider names one).
pub fn message_headers(target: &Target, d: &DueDelivery, attempt: i32) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = d
        .headers
        .pairs()
        .filter(|(name, _)| !target.withholds(&d.source, name))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
    out.push(("hookgate-event-id".into(), d.event_id.clone()));
    out.push(("hookgate-source".into(), d.source.clone()));
    out.push(("hookgate-attempt".into(), attempt.to_string()));
    if let Some(t) = &d.event_type {
        out.push(("hookgate-event-type".into(), t.clone()));
    }
    out
}

/// `{source}` and `{type}` filled in (`untyped` when the provider gave no
/// type), for stream names, subjects and routing keys.
pub fn render(template: &str, d: &DueDelivery) -> String {
    template
        .replace("{source}", &d.source)
        .replace("{type}", d.event_type.as_deref().unwrap_or("untyped"))
}

/// An error text with the target's URL (which may hold a password)
/// replaced, for logs and `last_error`.
pub fn redact(text: &str, url: &str) -> String {
    let redacted = crate::config::redact_url(url);
    let mut out = text.replace(url, &redacted);
    // Clients sometimes print the password alone ("…auth failed for user:pw"),
    // percent-decoded as they sent it, or as written in the URL.
    if let Some(pw) = password(url)
        && !pw.is_empty()
    {
        out = out.replace(pw, "***");
        let decoded = percent_decoded(pw);
        if !decoded.is_empty() {
            out = out.replace(&decoded, "***");
        }
    }
    out
}

/// `%XX` escapes decoded (invalid ones kept as written).
pub fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn password(url: &str) -> Option<&str> {
    let start = url.find("://")? + 3;
    let at = url.rfind('@')?;
    let userinfo = url.get(start..at)?;
    userinfo.split_once(':').map(|(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_hides_the_password_in_any_form() {
        let url = "redis://user:s3cret@127.0.0.1:6379/0";
        let text = format!("cannot reach {url}: auth s3cret refused");
        let out = redact(&text, url);
        assert!(!out.contains("s3cret"), "{out}");
        assert!(out.contains("redis://***@127.0.0.1:6379/0"), "{out}");
    }

    #[test]
    fn redaction_hides_broker_passwords_written_escaped_or_not() {
        for (url, shown) in [
            (
                "amqp://hookgate:s3cret@127.0.0.1:5672/%2f",
                "amqp://***@127.0.0.1:5672/%2f",
            ),
            (
                "nats://app:s3cret@127.0.0.1:4222",
                "nats://***@127.0.0.1:4222",
            ),
        ] {
            let text = format!("rabbitmq: cannot connect to {url}: PLAIN login s3cret refused");
            let out = redact(&text, url);
            assert!(!out.contains("s3cret"), "{out}");
            assert!(out.contains(shown), "{out}");
        }
        // A password with an escaped '@' may be printed decoded.
        let url = "amqp://u:p%40ss@127.0.0.1:5672/%2f";
        let out = redact(&format!("{url} refused p@ss and p%40ss"), url);
        assert!(!out.contains("p@ss") && !out.contains("p%40ss"), "{out}");
        assert!(out.contains("amqp://***@127.0.0.1:5672/%2f"), "{out}");
    }
}
