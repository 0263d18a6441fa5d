//! The closed vocabulary of counters: each enum value has one name, used
//! as the counters-table key, the `/stats` field and the metric label.

/// What became of one request to `POST /webhooks/{source}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A challenge or ping answered directly; nothing stored.
    Answered,
    New,
    Duplicate {
        layer: Layer,
        /// Same id, different body: counted, never forwarded.
        conflict: bool,
    },
    Rejected(RejectReason),
    /// The same id is in flight in another request (409).
    InFlight,
    /// Durable storage unavailable (503).
    Unavailable,
    UnknownSource,
    Timeout,
    /// An unreadable body or another malformed request.
    BadRequest,
}

/// Which dedup layer recognised a duplicate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    Cache,
    Ledger,
    /// `dedup_by_body`: the same body under another event id.
    Body,
}

impl Outcome {
    /// Bounded label for `hookgate_requests_total{outcome}` and the request log.
    pub fn label(self) -> &'static str {
        match self {
            Self::Answered => "answered",
            Self::New => "new",
            Self::Duplicate { conflict: true, .. } => "duplicate_conflict",
            Self::Duplicate {
                layer: Layer::Cache,
                ..
            } => "duplicate_cache",
            Self::Duplicate {
                layer: Layer::Ledger,
                ..
            } => "duplicate_ledger",
            Self::Duplicate {
                layer: Layer::Body, ..
            } => "duplicate_body",
            Self::Rejected(r) => r.as_str(),
            Self::InFlight => "in_flight",
            Self::Unavailable => "unavailable",
            Self::UnknownSource => "unknown_source",
            Self::Timeout => "timeout",
            Self::BadRequest => "bad_request",
        }
    }
}

/// Why a request to a known source was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    MissingSignature,
    MalformedSignature,
    InvalidSignature,
    BadTimestamp,
    TimestampOutOfTolerance,
    MissingEventId,
    InvalidEventId,
    BadBody,
    IpNotAllowed,
    CertificateUnavailable,
    BodyTooLarge,
}

impl RejectReason {
    /// Every reason, in `/stats` order; `ALL[r as usize] == r`.
    pub const ALL: [Self; 11] = [
        Self::MissingSignature,
        Self::MalformedSignature,
        Self::InvalidSignature,
        Self::BadTimestamp,
        Self::TimestampOutOfTolerance,
        Self::MissingEventId,
        Self::InvalidEventId,
        Self::BadBody,
        Self::IpNotAllowed,
        Self::CertificateUnavailable,
        Self::BodyTooLarge,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::MissingSignature => "missing_signature",
            Self::MalformedSignature => "malformed_signature",
            Self::InvalidSignature => "invalid_signature",
            Self::BadTimestamp => "bad_timestamp",
            Self::TimestampOutOfTolerance => "timestamp_out_of_tolerance",
            Self::MissingEventId => "missing_event_id",
            Self::InvalidEventId => "invalid_event_id",
            Self::BadBody => "bad_body",
            Self::IpNotAllowed => "ip_not_allowed",
            Self::CertificateUnavailable => "certificate_unavailable",
            Self::BodyTooLarge => "body_too_large",
        }
    }

    /// The key in the counters table.
    pub fn counter_name(self) -> String {
        format!("rejected.{}", self.as_str())
    }
}

/// How one delivery attempt ended, as counted per target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryOutcome {
    Delivered,
    /// The attempt failed and the delivery will be retried.
    Failed,
    /// The attempt failed and it was the last one: the delivery is dead
    /// (counted as a failed attempt too).
    Dead,
}

impl DeliveryOutcome {
    /// `ALL[o as usize] == o`.
    pub const ALL: [Self; 3] = [Self::Delivered, Self::Failed, Self::Dead];

    /// The name in `/stats` and the counters table.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Delivered => "delivered",
            Self::Failed => "failed_attempts",
            Self::Dead => "dead",
        }
    }

    pub(super) fn counter_name(self, target: &str) -> String {
        format!("targets.{target}.{}", self.as_str())
    }
}

/// What one delivery attempt came to, as an operator sorts failures:
/// `hookgate_delivery_attempt_results_total{target, class}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptClass {
    /// HTTP 2xx.
    Success,
    /// HTTP 4xx (429 included).
    ClientError,
    /// HTTP 5xx.
    ServerError,
    /// No answer within the target's `timeout`.
    Timeout,
    /// The connection could not be made (refused, unreachable, DNS, TLS).
    ConnectError,
    /// A broker confirmed the message (queue targets).
    Confirmed,
    /// Anything else: a 1xx or 3xx answer (redirects are not followed), a
    /// connection cut mid-answer, a broker refusal.
    Other,
}

impl AttemptClass {
    /// `ALL[c as usize] == c`.
    pub const ALL: [Self; 7] = [
        Self::Success,
        Self::ClientError,
        Self::ServerError,
        Self::Timeout,
        Self::ConnectError,
        Self::Confirmed,
        Self::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "2xx",
            Self::ClientError => "4xx",
            Self::ServerError => "5xx",
            Self::Timeout => "timeout",
            Self::ConnectError => "connect_error",
            Self::Confirmed => "confirmed",
            Self::Other => "other",
        }
    }

    /// The class of an attempt answered with `status` (HTTP) or, without
    /// one, that ended as `failure` (`None`: confirmed by a broker).
    pub fn of(status: Option<i32>, failure: Option<Failure>) -> Self {
        match (status, failure) {
            (Some(s), _) if (200..300).contains(&s) => Self::Success,
            (Some(s), _) if (400..500).contains(&s) => Self::ClientError,
            (Some(s), _) if (500..600).contains(&s) => Self::ServerError,
            (Some(_), _) => Self::Other,
            (None, None) => Self::Confirmed,
            (None, Some(Failure::Timeout)) => Self::Timeout,
            (None, Some(Failure::Connect)) => Self::ConnectError,
            (None, Some(Failure::Other)) => Self::Other,
        }
    }
}

/// How an attempt without an answer failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Timeout,
    Connect,
    Other,
}
