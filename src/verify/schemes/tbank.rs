//! T-Bank (Tinkoff) acquiring: JSON body; `Token` = hex SHA-256 of the
//! values of every root-level scalar field except `Token`, plus `Password`
//! (the terminal password = the source's secret), sorted by field name.
//! The secret is hashed together with the fields instead of keying an HMAC.

use super::{Cover, Ctx, Defaults, Part, SchemeDef, decode_hex, password, secret_position};
use crate::verify::locator::Locator;
use crate::verify::provider::Provider;
use crate::verify::VerifyError;
use crate::primitives::crypto::{Algorithm, Encoding};
use crate::verify::json_subset::{Want, subset};
use crate::verify::sign::{Signed, Signer};
use serde_json::Value;

pub struct Tbank;

impl SchemeDef for Tbank {
    const SUMMARY: &'static str = "SHA-256 → hex of the sorted root values with the password";

    const DEFAULTS: Defaults = Defaults::keyed(false, Algorithm::Sha256, Encoding::Hex);

    /// Root-level fields (`json:/PaymentId`); nested ones are not hashed.
    fn covers(_: &Provider, part: Part<'_>) -> Cover {
        let root = |p: &str| p.len() > 1 && !p[1..].contains('/') && p != "/Token";
        Cover::signed_if(matches!(part, Part::At(Locator::Json(p)) if root(p)))
    }

    fn verify(ctx: &Ctx<'_, '_>) -> Result<Option<usize>, VerifyError> {
        verify(ctx).map(Some)
    }

    /// Adds `Token` to the JSON body.
    fn sign(s: &Signer<'_>, out: &mut Signed) -> Result<(), String> {
        let Signer { provider, key, req } = *s;
        let mut json: Value = serde_json::from_slice(req.body).map_err(|e| format!("body: {e}"))?;
        let obj = json.as_object_mut().ok_or("body is not a JSON object")?;
        let content = tbank_content(obj, &password(key));
        let digest = provider.signature.algorithm.digest(&[content.as_bytes()]);
        obj.insert("Token".into(), hex::encode(digest).into());
        out.body = Some(serde_json::to_vec(&json).map_err(|e| e.to_string())?);
        Ok(())
    }
}

/// The text T-Bank hashes for `body` with `password`.
pub fn tbank_content(body: &serde_json::Map<String, Value>, password: &str) -> String {
    let mut fields: Vec<(&str, String)> = body
        .iter()
        .filter(|(k, _)| k.as_str() != "Token")
        .filter_map(|(k, v)| match v {
            Value::String(s) => Some((k.as_str(), s.clone())),
            Value::Number(n) => Some((k.as_str(), n.to_string())),
            Value::Bool(b) => Some((k.as_str(), b.to_string())),
            // Nested objects and arrays (Data, Receipt) and nulls are not signed.
            _ => None,
        })
        .collect();
    fields.push(("Password", password.to_owned()));
    fields.sort_by(|a, b| a.0.cmp(b.0));
    fields.into_iter().map(|(_, v)| v).collect()
}

fn verify(ctx: &Ctx<'_, '_>) -> Result<usize, VerifyError> {
    // Root members only: nested objects and arrays are skipped, not kept.
    let root = subset(ctx.fields.body(), &Want::EveryKey(Box::new(Want::Leaf)));
    let body = match root {
        Some(Value::Object(m)) => m,
        Some(_) => return Err(VerifyError::BadBody("JSON body is not an object")),
        None => return Err(VerifyError::BadBody("body is not valid JSON")),
    };
    let token = body
        .get("Token")
        .and_then(Value::as_str)
        .ok_or(VerifyError::MissingSignature)?;
    let given = decode_hex(token, ctx.sig.algorithm.output_len())?;
    secret_position(
        ctx,
        |password| {
            let content = tbank_content(&body, password);
            ctx.sig.algorithm.digest(&[content.as_bytes()])
        },
        &given,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tbank_sorts_root_scalars_and_skips_nested_values() {
        let body = serde_json::json!({
            "TerminalKey": "T1", "Amount": 1000, "Success": true, "Token": "x",
            "Data": {"a": 1}, "OrderId": "o-1"
        });
        let Value::Object(m) = body else { panic!() };
        // Amount, OrderId, Password, Success, TerminalKey.
        assert_eq!(tbank_content(&m, "pw"), "1000o-1pwtrueT1");
    }
}
