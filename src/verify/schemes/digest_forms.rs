//! Two acquirers that hash their secret together with the notification
//! fields instead of using HMAC.
//!
//! * T-Bank (Tinkoff): JSON body; `Token` = hex SHA-256 of the values of
//!   every root-level scalar field except `Token`, plus `Password` (the
//!   terminal password = the source's secret), sorted by field name.
//! * Robokassa: form body; `SignatureValue` = hex digest (MD5 by default,
//!   per shop setting) of `OutSum:InvId:Password2` followed by
//!   `:Shp_name=value` for every `Shp_` field in name order. Robokassa sends
//!   uppercase hex; comparison is case-insensitive.

use super::{Ctx, decode_hex};
use crate::verify::VerifyError;
use crate::verify::scheme::mac_eq;
use serde_json::Value;

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

pub fn verify_tbank(ctx: &Ctx<'_>) -> Result<usize, VerifyError> {
    let body = match ctx.fields.json() {
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
            let content = tbank_content(body, password);
            ctx.sig.algorithm.digest(&[content.as_bytes()])
        },
        &given,
    )
}

/// The text Robokassa hashes for form `fields` with `password`, or `None`
/// when `OutSum` or `InvId` is missing.
pub fn robokassa_content(fields: &[(String, String)], password: &str) -> Option<String> {
    let get = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let mut text = format!("{}:{}:{password}", get("OutSum")?, get("InvId")?);
    let mut shp: Vec<&(String, String)> = fields
        .iter()
        .filter(|(k, _)| k.to_ascii_lowercase().starts_with("shp_"))
        .collect();
    shp.sort();
    for (k, v) in shp {
        text.push_str(&format!(":{k}={v}"));
    }
    Some(text)
}

pub fn verify_robokassa(ctx: &Ctx<'_>) -> Result<usize, VerifyError> {
    if std::str::from_utf8(ctx.fields.body()).is_err() {
        return Err(VerifyError::BadBody("form body is not UTF-8"));
    }
    let form = ctx.fields.form();
    let given = form
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("SignatureValue"))
        .map(|(_, v)| v.as_str())
        .ok_or(VerifyError::MissingSignature)?;
    let given = decode_hex(given, ctx.sig.algorithm.output_len())?;
    if robokassa_content(form, "").is_none() {
        return Err(VerifyError::BadBody("missing OutSum or InvId"));
    }
    secret_position(
        ctx,
        |password| {
            let content = robokassa_content(form, password).unwrap_or_default();
            ctx.sig.algorithm.digest(&[content.as_bytes()])
        },
        &given,
    )
}

/// The first configured secret whose digest equals `given`.
fn secret_position(
    ctx: &Ctx<'_>,
    digest: impl Fn(&str) -> Vec<u8>,
    given: &[u8],
) -> Result<usize, VerifyError> {
    ctx.source
        .keys
        .iter()
        .position(|k| {
            // Raw secrets are the UTF-8 text as configured.
            let password = String::from_utf8_lossy(k.bytes());
            mac_eq(&digest(&password), given)
        })
        .ok_or(VerifyError::InvalidSignature)
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

    #[test]
    fn robokassa_appends_sorted_shp_fields() {
        let f = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        let fields = vec![
            f("OutSum", "10.000000"),
            f("InvId", "5"),
            f("Shp_b", "2"),
            f("Shp_a", "1"),
            f("SignatureValue", "X"),
        ];
        assert_eq!(
            robokassa_content(&fields, "pw2").unwrap(),
            "10.000000:5:pw2:Shp_a=1:Shp_b=2"
        );
        assert!(robokassa_content(&fields[2..], "pw2").is_none());
    }
}
