//! PayPal: list the webhook events of the window and ask PayPal to resend
//! the ones the ledger lacks; they arrive signed at `POST /webhooks/<source>`.
//!
//! API reference: "List event notifications"
//! `GET /v1/notifications/webhooks-events` (`page_size` ≤ 300, `start_time`,
//! `end_time`, `links[rel=next]`) and "Resend event notification"
//! `POST /v1/notifications/webhooks-events/{event_id}/resend`
//! (<https://developer.paypal.com/docs/api/webhooks/v1/>); the OAuth token
//! from `POST /v1/oauth2/token` with the app's client id and secret
//! (<https://developer.paypal.com/api/rest/authentication/>); `429`:
//! <https://developer.paypal.com/api/rest/reference/rate-limiting/>.

use super::api::Api;
use super::{Action, Found, Page, ReconcileError};
use crate::config::reconcile::Reconcile;
use crate::primitives::time::Millis;
use crate::verify::schemes::SchemeSettings;
use crate::verify::source::Source;
use serde::Deserialize;

#[derive(Deserialize)]
struct Token {
    access_token: String,
}

#[derive(Deserialize)]
struct List {
    #[serde(default)]
    events: Vec<Event>,
    #[serde(default)]
    links: Vec<Link>,
}

#[derive(Deserialize)]
struct Event {
    id: String,
    /// RFC 3339.
    create_time: Option<String>,
}

#[derive(Deserialize)]
struct Link {
    href: String,
    rel: String,
}

/// An OAuth access token for the app (`client_id:secret` in `api_key`).
pub async fn token(api: &Api, rec: &Reconcile) -> Result<String, ReconcileError> {
    let (id, secret) = rec.api_key.expose().split_once(':').unwrap_or_default();
    let url = format!("{}/v1/oauth2/token", rec.api_base);
    let answer = api
        .send("oauth2 token", || {
            api.client
                .post(&url)
                .basic_auth(id, Some(secret))
                .header("content-type", "application/x-www-form-urlencoded")
                .body("grant_type=client_credentials")
        })
        .await?;
    let t: Token =
        serde_json::from_slice(&answer.body).map_err(|_| ReconcileError::BadResponse {
            api: "paypal",
            what: "oauth2 token",
        })?;
    Ok(t.access_token)
}

/// One page of events created from `since` until `until` (the run's
/// grace cutoff: younger ones PayPal may still be delivering).
pub async fn page(
    api: &Api,
    rec: &Reconcile,
    token: &str,
    since: Millis,
    until: Millis,
    cursor: Option<&str>,
) -> Result<Page, ReconcileError> {
    let url = match cursor {
        Some(next) => next.to_owned(),
        None => {
            let q = form_urlencoded::Serializer::new(String::new())
                .append_pair("page_size", "300")
                .append_pair("start_time", &since.rfc3339_seconds())
                .append_pair("end_time", &until.rfc3339_seconds())
                .finish();
            format!("{}/v1/notifications/webhooks-events?{q}", rec.api_base)
        }
    };
    let answer = api
        .send("list webhook events", || {
            api.client.get(&url).bearer_auth(token)
        })
        .await?;
    let list: List =
        serde_json::from_slice(&answer.body).map_err(|_| ReconcileError::BadResponse {
            api: "paypal",
            what: "list webhook events",
        })?;
    let items = list
        .events
        .into_iter()
        .map(|e| Found {
            action: Action::Resend(e.id.clone()),
            created: e.create_time.as_deref().and_then(super::unix_secs),
            event_id: e.id,
        })
        .collect();
    let next = match list.links.iter().find(|l| l.rel == "next") {
        Some(l) => Some(super::github::under(&l.href, &rec.api_base)?),
        None => None,
    };
    Ok(Page { items, next })
}

/// Asks PayPal to send event `id` again, to this source's webhook.
pub async fn resend(
    api: &Api,
    rec: &Reconcile,
    source: Option<&Source>,
    token: &str,
    id: &str,
) -> Result<(), ReconcileError> {
    // The id goes into the path: PayPal's are `WH-…` (letters, digits, `-`).
    if id.is_empty()
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
    {
        return Err(ReconcileError::BadResponse {
            api: "paypal",
            what: "event id",
        });
    }
    let url = format!(
        "{}/v1/notifications/webhooks-events/{id}/resend",
        rec.api_base
    );
    let webhook_ids: Vec<&str> = match source.and_then(|s| s.settings.as_ref()) {
        Some(SchemeSettings::Paypal(p)) => vec![p.webhook_id.as_str()],
        _ => vec![],
    };
    let body = serde_json::json!({ "webhook_ids": webhook_ids }).to_string();
    api.send("resend event", || {
        api.client
            .post(&url)
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body.clone())
    })
    .await?;
    Ok(())
}
