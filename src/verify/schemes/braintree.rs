//! Braintree: a form body with `bt_signature` and `bt_payload`. The
//! signature is `public_key|hex` pairs joined with `&`; each hex is
//! HMAC-SHA1 over the `bt_payload` text keyed with SHA-1 of the private key
//! (the source's secret; `secret_encoding = "sha1"` derives it). Every pair
//! is tried against every key, so the public key need not be configured: a
//! match proves knowledge of the private key either way.

use super::hmac::{MAX_CANDIDATES, decode_candidates};
use super::{Ctx, matching_key};
use crate::verify::VerifyError;

pub fn verify(ctx: &Ctx<'_>) -> Result<usize, VerifyError> {
    if std::str::from_utf8(ctx.fields.body()).is_err() {
        return Err(VerifyError::BadBody("form body is not UTF-8"));
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
    let pairs: Vec<&str> = signature
        .split('&')
        .filter_map(|p| p.split_once('|').map(|(_, sig)| sig))
        .take(MAX_CANDIDATES + 1)
        .collect();
    let candidates = decode_candidates(ctx.sig, &pairs)?;
    // The SDK accepts the payload with or without one trailing newline.
    let trimmed = payload.strip_suffix('\n').unwrap_or(payload);
    for p in [payload, trimmed] {
        if let Some(k) = matching_key(ctx, &[p.as_bytes()], &candidates) {
            return Ok(k);
        }
    }
    Err(VerifyError::InvalidSignature)
}
