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

use super::broker::Shared;
use super::sink::{Sent, message_headers, redact, render};
use crate::config::{RabbitMqSpec, Target};
use crate::store::DueDelivery;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use std::sync::atomic::{AtomicU64, Ordering};

pub struct RabbitMq {
    spec: RabbitMqSpec,
    conn: Shared<Link>,
}

/// A connection and its one publishing channel (confirm mode).
struct Link {
    // Kept so the connection lives as long as the channel is used.
    conn: Connection,
    channel: Channel,
}

impl RabbitMq {
    pub fn new(spec: RabbitMqSpec) -> Self {
        Self {
            spec,
            conn: Shared::default(),
        }
    }

    pub async fn send(&self, target: &Target, d: &DueDelivery, attempt: i32) -> Sent {
        let routing_key = render(&self.spec.routing_key, d);
        let (Ok(exchange), Ok(key)) = (
            ShortString::try_new(self.spec.exchange.as_str()),
            ShortString::try_new(routing_key.as_str()),
        ) else {
            return Sent::Permanent {
                status: None,
                error: format!("rabbitmq: routing key `{routing_key}` is longer than 255 bytes"),
            };
        };
        let Ok(message_id) = ShortString::try_new(d.event_id.as_str()) else {
            return Sent::Permanent {
                status: None,
                error: "rabbitmq: the event id is longer than 255 bytes (message_id)".into(),
            };
        };
        let suspect = AtomicU64::new(0);
        let publish = self.attempt(target, d, attempt, (exchange, key), message_id, &suspect);
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
        Sent::Retry {
            status: None,
            error: redact(&error, &target.url),
            retry_after: None,
        }
    }

    async fn attempt(
        &self,
        target: &Target,
        d: &DueDelivery,
        attempt: i32,
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
                &d.body,
                properties(target, d, attempt, message_id),
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

async fn connect(target: &Target) -> Result<Link, String> {
    let props = ConnectionProperties::default().with_connection_name("hookgate".into());
    let conn = Connection::connect(&target.url, props)
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

fn properties(
    target: &Target,
    d: &DueDelivery,
    attempt: i32,
    message_id: ShortString,
) -> BasicProperties {
    let mut table = FieldTable::default();
    let mut content_type = None;
    let mut joined: Vec<(String, String)> = Vec::new();
    for (name, value) in message_headers(target, d, attempt) {
        if name.eq_ignore_ascii_case("content-type") {
            content_type = Some(value.clone());
        }
        // A table has one value per name: repeated headers are joined.
        match joined.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => {
                v.push_str(", ");
                v.push_str(&value);
            }
            None => joined.push((name, value)),
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
    if let Some(t) = d
        .event_type
        .as_deref()
        .and_then(|t| ShortString::try_new(t).ok())
    {
        props = props.with_type(t);
    }
    props
}
