//! What a target kind is: the functions every kind file provides
//! ([`KindDef`]), and the values they exchange with the rest of the crate.
//!
//! Rule: nothing here knows a particular kind; the kind files import this,
//! never the list in `target/mod.rs`.

use crate::primitives::secret::Secret;
use crate::verify::source::Resolve;
use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use serde::de::MapAccess;
use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

/// A target kind: its keys in `[targets.<name>]`, their validation, its way
/// out (the sink) and its `check-config` line.
pub trait KindDef {
    /// The kind's name in the config file (`kind = "…"`).
    const NAME: &'static str;
    /// The keys only this kind takes, as written.
    type Raw: RawKeys + Debug + Default;
    /// Those keys validated.
    type Spec: Debug + Clone + Send + Sync + 'static;
    /// What the kind keeps between attempts: a client, a connection.
    type Sink: Send + Sync + 'static;

    /// Whether the target's `url` suits this kind; the error is the
    /// problem's text, which never repeats the URL (it may hold a password).
    fn check_url(url: &str) -> Result<(), String>;

    /// Checks the kind's keys; problems go to `check` under the key they
    /// came from.
    fn validate(raw: Self::Raw, check: &mut Check<'_>) -> Self::Spec;

    /// The kind's part of the target's `check-config` line (` kind=… …`),
    /// nothing secret; empty for the default kind.
    fn describe(spec: &Self::Spec) -> String;

    /// Whether the gateway signs what it sends (`signed=` in `check-config`).
    fn signs(spec: &Self::Spec) -> bool {
        let _ = spec;
        false
    }

    /// The name template (stream, subject, routing key) that holds
    /// `{type}`, if any: each event type then makes its own name.
    fn named_by_type(spec: &Self::Spec) -> Option<&str> {
        let _ = spec;
        None
    }

    /// The bytes of the spec's secrets (a signing key), which its `Debug`
    /// prints redacted: a reload compares them to tell a changed target.
    fn secrets(spec: &Self::Spec) -> Vec<&[u8]> {
        let _ = spec;
        Vec::new()
    }

    /// The sink; a broker connects lazily, on the first attempt.
    fn sink(spec: &Self::Spec, http: &reqwest::Client) -> Self::Sink;

    /// One attempt.
    fn send(
        sink: &Self::Sink,
        to: &Endpoint<'_>,
        message: &Message<'_>,
    ) -> impl Future<Output = Sent> + Send;
}

/// A kind's own keys as the config file writes them: the target table's
/// deserializer hands each key no common key claims to every kind in turn.
pub trait RawKeys {
    /// The keys, in declaration order.
    const KEYS: &'static [&'static str];

    /// Takes `key`'s value from `map` when the key is this kind's; `false`:
    /// not one of its keys (the value is left for another kind).
    fn take<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error>;

    /// The keys that were set, in declaration order (a key of another kind
    /// is a problem, named in this order).
    fn set(&self) -> Vec<&'static str>;
}

/// The keys of `keys` (name, whether it was set) that were set, for
/// [`RawKeys::set`].
pub fn set_keys<const N: usize>(keys: [(&'static str, bool); N]) -> Vec<&'static str> {
    keys.into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect()
}

/// What a kind's validation reports to: the target's key path, the
/// delivery settings it depends on, and the config's problem list.
pub struct Check<'a> {
    /// `targets.<name>`.
    pub key: &'a str,
    /// `delivery.lease`: how long a sent row stays leased.
    pub lease: Duration,
    pub resolve: &'a mut dyn Resolve,
}

impl Check<'_> {
    /// A problem with the target's key `name`.
    pub fn problem(&mut self, name: &str, msg: String) {
        self.resolve.problem(&format!("{}.{name}", self.key), msg);
    }

    /// The secret the target's key `name` refers to.
    pub fn secret(&mut self, name: &str, reference: &str) -> Option<Secret> {
        self.resolve
            .secret(&format!("{}.{name}", self.key), reference)
    }
}

/// Where an attempt goes: the target's common settings.
pub struct Endpoint<'a> {
    pub name: &'a str,
    /// May hold a password: errors show it through
    /// [`crate::primitives::url::redact_in`].
    pub url: &'a str,
    /// Deadline of the whole attempt, connecting included.
    pub timeout: Duration,
}

/// One attempt's event, as every kind sends it.
pub struct Message<'a> {
    pub source: &'a str,
    pub event_id: &'a str,
    pub event_type: Option<&'a str>,
    /// The provider's exact bytes.
    pub body: &'a Bytes,
    /// The stored provider headers this target may see, in request order
    /// (built by [`crate::target::Target::message`]).
    pub provider_headers: Vec<(&'a HeaderName, &'a HeaderValue)>,
    /// The attempt's number (1-based), as the `hookgate-attempt` header.
    pub attempt: String,
    /// Unix time of the attempt (a signature's timestamp).
    pub now_secs: i64,
    /// The attempt's `traceparent` (and `tracestate`) when tracing is on
    /// (`traces::attempt`); empty otherwise.
    pub trace: &'a [(&'static str, String)],
}

impl Message<'_> {
    /// hookgate's own headers, sent after the provider's by every kind.
    pub fn hookgate_headers(&self) -> [(&'static str, &str); 3] {
        [
            ("hookgate-event-id", self.event_id),
            ("hookgate-source", self.source),
            ("hookgate-attempt", &self.attempt),
        ]
    }

    /// What a broker message carries, as text: the provider headers,
    /// hookgate's own, `hookgate-event-type` when the provider names one,
    /// and the attempt's trace context when tracing is on.
    pub fn broker_headers(&self) -> impl Iterator<Item = (&str, &str)> {
        self.provider_headers
            .iter()
            .filter(|(n, _)| !self.replaces(n.as_str()))
            .filter_map(|(n, v)| Some((n.as_str(), v.to_str().ok()?)))
            .chain(self.hookgate_headers())
            .chain(self.event_type.map(|t| ("hookgate-event-type", t)))
            .chain(self.trace.iter().map(|(n, v)| (*n, v.as_str())))
    }

    /// Whether provider header `name` gives way to the attempt's own trace
    /// context: a provider's `traceparent` is the provider's trace, and a
    /// second one would make the target's parent ambiguous.
    pub fn replaces(&self, name: &str) -> bool {
        !self.trace.is_empty()
            && (name.eq_ignore_ascii_case("traceparent") || name.eq_ignore_ascii_case("tracestate"))
    }
}

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

impl Sent {
    /// A retry with no status and no `Retry-After` (every broker failure).
    pub fn retry(error: String) -> Self {
        Self::Retry {
            status: None,
            error,
            retry_after: None,
        }
    }

    /// A message no retry can send.
    pub fn permanent(error: String) -> Self {
        Self::Permanent {
            status: None,
            error,
        }
    }
}

/// `{source}` and `{type}` filled in (`untyped` when the provider gave no
/// type), for stream names, subjects and routing keys.
pub fn render(template: &str, m: &Message<'_>) -> String {
    template
        .replace("{source}", m.source)
        .replace("{type}", m.event_type.unwrap_or("untyped"))
}

/// A name template [`render`] fills: only `{source}` and `{type}` are
/// placeholders, and it is not empty.
pub fn check_template(template: &str) -> Result<(), String> {
    let rest = template.replace("{source}", "").replace("{type}", "");
    if rest.contains('{') || rest.contains('}') {
        return Err(format!(
            "`{template}`: the only placeholders are {{source}} and {{type}}"
        ));
    }
    if template.trim().is_empty() {
        return Err("must not be empty".into());
    }
    Ok(())
}

/// The usual URL check: `url` starts with one of `schemes`.
pub fn needs_scheme(kind: &str, schemes: &[&str], url: &str) -> Result<(), String> {
    if schemes.iter().any(|s| url.starts_with(s)) {
        return Ok(());
    }
    Err(format!(
        "a {kind} target needs a {} URL",
        schemes.join(" or ")
    ))
}
