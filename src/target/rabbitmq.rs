//! `kind = "rabbitmq"`: one publish per event to `exchange` with the
//! rendered `routing_key`, on a channel in publisher-confirm mode.
//!
//! Delivered means the broker acknowledged the message (`basic.ack`): for
//! a persistent message routed to a durable queue, RabbitMQ acks once the
//! message is written to disk. A `basic.nack`, or a message returned as
//! unroutable (it is published `mandatory`, so a key no queue is bound to
//! comes back instead of vanishing), is a retry with the reason. See
//! https://www.rabbitmq.com/docs/confirms#publisher-confirms and
//! https://www.rabbitmq.com/docs/publishers#unroutable, and lapin's
//! `Channel::confirm_select` / `basic_publish`
//! (https://docs.rs/lapin/4.12.3/lapin/struct.Channel.html).
//!
//! Messages are persistent (`delivery_mode` 2), carry `message_id` = the
//! event id, `type` = the event type, `content_type` from the provider's
//! request, and a headers table with the provider headers and `hookgate-*`
//! metadata; the body is the provider's exact bytes.
//!
//! Duplicates: RabbitMQ has no publish-side deduplication. A resend after a
//! crash between the broker's ack and the attempt's record, or after an ack
//! that timed out, is a second message with the same `message_id`:
//! consumers dedupe by `message_id` (docs/design.md, "Broker targets").
//!
//! Rule: delivered only on the broker's confirm; every error is shown with
//! the URL's password redacted.

use super::connection::LazyConnection;
use super::kind::{
    Check, Endpoint, KindDef, Message, RawKeys, Sent, check_template, render, set_keys,
};
use crate::primitives::url::redact_in;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use serde::de::MapAccess;
use std::sync::atomic::{AtomicU64, Ordering};

/// `kind = "rabbitmq"`.
pub struct RabbitMqKind;

/// The keys only a rabbitmq target takes.
#[derive(Debug, Default)]
pub struct Raw {
    /// The exchange events are published to; `""` is the default exchange
    /// (the routing key is then a queue name). Required.
    pub exchange: Option<String>,
    /// The routing key; `{source}` and `{type}` are filled in. Required
    /// (may be `""` only with a named exchange, e.g. a fanout).
    pub routing_key: Option<String>,
}

impl RawKeys for Raw {
    const KEYS: &'static [&'static str] = &["exchange", "routing_key"];

    fn take<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "exchange" => self.exchange = Some(map.next_value()?),
            "routing_key" => self.routing_key = Some(map.next_value()?),
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn set(&self) -> Vec<&'static str> {
        set_keys([
            ("exchange", self.exchange.is_some()),
            ("routing_key", self.routing_key.is_some()),
        ])
    }
}

#[derive(Debug, Clone)]
pub struct Spec {
    /// Exchange name; `""` is the default exchange.
    pub exchange: String,
    /// Routing key template (`{source}`, `{type}`).
    pub routing_key: String,
}

impl KindDef for RabbitMqKind {
    const NAME: &'static str = "rabbitmq";
    type Raw = Raw;
    type Spec = Spec;
    type Sink = RabbitMq;

    fn check_url(url: &str) -> Result<(), String> {
        // lapin is built without TLS (it would bring a PKCS#12 stack).
        if url.starts_with("amqp://") {
            Ok(())
        } else if url.starts_with("amqps://") {
            Err("amqps:// (TLS to RabbitMQ) is not supported yet: use amqp://".into())
        } else {
            Err("a rabbitmq target needs an amqp:// URL".into())
        }
    }

    fn validate(raw: Raw, check: &mut Check<'_>) -> Spec {
        let exchange = raw.exchange.clone().unwrap_or_default();
        if raw.exchange.is_none() {
            check.problem(
                "exchange",
                "a rabbitmq target needs `exchange` (\"\" for the default exchange)".into(),
            );
        } else if exchange.len() > 255 {
            check.problem(
                "exchange",
                "an exchange name is at most 255 bytes".into(),
            );
        }
        let routing_key = raw.routing_key.clone().unwrap_or_default();
        match &raw.routing_key {
            None => check.problem(
                "routing_key",
                "a rabbitmq target needs `routing_key` (e.g. \"hooks.{source}.{type}\")".into(),
            ),
            // A fanout or headers exchange ignores the key.
            Some(k) if k.is_empty() && !exchange.is_empty() => {}
            Some(k) => {
                if let Err(e) = check_template(k) {
                    check.problem("routing_key", e);
                }
            }
        }
        Spec {
            exchange,
            routing_key,
        }
    }

    fn named_by_type(spec: &Spec) -> Option<&str> {
        Some(spec.routing_key.as_str()).filter(|t| t.contains("{type}"))
    }

    fn describe(spec: &Spec) -> String {
        format!(
            " kind=rabbitmq exchange={:?} routing_key={}",
            spec.exchange, spec.routing_key
        )
    }

    fn sink(spec: &Spec, _: &reqwest::Client) -> RabbitMq {
        RabbitMq {
            spec: spec.clone(),
            conn: LazyConnection::default(),
        }
    }

    async fn send(sink: &RabbitMq, to: &Endpoint<'_>, message: &Message<'_>) -> Sent {
        sink.send(to, message).await
    }
}

pub struct RabbitMq {
    spec: Spec,
    conn: LazyConnection<Link>,
}

/// A connection and its one publishing channel (confirm mode).
struct Link {
    // Kept so the connection lives as long as the channel is used.
    conn: Connection,
    channel: Channel,
}

impl RabbitMq {
    async fn send(&self, target: &Endpoint<'_>, d: &Message<'_>) -> Sent {
        let routing_key = render(&self.spec.routing_key, d);
        let (Ok(exchange), Ok(key)) = (
            ShortString::try_new(self.spec.exchange.as_str()),
            ShortString::try_new(routing_key.as_str()),
        ) else {
            return Sent::permanent(format!(
                "rabbitmq: routing key `{routing_key}` is longer than 255 bytes"
            ));
        };
        let Ok(message_id) = ShortString::try_new(d.event_id) else {
            return Sent::permanent(
                "rabbitmq: the event id is longer than 255 bytes (message_id)".into(),
            );
        };
        let suspect = AtomicU64::new(0);
        let publish = self.attempt(target, d, (exchange, key), message_id, &suspect);
        let error = match tokio::time::timeout(target.timeout, publish).await {
            Ok(Ok(())) => return Sent::Delivered { status: None },
            Ok(Err(error)) => error,
            Err(_) => format!(
                "rabbitmq: no confirm for routing key `{routing_key}` within {}",
                humantime::format_duration(target.timeout)
            ),
        };
        // A closed channel, a dead or hung connection: the next attempt
        // starts on a fresh connection. (A nack or a returned message is a
        // clean answer and keeps it.)
        let generation = suspect.load(Ordering::Relaxed);
        if generation != 0 {
            self.conn.forget(generation).await;
        }
        Sent::retry(redact_in(&error, target.url))
    }

    async fn attempt(
        &self,
        target: &Endpoint<'_>,
        d: &Message<'_>,
        (exchange, routing_key): (ShortString, ShortString),
        message_id: ShortString,
        suspect: &AtomicU64,
    ) -> Result<(), String> {
        let (generation, link) = self
            .conn
            .get(
                |l| l.conn.status().connected() && l.channel.status().connected(),
                || connect(target),
            )
            .await?;
        suspect.store(generation, Ordering::Relaxed);
        let route = format!(
            "exchange {:?} with routing key `{}`",
            self.spec.exchange,
            routing_key.as_str()
        );
        let confirm = link
            .channel
            .basic_publish(
                exchange,
                routing_key,
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                d.body,
                properties(d, message_id),
            )
            .await
            .map_err(|e| format!("rabbitmq: publish to {route} failed: {e}"))?;
        let confirmation = confirm.await;
        if matches!(
            confirmation,
            Ok(Confirmation::Ack(_) | Confirmation::Nack(_))
        ) {
            // The broker answered on this channel: it is fine.
            suspect.store(0, Ordering::Relaxed);
        }
        match confirmation {
            Ok(Confirmation::Ack(None)) => Ok(()),
            Ok(Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned))) => {
                Err(format!(
                    "rabbitmq: {route} is unroutable (returned {} {}): no queue is bound for it",
                    returned.reply_code,
                    returned.reply_text.as_str()
                ))
            }
            Ok(Confirmation::Nack(None)) => Err(format!(
                "rabbitmq: the broker refused (nacked) the message to {route}"
            )),
            Ok(Confirmation::NotRequested) => Err(
                "rabbitmq: the channel is not in confirm mode; nothing confirms the publish".into(),
            ),
            Err(e) => Err(format!("rabbitmq: publish to {route} failed: {e}")),
        }
    }
}

async fn connect(target: &Endpoint<'_>) -> Result<Link, String> {
    let props = ConnectionProperties::default().with_connection_name("hookgate".into());
    let conn = Connection::connect(target.url, props)
        .await
        .map_err(|e| format!("rabbitmq: cannot connect to {}: {e}", target.url))?;
    let channel = conn
        .create_channel()
        .await
        .map_err(|e| format!("rabbitmq: cannot open a channel: {e}"))?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(|e| format!("rabbitmq: cannot enable publisher confirms: {e}"))?;
    Ok(Link { conn, channel })
}

fn properties(d: &Message<'_>, message_id: ShortString) -> BasicProperties {
    let mut table = FieldTable::default();
    let mut content_type = None;
    let mut joined: Vec<(String, String)> = Vec::new();
    for (name, value) in d.broker_headers() {
        if name.eq_ignore_ascii_case("content-type") {
            content_type = Some(value.to_owned());
        }
        // A table has one value per name: repeated headers are joined.
        match joined.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => {
                v.push_str(", ");
                v.push_str(value);
            }
            None => joined.push((name.to_owned(), value.to_owned())),
        }
    }
    for (name, value) in joined {
        if let Ok(name) = ShortString::try_new(name) {
            table.insert(name, AMQPValue::LongString(LongString::from(value)));
        }
    }
    let mut props = BasicProperties::default()
        .with_delivery_mode(2)
        .with_message_id(message_id)
        .with_app_id("hookgate".into())
        .with_headers(table);
    if let Some(ct) = content_type.and_then(|c| ShortString::try_new(c).ok()) {
        props = props.with_content_type(ct);
    }
    if let Some(t) = d.event_type.and_then(|t| ShortString::try_new(t).ok())
    {
        props = props.with_type(t);
    }
    props
}
