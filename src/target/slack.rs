//! `kind = "slack"`: each event posted to a Slack incoming webhook as one
//! readable line, `{"text": "…"}`
//! (<https://api.slack.com/messaging/webhooks>). The alert sinks'
//! targets (`[alerts.<name>] slack = …`) use it; a `[targets.*]` may too,
//! and then gets one line per event (source, type, id), never its body.
//!
//! Rule: the URL is the credential (Slack's webhook URLs carry no other
//! one), so it is treated like a target URL with a token: it never reaches
//! `last_error`, a log or `check-config`. The attempt is the http kind's
//! (same client, same classification of the answer), with Slack's body.

use super::http::{self, Http};
use super::kind::{Check, Endpoint, KindDef, Message, RawKeys, Sent};
use bytes::Bytes;
use serde::de::MapAccess;
use serde_json::Value;

/// `kind = "slack"`.
pub struct SlackKind;

/// A slack target takes no keys of its own.
#[derive(Debug, Default)]
pub struct Raw;

impl RawKeys for Raw {
    const KEYS: &'static [&'static str] = &[];

    fn take<'de, A: MapAccess<'de>>(&mut self, _: &str, _: &mut A) -> Result<bool, A::Error> {
        Ok(false)
    }

    fn set(&self) -> Vec<&'static str> {
        Vec::new()
    }
}

#[derive(Debug, Clone)]
pub struct Spec;

impl KindDef for SlackKind {
    const NAME: &'static str = "slack";
    type Raw = Raw;
    type Spec = Spec;
    type Sink = Http;

    fn check_url(url: &str) -> Result<(), String> {
        http::HttpKind::check_url(url)
    }

    fn validate(_: Raw, _: &mut Check<'_>) -> Spec {
        Spec
    }

    fn describe(_: &Spec) -> String {
        String::new()
    }

    fn sink(_: &Spec, client: &reqwest::Client) -> Http {
        Http::unsigned(client)
    }

    async fn send(sink: &Http, to: &Endpoint<'_>, m: &Message<'_>) -> Sent {
        let body = match serde_json::to_vec(&serde_json::json!({ "text": text(m) })) {
            Ok(b) => Bytes::from(b),
            Err(e) => return Sent::permanent(format!("building the Slack message: {e}")),
        };
        let json = ::http::HeaderValue::from_static("application/json");
        let message = Message {
            source: m.source,
            event_id: m.event_id,
            event_type: m.event_type,
            body: &body,
            provider_headers: vec![(&::http::header::CONTENT_TYPE, &json)],
            attempt: m.attempt.clone(),
            now_secs: m.now_secs,
            trace: m.trace,
        };
        http::send(sink, to, &message).await
    }
}

/// The line Slack shows: an alert's own summary (`src/alerts/message.rs`
/// writes it), or, for any other event, where it came from and what it is.
pub fn text(m: &Message<'_>) -> String {
    let alert: Option<Value> = serde_json::from_slice(m.body).ok();
    if let Some(a) = alert.as_ref().filter(|a| a.get("alert").is_some()) {
        let field = |k: &str| a.get(k).and_then(Value::as_str).unwrap_or_default();
        let (icon, state) = match field("state") {
            "firing" => (":rotating_light:", "FIRING"),
            _ => (":white_check_mark:", "RESOLVED"),
        };
        return format!(
            "{icon} *{state}* `{}` {}\n_hookgate alert `{}` · {} · {}_",
            field("condition"),
            escape(field("summary")),
            escape(field("alert")),
            escape(field("subject")),
            field("at"),
        );
    }
    format!(
        "hookgate: `{}` event `{}` from `{}`",
        escape(m.event_type.unwrap_or("untyped")),
        escape(m.event_id),
        escape(m.source)
    )
}

/// Slack's three control characters in message text, escaped as its
/// formatting guide asks (<https://api.slack.com/reference/surfaces/formatting#escaping>).
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(body: &Bytes) -> Message<'_> {
        Message {
            source: "hookgate.alerts",
            event_id: "ops/target_failing/billing#1#fired",
            event_type: Some("alert.fired"),
            body,
            provider_headers: Vec::new(),
            attempt: "1".into(),
            now_secs: 0,
            trace: &[],
        }
    }

    #[test]
    fn an_alert_reads_as_one_line_with_its_state_and_summary() {
        let body = Bytes::from_static(
            br#"{"alert":"ops","state":"firing","condition":"target_failing","subject":"billing","summary":"target billing failing for 5m <HTTP 503>","at":"2026-01-01T00:00:00Z"}"#,
        );
        let t = text(&message(&body));
        assert!(t.starts_with(":rotating_light: *FIRING* `target_failing` target billing failing for 5m &lt;HTTP 503&gt;"), "{t}");
        assert!(t.contains("alert `ops` · billing · 2026-01-01T00:00:00Z"), "{t}");
        let body = Bytes::from_static(
            br#"{"alert":"ops","state":"cleared","condition":"target_failing","subject":"billing","summary":"target billing recovered","at":"x"}"#,
        );
        assert!(text(&message(&body)).starts_with(":white_check_mark: *RESOLVED*"));
    }

    #[test]
    fn another_event_is_named_never_shown() {
        let body = Bytes::from_static(br#"{"card":"4242 4242 4242 4242"}"#);
        let mut m = message(&body);
        m.source = "stripe";
        let t = text(&m);
        assert!(!t.contains("4242"), "{t}");
        assert!(t.contains("from `stripe`"), "{t}");
    }
}
