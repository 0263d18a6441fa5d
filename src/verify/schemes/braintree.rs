//! Braintree: a form body with `bt_signature` and `bt_payload`. The
//! signature is `public_key|hex` pairs joined with `&`; each hex is
//! HMAC-SHA1 over the `bt_payload` text keyed with SHA-1 of the private key
//! (the source's secret; `secret_encoding = "sha1"` derives it). Every pair
//! is tried against every key, so the public key need not be configured: a
//! match proves knowledge of the private key either way.

use super::hmac::{MAX_CANDIDATES, decode_candidates};
use super::{Cover, Ctx, Defaults, Part, SchemeDef, SchemeSettings, matching_key};
use crate::primitives::crypto::{Algorithm, Encoding, SigningKey};
use crate::verify::locator::Locator;
use crate::verify::provider::Provider;
use crate::verify::provider::Signature;
use crate::verify::reply::Reply;
use crate::verify::fields::Fields;
use crate::verify::sign::{Signed, Signer};
use crate::verify::source::{Resolve, SettingsTable, Source};
use crate::verify::{GetAnswer, VerifyError};
use base64::Engine;
use serde::Deserialize;

pub struct Braintree;

impl SchemeDef for Braintree {
    const HANDSHAKE: Option<&'static str> =
        Some("GET `bt_challenge` answered with `public_key|HMAC` (needs `[sources.x.braintree] public_key`)");

    const SUMMARY: &'static str = "HMAC-SHA1 (key = SHA-1 of the private key) → hex over `bt_payload`";

    const DEFAULTS: Defaults = Defaults::keyed(false, Algorithm::HmacSha1, Encoding::Hex);

    /// `bt_payload` and the type read from it; nothing else in the form.
    fn covers(_: &Provider, part: Part<'_>) -> Cover {
        Cover::signed_if(match part {
            Part::OwnType => true,
            Part::At(Locator::Form(f)) => f == "bt_payload",
            _ => false,
        })
    }

    fn verify(ctx: &Ctx<'_, '_>) -> Result<Option<usize>, VerifyError> {
        verify(ctx).map(Some)
    }

    /// A form body with `bt_signature` and the body as `bt_payload`.
    fn sign(s: &Signer<'_>, out: &mut Signed) -> Result<(), String> {
        let Signer { provider, key, req } = *s;
        let payload = base64::engine::general_purpose::STANDARD.encode(req.body);
        let mac = provider
            .signature
            .algorithm
            .mac(key.bytes(), &[payload.as_bytes()]);
        let body = form_urlencoded::Serializer::new(String::new())
            .append_pair("bt_signature", &format!("hookgate|{}", hex::encode(mac)))
            .append_pair("bt_payload", &payload)
            .finish();
        out.body = Some(body.into_bytes());
        Ok(())
    }

    /// Braintree verifies the URL with `GET …?bt_challenge=<hex>`.
    fn answer_get(source: &Source, query: Option<&str>) -> GetAnswer {
        let challenge = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
            .find(|(k, _)| k == "bt_challenge")
            .map(|(_, v)| v.into_owned());
        let Some(challenge) = challenge else {
            return GetAnswer::Bad("missing bt_challenge");
        };
        let (Some(SchemeSettings::Braintree(settings)), Some(key)) =
            (&source.settings, source.keys.first())
        else {
            return GetAnswer::NotConfigured("set [sources.<name>.braintree] public_key");
        };
        match challenge_answer(settings, key, &source.provider.signature, &challenge) {
            Ok(body) => GetAnswer::Reply(Reply {
                status: 200,
                body,
                content_type: Some("text/plain; charset=utf-8".into()),
                ..Reply::default()
            }),
            Err(why) => GetAnswer::Bad(why),
        }
    }

    const TYPE_FROM: Option<&'static str> = Some("bt_payload's <kind>");

    /// The notification's `<kind>` (`subscription_went_past_due`, …): the
    /// payload is base64 XML, `<notification><timestamp/><kind/><subject/>`
    /// (https://developer.paypal.com/braintree/docs/reference/general/webhooks/overview).
    fn event_type(fields: &Fields<'_>) -> Option<String> {
        let payload = fields.form_value("bt_payload")?;
        let compact: String = payload.split_ascii_whitespace().collect();
        let xml = base64::engine::general_purpose::STANDARD
            .decode(compact)
            .ok()?;
        notification_kind(std::str::from_utf8(&xml).ok()?)
    }
}

/// The text of the `<kind>` element directly inside the root element. A
/// subject may hold its own `<kind>` (a dispute's), deeper down, which is
/// not the notification's. Declarations, comments and self-closing tags are
/// skipped; anything else odd gives `None`.
fn notification_kind(xml: &str) -> Option<String> {
    let mut depth = 0usize;
    let mut rest = xml;
    while let Some(open) = rest.find('<') {
        let after = &rest[open + 1..];
        let close = after.find('>')?;
        let tag = &after[..close];
        rest = &after[close + 1..];
        if tag.starts_with('?') || tag.starts_with('!') || tag.ends_with('/') {
            continue;
        }
        if tag.starts_with('/') {
            depth = depth.checked_sub(1)?;
            continue;
        }
        depth += 1;
        let name = tag.split_ascii_whitespace().next()?;
        if depth == 2 && name == "kind" {
            let end = rest.find("</kind>")?;
            let kind = rest[..end].trim();
            return (!kind.is_empty() && !kind.contains('<')).then(|| kind.to_owned());
        }
    }
    None
}

fn verify(ctx: &Ctx<'_, '_>) -> Result<usize, VerifyError> {
    if std::str::from_utf8(ctx.fields.body()).is_err() {
        return Err(VerifyError::BadBody("form body is not UTF-8"));
    }
    // The MAC covers the first `bt_payload`; a consumer that reads the last
    // would act on an unsigned one.
    if ctx.fields.form_count("bt_payload") > 1 || ctx.fields.form_count("bt_signature") > 1 {
        return Err(VerifyError::BadBody("bt_payload or bt_signature is repeated"));
    }
    let signature = ctx
        .fields
        .form_value("bt_signature")
        .ok_or(VerifyError::MissingSignature)?;
    let payload = ctx
        .fields
        .form_value("bt_payload")
        .ok_or(VerifyError::BadBody("missing bt_payload"))?;
    if !payload
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'=' | b'/' | b'\n'))
    {
        return Err(VerifyError::BadBody("bt_payload is not base64"));
    }
    // The challenge GET answers HMAC(challenge) to anyone who asks; a
    // payload that is itself a valid challenge could replay that answer as
    // a signature. Real payloads (base64 XML) are far longer.
    if is_challenge(payload.trim_end_matches('\n')) {
        return Err(VerifyError::InvalidSignature);
    }
    let pairs: Vec<&str> = signature
        .split('&')
        .filter_map(|p| p.split_once('|').map(|(_, sig)| sig))
        .take(MAX_CANDIDATES + 1)
        .collect();
    let candidates = decode_candidates(ctx.sig, &pairs)?;
    // The SDKs accept an HMAC over the payload as received or over the
    // payload plus one "\n" (braintree_ruby, lib/braintree/
    // webhook_notification_gateway.rb, `_verify_signature`:
    // `[payload, payload + "\n"].any?`). Never the payload minus one: that
    // would let a captured post be replayed with an extra `%0A`. The event
    // id is taken from the payload without trailing line feeds
    // (`trimlf:` in providers/braintree.toml), so both spellings of one
    // genuine post are one event.
    if let Some(k) = matching_key(ctx, &[payload.as_bytes()], &candidates) {
        return Ok(k);
    }
    matching_key(ctx, &[payload.as_bytes(), b"\n"], &candidates)
        .ok_or(VerifyError::InvalidSignature)
}

/// `[sources.<name>.braintree]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Raw {
    /// The merchant's public key (Control panel → API keys), sent back in
    /// the answer to Braintree's `GET ?bt_challenge=…`. Required for the
    /// challenge; POST verification needs only the private key (`secrets`).
    pub public_key: String,
}

impl SettingsTable for Raw {
    const SCHEME: super::Scheme = super::Scheme::Braintree;
    const TABLE: &'static str = "braintree";
    const TITLE: &'static str = "Braintree";

    fn build(&self, key: &str, cx: &mut dyn Resolve) -> Option<SchemeSettings> {
        Settings::new(self.public_key.clone())
            .map(SchemeSettings::Braintree)
            .map_err(|e| cx.problem(&format!("{key}.public_key"), e))
            .ok()
    }

    /// POST verification works without it; only the challenge does not.
    fn missing(key: &str, cx: &mut dyn Resolve) {
        cx.warning(format!(
            "`{key}.public_key` is unset: Braintree's bt_challenge GET gets 404"
        ));
    }
}

/// A source's Braintree settings (`[sources.<name>.braintree]`).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The merchant's public key: the first half of the challenge answer.
    pub public_key: String,
}

impl Settings {
    pub fn new(public_key: String) -> Result<Self, String> {
        let ok = !public_key.is_empty()
            && public_key.len() <= 64
            && public_key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'));
        if !ok {
            return Err("public_key must be 1-64 letters, digits, `-` or `_`".into());
        }
        Ok(Self { public_key })
    }
}

/// Longest and shortest `bt_challenge` Braintree's SDK accepts (lowercase hex).
const CHALLENGE_LEN: std::ops::RangeInclusive<usize> = 20..=32;

fn is_challenge(text: &str) -> bool {
    CHALLENGE_LEN.contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The answer to `GET …?bt_challenge=<hex>`:
/// `public_key|hex(HMAC-SHA1(SHA-1(private key), challenge))`, with the
/// source's first key (already SHA-1 of the private key).
pub fn challenge_answer(
    settings: &Settings,
    key: &SigningKey,
    sig: &Signature,
    challenge: &str,
) -> Result<String, &'static str> {
    if !is_challenge(challenge) {
        return Err("bt_challenge is not 20-32 lowercase hex digits");
    }
    let mac = sig.algorithm.mac(key.bytes(), &[challenge.as_bytes()]);
    Ok(format!("{}|{}", settings.public_key, hex::encode(mac)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::primitives::secret::Secret;
    use crate::verify::registry::Registry;

    // braintree_python tests/unit/test_webhooks.py (and the Ruby, PHP and
    // Node SDKs): the integration merchant's keys and this challenge.
    const CHALLENGE: &str = "20f9f8ed05f77439fe955c977e4c8a53";
    const ANSWER: &str = "integration_public_key|d9b899556c966b3f06945ec21311865d35df3ce4";

    #[test]
    fn challenge_answer_matches_the_sdk_vector_and_refuses_bad_challenges() {
        let p = Registry::builtin().get("braintree").unwrap();
        let key = p
            .signing_key(&Secret::new("integration_private_key"))
            .unwrap();
        let s = Settings::new("integration_public_key".into()).unwrap();
        let answer = challenge_answer(&s, &key, &p.signature, CHALLENGE);
        assert_eq!(answer.unwrap(), ANSWER);
        for bad in [
            "bad challenge",
            "HELLOWORLD",
            "20F9F8ED05F77439FE955C",
            "abc",
            &"a".repeat(33),
        ] {
            assert!(
                challenge_answer(&s, &key, &p.signature, bad).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_kind_is_the_root_elements_own_not_a_subjects() {
        // Shaped like the SDKs' sample notifications (braintree_node
        // lib/braintree/webhook_testing_gateway.js, `sampleXml`).
        let xml = "<?xml version=\"1.0\"?>\n<notification>\n\
            <timestamp type=\"datetime\">2026-11-26T09:00:00Z</timestamp>\n\
            <subject><dispute><kind>chargeback</kind><id>d1</id></dispute></subject>\n\
            <kind>dispute_opened</kind>\n</notification>";
        assert_eq!(notification_kind(xml).as_deref(), Some("dispute_opened"));
        let first = "<notification><kind>check</kind><subject><check type=\"boolean\">true</check></subject></notification>";
        assert_eq!(notification_kind(first).as_deref(), Some("check"));
        for odd in [
            "<notification><subject><kind>x</kind></subject></notification>",
            "<notification><kind></kind></notification>",
            "<notification><kind>unclosed",
            "</a></b><kind>x</kind>",
            "not xml",
        ] {
            assert_eq!(notification_kind(odd), None, "{odd}");
        }
    }

    #[test]
    fn a_signed_notifications_type_is_its_kind() {
        let p = Registry::builtin().get("braintree").unwrap();
        let xml = "<notification><timestamp type=\"datetime\">2026-11-26T09:00:00Z</timestamp>\
            <kind>subscription_went_past_due</kind><subject/></notification>";
        let payload = base64::engine::general_purpose::STANDARD.encode(xml) + "\n";
        let body = form_urlencoded::Serializer::new(String::new())
            .append_pair("bt_signature", "k|00")
            .append_pair("bt_payload", &payload)
            .finish();
        let h = http::HeaderMap::new();
        let f = Fields::new(&h, body.as_bytes());
        assert_eq!(
            crate::verify::facts::event_type(&p, &f).as_deref(),
            Some("subscription_went_past_due")
        );
    }

    #[test]
    fn public_keys_are_plain_identifiers() {
        assert!(Settings::new("abc_123-x".into()).is_ok());
        for bad in ["", "a|b", "has space", &"k".repeat(65)] {
            assert!(Settings::new(bad.into()).is_err(), "{bad}");
        }
    }
}
