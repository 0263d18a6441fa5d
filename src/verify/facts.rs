//! What verification learned about an event besides its id, for the admin
//! console: the provider's event type, the index of the secret that
//! matched, and the provider's signed timestamp.
//!
//! Rule: read only after the signature verified; nothing here decides
//! acceptance. A missing or odd value is simply absent.

use super::provider::Provider;
use super::request::Fields;
use super::schemes::hmac::signature_values_of;
use super::spec::TimeUnit;

/// Longest event type kept, in characters.
pub const MAX_EVENT_TYPE: usize = 128;

/// The event type per the provider's `event_type` locator: trimmed,
/// control characters dropped, at most [`MAX_EVENT_TYPE`] characters.
pub fn event_type(provider: &Provider, fields: &Fields<'_>) -> Option<String> {
    let raw = fields.lookup(provider.event_type.as_ref()?, &[])?;
    let trimmed = raw.trim();
    // The usual type (`invoice.paid`) is kept as it came, without a copy
    // built character by character.
    let usual = trimmed.len() <= MAX_EVENT_TYPE && !trimmed.contains(char::is_control);
    let clean: String = match (usual, trimmed.len() == raw.len()) {
        (true, true) => raw,
        (true, false) => trimmed.to_owned(),
        (false, _) => trimmed
            .chars()
            .filter(|c| !c.is_control())
            .take(MAX_EVENT_TYPE)
            .collect(),
    };
    (!clean.is_empty()).then_some(clean)
}

/// The provider's signed timestamp in unix seconds, where the provider
/// declares one (`[timestamp]`).
pub fn provider_timestamp(provider: &Provider, fields: &Fields<'_>) -> Option<i64> {
    let spec = provider.timestamp.as_ref()?;
    let pairs = signature_values_of(&provider.signature, fields)
        .map(|(_, pairs)| pairs.as_slice())
        .unwrap_or_default();
    let ts: i64 = fields.lookup(&spec.from, pairs)?.trim().parse().ok()?;
    Some(match spec.unit {
        TimeUnit::Seconds => ts,
        TimeUnit::Millis => ts.div_euclid(1000),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;

    const P: &str = r#"
        name = "x"
        title = "X"
        event_type = "json:/type|header:x-type"
        [signature]
        header = "x-sig"
        format = "pairs"
        keys = ["v1"]
        algorithm = "hmac-sha256"
        encoding = "hex"
        signed_content = "{timestamp}.{body}"
        [timestamp]
        from = "signature:t"
        [event_id]
        from = "json:/id"
    "#;

    #[test]
    fn type_and_timestamp_are_read_from_their_locators() {
        let p = Provider::from_toml(P).unwrap();
        let mut h = HeaderMap::new();
        h.insert("x-sig", "t=1700000000,v1=ab".parse().unwrap());
        h.insert("x-type", "from.header".parse().unwrap());
        let body = br#"{"id":"e","type":" charge.succeeded\u0007 "}"#;
        let f = Fields::new(&h, body);
        assert_eq!(event_type(&p, &f).as_deref(), Some("charge.succeeded"));
        assert_eq!(provider_timestamp(&p, &f), Some(1_700_000_000));
        let f = Fields::new(&h, br#"{"id":"e"}"#);
        assert_eq!(event_type(&p, &f).as_deref(), Some("from.header"));
        let long = format!(r#"{{"type":"{}"}}"#, "a".repeat(300));
        let f = Fields::new(&h, long.as_bytes());
        assert_eq!(event_type(&p, &f).unwrap().len(), MAX_EVENT_TYPE);
    }
}
