//! What verification learned about an event besides its id, for the admin
//! console: the provider's event type, the index of the secret that
//! matched, and the provider's signed timestamp.
//!
//! Rule: read only after the signature verified; nothing here decides
//! acceptance. A missing or odd value is simply absent.

use super::fields::Fields;
use super::provider::{Provider, TypeRule};
use super::schemes::hmac::signature_values_of;

/// Longest event type kept, in characters.
pub const MAX_EVENT_TYPE: usize = 128;

/// The event type per the provider's `event_type` rule: the first part's
/// value, then `.` and the value of each later part that is present
/// (GitHub's `issues.opened`; `push` has no action). Without a rule, the
/// scheme's own reading of its envelope (Braintree's `<kind>`). Trimmed,
/// control characters dropped, at most [`MAX_EVENT_TYPE`] characters.
pub fn event_type(provider: &Provider, fields: &Fields<'_>) -> Option<String> {
    match &provider.event_type {
        Some(rule) => type_by(rule, fields),
        None => clean(provider.signature.scheme.event_type(fields)?),
    }
}

/// The type `rule` finds in `fields` (a split item's, by the split's rule).
pub fn type_by(rule: &TypeRule, fields: &Fields<'_>) -> Option<String> {
    let (first, rest) = rule.parts.split_first()?;
    let mut t = fields.lookup(first, &[])?;
    for part in rest {
        if let Some(v) = fields.lookup(part, &[]).filter(|v| !v.trim().is_empty()) {
            t.push('.');
            t.push_str(v.trim());
        }
    }
    clean(t)
}

fn clean(raw: String) -> Option<String> {
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

/// Longest object id kept as it is, in bytes; a longer one is stored as
/// `sha256:<hex>` (as ordering keys are), so an index entry stays small and
/// a search for the same long value still finds it.
pub const MAX_OBJECT_ID: usize = 200;

/// The id of the provider object the event is about, per the provider's (or
/// the source's) `object_id` locator; `None` when it defines none or the
/// event holds none.
pub fn object_id(provider: &Provider, fields: &Fields<'_>) -> Option<String> {
    let v = fields.lookup(provider.object_id.as_ref()?, &[])?;
    stored_object_id(v.trim())
}

/// How an object id is stored and searched: trimmed, empty as none, longer
/// than [`MAX_OBJECT_ID`] as its hash.
pub fn stored_object_id(v: &str) -> Option<String> {
    if v.is_empty() {
        return None;
    }
    if v.len() <= MAX_OBJECT_ID {
        return Some(v.to_owned());
    }
    use sha2::Digest;
    let digest: [u8; 32] = sha2::Sha256::digest(v.as_bytes()).into();
    Some(format!("sha256:{}", hex::encode(digest)))
}

/// The provider's signed timestamp in unix seconds, where the provider
/// declares one (`[timestamp]`).
pub fn provider_timestamp(provider: &Provider, fields: &Fields<'_>) -> Option<i64> {
    let spec = provider.timestamp.as_ref()?;
    let pairs = signature_values_of(&provider.signature, fields)
        .map(|(_, pairs)| pairs.as_slice())
        .unwrap_or_default();
    spec.unit.unix_secs(&fields.lookup(&spec.from, pairs)?)
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

    fn builtin(name: &str) -> std::sync::Arc<Provider> {
        crate::verify::registry::Registry::builtin()
            .get(name)
            .unwrap()
    }

    fn type_of(p: &Provider, headers: &[(&'static str, &str)], body: &[u8]) -> Option<String> {
        let mut h = HeaderMap::new();
        for (k, v) in headers {
            h.insert(*k, v.parse().unwrap());
        }
        event_type(p, &Fields::new(&h, body))
    }

    #[test]
    fn a_joined_type_adds_each_later_part_that_is_present() {
        let gh = builtin("github");
        let ev = [("x-github-event", "issues")];
        assert_eq!(
            type_of(&gh, &ev, br#"{"action":"opened","issue":{}}"#).as_deref(),
            Some("issues.opened")
        );
        // `push` has no action; a blank one adds nothing either.
        let push = [("x-github-event", "push")];
        assert_eq!(
            type_of(&gh, &push, br#"{"ref":"x"}"#).as_deref(),
            Some("push")
        );
        assert_eq!(
            type_of(&gh, &push, br#"{"action":" "}"#).as_deref(),
            Some("push")
        );
        // Without the first part there is no type, whatever follows.
        assert_eq!(type_of(&gh, &[], br#"{"action":"opened"}"#), None);
        let cp = builtin("cloudpayments");
        assert_eq!(
            type_of(
                &cp,
                &[],
                b"TransactionId=1&OperationType=Payment&Status=Completed"
            )
            .as_deref(),
            Some("Payment.Completed")
        );
        assert_eq!(
            type_of(
                &cp,
                &[],
                br#"{"TransactionId":2,"OperationType":"Refund","Status":"Completed"}"#
            )
            .as_deref(),
            Some("Refund.Completed")
        );
    }

    #[test]
    fn every_shipped_provider_says_where_its_type_is_or_why_it_has_none() {
        // Robokassa's ResultURL reports one thing (a paid invoice);
        // Airtable's notification is a typeless ping; Mandrill's events are a
        // JSON array inside one form field; a Telegram update and a Sinch
        // callback name their kind by which member they carry, not by a
        // value; a Dropbox notification only lists accounts that changed;
        // an X delivery names its kind by which `*_events` member it
        // carries; the generic providers leave the type to the source
        // (`event_type`).
        let untyped = [
            "dropbox",
            "twitter",
            "robokassa",
            "airtable",
            "mandrill",
            "telegram",
            "sinch",
            "basic",
            "bearer",
            "hmac",
        ];
        let registry = crate::verify::registry::Registry::builtin();
        for name in registry.names() {
            let p = registry.get(name).unwrap();
            let typed = p.event_type.is_some() || p.signature.scheme.type_from().is_some();
            assert_eq!(typed, !untyped.contains(&name), "{name}");
        }
        assert_eq!(
            type_of(
                &builtin("tbank"),
                &[],
                br#"{"PaymentId":1,"Status":"CONFIRMED"}"#
            )
            .as_deref(),
            Some("CONFIRMED")
        );
        assert_eq!(
            type_of(
                &builtin("twilio"),
                &[],
                b"MessageSid=SM1&MessageStatus=delivered"
            )
            .as_deref(),
            Some("delivered")
        );
    }

    #[test]
    fn a_source_names_the_type_of_a_generic_provider() {
        use crate::verify::provider::SourceOverrides;
        use crate::verify::spec::OneOrMany;
        let hmac = builtin("hmac");
        assert_eq!(type_of(&hmac, &[], br#"{"type":"a"}"#), None);
        let joined = OneOrMany::Many(vec!["json:/kind".into(), "header:x-action".into()]);
        let p = hmac
            .customized(&SourceOverrides {
                event_type: Some(&joined),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(
            type_of(&p, &[("x-action", "done")], br#"{"kind":"job"}"#).as_deref(),
            Some("job.done")
        );
        for bad in [OneOrMany::Many(vec![]), OneOrMany::One("nowhere".into())] {
            let e = hmac
                .customized(&SourceOverrides {
                    event_type: Some(&bad),
                    ..Default::default()
                })
                .unwrap_err();
            assert!(e.starts_with("event_type: "), "{e}");
        }
    }
}
