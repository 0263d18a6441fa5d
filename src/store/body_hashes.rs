//! `dedup_by_body` (docs/design.md "Dedup by body"): per opted-in source,
//! which event id first brought a body, until that event's window ends.
//!
//! ```text
//! upsert (source, sha256) → no row / row past its window → ours: go on to the id ledger
//!                         → live row of our id           → ours (a retry of our event)
//!                         → live row of another id       → body duplicate
//! ```
//! One statement per request of an opted-in source, its own commit, before
//! the event's group commit. A claim whose event then fails to commit stays
//! behind: the provider's retry carries the same id and passes; only the
//! same body under another id is refused, which is what it is for. Both
//! backends share the SQL (`$N` placeholders work on both).

use crate::primitives::time::Millis;

/// One request's claim on its body.
#[derive(Debug, Clone)]
pub struct BodyClaim<'a> {
    pub source: &'a str,
    pub body_sha256: &'a [u8; 32],
    pub event_id: &'a str,
    pub now: Millis,
    /// The end of this event's dedup window.
    pub expires_at: Millis,
}

/// `$1` source, `$2` body hash, `$3` event id, `$4` expires_at, `$5` now.
/// Takes a row past its window over; returns the id holding the body after
/// the statement (ours unless another id holds a live row).
pub(crate) const CLAIM_SQL: &str = "INSERT INTO hookgate_body_hashes AS h
        (source, body_sha256, event_id, expires_at)
     VALUES ($1, $2, $3, $4)
     ON CONFLICT (source, body_sha256) DO UPDATE
         SET event_id = CASE WHEN h.expires_at <= $5 THEN excluded.event_id ELSE h.event_id END,
             expires_at = CASE WHEN h.expires_at <= $5 THEN excluded.expires_at ELSE h.expires_at END
     RETURNING event_id";

/// `$1` now: rows whose window is over.
pub(crate) const PURGE_SQL: &str = "DELETE FROM hookgate_body_hashes
     WHERE (source, body_sha256) IN (
         SELECT source, body_sha256 FROM hookgate_body_hashes WHERE expires_at < $1 LIMIT $2)";
