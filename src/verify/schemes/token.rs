//! A shared token in a header or query parameter (Xendit's
//! `x-callback-token`, generic bearer / API keys). The token is compared as
//! a SHA-256 digest in constant time, so neither the content nor the length
//! of a secret leaks through timing. It authenticates the sender, not the
//! body.

use super::hmac::MAX_SIGNATURE_HEADER;
use super::{Cover, Ctx, Defaults, Part, SchemeDef, password};
use crate::verify::provider::Provider;
use crate::verify::VerifyError;
use crate::primitives::crypto::{Algorithm, Encoding, mac_eq};
use crate::verify::locator::Lookup;
use crate::verify::sign::{Signed, Signer};

pub struct Token;

impl SchemeDef for Token {
    const SUMMARY: &'static str = "shared token, compared in constant time; the body is not signed";

    const DEFAULTS: Defaults = Defaults::keyed(false, Algorithm::Sha256, Encoding::Hex);

    /// A shared credential authenticates the sender; no part of the
    /// request is signed.
    fn covers(_: &Provider, _: Part<'_>) -> Cover {
        Cover::Unsigned
    }

    fn verify(ctx: &Ctx<'_, '_>) -> Result<Option<usize>, VerifyError> {
        verify(ctx).map(Some)
    }

    /// The secret itself, in the header (after the prefix) or the query.
    fn sign(s: &Signer<'_>, out: &mut Signed) -> Result<(), String> {
        let Signer { provider, key, .. } = *s;
        let sig = &provider.signature;
        if sig.from.is_some() {
            return Err("the token is part of the body: put it there (Graph's clientState)".into());
        }
        match (sig.headers.first(), &sig.query) {
            (Some(h), _) => out
                .headers
                .push((h.clone(), format!("{}{}", sig.prefix, password(key)))),
            (None, Some(q)) => {
                out.query = Some(
                    form_urlencoded::Serializer::new(String::new())
                        .append_pair(q, &password(key))
                        .finish(),
                )
            }
            (None, None) => return Err("token has neither header nor query".into()),
        }
        Ok(())
    }
}

fn verify(ctx: &Ctx<'_, '_>) -> Result<usize, VerifyError> {
    let sig = ctx.sig;
    // In the body (Microsoft Graph's `value[*].clientState`): every value
    // must be the same configured secret, so one forged item cannot ride
    // along with genuine ones.
    if let Some(at) = &sig.from {
        let values = ctx.fields.lookup_each(at);
        let first = values.first().ok_or(VerifyError::MissingSignature)?;
        if first.is_empty() {
            return Err(VerifyError::MalformedSignature("empty token"));
        }
        let key = matching_secret(ctx, first.as_bytes())?;
        let want = Algorithm::Sha256.digest(&[ctx.source.keys[key].bytes()]);
        let all_match = values
            .iter()
            .all(|v| mac_eq(&Algorithm::Sha256.digest(&[v.as_bytes()]), &want));
        return if all_match {
            Ok(key)
        } else {
            Err(VerifyError::InvalidSignature)
        };
    }
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
            let l = Lookup::parse(&format!("query:{q}"))
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

/// The first of the provider's signature headers the request carries, as
/// text (Basic credentials, iyzico's signature).
pub(super) fn signature_header<'a>(ctx: &Ctx<'_, 'a>) -> Result<&'a str, VerifyError> {
    let v = ctx
        .sig
        .headers
        .iter()
        .find_map(|h| ctx.fields.headers().get(h.as_str()))
        .ok_or(VerifyError::MissingSignature)?;
    header_text(v)
}

pub(super) fn header_text(v: &http::HeaderValue) -> Result<&str, VerifyError> {
    if v.len() > MAX_SIGNATURE_HEADER {
        return Err(VerifyError::MalformedSignature("header too long"));
    }
    v.to_str()
        .map_err(|_| VerifyError::MalformedSignature("not visible ASCII"))
}

pub(super) fn strip_prefix_ignore_case<'a>(v: &'a str, prefix: &str) -> Option<&'a str> {
    let head = v.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &v[prefix.len()..])
}

/// The first configured secret equal to `given` (compared as SHA-256
/// digests, in constant time).
pub(super) fn matching_secret(ctx: &Ctx<'_, '_>, given: &[u8]) -> Result<usize, VerifyError> {
    let given = Algorithm::Sha256.digest(&[given]);
    ctx.source
        .keys
        .iter()
        .position(|k| mac_eq(&Algorithm::Sha256.digest(&[k.bytes()]), &given))
        .ok_or(VerifyError::InvalidSignature)
}
