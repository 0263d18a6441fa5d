//! iyzico payment webhooks (`X-IYZ-SIGNATURE-V3`): lowercase hex
//! HMAC-SHA256, keyed with the merchant's secret key, over the secret key
//! followed by fields of the JSON body, no separators. Which fields depends
//! on the notification's format (docs.iyzico.com/en/advanced/webhook):
//!
//! - direct (API, 3DS) payments: `iyziEventType`, `paymentId`,
//!   `paymentConversationId`, `status`;
//! - hosted payment page (HPP, checkout form), told apart by its `token`:
//!   `iyziEventType`, `iyziPaymentId`, `token`, `paymentConversationId`,
//!   `status`.
//!
//! A template cannot choose between the two, so this is code. Adding or
//! dropping `token` changes the signed text, so a relay cannot move a
//! request from one format to the other. Subscription notifications sign a
//! fixed template and use the `hmac` scheme (`iyzico-subscription`).

use super::{Cover, Ctx, Defaults, Part, SchemeDef, decode_hex, first_header};
use crate::verify::VerifyError;
use crate::primitives::crypto::{Algorithm, Encoding, SigningKey};
use crate::verify::json_subset::{Want, subset};
use crate::verify::locator::Locator;
use crate::verify::provider::Provider;
use crate::verify::json_pointer::scalar;
use crate::verify::sign::{Signed, Signer};
use serde_json::Value;

pub struct Iyzico;

const DIRECT: &[&str] = &[
    "iyziEventType",
    "paymentId",
    "paymentConversationId",
    "status",
];
const HPP: &[&str] = &[
    "iyziEventType",
    "iyziPaymentId",
    "token",
    "paymentConversationId",
    "status",
];

impl SchemeDef for Iyzico {
    const SUMMARY: &'static str = "HMAC-SHA256 → hex over the secret key + the body fields of the direct or hosted-page format (`token` present)";

    const DEFAULTS: Defaults = Defaults::keyed(true, Algorithm::HmacSha256, Encoding::Hex);

    fn verify(ctx: &Ctx<'_, '_>) -> Result<Option<usize>, VerifyError> {
        verify(ctx).map(Some)
    }

    fn sign(s: &Signer<'_>, out: &mut Signed) -> Result<(), String> {
        let Signer { provider, key, req } = *s;
        let body: Value = serde_json::from_slice(req.body).map_err(|e| format!("body: {e}"))?;
        let fields = signed_fields(&body).ok_or("body lacks a field iyzico signs")?;
        let mac = mac(provider.signature.algorithm, key, &fields);
        out.headers
            .push((first_header(&provider.signature), hex::encode(mac)));
        Ok(())
    }

    /// The fields both formats sign (`iyziEventType`,
    /// `paymentConversationId`, `status`); the others only in one.
    fn covers(_: &Provider, part: Part<'_>) -> Cover {
        let both = |f: &str| DIRECT.contains(&f) && HPP.contains(&f);
        Cover::signed_if(matches!(part, Part::At(Locator::Json(p)) if both(&p[1..])))
    }
}

/// The values iyzico signs for `body`, in order; `None` when one is missing.
fn signed_fields(body: &Value) -> Option<Vec<String>> {
    let names = if body.get("token").is_some_and(|t| !t.is_null()) {
        HPP
    } else {
        DIRECT
    };
    names
        .iter()
        .map(|n| body.get(n).and_then(scalar))
        .collect()
}

fn mac(algorithm: Algorithm, key: &SigningKey, fields: &[String]) -> Vec<u8> {
    let mut parts: Vec<&[u8]> = vec![key.bytes()];
    parts.extend(fields.iter().map(String::as_bytes));
    algorithm.mac(key.bytes(), &parts)
}

fn verify(ctx: &Ctx<'_, '_>) -> Result<usize, VerifyError> {
    let header = super::token::signature_header(ctx)?;
    let given = decode_hex(header, ctx.sig.algorithm.output_len())?;
    // Only the signed fields are copied out of the body.
    let want = Want::Keys(
        DIRECT
            .iter()
            .chain(HPP)
            .map(|n| ((*n).to_owned(), Want::Leaf))
            .collect(),
    );
    let body = match subset(ctx.fields.body(), &want) {
        Some(v @ Value::Object(_)) => v,
        Some(_) => return Err(VerifyError::BadBody("JSON body is not an object")),
        None => return Err(VerifyError::BadBody("body is not valid JSON")),
    };
    let fields = signed_fields(&body).ok_or(VerifyError::BadBody(
        "body lacks a field iyzico signs (iyziEventType, paymentId or iyziPaymentId, \
         paymentConversationId, status)",
    ))?;
    // The signed text holds the key itself, so each key builds its own.
    ctx.source
        .keys
        .iter()
        .position(|key| {
            let expected = mac(ctx.sig.algorithm, key, &fields);
            crate::primitives::crypto::mac_eq(&expected, &given)
        })
        .ok_or(VerifyError::InvalidSignature)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_is_chosen_by_the_token_and_every_field_must_be_present() {
        let direct = serde_json::json!({
            "iyziEventType": "THREE_DS_AUTH", "paymentId": "22416035",
            "paymentConversationId": "c1", "status": "SUCCESS", "token": null
        });
        // A null `token` is no token: direct.
        assert_eq!(
            signed_fields(&direct).unwrap(),
            ["THREE_DS_AUTH", "22416035", "c1", "SUCCESS"]
        );
        let direct = serde_json::json!({
            "iyziEventType": "THREE_DS_AUTH", "paymentId": 22416035,
            "paymentConversationId": "c1", "status": "SUCCESS"
        });
        assert_eq!(
            signed_fields(&direct).unwrap(),
            ["THREE_DS_AUTH", "22416035", "c1", "SUCCESS"]
        );
        let hpp = serde_json::json!({
            "iyziEventType": "CHECKOUT_FORM_AUTH", "iyziPaymentId": 1, "token": "t",
            "paymentConversationId": "c1", "status": "SUCCESS"
        });
        assert_eq!(
            signed_fields(&hpp).unwrap(),
            ["CHECKOUT_FORM_AUTH", "1", "t", "c1", "SUCCESS"]
        );
    }
}
