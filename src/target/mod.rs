//! Targets: where events are delivered. A target is its common settings
//! ([`Target`]: URL, timeout, attempts, concurrency), its route (which
//! events it wants: [`route`]) and a kind: HTTP, or a broker (a Redis
//! stream, NATS JetStream, RabbitMQ).
//!
//! Rule: one file per kind, holding its keys in `[targets.<name>]`, their
//! validation, its sink (connection and one send per attempt) and its
//! `check-config` line. The file implements [`KindDef`]; the [`kinds!`]
//! list below is the only place that names every kind, so adding one is a
//! new file plus one line there. `config` parses and validates targets
//! through this module; `deliver` sends through it.

pub mod connection;
pub mod kind;
pub mod route;

pub use kind::{Check, Endpoint, KindDef, Message, RawKeys, Sent};

use crate::primitives::headers::StoredHeaders;
use crate::verify::locator::Lookup;
use bytes::Bytes;
use route::Rule;
use serde::de::{self, MapAccess};
use std::collections::BTreeMap;
use std::time::Duration;

/// An internal endpoint events are delivered to.
#[derive(Debug)]
pub struct Target {
    pub name: String,
    pub url: String,
    pub timeout: Duration,
    /// Retry window, permanent statuses, optional attempt cap, backoff.
    pub retry: RetryPolicy,
    /// Most in flight at once: the fixed `concurrency`, or the adaptive
    /// limit's ceiling (`max_concurrency`) when `adaptive`.
    pub concurrency: usize,
    /// No fixed `concurrency` was set: the limit adapts (deliver::limit).
    pub adaptive: bool,
    pub forward_credentials: bool,
    pub forward_proxy_headers: bool,
    /// Per source name: stored header names never sent to this target
    /// (credentials and proxy headers another target of the source needs).
    pub withheld: BTreeMap<String, Vec<String>>,
    /// Which events this target subscribes to (`events`, `filter`).
    pub rule: Rule,
    /// HTTP, or the broker and its settings.
    pub kind: Kind,
    /// `rate`: most deliveries per second from this process; `None` = no cap.
    pub rate: Option<f64>,
    /// `order_by`: where each event's ordering key is; `None` = unordered.
    pub order_by: Option<Lookup>,
}

/// When a target's failed delivery is retried and when it is dead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retried until this long after the event was received.
    pub retry_for: Duration,
    /// HTTP statuses that make a delivery dead at once.
    pub permanent_statuses: Vec<u16>,
    /// Optional cap on attempts inside the window.
    pub max_attempts: Option<u32>,
    /// The retry delay's ceiling doubles from `backoff_base` to `backoff_max`.
    pub backoff_base: Duration,
    pub backoff_max: Duration,
}

impl Target {
    /// Whether `self` and `other` (the same target in two loaded configs)
    /// have every setting in common. A kind's secrets (a signing key) print
    /// redacted, so their bytes are compared ([`Kind::secrets`]).
    pub fn same_as(&self, other: &Target) -> bool {
        format!("{self:?}") == format!("{other:?}") && self.kind.secrets() == other.kind.secrets()
    }

    /// Whether stored header `name` of an event from `source` stays here.
    pub fn withholds(&self, source: &str, name: &str) -> bool {
        self.withheld
            .get(source)
            .is_some_and(|w| w.iter().any(|h| h.eq_ignore_ascii_case(name)))
    }

    /// Where this target's attempts go.
    pub fn endpoint(&self) -> Endpoint<'_> {
        Endpoint {
            name: &self.name,
            url: &self.url,
            timeout: self.timeout,
        }
    }

    /// Attempt number `attempt` (1-based) of an event, at unix time
    /// `now_secs`: the one place that decides which stored headers this
    /// target may see (every kind then adds [`Message::hookgate_headers`]).
    pub fn message<'a>(&self, event: Event<'a>, attempt: i32, now_secs: i64) -> Message<'a> {
        let provider_headers = event
            .headers
            .iter()
            .filter(|(name, _)| !self.withholds(event.source, name.as_str()))
            .collect();
        Message {
            source: event.source,
            event_id: event.event_id,
            event_type: event.event_type,
            body: event.body,
            provider_headers,
            attempt: attempt.to_string(),
            now_secs,
            trace: &[],
        }
    }
}

/// A stored event as [`Target::message`] reads it.
#[derive(Clone, Copy)]
pub struct Event<'a> {
    pub source: &'a str,
    pub event_id: &'a str,
    pub event_type: Option<&'a str>,
    pub body: &'a Bytes,
    pub headers: &'a StoredHeaders,
}

/// The list of kinds: `Variant => module::Def,`, the first is the default
/// `kind`. It declares each module and builds the enums that dispatch to
/// its [`KindDef`].
macro_rules! kinds {
    ($($variant:ident => $module:ident :: $def:ident,)*) => {
        $(pub mod $module;)*

        /// A target's kind with the settings only that kind has.
        #[derive(Debug, Clone)]
        pub enum Kind {
            $($variant(<$module::$def as KindDef>::Spec),)*
        }

        /// The kind a target names (`kind = "…"`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum KindName {
            $($variant,)*
        }

        /// Every kind's own keys, as written in one `[targets.<name>]` table.
        #[derive(Debug, Default)]
        pub struct RawKinds {
            $($module: <$module::$def as KindDef>::Raw,)*
        }

        /// A target's way out: what its kind keeps between attempts.
        pub enum Sink {
            $($variant(<$module::$def as KindDef>::Sink),)*
        }

        impl KindName {
            const NAMES: &[&str] = &[$(<$module::$def as KindDef>::NAME),*];
            const ALL: &[KindName] = &[$(Self::$variant),*];

            /// The name in the config file.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => <$module::$def as KindDef>::NAME,)*
                }
            }

            fn check_url(self, url: &str) -> Result<(), String> {
                match self {
                    $(Self::$variant => <$module::$def as KindDef>::check_url(url),)*
                }
            }
        }

        impl RawKinds {
            /// Every kind's keys, in list order.
            pub fn keys() -> impl Iterator<Item = &'static str> {
                [$(<<$module::$def as KindDef>::Raw as RawKeys>::KEYS),*]
                    .into_iter()
                    .flatten()
                    .copied()
            }

            /// Takes `key`'s value when it is one of a kind's keys.
            pub fn take<'de, A: MapAccess<'de>>(
                &mut self,
                key: &str,
                map: &mut A,
            ) -> Result<bool, A::Error> {
                $(if self.$module.take(key, map)? {
                    return Ok(true);
                })*
                Ok(false)
            }

            /// The keys set, each with the kind it belongs to, in list order.
            fn set(&self) -> Vec<(&'static str, KindName)> {
                let mut out = Vec::new();
                $(out.extend(self.$module.set().into_iter().map(|k| (k, KindName::$variant)));)*
                out
            }

            /// The settings of kind `name`: another kind's key is a
            /// problem (never silently ignored), then the URL, then the
            /// kind's own keys.
            pub fn validate(self, name: KindName, url: &str, check: &mut Check<'_>) -> Kind {
                for (key, owner) in self.set() {
                    if owner != name {
                        check.problem(
                            key,
                            format!("only a {} target takes `{key}`", owner.as_str()),
                        );
                    }
                }
                if let Err(msg) = name.check_url(url) {
                    check.problem("url", msg);
                }
                match name {
                    $(KindName::$variant => Kind::$variant(
                        <$module::$def as KindDef>::validate(self.$module, check),
                    ),)*
                }
            }
        }

        impl Kind {
            /// The kind's part of the `check-config` line.
            pub fn describe(&self) -> String {
                match self {
                    $(Self::$variant(spec) => <$module::$def as KindDef>::describe(spec),)*
                }
            }

            /// Whether the gateway signs what it sends.
            pub fn signs(&self) -> bool {
                match self {
                    $(Self::$variant(spec) => <$module::$def as KindDef>::signs(spec),)*
                }
            }

            /// The name template holding `{type}` ([`KindDef::named_by_type`]).
            pub fn named_by_type(&self) -> Option<&str> {
                match self {
                    $(Self::$variant(spec) => <$module::$def as KindDef>::named_by_type(spec),)*
                }
            }

            /// The bytes of the kind's secrets ([`KindDef::secrets`]).
            pub fn secrets(&self) -> Vec<&[u8]> {
                match self {
                    $(Self::$variant(spec) => <$module::$def as KindDef>::secrets(spec),)*
                }
            }

            /// The sink; brokers connect on first use.
            pub fn sink(&self, http: &reqwest::Client) -> Sink {
                match self {
                    $(Self::$variant(spec) => Sink::$variant(
                        <$module::$def as KindDef>::sink(spec, http),
                    ),)*
                }
            }
        }

        impl Sink {
            /// One attempt.
            pub async fn send(&self, to: &Endpoint<'_>, message: &Message<'_>) -> Sent {
                match self {
                    // Boxed: the awaiting future would otherwise be as large
                    // as the largest kind's (a broker client's), and it is
                    // moved with every delivery task that holds it.
                    $(Self::$variant(sink) => {
                        Box::pin(<$module::$def as KindDef>::send(sink, to, message)).await
                    })*
                }
            }
        }
    };
}

kinds! {
    Http => http::HttpKind,
    RedisStream => redis_stream::RedisStreamKind,
    Nats => nats::NatsKind,
    RabbitMq => rabbitmq::RabbitMqKind,
    Slack => slack::SlackKind,
}

impl Default for KindName {
    /// The first kind of the list: `http`.
    fn default() -> Self {
        Self::ALL[0]
    }
}

impl<'de> serde::Deserialize<'de> for KindName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Self::NAMES
            .iter()
            .position(|n| *n == name)
            .map(|i| Self::ALL[i])
            .ok_or_else(|| de::Error::unknown_variant(&name, Self::NAMES))
    }
}

#[cfg(test)]
mod tests {
    use super::{Event, Kind, Target, http};
    use crate::primitives::headers::StoredHeaders;
    use ::http::{HeaderName, HeaderValue};
    use std::collections::BTreeMap;
    use std::time::Duration;

    fn target(withheld: &[(&str, &str)]) -> Target {
        let mut w: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (source, name) in withheld {
            w.entry((*source).into()).or_default().push((*name).into());
        }
        Target {
            name: "t".into(),
            url: "http://127.0.0.1:9/".into(),
            timeout: Duration::from_secs(1),
            retry: super::RetryPolicy {
                retry_for: Duration::from_secs(60),
                permanent_statuses: vec![410],
                max_attempts: Some(1),
                backoff_base: Duration::from_secs(1),
                backoff_max: Duration::from_secs(1),
            },
            concurrency: 1,
            adaptive: false,
            forward_credentials: false,
            forward_proxy_headers: false,
            withheld: w,
            rule: Default::default(),
            kind: Kind::Http(http::Spec { signing_key: None }),
            rate: None,
            order_by: None,
        }
    }

    #[test]
    fn every_kind_gets_the_headers_the_target_may_see_then_hookgates() {
        let mut stored = StoredHeaders::default();
        for (n, v) in [
            ("content-type", "application/json"),
            ("authorization", "Bearer s3cret"),
            ("x-a", "1"),
        ] {
            stored.push(HeaderName::from_static(n), HeaderValue::from_static(v));
        }
        let body = bytes::Bytes::from_static(b"{}");
        let event = Event {
            source: "stripe",
            event_id: "evt_1",
            event_type: Some("invoice.paid"),
            body: &body,
            headers: &stored,
        };
        let t = target(&[("stripe", "Authorization")]);
        let m = t.message(event, 3, 0);
        let names: Vec<&str> = m.provider_headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["content-type", "x-a"]);
        let broker: Vec<(&str, &str)> = m.broker_headers().collect();
        assert_eq!(
            broker,
            [
                ("content-type", "application/json"),
                ("x-a", "1"),
                ("hookgate-event-id", "evt_1"),
                ("hookgate-source", "stripe"),
                ("hookgate-attempt", "3"),
                ("hookgate-event-type", "invoice.paid"),
            ]
        );
        // Withheld for another source only: this one's events keep it.
        let m = target(&[("github", "authorization")]).message(event, 1, 0);
        assert_eq!(m.provider_headers.len(), 3);
    }
}
