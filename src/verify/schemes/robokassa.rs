//! Robokassa: form body; `SignatureValue` = hex digest (MD5 by default,
//! per shop setting) of `OutSum:InvId:Password2` followed by
//! `:Shp_name=value` for every `Shp_` field in name order. Robokassa sends
//! uppercase hex; comparison is case-insensitive. The secret is hashed
//! together with the fields instead of keying an HMAC.

use super::{Cover, Ctx, Defaults, Part, SchemeDef, decode_hex, password, secret_position};
use crate::verify::locator::Locator;
use crate::verify::provider::Provider;
use crate::verify::VerifyError;
use crate::primitives::crypto::{Algorithm, Encoding};
use crate::verify::sign::{Signed, Signer};

pub struct Robokassa;

impl SchemeDef for Robokassa {
    const SUMMARY: &'static str = "digest (MD5 or the shop's choice) → hex of `OutSum:InvId:Password2[:Shp_…]`";

    const DEFAULTS: Defaults = Defaults::keyed(false, Algorithm::Md5, Encoding::Hex);

    /// `OutSum`, `InvId` and the `Shp_` fields.
    fn covers(_: &Provider, part: Part<'_>) -> Cover {
        Cover::signed_if(
            matches!(part, Part::At(Locator::Form(f)) if is_signed_field(f) && !f.eq_ignore_ascii_case("SignatureValue")),
        )
    }

    fn verify(ctx: &Ctx<'_, '_>) -> Result<Option<usize>, VerifyError> {
        verify(ctx).map(Some)
    }

    /// Appends `SignatureValue` (uppercase hex, as Robokassa sends it).
    fn sign(s: &Signer<'_>, out: &mut Signed) -> Result<(), String> {
        let Signer { provider, key, req } = *s;
        let fields: Vec<(String, String)> = form_urlencoded::parse(req.body)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let content =
            robokassa_content(&fields, &password(key)).ok_or("body needs OutSum and InvId")?;
        let digest = provider.signature.algorithm.digest(&[content.as_bytes()]);
        let mut body = req.body.to_vec();
        body.extend_from_slice(format!("&SignatureValue={}", hex::encode_upper(digest)).as_bytes());
        out.body = Some(body);
        Ok(())
    }
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

/// `SignatureValue`, `OutSum`, `InvId` and `Shp_*`, in any case.
fn is_signed_field(name: &str) -> bool {
    ["SignatureValue", "OutSum", "InvId"]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n))
        || name
            .as_bytes()
            .get(..4)
            .is_some_and(|p| p.eq_ignore_ascii_case(b"shp_"))
}

fn verify(ctx: &Ctx<'_, '_>) -> Result<usize, VerifyError> {
    if std::str::from_utf8(ctx.fields.body()).is_err() {
        return Err(VerifyError::BadBody("form body is not UTF-8"));
    }
    // Only the fields the signature covers are copied out of the body.
    let form: Vec<(String, String)> = form_urlencoded::parse(ctx.fields.body())
        .filter(|(k, _)| is_signed_field(k))
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let form = form.as_slice();
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

#[cfg(test)]
mod tests {
    use super::*;

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
