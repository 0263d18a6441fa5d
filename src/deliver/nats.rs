//! `kind = "nats"`: one JetStream publish per event to the rendered
//! `subject`, with the provider's exact body bytes as the payload and the
//! provider headers plus `hookgate-*` metadata as NATS headers.
//!
//! Delivered means JetStream's PubAck arrived: the message is stored in a
//! stream. A plain core-NATS publish would be fire-and-forget. When no
//! stream captures the subject, the server answers "no responders" and the
//! attempt is a retry naming the subject (the operator creates the stream;
//! the backlog waits in the outbox meanwhile).
//!
//! Duplicates: every publish carries `Nats-Msg-Id: <source>:<event id>`, so
//! a resend within the stream's `duplicate_window` (after a crash between
//! the PubAck and the attempt's record, or a publish whose ack timed out)
//! is acknowledged as a duplicate and not stored again. The window must be
//! longer than `delivery.lease` for that to cover a crash. See
//! https://docs.nats.io/using-nats/developer/develop_jetstream/model_deep_dive#message-deduplication
//! and https://docs.rs/async-nats/0.50.0/async_nats/jetstream/context/struct.Context.html#method.send_publish.

use super::broker::Shared;
use super::sink::{Sent, message_headers, percent_decoded, redact, render};
use crate::config::{NatsSpec, Target};
use crate::store::DueDelivery;
use async_nats::jetstream::{self, context::PublishErrorKind};
use async_nats::{HeaderMap, HeaderName, HeaderValue};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};

pub struct Nats {
    spec: NatsSpec,
    conn: Shared<jetstream::Context>,
}

/// Why an attempt failed, and whether the connection is suspect.
struct Failure {
    error: String,
    drop_connection: bool,
}

impl Nats {
    pub fn new(spec: NatsSpec) -> Self {
        Self {
            spec,
            conn: Shared::default(),
        }
    }

    pub async fn send(&self, target: &Target, d: &DueDelivery, attempt: i32) -> Sent {
        let subject = render(&self.spec.subject, d);
        if let Err(error) = valid_subject(&subject) {
            return Sent::Permanent {
                status: None,
                error,
            };
        }
        let used = AtomicU64::new(0);
        let attempt = self.attempt(target, d, attempt, &subject, &used);
        let failure = match tokio::time::timeout(target.timeout, attempt).await {
            Ok(Ok(())) => return Sent::Delivered { status: None },
            Ok(Err(failure)) => failure,
            Err(_) => Failure {
                error: format!(
                    "nats: no PubAck for `{subject}` within {}",
                    humantime::format_duration(target.timeout)
                ),
                drop_connection: true,
            },
        };
        let generation = used.load(Ordering::Relaxed);
        if failure.drop_connection && generation != 0 {
            self.conn.forget(generation).await;
        }
        Sent::Retry {
            status: None,
            error: redact(&failure.error, &target.url),
            retry_after: None,
        }
    }

    /// Connects when needed, publishes, waits for the PubAck.
    async fn attempt(
        &self,
        target: &Target,
        d: &DueDelivery,
        attempt: i32,
        subject: &str,
        used: &AtomicU64,
    ) -> Result<(), Failure> {
        let (generation, js) = self
            .conn
            .get(
                |js| {
                    // Disconnected: reconnecting, or given up for good; a
                    // fresh connection either way (anything the old one
                    // still sends is dropped by its Nats-Msg-Id).
                    js.client().connection_state() != async_nats::connection::State::Disconnected
                },
                || connect(target),
            )
            .await
            .map_err(|error| Failure {
                error,
                drop_connection: false,
            })?;
        used.store(generation, Ordering::Relaxed);
        let message = jetstream::message::PublishMessage::build()
            .payload(d.body.clone())
            .headers(nats_headers(target, d, attempt)?);
        let ack = js
            .send_publish(subject.to_owned(), message)
            .await
            .map_err(|e| publish_failure(subject, e))?;
        let ack = ack.await.map_err(|e| publish_failure(subject, e))?;
        if ack.duplicate {
            tracing::debug!(
                target = %target.name, event_id = %d.event_id, stream = %ack.stream,
                "JetStream already had this message id: not stored twice"
            );
        }
        Ok(())
    }
}

async fn connect(target: &Target) -> Result<jetstream::Context, String> {
    // async-nats does not log in with a URL's user:password; they are
    // passed as options, and the client never sees them in the URL (which
    // it may log at debug level).
    let (url, user, password) = split_userinfo(&target.url);
    let options = match (user, password) {
        (Some(user), Some(password)) => {
            async_nats::ConnectOptions::with_user_and_password(user, password)
        }
        // `nats://<token>@host`: NATS' own URL form for token auth.
        (Some(token), None) => async_nats::ConnectOptions::with_token(token),
        _ => async_nats::ConnectOptions::new(),
    };
    let client = options
        .name("hookgate")
        .connection_timeout(target.timeout)
        // The client reconnects by itself after a blip; a longer outage
        // ends it, and a later attempt connects anew.
        .max_reconnects(5)
        .connect(url.as_str())
        .await
        .map_err(|e| format!("nats: cannot connect to {}: {e}", target.url))?;
    let mut js = jetstream::new(client);
    js.set_timeout(target.timeout);
    Ok(js)
}

/// The URL without its `user[:password]@`, and the user and password
/// (percent-decoded).
fn split_userinfo(url: &str) -> (String, Option<String>, Option<String>) {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return (url.to_owned(), None, None);
    };
    let authority_end = url[start..].find('/').map_or(url.len(), |i| start + i);
    let Some(at) = url[start..authority_end].rfind('@').map(|i| start + i) else {
        return (url.to_owned(), None, None);
    };
    let userinfo = &url[start..at];
    let bare = format!("{}{}", &url[..start], &url[at + 1..]);
    let (user, password) = match userinfo.split_once(':') {
        Some((u, p)) => (percent_decoded(u), Some(percent_decoded(p))),
        None => (percent_decoded(userinfo), None),
    };
    (bare, (!user.is_empty()).then_some(user), password)
}

/// Provider headers and `hookgate-*` metadata, plus `Nats-Msg-Id`.
fn nats_headers(target: &Target, d: &DueDelivery, attempt: i32) -> Result<HeaderMap, Failure> {
    let mut headers = HeaderMap::new();
    for (name, value) in message_headers(target, d, attempt) {
        // `Nats-*` headers steer JetStream (expected stream or sequence,
        // message id): none may come from the provider's request.
        if name
            .get(..5)
            .is_some_and(|p| p.eq_ignore_ascii_case("nats-"))
        {
            continue;
        }
        // A name or value NATS cannot carry (control characters, ':') is
        // left out rather than failing the event.
        if let (Ok(n), Ok(v)) = (HeaderName::from_str(&name), HeaderValue::from_str(&value)) {
            headers.append(n, v);
        }
    }
    let msg_id = format!("{}:{}", d.source, d.event_id);
    let msg_id = HeaderValue::from_str(&msg_id).map_err(|_| Failure {
        error: "nats: the event id cannot be a Nats-Msg-Id header value".into(),
        drop_connection: false,
    })?;
    headers.insert(async_nats::header::NATS_MESSAGE_ID, msg_id);
    Ok(headers)
}

fn publish_failure(subject: &str, e: jetstream::context::PublishError) -> Failure {
    match e.kind() {
        PublishErrorKind::StreamNotFound => Failure {
            error: format!("nats: no JetStream stream captures subject `{subject}`"),
            drop_connection: false,
        },
        PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe | PublishErrorKind::Other => {
            Failure {
                error: format!("nats: publish to `{subject}` failed: {e}"),
                drop_connection: true,
            }
        }
        _ => Failure {
            error: format!("nats: publish to `{subject}` failed: {e}"),
            drop_connection: false,
        },
    }
}

/// A rendered subject one can publish to: the event's type fills `{type}`
/// and may hold what a subject cannot (whitespace, wildcards, empty tokens).
/// See https://docs.nats.io/nats-concepts/subjects.
fn valid_subject(subject: &str) -> Result<(), String> {
    let bad_token = subject
        .split('.')
        .any(|t| t.is_empty() || t == "*" || t == ">");
    if bad_token || subject.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "nats: `{subject}` is not a subject one can publish to (empty token, \
             wildcard or whitespace); the event's type or source filled the template"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{split_userinfo, valid_subject};

    #[test]
    fn credentials_come_out_of_the_url_decoded() {
        let s = |u: &str| split_userinfo(u);
        assert_eq!(
            s("nats://app:p%40ss@127.0.0.1:4222"),
            (
                "nats://127.0.0.1:4222".to_owned(),
                Some("app".to_owned()),
                Some("p@ss".to_owned())
            )
        );
        assert_eq!(
            s("tls://s3cr3t-token@nats.internal:4222"),
            (
                "tls://nats.internal:4222".to_owned(),
                Some("s3cr3t-token".to_owned()),
                None
            )
        );
        assert_eq!(
            s("nats://127.0.0.1:4222"),
            ("nats://127.0.0.1:4222".to_owned(), None, None)
        );
    }

    #[test]
    fn a_rendered_subject_with_a_wildcard_or_space_is_refused() {
        assert!(valid_subject("hooks.stripe.invoice.paid").is_ok());
        for bad in [
            "hooks.stripe.a b",
            "hooks.stripe.*",
            "hooks..x",
            "hooks.>",
            "hooks.",
        ] {
            assert!(valid_subject(bad).is_err(), "{bad}");
        }
    }
}
