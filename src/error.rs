//! The one place a handler's errors become HTTP answers: status, short
//! fixed body, `Retry-After`, `WWW-Authenticate`, the provider's own reject
//! status, and the bounded outcome the answer is counted under. Two shapes:
//! [`ApiError`] answers providers and operators (webhooks, admin) in plain
//! text; [`ProxyError`] answers the Idempotency-Key proxy's API clients in
//! JSON (`{"error": code, "message": text}`), as the APIs behind it do.
//!
//! Rule: client bodies are short and fixed; details are logged once where
//! the request is handled, never echoed (no expected signature, no secret).
//! The transport's own refusals (a route layer's timeout, hyper's header
//! limits) are configured with those layers in `http` and `serve`.

use crate::serve::BodyError;
use crate::stats::apis::ApiOutcome;
use crate::stats::{Outcome, RejectReason};
use crate::verify::VerifyError;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::time::Duration;

/// `Retry-After` seconds: a 409 for a request still in flight elsewhere,
/// and a 503 while storage (or a provider's key host) is unavailable.
const RETRY_IN_FLIGHT: &str = "1";
const RETRY_UNAVAILABLE: &str = "5";

/// Every non-2xx answer hookgate gives.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("unknown source")]
    UnknownSource,
    /// `/admin/events/{source}/{id}` names no stored event.
    #[error("unknown event")]
    UnknownEvent,
    #[error("body too large")]
    TooLarge,
    #[error("could not read body")]
    BadBody,
    /// Verification refused the request. `status` is the provider's own
    /// status for a bad signature (GoCardless: 498 Token Invalid), if any.
    #[error("{error}")]
    Rejected {
        error: VerifyError,
        status: Option<StatusCode>,
    },
    #[error("event in flight")]
    InFlight,
    #[error("storage unavailable")]
    Unavailable,
    #[error("request timed out")]
    Timeout,
    #[error("unauthorized")]
    Unauthorized,
    /// A valid token without the scope the route needs.
    #[error("this token lacks the `{0}` scope")]
    Forbidden(&'static str),
    /// Too many wrong admin tokens from this address; retry after the
    /// seconds given (`primitives::throttle`).
    #[error("too many wrong tokens; try again later")]
    Throttled(u64),
    /// The body budget is spent (in all, or this client's share).
    #[error("busy; try again later")]
    Busy,
    /// The endpoint answers another method (`Allow: POST`).
    #[error("use POST")]
    UsePost,
    /// The source exists but lacks a setting this request needs.
    #[error("{0}")]
    NotConfigured(&'static str),
    #[error("{0}")]
    BadRequest(String),
}

impl From<VerifyError> for ApiError {
    fn from(error: VerifyError) -> Self {
        Self::Rejected {
            error,
            status: None,
        }
    }
}

impl From<BodyError> for ApiError {
    fn from(e: BodyError) -> Self {
        match e {
            BodyError::TooLarge => Self::TooLarge,
            BodyError::Unreadable => Self::BadBody,
            BodyError::Busy => Self::Busy,
        }
    }
}

impl ApiError {
    /// A verification failure, answered with `provider_status` instead of
    /// 401 when it is about authenticity and the provider wants its own.
    pub fn rejected(error: VerifyError, provider_status: Option<u16>) -> Self {
        let status = provider_status
            .filter(|_| error.is_authenticity())
            .and_then(|s| StatusCode::from_u16(s).ok());
        Self::Rejected { error, status }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::UnknownSource | Self::UnknownEvent | Self::NotConfigured(_) => {
                StatusCode::NOT_FOUND
            }
            Self::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BadBody | Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Rejected {
                status: Some(s), ..
            } => *s,
            Self::Rejected { error, .. } => {
                StatusCode::from_u16(error.status()).unwrap_or(StatusCode::BAD_REQUEST)
            }
            Self::InFlight => StatusCode::CONFLICT,
            Self::Unavailable | Self::Timeout | Self::Busy => StatusCode::SERVICE_UNAVAILABLE,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::Throttled(_) => StatusCode::TOO_MANY_REQUESTS,
            Self::UsePost => StatusCode::METHOD_NOT_ALLOWED,
        }
    }

    /// Seconds a client should wait before retrying: every 409 and 503.
    fn retry_after(&self) -> Option<&'static str> {
        match self.status() {
            StatusCode::CONFLICT => Some(RETRY_IN_FLIGHT),
            StatusCode::SERVICE_UNAVAILABLE => Some(RETRY_UNAVAILABLE),
            _ => None,
        }
    }

    /// What this answer counts as in `/stats` and `hookgate_requests_total`.
    pub fn outcome(&self) -> Outcome {
        match self {
            Self::Rejected { error, .. } => Outcome::Rejected(reject_reason(*error)),
            Self::TooLarge => Outcome::Rejected(RejectReason::BodyTooLarge),
            Self::UnknownSource => Outcome::UnknownSource,
            Self::InFlight => Outcome::InFlight,
            Self::Unavailable | Self::Busy => Outcome::Unavailable,
            Self::Timeout => Outcome::Timeout,
            Self::BadBody
            | Self::UnknownEvent
            | Self::Unauthorized
            | Self::Forbidden(_)
            | Self::Throttled(_)
            | Self::UsePost
            | Self::NotConfigured(_)
            | Self::BadRequest(_) => Outcome::BadRequest,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut res = (self.status(), format!("{self}\n")).into_response();
        let headers = res.headers_mut();
        if let Some(secs) = self.retry_after() {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static(secs));
        }
        match self {
            Self::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            Self::Throttled(secs) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
            Self::UsePost => {
                headers.insert(header::ALLOW, HeaderValue::from_static("POST"));
            }
            _ => {}
        }
        res
    }
}

/// The reason a refused request is counted under in `/stats` and metrics.
pub fn reject_reason(e: VerifyError) -> RejectReason {
    match e {
        VerifyError::MissingSignature => RejectReason::MissingSignature,
        VerifyError::MalformedSignature(_) => RejectReason::MalformedSignature,
        VerifyError::InvalidSignature | VerifyError::WrongVerifyToken => {
            RejectReason::InvalidSignature
        }
        VerifyError::MissingTimestamp | VerifyError::MalformedTimestamp => {
            RejectReason::BadTimestamp
        }
        VerifyError::TimestampOutOfTolerance => RejectReason::TimestampOutOfTolerance,
        VerifyError::MissingEventId => RejectReason::MissingEventId,
        VerifyError::InvalidEventId(_) => RejectReason::InvalidEventId,
        VerifyError::BadBody(_) => RejectReason::BadBody,
        VerifyError::IpNotAllowed => RejectReason::IpNotAllowed,
        VerifyError::CertificateUnavailable => RejectReason::CertificateUnavailable,
    }
}

/// Every error answer of the Idempotency-Key proxy (`/api/{name}/…`).
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("no such API")]
    UnknownApi,
    #[error("request body too large")]
    TooLarge,
    #[error("could not read the request body")]
    BadBody,
    /// A missing or malformed key or scope header (the text says which).
    #[error("{0}")]
    InvalidKey(String),
    /// The path after `/api/<name>` could leave the upstream's base path.
    #[error("{0}")]
    BadPath(String),
    /// The key was used for a different request; `status` is the API's
    /// `mismatch_status`.
    #[error("this idempotency key was already used for a different request")]
    KeyReused { status: StatusCode },
    #[error("a request with this idempotency key is still being processed")]
    InFlight,
    #[error("storage unavailable; the request was not forwarded")]
    Unavailable,
    /// The upstream did not answer within the API's `timeout`.
    #[error("the upstream did not answer within {0:?}")]
    UpstreamTimeout(Duration),
    #[error("the upstream could not be reached")]
    UpstreamUnreachable,
    #[error("the upstream answer is too large")]
    UpstreamTooLarge,
    /// The task that owned the call ended without an answer.
    #[error("proxy task failed")]
    TaskFailed,
    /// The body or answer budget is spent (`server.max_buffered_*`).
    #[error("busy; try again later")]
    Busy,
    /// The request body did not arrive within `server.request_timeout`.
    #[error("the request body did not arrive in time")]
    RequestTimeout,
}

impl From<BodyError> for ProxyError {
    fn from(e: BodyError) -> Self {
        match e {
            BodyError::TooLarge => Self::TooLarge,
            BodyError::Unreadable => Self::BadBody,
            BodyError::Busy => Self::Busy,
        }
    }
}

impl ProxyError {
    pub fn status(&self) -> StatusCode {
        match self {
            Self::UnknownApi => StatusCode::NOT_FOUND,
            Self::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BadBody | Self::InvalidKey(_) | Self::BadPath(_) => StatusCode::BAD_REQUEST,
            Self::KeyReused { status } => *status,
            Self::InFlight => StatusCode::CONFLICT,
            Self::Unavailable | Self::Busy => StatusCode::SERVICE_UNAVAILABLE,
            Self::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::UpstreamTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
            Self::UpstreamUnreachable | Self::UpstreamTooLarge | Self::TaskFailed => {
                StatusCode::BAD_GATEWAY
            }
        }
    }

    /// The `error` field: a stable code a client can branch on.
    fn code(&self) -> &'static str {
        match self {
            Self::UnknownApi => "unknown_api",
            Self::TooLarge => "body_too_large",
            Self::BadBody => "bad_body",
            Self::InvalidKey(_) => "invalid_idempotency_key",
            Self::BadPath(_) => "invalid_path",
            Self::KeyReused { .. } => "idempotency_key_reused",
            Self::InFlight => "request_in_progress",
            Self::Unavailable => "unavailable",
            Self::Busy => "busy",
            Self::RequestTimeout => "request_timeout",
            Self::UpstreamTimeout(_) => "upstream_timeout",
            Self::UpstreamUnreachable | Self::UpstreamTooLarge | Self::TaskFailed => {
                "upstream_error"
            }
        }
    }

    /// Only a request that may succeed as it is when retried says when:
    /// one still in flight, and one refused while storage is down.
    fn retry_after(&self) -> Option<&'static str> {
        match self {
            Self::InFlight => Some(RETRY_IN_FLIGHT),
            Self::Unavailable | Self::Busy => Some(RETRY_UNAVAILABLE),
            _ => None,
        }
    }

    /// What this answer counts as in `/stats`'s `apis` and
    /// `hookgate_api_requests_total`.
    pub fn outcome(&self) -> ApiOutcome {
        match self {
            Self::UnknownApi
            | Self::TooLarge
            | Self::BadBody
            | Self::InvalidKey(_)
            | Self::BadPath(_)
            | Self::RequestTimeout => ApiOutcome::BadRequest,
            Self::KeyReused { .. } => ApiOutcome::Conflict,
            Self::InFlight => ApiOutcome::InflightRejected,
            Self::Unavailable | Self::Busy => ApiOutcome::Unavailable,
            Self::UpstreamTimeout(_)
            | Self::UpstreamUnreachable
            | Self::UpstreamTooLarge
            | Self::TaskFailed => ApiOutcome::UpstreamError,
        }
    }
}

impl IntoResponse for ProxyError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.code(), "message": self.to_string() });
        let mut res = (self.status(), axum::Json(body)).into_response();
        if let Some(secs) = self.retry_after() {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static(secs));
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_409_and_503_carries_retry_after() {
        let all = [
            ApiError::InFlight,
            ApiError::Unavailable,
            ApiError::Timeout,
            ApiError::Busy,
            ApiError::Throttled(7),
            ApiError::from(VerifyError::CertificateUnavailable),
        ];
        for e in all {
            let label = e.to_string();
            let res = e.into_response();
            assert!(
                res.headers().contains_key(header::RETRY_AFTER),
                "{label}: {}",
                res.status()
            );
        }
    }

    #[test]
    fn a_provider_reject_status_applies_only_to_authenticity_failures() {
        let bad_sig = ApiError::rejected(VerifyError::InvalidSignature, Some(498));
        assert_eq!(bad_sig.status().as_u16(), 498);
        let no_id = ApiError::rejected(VerifyError::MissingEventId, Some(498));
        assert_eq!(no_id.status(), StatusCode::BAD_REQUEST);
        let plain = ApiError::rejected(VerifyError::InvalidSignature, None);
        assert_eq!(plain.status(), StatusCode::UNAUTHORIZED);
    }

    #[test]
    fn both_timestamp_problems_count_as_one_reason_and_the_others_as_their_own() {
        use RejectReason as R;
        let all = [
            (VerifyError::MissingSignature, R::MissingSignature),
            (VerifyError::MalformedSignature("x"), R::MalformedSignature),
            (VerifyError::InvalidSignature, R::InvalidSignature),
            (VerifyError::MissingTimestamp, R::BadTimestamp),
            (VerifyError::MalformedTimestamp, R::BadTimestamp),
            (
                VerifyError::TimestampOutOfTolerance,
                R::TimestampOutOfTolerance,
            ),
            (VerifyError::MissingEventId, R::MissingEventId),
            (VerifyError::InvalidEventId("x"), R::InvalidEventId),
            (VerifyError::BadBody("x"), R::BadBody),
            (VerifyError::IpNotAllowed, R::IpNotAllowed),
            (
                VerifyError::CertificateUnavailable,
                R::CertificateUnavailable,
            ),
        ];
        for (e, want) in all {
            assert_eq!(reject_reason(e), want, "{e}");
        }
    }
}
