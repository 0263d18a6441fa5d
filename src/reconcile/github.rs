//! GitHub: list the hook's deliveries (newest first) back to the window
//! start, and ask GitHub to redeliver each one whose GUID the ledger lacks
//! (failed, or never reached us). The redelivery keeps its
//! `X-GitHub-Delivery` GUID and arrives signed at `POST /webhooks/<source>`.
//!
//! API reference: "List deliveries for a repository webhook"
//! <https://docs.github.com/en/rest/repos/webhooks#list-deliveries-for-a-repository-webhook>
//! and "Redeliver a delivery for a repository webhook"
//! <https://docs.github.com/en/rest/repos/webhooks#redeliver-a-delivery-for-a-repository-webhook>
//! (organisation hooks: <https://docs.github.com/en/rest/orgs/webhooks>;
//! the App's own hook, `app/hook`: "List deliveries for an app webhook" and
//! "Redeliver a delivery for an app webhook",
//! <https://docs.github.com/en/rest/apps/webhooks>, same paths below the
//! hook and same shapes, authenticated with the App's JWT, see
//! [`super::github_app`]);
//! `per_page` ≤ 100, the next page in the `Link` header
//! (<https://docs.github.com/en/rest/using-the-rest-api/using-pagination-in-the-rest-api>),
//! redelivery answers `202`; rate limits (`429`/`403` + `Retry-After`):
//! <https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api>.
//! Deliveries are kept 3 days.

use super::api::Api;
use super::github_app::AppJwt;
use super::{Action, Found, Page, ReconcileError};
use crate::config::reconcile::Reconcile;
use crate::primitives::secret::Secret;
use crate::primitives::time::Millis;
use serde::Deserialize;

/// How a run's calls authenticate; the only difference between the kinds
/// of hook.
pub enum Auth {
    /// A repository or organisation hook: the configured token.
    Token(Secret),
    /// The App's own hook: its JWT, minted per run and renewed near expiry.
    App(AppJwt),
}

impl Auth {
    pub fn of(rec: &Reconcile) -> Self {
        match &rec.app {
            Some(app) => Self::App(AppJwt::new(app.clone())),
            None => Self::Token(rec.api_key.clone()),
        }
    }

    fn bearer(&self) -> Result<String, ReconcileError> {
        match self {
            Self::Token(t) => Ok(t.expose().to_owned()),
            Self::App(jwt) => jwt.bearer(Millis::now().as_secs()),
        }
    }
}

#[derive(Deserialize)]
struct Delivery {
    id: i64,
    guid: String,
    delivered_at: Option<String>,
}

/// One try of a call; the credential is taken per try.
fn request(
    api: &Api,
    auth: &Auth,
    method: reqwest::Method,
    url: &str,
) -> Result<reqwest::RequestBuilder, ReconcileError> {
    Ok(api
        .client
        .request(method, url)
        .bearer_auth(auth.bearer()?)
        .header("accept", "application/vnd.github+json")
        .header("x-github-api-version", "2022-11-28"))
}

/// One page of deliveries; `cursor` is the previous page's `next` link.
pub async fn page(
    api: &Api,
    rec: &Reconcile,
    auth: &Auth,
    since: Millis,
    cursor: Option<&str>,
) -> Result<Page, ReconcileError> {
    let hook = rec.hook.as_deref().unwrap_or_default();
    let url = match cursor {
        Some(next) => next.to_owned(),
        None => format!("{}/{hook}/deliveries?per_page=100", rec.api_base),
    };
    let answer = api
        .try_send("list deliveries", || {
            request(api, auth, reqwest::Method::GET, &url)
        })
        .await?;
    let bad = |_| ReconcileError::BadResponse {
        api: "github",
        what: "list deliveries",
    };
    let deliveries: Vec<Delivery> = serde_json::from_slice(&answer.body).map_err(bad)?;
    let mut items = Vec::with_capacity(deliveries.len());
    let mut older = false;
    for d in deliveries {
        let at = d.delivered_at.as_deref().and_then(super::unix_secs);
        if at.is_some_and(|t| t < since.as_secs()) {
            older = true;
            continue;
        }
        items.push(Found {
            event_id: d.guid,
            created: at,
            action: Action::Resend(d.id.to_string()),
        });
    }
    let next = if older {
        None
    } else {
        next_link(&answer.headers, &rec.api_base)?
    };
    Ok(Page { items, next })
}

/// Asks GitHub to send delivery `id` again.
pub async fn redeliver(
    api: &Api,
    rec: &Reconcile,
    auth: &Auth,
    id: &str,
) -> Result<(), ReconcileError> {
    let hook = rec.hook.as_deref().unwrap_or_default();
    let url = format!("{}/{hook}/deliveries/{id}/attempts", rec.api_base);
    api.try_send("redeliver", || {
        request(api, auth, reqwest::Method::POST, &url)
    })
    .await?;
    Ok(())
}

/// The `rel="next"` URL of a `Link` header. It must lie under `api_base`:
/// the credential is sent to it.
pub(super) fn next_link(
    headers: &http::HeaderMap,
    api_base: &str,
) -> Result<Option<String>, ReconcileError> {
    let Some(link) = headers
        .get(http::header::LINK)
        .and_then(|v| v.to_str().ok())
    else {
        return Ok(None);
    };
    for part in link.split(',') {
        let mut pieces = part.split(';');
        let url = pieces.next().unwrap_or_default().trim();
        if pieces.any(|p| p.trim() == "rel=\"next\"") {
            let url = url.trim_start_matches('<').trim_end_matches('>');
            return under(url, api_base).map(Some);
        }
    }
    Ok(None)
}

/// `url` when it starts with `api_base` followed by `/` or `?`.
pub(super) fn under(url: &str, api_base: &str) -> Result<String, ReconcileError> {
    match url.strip_prefix(api_base) {
        Some(rest) if rest.starts_with('/') || rest.starts_with('?') => Ok(url.to_owned()),
        _ => Err(ReconcileError::BadResponse {
            api: "provider",
            what: "next page link outside api_base",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_link_is_followed_only_under_the_api_base() {
        let mut h = http::HeaderMap::new();
        h.insert(
            http::header::LINK,
            "<https://api.github.com/repos/o/r/hooks/1/deliveries?per_page=100&cursor=v1_7>; rel=\"next\""
                .parse()
                .unwrap(),
        );
        assert_eq!(
            next_link(&h, "https://api.github.com").unwrap().as_deref(),
            Some("https://api.github.com/repos/o/r/hooks/1/deliveries?per_page=100&cursor=v1_7")
        );
        assert!(next_link(&h, "https://api.github.com.evil").is_err());
        assert!(
            next_link(&http::HeaderMap::new(), "https://api.github.com")
                .unwrap()
                .is_none()
        );
    }
}
