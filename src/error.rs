//! The one place errors become HTTP answers: status, short fixed body,
//! `Retry-After`, `WWW-Authenticate`, the provider's own reject status, and
//! the bounded outcome label the answer is counted under.
//!
//! Rule: client bodies are short and fixed; details are logged once where
//! the request is handled, never echoed (no expected signature, no secret).

use crate::stats::{Outcome, RejectReason};
use crate::verify::VerifyError;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Every non-2xx answer hookgate gives.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("unknown source")]
    UnknownSource,
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
            Self::UnknownSource | Self::NotConfigured(_) => StatusCode::NOT_FOUND,
            Self::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BadBody | Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Rejected {
                status: Some(s), ..
            } => *s,
            Self::Rejected { error, .. } => {
                StatusCode::from_u16(error.status()).unwrap_or(StatusCode::BAD_REQUEST)
            }
            Self::InFlight => StatusCode::CONFLICT,
            Self::Unavailable | Self::Timeout => StatusCode::SERVICE_UNAVAILABLE,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::UsePost => StatusCode::METHOD_NOT_ALLOWED,
        }
    }

    /// Seconds a client should wait before retrying: every 409 and 503.
    fn retry_after(&self) -> Option<&'static str> {
        match self.status() {
            StatusCode::CONFLICT => Some("1"),
            StatusCode::SERVICE_UNAVAILABLE => Some("5"),
            _ => None,
        }
    }

    /// What this answer counts as in `/stats` and `hookgate_requests_total`.
    pub fn outcome(&self) -> Outcome {
        match self {
            Self::Rejected { error, .. } => Outcome::Rejected(error.label()),
            Self::TooLarge => Outcome::Rejected(RejectReason::BodyTooLarge),
            Self::UnknownSource => Outcome::UnknownSource,
            Self::InFlight => Outcome::InFlight,
            Self::Unavailable => Outcome::Unavailable,
            Self::Timeout => Outcome::Timeout,
            Self::BadBody
            | Self::Unauthorized
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
            Self::UsePost => {
                headers.insert(header::ALLOW, HeaderValue::from_static("POST"));
            }
            _ => {}
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
}
