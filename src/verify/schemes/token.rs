//! Shared-secret schemes without a MAC: a token in a header or query
//! parameter (Xendit's `x-callback-token`, generic bearer / API keys), and
//! HTTP Basic credentials. Both compare SHA-256 digests of the values in
//! constant time, so neither the content nor the length of a secret leaks
//! through timing. They authenticate the sender, not the body.

use super::Ctx;
use super::hmac::MAX_SIGNATURE_HEADER;
use crate::verify::VerifyError;
use crate::verify::scheme::{Algorithm, BASE64_LENIENT, mac_eq};
use base64::Engine;

pub fn verify_token(ctx: &Ctx<'_>) -> Result<usize, VerifyError> {
    let sig = ctx.sig;
    let from_header = sig
        .headers
        .iter()
        .find_map(|h| ctx.fields.headers().get(h.as_str()));
    let token = match (from_header, &sig.query) {
        (Some(v), _) => {
            let v = header_text(v)?;
            v.strip_prefix(sig.prefix.as_str())
                .or_else(|| strip_prefix_ignore_case(v, &sig.prefix))
                .ok_or(VerifyError::MalformedSignature("missing prefix"))?
                .trim()
                .to_owned()
        }
        (None, Some(q)) => {
            let l = crate::verify::locator::Lookup::parse(&format!("query:{q}"))
                .map_err(|_| VerifyError::MissingSignature)?;
            ctx.fields
                .lookup(&l, &[])
                .ok_or(VerifyError::MissingSignature)?
        }
        (None, None) => return Err(VerifyError::MissingSignature),
    };
    if token.is_empty() {
        return Err(VerifyError::MalformedSignature("empty token"));
    }
    matching_secret(ctx, token.as_bytes())
}

pub fn verify_basic(ctx: &Ctx<'_>) -> Result<usize, VerifyError> {
    let v = ctx
        .sig
        .headers
        .iter()
        .find_map(|h| ctx.fields.headers().get(h.as_str()))
        .ok_or(VerifyError::MissingSignature)?;
    let v = header_text(v)?;
    let encoded = strip_prefix_ignore_case(v, "basic ").ok_or(VerifyError::MalformedSignature(
        "expected Basic credentials",
    ))?;
    let decoded = BASE64_LENIENT
        .decode(encoded.trim())
        .map_err(|_| VerifyError::MalformedSignature("credentials are not base64"))?;
    if !decoded.contains(&b':') {
        return Err(VerifyError::MalformedSignature("expected user:password"));
    }
    matching_secret(ctx, &decoded)
}

fn header_text(v: &http::HeaderValue) -> Result<&str, VerifyError> {
    if v.len() > MAX_SIGNATURE_HEADER {
        return Err(VerifyError::MalformedSignature("header too long"));
    }
    v.to_str()
        .map_err(|_| VerifyError::MalformedSignature("not visible ASCII"))
}

fn strip_prefix_ignore_case<'a>(v: &'a str, prefix: &str) -> Option<&'a str> {
    let head = v.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &v[prefix.len()..])
}

fn matching_secret(ctx: &Ctx<'_>, given: &[u8]) -> Result<usize, VerifyError> {
    let given = Algorithm::Sha256.digest(&[given]);
    ctx.source
        .keys
        .iter()
        .position(|k| mac_eq(&Algorithm::Sha256.digest(&[k.bytes()]), &given))
        .ok_or(VerifyError::InvalidSignature)
}
