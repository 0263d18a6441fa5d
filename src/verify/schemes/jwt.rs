//! A JWT signed with the shared secret (HS256) in a header: monday.com
//! puts one in `Authorization` on requests of apps built in its Developer
//! Center (https://developer.monday.com/apps/docs/authorization-header).
//! The token carries `exp` (checked, with the source's tolerance as the
//! leeway) and `aud` (the app's endpoint: checked against `public_url`
//! when the source sets one).
//!
//! The token does not cover the body: it authenticates the sender, like a
//! shared token, for the time it is valid. Only `HS256` is accepted (no
//! `none`, no algorithm taken from the token beyond that check).

use super::token::{header_text, strip_prefix_ignore_case};
use super::{Cover, Ctx, Defaults, Part, SchemeDef};
use crate::primitives::crypto::{Algorithm, Encoding, mac_eq};
use crate::verify::VerifyError;
use crate::verify::provider::Provider;
use crate::verify::sign::{Signed, Signer};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

pub struct Jwt;

/// How long a token `hookgate sign` makes is valid.
const SIGNED_LIFETIME: i64 = 300;

impl SchemeDef for Jwt {
    const SUMMARY: &'static str =
        "HS256 JWT with the secret (`exp` checked, `aud` against `public_url` when set); the body is not signed";

    const DEFAULTS: Defaults = Defaults::keyed(true, Algorithm::HmacSha256, Encoding::Base64url);

    /// The token authenticates the sender; no part of the request is in it.
    fn covers(_: &Provider, _: Part<'_>) -> Cover {
        Cover::Unsigned
    }

    fn verify(ctx: &Ctx<'_, '_>) -> Result<Option<usize>, VerifyError> {
        verify(ctx).map(Some)
    }

    /// `Authorization: <header.payload.signature>` with `exp` 5 minutes
    /// after the request's timestamp, and `aud` the URL when given.
    fn sign(s: &Signer<'_>, out: &mut Signed) -> Result<(), String> {
        let Signer { provider, key, req } = *s;
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
        let mut claims = serde_json::json!({
            "iat": req.timestamp,
            "exp": req.timestamp + SIGNED_LIFETIME,
        });
        if let Some(url) = req.url {
            claims["aud"] = url.into();
        }
        let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
        let signing_input = format!("{header}.{payload}");
        let mac = Algorithm::HmacSha256.mac(key.bytes(), &[signing_input.as_bytes()]);
        let name = provider.signature.first_header().ok_or("jwt needs a header")?;
        let token = format!("{}{signing_input}.{}", provider.signature.prefix, URL_SAFE_NO_PAD.encode(mac));
        out.headers.push((name, token));
        Ok(())
    }
}

fn verify(ctx: &Ctx<'_, '_>) -> Result<usize, VerifyError> {
    let sig = ctx.sig;
    let value = sig
        .headers
        .iter()
        .find_map(|h| ctx.fields.headers().get(h.as_str()))
        .ok_or(VerifyError::MissingSignature)?;
    let value = header_text(value)?;
    let token = strip_prefix_ignore_case(value, "Bearer ").unwrap_or(value).trim();
    let malformed = VerifyError::MalformedSignature("not a JWT");
    let (signing_input, signature) = token.rsplit_once('.').ok_or(malformed)?;
    let (header, payload) = signing_input.split_once('.').ok_or(malformed)?;
    let json = |part: &str| -> Result<serde_json::Value, VerifyError> {
        let bytes = URL_SAFE_NO_PAD.decode(part).map_err(|_| malformed)?;
        serde_json::from_slice(&bytes).map_err(|_| malformed)
    };
    if json(header)?.get("alg").and_then(|a| a.as_str()) != Some("HS256") {
        return Err(VerifyError::MalformedSignature("JWT algorithm is not HS256"));
    }
    let given = URL_SAFE_NO_PAD.decode(signature).map_err(|_| malformed)?;
    let key = ctx
        .source
        .keys
        .iter()
        .position(|k| {
            let mac = Algorithm::HmacSha256.mac(k.bytes(), &[signing_input.as_bytes()]);
            mac_eq(&mac, &given)
        })
        .ok_or(VerifyError::InvalidSignature)?;
    // Claims are read only once the token is ours.
    let claims = json(payload)?;
    let leeway = ctx.source.tolerance.as_secs() as i64;
    match claims.get("exp").and_then(serde_json::Value::as_i64) {
        Some(exp) if ctx.now > exp.saturating_add(leeway) => {
            return Err(VerifyError::TimestampOutOfTolerance);
        }
        Some(_) => {}
        None => return Err(VerifyError::MissingTimestamp),
    }
    if let (Some(url), Some(aud)) = (&ctx.source.public_url, claims.get("aud")) {
        let named = match aud {
            serde_json::Value::String(a) => a == url,
            serde_json::Value::Array(list) => list.iter().any(|a| a.as_str() == Some(url)),
            _ => false,
        };
        if !named {
            return Err(VerifyError::InvalidSignature);
        }
    }
    Ok(key)
}
