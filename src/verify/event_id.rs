//! The dedup key of a verified request: the provider's event id where it has
//! one, else a composite of named fields, else a hash of the body.
//!
//! Rule: a composite or hashed id is derived only from signed data (the body)
//! or headers the provider sends unchanged on retries, so every retry of one
//! event maps to the same key.

use super::VerifyError;
use super::fields::Fields;
use super::provider::EventIdRule;
use crate::primitives::crypto::Algorithm;

/// Longest accepted event id, in bytes.
pub const MAX_EVENT_ID: usize = 256;

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

/// `sha256:<hex>` of `bytes`: the form of every derived id that would be too
/// long (or is a body hash).
pub(crate) fn hashed(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Algorithm::Sha256.digest(&[bytes])))
}

/// The event id per `rule`: `from`, then `composite`, then the body hash.
pub fn resolve(fields: &Fields<'_>, rule: &EventIdRule) -> Result<EventId, VerifyError> {
    if let Some(from) = &rule.from
        && let Some(id) = fields.lookup(from, &[])
    {
        return EventId::parse(&id);
    }
    if !rule.composite.is_empty() {
        let parts: Option<Vec<String>> = rule
            .composite
            .iter()
            .map(|l| fields.lookup(l, &[]))
            .collect();
        if let Some(parts) = parts.filter(|p| p.iter().all(|s| !s.is_empty())) {
            let joined = parts.join(":");
            if rule.digest || joined.len() > MAX_EVENT_ID || joined.chars().any(char::is_control) {
                return EventId::parse(&hashed(joined.as_bytes()));
            }
            return EventId::parse(&joined);
        }
    }
    if rule.body_hash {
        return EventId::parse(&hashed(fields.body()));
    }
    // Nothing found: say why, most specific first.
    let lookups = rule.from.iter().chain(rule.composite.iter());
    for l in lookups {
        if let Some(problem) = fields.body_problem(l) {
            return Err(problem);
        }
    }
    Err(VerifyError::MissingEventId)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::locator::Lookup;
    use http::HeaderMap;

    fn rule(from: Option<&str>, composite: &[&str], body_hash: bool) -> EventIdRule {
        EventIdRule {
            from: from.map(|f| Lookup::parse(f).unwrap()),
            composite: composite
                .iter()
                .map(|c| Lookup::parse(c).unwrap())
                .collect(),
            digest: false,
            body_hash,
        }
    }

    #[test]
    fn from_then_composite_then_body_hash() {
        let h = HeaderMap::new();
        let body = br#"{"a":"x","b":2,"items":[{"id":"e1"},{"id":"e2"}]}"#;
        let f = Fields::new(&h, body);
        let r = rule(Some("json:/id"), &["json:/a", "json:/b"], true);
        assert_eq!(resolve(&f, &r).unwrap().as_str(), "x:2");
        let r = rule(None, &["json:/items/*/id"], false);
        assert_eq!(resolve(&f, &r).unwrap().as_str(), "e1,e2");
        let r = rule(Some("json:/id"), &["json:/nope"], true);
        let id = resolve(&f, &r).unwrap();
        assert!(id.as_str().starts_with("sha256:") && id.as_str().len() == 71);
        let r = rule(Some("json:/id"), &[], false);
        assert_eq!(resolve(&f, &r).unwrap_err(), VerifyError::MissingEventId);
    }

    #[test]
    fn long_composites_are_hashed_but_long_ids_are_rejected() {
        let h = HeaderMap::new();
        let long = "a".repeat(300);
        let body = format!(r#"{{"id":"{long}","x":"{long}"}}"#);
        let f = Fields::new(&h, body.as_bytes());
        let c = resolve(&f, &rule(None, &["json:/x"], false)).unwrap();
        assert!(c.as_str().starts_with("sha256:"));
        assert!(matches!(
            resolve(&f, &rule(Some("json:/id"), &[], false)),
            Err(VerifyError::InvalidEventId(_))
        ));
    }

    #[test]
    fn body_problems_are_reported() {
        let h = HeaderMap::new();
        for (body, want) in [
            (&b"[1]"[..], "JSON body is not an object"),
            (b"nope", "body is not valid JSON"),
            (b"\xff\xfe", "body is not UTF-8 JSON"),
        ] {
            let f = Fields::new(&h, body);
            let e = resolve(&f, &rule(Some("json:/id"), &[], false)).unwrap_err();
            assert_eq!(e.to_string(), want);
        }
    }
}
