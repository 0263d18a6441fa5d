//! Adyen standard notifications: every item of `notificationItems` carries
//! its own `additionalData.hmacSignature`, a base64 HMAC-SHA256 (hex key)
//! over eight fields joined with `:` — unescaped, missing fields empty.
//! Every item must verify; one forged item rejects the whole request.

use super::hmac::decode_candidates;
use super::{Cover, Ctx, Defaults, Part, SchemeDef, matching_key};
use crate::verify::locator::Locator;
use crate::verify::provider::Provider;
use crate::verify::VerifyError;
use crate::primitives::crypto::{Algorithm, Encoding};
use crate::verify::json_subset::{Want, subset};
use crate::verify::json_pointer::scalar;
use crate::verify::sign::{Signed, Signer};
use serde_json::Value;

pub struct Adyen;

impl SchemeDef for Adyen {
    const SUMMARY: &'static str = "HMAC-SHA256 (hex key) → base64 per item, over 8 fields joined with `:`";

    const DEFAULTS: Defaults = Defaults::keyed(false, Algorithm::HmacSha256, Encoding::Base64);

    /// The eight signed fields of any item (`/notificationItems/<n or
    /// *>/NotificationRequestItem/<field>`); nothing else.
    fn covers(_: &Provider, part: Part<'_>) -> Cover {
        let Part::At(Locator::Json(pointer)) = part else {
            return Cover::Unsigned;
        };
        let Some(rest) = pointer.strip_prefix("/notificationItems/") else {
            return Cover::Unsigned;
        };
        let field = rest
            .split_once('/')
            .filter(|(index, _)| *index == "*" || index.parse::<usize>().is_ok())
            .and_then(|(_, f)| f.strip_prefix("NotificationRequestItem/"));
        Cover::signed_if(field.is_some_and(|f| SIGNED_FIELDS.contains(&f)))
    }

    fn verify(ctx: &Ctx<'_, '_>) -> Result<Option<usize>, VerifyError> {
        verify(ctx).map(Some)
    }

    /// Signs every item in place: the signature is part of the body.
    fn sign(s: &Signer<'_>, out: &mut Signed) -> Result<(), String> {
        let Signer { provider, key, req } = *s;
        let sig = &provider.signature;
        let mut json: Value = serde_json::from_slice(req.body).map_err(|e| format!("body: {e}"))?;
        let items = json
            .get_mut("notificationItems")
            .and_then(|v| v.as_array_mut())
            .ok_or("body has no notificationItems")?;
        for item in items {
            let nri = item
                .get_mut("NotificationRequestItem")
                .ok_or("item without NotificationRequestItem")?;
            let content = signed_fields(nri);
            let mac = sig.algorithm.mac(key.bytes(), &[content.as_bytes()]);
            let obj = nri.as_object_mut().ok_or("item is not an object")?;
            let extra = obj
                .entry("additionalData")
                .or_insert_with(|| serde_json::json!({}));
            extra["hmacSignature"] = sig.encoding.encode(&mac).into();
        }
        out.body = Some(serde_json::to_vec(&json).map_err(|e| e.to_string())?);
        Ok(())
    }
}

/// Most items accepted in one request (Adyen sends one, historically up to a few).
const MAX_ITEMS: usize = 100;

/// The signed fields of one item, in signing order.
pub fn signed_fields(item: &Value) -> String {
    let text = |field: &str| {
        item.pointer(&format!("/{field}"))
            .and_then(scalar)
            .unwrap_or_default()
    };
    SIGNED_FIELDS.map(text).join(":")
}

/// The fields of an item the signature covers, in signed order (JSON
/// pointers below `NotificationRequestItem`, without the leading `/`).
const SIGNED_FIELDS: [&str; 8] = [
    "pspReference",
    "originalReference",
    "merchantAccountCode",
    "merchantReference",
    "amount/value",
    "amount/currency",
    "eventCode",
    "success",
];

/// The `NotificationRequestItem` objects of a notification body.
pub fn items(body: &Value) -> Result<Vec<&Value>, VerifyError> {
    let list = body
        .get("notificationItems")
        .and_then(Value::as_array)
        .ok_or(VerifyError::BadBody("not an Adyen notification"))?;
    if list.is_empty() || list.len() > MAX_ITEMS {
        return Err(VerifyError::BadBody(
            "Adyen notification has no items or too many",
        ));
    }
    list.iter()
        .map(|i| {
            i.get("NotificationRequestItem")
                .filter(|v| v.is_object())
                .ok_or(VerifyError::BadBody("Adyen item is not an object"))
        })
        .collect()
}

/// The part of a notification [`verify`] reads: per item, the signed
/// fields and the signature (at most `MAX_ITEMS + 1` items, enough to refuse
/// more). Everything else in the body is skipped, not kept.
fn wanted() -> Want {
    let leaf = |name: &str| (name.to_owned(), Want::Leaf);
    let item = Want::Keys(vec![
        leaf("pspReference"),
        leaf("originalReference"),
        leaf("merchantAccountCode"),
        leaf("merchantReference"),
        (
            "amount".into(),
            Want::Keys(vec![leaf("value"), leaf("currency")]),
        ),
        leaf("eventCode"),
        leaf("success"),
        (
            "additionalData".into(),
            Want::Keys(vec![leaf("hmacSignature")]),
        ),
    ]);
    Want::Keys(vec![(
        "notificationItems".into(),
        Want::Items {
            each: Box::new(Want::Keys(vec![("NotificationRequestItem".into(), item)])),
            limit: MAX_ITEMS + 1,
        },
    )])
}

fn verify(ctx: &Ctx<'_, '_>) -> Result<usize, VerifyError> {
    let json = subset(ctx.fields.body(), &wanted());
    let json = match &json {
        Some(v) if v.is_object() => v,
        Some(_) => return Err(VerifyError::BadBody("JSON body is not an object")),
        None => return Err(VerifyError::BadBody("body is not valid JSON")),
    };
    let mut matched = None;
    for item in items(json)? {
        let sig = item
            .pointer("/additionalData/hmacSignature")
            .and_then(Value::as_str)
            .ok_or(VerifyError::MissingSignature)?;
        let candidates = decode_candidates(ctx.sig, &[sig])?;
        let content = signed_fields(item);
        let key = matching_key(ctx, &[content.as_bytes()], &candidates)
            .ok_or(VerifyError::InvalidSignature)?;
        matched.get_or_insert(key);
    }
    matched.ok_or(VerifyError::MissingSignature)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac_b64(hex_key: &str, content: &str) -> String {
        let key = hex::decode(hex_key).unwrap();
        Encoding::Base64
            .encode(&Algorithm::HmacSha256.mac(&key, &[content.as_bytes()]))
    }

    // V7: adyen-python-api-library test/test_util.py::test_notification_request_item_hmac.
    #[test]
    fn v7_sdk_vector() {
        let item = serde_json::json!({
            "pspReference": "7914073381342284",
            "merchantAccountCode": "TestMerchant",
            "merchantReference": "TestPayment-1407325143704",
            "amount": {"value": 1130, "currency": "EUR"},
            "eventCode": "AUTHORISATION",
            "success": "true"
        });
        let content = signed_fields(&item);
        assert_eq!(
            content,
            "7914073381342284::TestMerchant:TestPayment-1407325143704:1130:EUR:AUTHORISATION:true"
        );
        assert_eq!(
            mac_b64(
                "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056",
                &content
            ),
            "coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0="
        );
    }

    // V7b / V7c: same repo, test/mocks/util/colon_notification.json and
    // backslash_notification.json: values are signed unescaped.
    #[test]
    fn v7b_v7c_colons_and_backslashes_are_not_escaped() {
        let key = "74F490DD33F7327BAECC88B2947C011FC02D014A473AAA33A8EC93E4DC069174";
        for (psp, reference, want) in [
            (
                "M8NB66SBZSGLNK82",
                ":slashes are fun",
                "2EQYm7YJpKO4EtHSPu55SQTyWf8dkW5u2nD1tJFpViA=",
            ),
            (
                "T7FD4VM4D3RZNN82",
                "\\\\slashes are fun",
                "nIgT81gaB5oJpn2jPXupDq68iRo2wUlBsuYjtYfwKqo=",
            ),
        ] {
            let item = serde_json::json!({
                "pspReference": psp,
                "merchantAccountCode": "AntoniStroinski",
                "merchantReference": reference,
                "amount": {"value": 1000, "currency": "EUR"},
                "eventCode": "AUTHORISATION",
                "success": "true"
            });
            assert_eq!(mac_b64(key, &signed_fields(&item)), want, "{psp}");
        }
    }
}
