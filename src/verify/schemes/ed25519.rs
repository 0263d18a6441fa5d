//! Ed25519 signatures over the provider's signed-content template, checked
//! with the provider's public key (Discord: `{timestamp}{body}`, hex;
//! Telnyx: `{timestamp}|{body}`, base64).
//!
//! Rule: the source's `secrets` hold the provider's public key (32 bytes,
//! decoded per `secret_encoding`), never a private key; signing takes a
//! test's own private key. Headers, template and timestamp are read as the
//! `hmac` scheme reads them; only the check differs.

use super::hmac::{sign_with, verify_with};
use super::{Cover, Ctx, Defaults, Part, SchemeDef};
use crate::primitives::crypto::{Algorithm, Encoding};
use crate::verify::VerifyError;
use crate::verify::provider::Provider;
use crate::verify::sign::{Signed, Signer};
use ed25519_dalek::{Signature, SigningKey, VerifyingKey};

pub struct Ed25519;

impl SchemeDef for Ed25519 {
    const SUMMARY: &'static str =
        "Ed25519 with the provider's public key over the signed-content template";

    const DEFAULTS: Defaults = Defaults::keyed(true, Algorithm::Sha512, Encoding::Hex);

    const SIGNATURE_LEN: Option<(usize, usize)> = Some((64, 64));

    fn check_key(key: &[u8]) -> Result<(), String> {
        public_key(key).map(|_| ())
    }

    fn verify(ctx: &Ctx<'_, '_>) -> Result<Option<usize>, VerifyError> {
        verify_with(ctx, Some(&check)).map(Some)
    }

    fn sign(s: &Signer<'_>, out: &mut Signed) -> Result<(), String> {
        let pem = s.req.private_key.ok_or(
            "Ed25519 providers sign with their own private key: pass --private-key (a test key)",
        )?;
        let key = private_key(pem)?;
        sign_with(s, out, Some(&|msg| Ok(sign(&key, msg))))
    }

    fn covers(provider: &Provider, part: Part<'_>) -> Cover {
        super::hmac::template_covers(provider, &provider.signature.content, part)
    }
}

/// A configured public key: exactly 32 bytes that decode to a curve point.
pub fn public_key(key: &[u8]) -> Result<VerifyingKey, String> {
    let bytes: &[u8; 32] = key
        .try_into()
        .map_err(|_| format!("an Ed25519 public key is 32 bytes, this one {}", key.len()))?;
    VerifyingKey::from_bytes(bytes).map_err(|_| "not an Ed25519 public key".into())
}

/// Whether `signature` is `key`'s over `message`. Strict verification:
/// weak (small-order) keys and non-canonical points are refused, so one
/// signature cannot verify for several messages.
fn check(key: &[u8], message: &[u8], signature: &[u8]) -> bool {
    let (Ok(key), Ok(sig)) = (public_key(key), Signature::from_slice(signature)) else {
        return false;
    };
    key.verify_strict(message, &sig).is_ok()
}

/// A test's private key: PKCS#8 PEM, or the 32-byte seed in hex.
pub fn private_key(text: &str) -> Result<SigningKey, String> {
    use ed25519_dalek::pkcs8::DecodePrivateKey;
    if let Ok(k) = SigningKey::from_pkcs8_pem(text) {
        return Ok(k);
    }
    let seed: [u8; 32] = hex::decode(text.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or("--private-key is neither an Ed25519 PKCS#8 PEM nor a 32-byte hex seed")?;
    Ok(SigningKey::from_bytes(&seed))
}

/// `key`'s signature of `message`.
pub fn sign(key: &SigningKey, message: &[u8]) -> Vec<u8> {
    use ed25519_dalek::Signer as _;
    key.sign(message).to_bytes().to_vec()
}
