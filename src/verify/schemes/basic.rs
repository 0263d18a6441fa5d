//! HTTP Basic credentials: `Authorization: Basic base64(user:password)`,
//! compared with the configured `user:password` as SHA-256 digests in
//! constant time (see `token`). It authenticates the sender, not the body.

use super::token::{matching_secret, signature_header, strip_prefix_ignore_case};
use super::{Cover, Ctx, Defaults, Part, SchemeDef, first_header};
use crate::verify::provider::Provider;
use crate::verify::VerifyError;
use crate::primitives::crypto::{Algorithm, BASE64_LENIENT, Encoding};
use crate::verify::sign::{Signed, Signer};
use base64::Engine;

pub struct Basic;

impl SchemeDef for Basic {
    const SUMMARY: &'static str = "HTTP Basic `user:password`; the body is not signed";

    const DEFAULTS: Defaults = Defaults::keyed(true, Algorithm::Sha256, Encoding::Base64);

    /// A shared credential authenticates the sender; no part of the
    /// request is signed.
    fn covers(_: &Provider, _: Part<'_>) -> Cover {
        Cover::Unsigned
    }

    fn verify(ctx: &Ctx<'_, '_>) -> Result<Option<usize>, VerifyError> {
        verify(ctx).map(Some)
    }

    fn sign(s: &Signer<'_>, out: &mut Signed) -> Result<(), String> {
        let Signer { provider, key, .. } = *s;
        let creds = base64::engine::general_purpose::STANDARD.encode(key.bytes());
        out.headers.push((
            first_header(&provider.signature),
            format!("Basic {creds}"),
        ));
        Ok(())
    }
}

fn verify(ctx: &Ctx<'_, '_>) -> Result<usize, VerifyError> {
    let v = signature_header(ctx)?;
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

