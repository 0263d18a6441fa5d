//! Verify: the provider's signature over the exact raw body, then the event id.
//!
//! Rule: [`Verified`] can only be built by [`verify`], and dedup accepts only
//! a `Verified`, so a request with a bad signature can never consume an event
//! id. Nothing here is logged: bodies, signatures and keys stay inside.

pub mod provider;
pub mod request;
pub mod scheme;
pub mod sign;

use crate::config::Source;
use bytes::Bytes;
use http::HeaderMap;
use provider::{HeaderFormat, Lookup, Segment};
use request::Fields;
use scheme::mac_eq;
use std::sync::Arc;

/// Longest signature header we parse; real ones are well under 1 KiB.
const MAX_SIGNATURE_HEADER: usize = 8 * 1024;
/// Most signatures considered in one header (rotation needs two or three).
const MAX_CANDIDATES: usize = 16;
/// Longest accepted event id, in bytes.
pub const MAX_EVENT_ID: usize = 256;

/// A request whose signature matched one of the source's keys, with its event id.
#[derive(Debug)]
pub struct Verified {
    source: Arc<Source>,
    event_id: EventId,
    body: Bytes,
    headers: Vec<(String, String)>,
}

impl Verified {
    pub fn source(&self) -> &Arc<Source> {
        &self.source
    }
    pub fn event_id(&self) -> &EventId {
        &self.event_id
    }
    pub fn body(&self) -> &Bytes {
        &self.body
    }
    /// The request headers to forward (hop-by-hop, Host and Content-Length removed).
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }
}

/// A provider event id: 1..=256 bytes, no control characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EventId(String);

impl EventId {
    pub fn parse(text: &str) -> Result<Self, VerifyError> {
        if text.is_empty() {
            return Err(VerifyError::MissingEventId);
        }
        if text.len() > MAX_EVENT_ID {
            return Err(VerifyError::InvalidEventId(
                "event id longer than 256 bytes",
            ));
        }
        if text.chars().any(char::is_control) {
            return Err(VerifyError::InvalidEventId(
                "event id has control characters",
            ));
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

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
}

impl VerifyError {
    /// 401 for anything about authenticity, 400 for a verified but unusable request.
    pub fn status(self) -> u16 {
        match self {
            Self::MissingEventId | Self::InvalidEventId(_) | Self::BadBody(_) => 400,
            _ => 401,
        }
    }

    /// Bounded label for metrics and stats.
    pub fn label(self) -> &'static str {
        match self {
            Self::MissingSignature => "missing_signature",
            Self::MalformedSignature(_) => "malformed_signature",
            Self::InvalidSignature => "invalid_signature",
            Self::MissingTimestamp | Self::MalformedTimestamp => "bad_timestamp",
            Self::TimestampOutOfTolerance => "timestamp_out_of_tolerance",
            Self::MissingEventId => "missing_event_id",
            Self::InvalidEventId(_) => "invalid_event_id",
            Self::BadBody(_) => "bad_body",
        }
    }
}

/// Checks `body` + `headers` against `source`'s provider and keys at time `now`
/// (unix seconds).
pub fn verify(
    source: &Arc<Source>,
    headers: &HeaderMap,
    body: Bytes,
    now: i64,
) -> Result<Verified, VerifyError> {
    let provider = &source.provider;
    let sig = &provider.signature;
    let fields = Fields::new(headers, &body);

    let (values, pairs) = signature_values(sig, headers)?;
    let candidates = parse_candidates(sig, &values, &pairs)?;

    let timestamp = match &provider.timestamp {
        Some(t) => Some(
            fields
                .lookup(&t.from, &pairs)
                .ok_or(VerifyError::MissingTimestamp)?,
        ),
        None => None,
    };

    let url = source.public_url.as_deref().unwrap_or_default();
    let mut parts: Vec<&[u8]> = Vec::with_capacity(sig.content.len());
    let mut owned: Vec<Vec<u8>> = Vec::new();
    // Resolve owned pieces first so `parts` can borrow them all.
    for seg in &sig.content {
        if let Segment::Value(l) = seg {
            let v = fields
                .lookup(l, &pairs)
                .ok_or(VerifyError::MalformedSignature("a signed value is missing"))?;
            owned.push(v.into_bytes());
        }
    }
    let mut next_owned = owned.iter();
    for seg in &sig.content {
        parts.push(match seg {
            Segment::Literal(b) => b,
            Segment::Body => &body,
            Segment::Timestamp => timestamp.as_deref().unwrap_or_default().as_bytes(),
            Segment::Url => url.as_bytes(),
            Segment::Value(_) => next_owned.next().map(Vec::as_slice).unwrap_or_default(),
        });
    }

    let matched = source.keys.iter().any(|key| {
        let expected = sig.algorithm.mac(key.bytes(), &parts);
        candidates.iter().any(|c| mac_eq(&expected, c))
    });
    if !matched {
        return Err(VerifyError::InvalidSignature);
    }

    if let (Some(spec), Some(ts)) = (&provider.timestamp, &timestamp) {
        let ts: i64 = ts
            .trim()
            .parse()
            .map_err(|_| VerifyError::MalformedTimestamp)?;
        let tolerance = source.tolerance.as_secs() as i64;
        let too_old = ts < now - tolerance;
        let too_new = spec.reject_future && ts > now + tolerance;
        if too_old || too_new {
            return Err(VerifyError::TimestampOutOfTolerance);
        }
    }

    let event_id = event_id(&fields, &provider.event_id)?;
    Ok(Verified {
        source: source.clone(),
        event_id,
        headers: request::forwardable(headers),
        body,
    })
}

fn event_id(fields: &Fields<'_>, lookup: &Lookup) -> Result<EventId, VerifyError> {
    fields.check_body_for(lookup)?;
    let id = fields
        .lookup(lookup, &[])
        .ok_or(VerifyError::MissingEventId)?;
    EventId::parse(&id)
}

/// Raw signature header values, and their `k=v` pairs (`pairs` format).
type HeaderParts<'h> = (Vec<&'h str>, Vec<(&'h str, &'h str)>);

/// The raw signature header values, and `k=v` pairs for the `pairs` format.
fn signature_values<'h>(
    sig: &provider::Signature,
    headers: &'h HeaderMap,
) -> Result<HeaderParts<'h>, VerifyError> {
    let name = sig
        .headers
        .iter()
        .find(|h| headers.contains_key(h.as_str()))
        .ok_or(VerifyError::MissingSignature)?;
    let mut values = Vec::new();
    for v in headers.get_all(name.as_str()) {
        if v.len() > MAX_SIGNATURE_HEADER {
            return Err(VerifyError::MalformedSignature("header too long"));
        }
        let v = v
            .to_str()
            .map_err(|_| VerifyError::MalformedSignature("not visible ASCII"))?;
        values.push(v.trim());
    }
    let mut pairs = Vec::new();
    if sig.format == HeaderFormat::Pairs {
        for v in &values {
            for item in v.split(sig.separator.as_str()) {
                let item = item.trim();
                if item.is_empty() {
                    continue;
                }
                let (k, val) = item
                    .split_once('=')
                    .ok_or(VerifyError::MalformedSignature("expected key=value items"))?;
                pairs.push((k.trim(), val.trim()));
            }
        }
    }
    Ok((values, pairs))
}

/// Every decodable signature in the header(s), capped at [`MAX_CANDIDATES`].
fn parse_candidates(
    sig: &provider::Signature,
    values: &[&str],
    pairs: &[(&str, &str)],
) -> Result<Vec<Vec<u8>>, VerifyError> {
    let mut texts: Vec<&str> = Vec::new();
    match sig.format {
        HeaderFormat::Value => {
            for v in values {
                match v.strip_prefix(sig.prefix.as_str()) {
                    Some(s) => texts.push(s),
                    None => return Err(VerifyError::MalformedSignature("missing prefix")),
                }
            }
        }
        HeaderFormat::Pairs => texts.extend(
            pairs
                .iter()
                .filter(|(k, _)| sig.keys.iter().any(|key| key == k))
                .map(|(_, v)| *v),
        ),
        HeaderFormat::Tagged => {
            for v in values {
                for item in v.split(sig.separator.as_str()).filter(|s| !s.is_empty()) {
                    let (tag, s) = item.split_once(',').ok_or(VerifyError::MalformedSignature(
                        "expected tag,signature items",
                    ))?;
                    if sig.keys.iter().any(|k| k == tag) {
                        texts.push(s);
                    }
                }
            }
        }
    }
    if texts.is_empty() {
        return Err(VerifyError::MalformedSignature(
            "no signature of a known version",
        ));
    }
    if texts.len() > MAX_CANDIDATES {
        return Err(VerifyError::MalformedSignature("too many signatures"));
    }
    let want = sig.algorithm.output_len();
    let decoded: Vec<Vec<u8>> = texts
        .iter()
        .filter_map(|t| sig.encoding.decode(t))
        .filter(|d| d.len() == want)
        .collect();
    if decoded.is_empty() {
        return Err(VerifyError::MalformedSignature(
            "signature is not valid encoding",
        ));
    }
    Ok(decoded)
}

#[cfg(test)]
mod tests;
