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
//!
//! Rule: the URL's credentials are login options, never part of the URL the
//! client sees; every error is shown with the password redacted.

use super::connection::LazyConnection;
use super::kind::{
    Check, Endpoint, KindDef, Message, RawKeys, Sent, check_template, render, set_keys,
};
use crate::primitives::url::{Credentials, percent_decode_lossy, redact_in, split_credentials};
use async_nats::jetstream::{self, context::PublishErrorKind};
use async_nats::{HeaderMap, HeaderName, HeaderValue};
use serde::de::MapAccess;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};

/// `kind = "nats"`.
pub struct NatsKind;

/// The keys only a nats target takes.
#[derive(Debug, Default)]
pub struct Raw {
    /// The subject events are published to; `{source}` and `{type}` are
    /// filled in. A JetStream stream must capture it. Required.
    pub subject: Option<String>,
}

impl RawKeys for Raw {
    const KEYS: &'static [&'static str] = &["subject"];

    fn take<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "subject" => self.subject = Some(map.next_value()?),
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn set(&self) -> Vec<&'static str> {
        set_keys([("subject", self.subject.is_some())])
    }
}

#[derive(Debug, Clone)]
pub struct Spec {
    /// Subject template (`{source}`, `{type}`).
    pub subject: String,
}

impl KindDef for NatsKind {
    const NAME: &'static str = "nats";
    type Raw = Raw;
    type Spec = Spec;
    type Sink = Nats;

    fn check_url(url: &str) -> Result<(), String> {
        super::kind::needs_scheme(Self::NAME, &["nats://", "tls://"], url)
    }

    fn validate(raw: Raw, check: &mut Check<'_>) -> Spec {
        let subject = raw.subject.clone().unwrap_or_default();
        if raw.subject.is_none() {
            check.problem(
                "subject",
                "a nats target needs `subject` (e.g. \"hooks.{source}.{type}\")".into(),
            );
        } else if let Err(e) = check_template(&subject).and_then(|()| check_subject(&subject)) {
            check.problem("subject", e);
        }
        Spec { subject }
    }

    fn named_by_type(spec: &Spec) -> Option<&str> {
        Some(spec.subject.as_str()).filter(|t| t.contains("{type}"))
    }

    fn describe(spec: &Spec) -> String {
        format!(" kind=nats subject={}", spec.subject)
    }

    fn sink(spec: &Spec, _: &reqwest::Client) -> Nats {
        Nats {
            spec: spec.clone(),
            conn: LazyConnection::default(),
        }
    }

    async fn send(sink: &Nats, to: &Endpoint<'_>, message: &Message<'_>) -> Sent {
        sink.send(to, message).await
    }
}

/// A NATS subject template: dot-separated tokens, none empty, no
/// whitespace, and no wildcard (`*`, `>`): one publishes to one subject.
/// See https://docs.nats.io/nats-concepts/subjects.
fn check_subject(template: &str) -> Result<(), String> {
    if template.chars().any(char::is_whitespace) {
        return Err(format!("`{template}`: a subject has no whitespace"));
    }
    if template
        .split('.')
        .any(|token| token.is_empty() || token == "*" || token == ">")
    {
        return Err(format!(
            "`{template}`: a subject is dot-separated tokens, none empty and none a \
             wildcard (`*`, `>`)"
        ));
    }
    Ok(())
}

pub struct Nats {
    spec: Spec,
    conn: LazyConnection<jetstream::Context>,
}

/// Why an attempt failed, and whether the connection is suspect.
struct Failure {
    error: String,
    drop_connection: bool,
}

impl Nats {
    async fn send(&self, target: &Endpoint<'_>, d: &Message<'_>) -> Sent {
        let subject = render(&self.spec.subject, d);
        if let Err(error) = valid_subject(&subject) {
            return Sent::permanent(error);
        }
        let used = AtomicU64::new(0);
        let attempt = self.attempt(target, d, &subject, &used);
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
        Sent::retry(redact_in(&failure.error, target.url))
    }

    /// Connects when needed, publishes, waits for the PubAck.
    async fn attempt(
        &self,
        target: &Endpoint<'_>,
        d: &Message<'_>,
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
            .headers(nats_headers(d)?);
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

async fn connect(target: &Endpoint<'_>) -> Result<jetstream::Context, String> {
    // async-nats does not log in with a URL's user:password; they are
    // passed as options, and the client never sees them in the URL (which
    // it may log at debug level).
    let (url, user, password) = split_userinfo(target.url);
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
    let (bare, credentials) = split_credentials(url);
    let Some(Credentials { user, password }) = credentials else {
        return (bare, None, None);
    };
    let user = percent_decode_lossy(user);
    let password = password.map(percent_decode_lossy);
    (bare, (!user.is_empty()).then_some(user), password)
}

/// Provider headers and `hookgate-*` metadata, plus `Nats-Msg-Id`.
fn nats_headers(d: &Message<'_>) -> Result<HeaderMap, Failure> {
    let mut headers = HeaderMap::new();
    for (name, value) in d.broker_headers() {
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
        if let (Ok(n), Ok(v)) = (HeaderName::from_str(name), HeaderValue::from_str(value)) {
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
