//! The router and the one place errors become HTTP responses.
//!
//! Rule: client bodies are short and fixed; details are logged once where
//! the request is handled, never echoed (no expected signature, no secret).

use crate::admin;
use crate::app::AppState;
use crate::ingest;
use crate::verify::VerifyError;
use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

pub fn router(state: AppState) -> Router {
    Router::new()
        .route(
            "/webhooks/{source}",
            post(ingest::receive).get(ingest::challenge::answer),
        )
        .route("/healthz", get(admin::health::healthz))
        .route("/readyz", get(admin::health::readyz))
        .route("/metrics", get(admin::metrics::render))
        .route("/stats", get(admin::stats_handler))
        .route("/admin/replay", post(admin::replay::handler))
        // Our own limit is enforced in ingest with a clear 413; axum's
        // default 2 MiB extractor limit must not cut in first.
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(state)
}

/// Every non-2xx answer hookgate gives.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("unknown source")]
    UnknownSource,
    #[error("body too large")]
    TooLarge,
    #[error("could not read body")]
    BadBody,
    #[error(transparent)]
    Rejected(#[from] VerifyError),
    #[error("event in flight")]
    InFlight,
    #[error("storage unavailable")]
    Unavailable,
    #[error("request timed out")]
    Timeout,
    #[error("unauthorized")]
    Unauthorized,
    #[error("{0}")]
    BadRequest(String),
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            Self::UnknownSource => StatusCode::NOT_FOUND,
            Self::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BadBody | Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Rejected(e) => {
                StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST)
            }
            Self::InFlight => StatusCode::CONFLICT,
            Self::Unavailable | Self::Timeout => StatusCode::SERVICE_UNAVAILABLE,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
        }
    }

    /// Seconds a client should wait before retrying, where that helps.
    fn retry_after(&self) -> Option<&'static str> {
        match self {
            Self::InFlight => Some("1"),
            Self::Unavailable | Self::Timeout => Some("5"),
            _ => None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut res = (self.status(), format!("{self}\n")).into_response();
        if let Some(secs) = self.retry_after() {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static(secs));
        }
        if matches!(self, Self::Unauthorized) {
            res.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        res
    }
}
