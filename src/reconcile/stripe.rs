//! Stripe: page through `GET /v1/events` (newest first) from the window
//! start, and hand each event object over exactly as the API returned it.
//!
//! API reference: <https://docs.stripe.com/api/events/list> (`created[gte]`,
//! `limit` ≤ 100, `starting_after` = the last id of the previous page,
//! `has_more`); the event object: <https://docs.stripe.com/api/events/object>;
//! authentication (`Authorization: Bearer <secret or restricted key>`):
//! <https://docs.stripe.com/api/authentication>; rate limits (`429`):
//! <https://docs.stripe.com/rate-limits>. The list only reaches back 30 days.

use super::api::Api;
use super::{Action, Found, Page, ReconcileError};
use crate::config::reconcile::Reconcile;
use crate::primitives::time::Millis;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

/// Stripe's largest page.
const LIMIT: &str = "100";

#[derive(Deserialize)]
struct List<'a> {
    #[serde(borrow)]
    data: Vec<&'a RawValue>,
    #[serde(default)]
    has_more: bool,
}

#[derive(Deserialize)]
struct Head {
    id: String,
    #[serde(rename = "type")]
    event_type: Option<String>,
    created: Option<i64>,
}

/// One page of events created at or after `since`, after `cursor` (an
/// event id) when given.
pub async fn page(
    api: &Api,
    rec: &Reconcile,
    since: Millis,
    cursor: Option<&str>,
) -> Result<Page, ReconcileError> {
    let url = format!("{}/v1/events", rec.api_base);
    let since = since.as_secs().to_string();
    let url = {
        // Not held across an await: the serializer is not `Send`.
        let mut q = form_urlencoded::Serializer::new(String::new());
        q.append_pair("limit", LIMIT)
            .append_pair("created[gte]", &since);
        if let Some(c) = cursor {
            q.append_pair("starting_after", c);
        }
        format!("{url}?{}", q.finish())
    };
    let answer = api
        .send("list events", || {
            api.client.get(&url).bearer_auth(rec.api_key.expose())
        })
        .await?;
    parse(&answer.body)
}

fn parse(body: &Bytes) -> Result<Page, ReconcileError> {
    let bad = |_| ReconcileError::BadResponse {
        api: "stripe",
        what: "list events",
    };
    let list: List = serde_json::from_slice(body).map_err(bad)?;
    let mut items = Vec::with_capacity(list.data.len());
    for raw in &list.data {
        let head: Head = serde_json::from_str(raw.get()).map_err(bad)?;
        items.push(Found {
            event_id: head.id,
            created: head.created,
            // The exact bytes of this element of `data`.
            action: Action::Admit(body.slice_ref(raw.get().as_bytes()), head.event_type),
        });
    }
    let next = match (list.has_more, items.last()) {
        (true, Some(last)) => Some(last.event_id.clone()),
        _ => None,
    };
    Ok(Page { items, next })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shaped from the list example of https://docs.stripe.com/api/events/list.
    const LIST: &str = r#"{
  "object": "list",
  "url": "/v1/events",
  "has_more": true,
  "data": [
    {
      "id": "evt_1NG8Du2eZvKYlo2CUI79vXWy",
      "object": "event",
      "api_version": "2019-02-19",
      "created": 1686089970,
      "data": {"object": {"id": "seti_1NG8Du2eZvKYlo2C9XMqbR0x", "object": "setup_intent"}},
      "livemode": false,
      "pending_webhooks": 0,
      "request": {"id": null, "idempotency_key": null},
      "type": "setup_intent.created"
    }
  ]
}"#;

    #[test]
    fn a_page_keeps_each_event_object_byte_for_byte() {
        let body = Bytes::from_static(LIST.as_bytes());
        let page = parse(&body).unwrap();
        assert_eq!(page.items.len(), 1);
        let e = &page.items[0];
        assert_eq!(e.event_id, "evt_1NG8Du2eZvKYlo2CUI79vXWy");
        let Action::Admit(bytes, event_type) = &e.action else {
            panic!("stripe events are admitted")
        };
        assert_eq!(event_type.as_deref(), Some("setup_intent.created"));
        let text = std::str::from_utf8(bytes).unwrap();
        assert!(text.starts_with("{\n      \"id\": \"evt_1NG8"), "{text}");
        assert!(text.ends_with("\"setup_intent.created\"\n    }"), "{text}");
        assert_eq!(page.next.as_deref(), Some("evt_1NG8Du2eZvKYlo2CUI79vXWy"));
    }

    #[test]
    fn the_last_page_has_no_cursor() {
        let body = Bytes::from_static(br#"{"object":"list","data":[],"has_more":false}"#);
        assert!(parse(&body).unwrap().next.is_none());
    }
}
