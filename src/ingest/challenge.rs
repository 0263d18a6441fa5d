//! `GET /webhooks/{source}`: the URL check some providers make before they
//! send events (Braintree's `bt_challenge`). Answered from the source's
//! settings; nothing is verified against a body, stored or forwarded.

use crate::error::ApiError;
use crate::state::AppState;
use crate::verify::{self, GetAnswer};
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

pub async fn answer(
    State(state): State<AppState>,
    Path(source): Path<String>,
    uri: Uri,
) -> Response {
    let config = state.config();
    let Some(src) = config.sources.get(&source) else {
        return ApiError::UnknownSource.into_response();
    };
    let (outcome, res) = match verify::answer_get(src, uri.query()) {
        GetAnswer::Reply(r) => {
            let mut res = (StatusCode::OK, r.body).into_response();
            if let Some(ct) = r.content_type.and_then(|c| HeaderValue::from_str(&c).ok()) {
                res.headers_mut().insert(header::CONTENT_TYPE, ct);
            }
            ("challenge_answered", res)
        }
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
