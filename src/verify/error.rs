//! Why verification refused a request.
//!
//! Rule: each reason maps to a status and a short fixed text; none carries
//! the expected signature, a key or any other secret. How a reason is
//! answered and counted is `crate::error`'s business.

/// Why a request was rejected. Each maps to a status and a short fixed reason;
/// none carries the expected signature or any secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("missing signature header")]
    MissingSignature,
    #[error("malformed signature header: {0}")]
    MalformedSignature(&'static str),
    #[error("invalid signature")]
    InvalidSignature,
    #[error("missing timestamp")]
    MissingTimestamp,
    #[error("malformed timestamp")]
    MalformedTimestamp,
    #[error("timestamp outside tolerance")]
    TimestampOutOfTolerance,
    #[error("missing event id")]
    MissingEventId,
    #[error("{0}")]
    InvalidEventId(&'static str),
    #[error("{0}")]
    BadBody(&'static str),
    #[error("client address not allowed")]
    IpNotAllowed,
    #[error("signing certificate unavailable")]
    CertificateUnavailable,
    /// A handshake's verify token (Meta's `hub.verify_token`) is missing or
    /// not the source's.
    #[error("wrong verify token")]
    WrongVerifyToken,
}

impl VerifyError {
    /// 401 for anything about authenticity, 403 for a refused address, 400
    /// for a verified but unusable request, 503 when PayPal's certificate
    /// or Plaid's key cannot be fetched (both retry later).
    pub fn status(self) -> u16 {
        match self {
            Self::MissingEventId | Self::InvalidEventId(_) | Self::BadBody(_) => 400,
            Self::IpNotAllowed | Self::WrongVerifyToken => 403,
            Self::CertificateUnavailable => 503,
            _ => 401,
        }
    }

    /// A signature problem: the provider's `reject_status` applies.
    pub fn is_authenticity(self) -> bool {
        self.status() == 401
    }
}
