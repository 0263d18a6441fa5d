//! `GET /webhooks/{source}`: the URL check some providers make before they
//! send events (Meta's `hub.challenge`, Dropbox's `challenge`, X's CRC,
//! Okta's verification, Braintree's `bt_challenge`). Answered from the
//! provider file's `GET` controls or the scheme; nothing is stored or
//! forwarded, and the answer is counted as a handshake, not an event.

use crate::error::ApiError;
use crate::primitives::time::Millis;
use crate::state::AppState;
use crate::verify::{self, GetAnswer};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Response};

pub async fn answer(
    State(state): State<AppState>,
    Path(source): Path<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let config = state.config();
    let Some(src) = config.sources.get(&source) else {
        return ApiError::UnknownSource.into_response();
    };
    let now = Millis::now().as_secs();
    let (outcome, res) = match verify::answer_get(src, &headers, uri.query(), now) {
        GetAnswer::Reply(r) => {
            state.counters.handshake(&source);
            ("challenge_answered", super::reply_response(r, None))
        }
        GetAnswer::Refused(e) => (
            "challenge_refused",
            ApiError::rejected(e, None).into_response(),
        ),
        GetAnswer::NotOffered => ("method_not_allowed", ApiError::UsePost.into_response()),
        GetAnswer::NotConfigured(why) => (
            "challenge_not_configured",
            ApiError::NotConfigured(why).into_response(),
        ),
        GetAnswer::Bad(why) => (
            "bad_challenge",
            ApiError::BadRequest(why.to_owned()).into_response(),
        ),
    };
    metrics::counter!("hookgate_challenges_total", "source" => source.clone(), "outcome" => outcome)
        .increment(1);
    tracing::info!(
        source,
        outcome,
        status = res.status().as_u16(),
        "webhook challenge"
    );
    res
}
