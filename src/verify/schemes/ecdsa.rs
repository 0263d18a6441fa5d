//! ECDSA P-256 / SHA-256 over the provider's signed-content template,
//! checked with the provider's public key (SendGrid's Event Webhook:
//! `{timestamp}{body}`, a base64 DER signature, the key as base64 DER
//! SubjectPublicKeyInfo).
//!
//! Rule: the source's `secrets` hold the provider's public key (PEM, or
//! base64 DER as the provider shows it), never a private key; signing takes
//! a test's own key. Headers, template and timestamp are read as the `hmac`
//! scheme reads them; only the check differs.

use super::hmac::{sign_with, verify_with};
use super::pkcs1::spki_der;
use super::{Cover, Ctx, Defaults, Part, SchemeDef};
use crate::primitives::crypto::{Algorithm, Encoding};
use crate::verify::VerifyError;
use crate::verify::provider::Provider;
use crate::verify::sign::{Signed, Signer};
use p256::ecdsa::signature::{Signer as _, Verifier as _};
use p256::ecdsa::{Signature, SigningKey, VerifyingKey};
use p256::pkcs8::{DecodePrivateKey, DecodePublicKey};

pub struct Ecdsa;

impl SchemeDef for Ecdsa {
    const SUMMARY: &'static str =
        "ECDSA P-256/SHA-256 with the provider's public key over the signed-content template";

    const DEFAULTS: Defaults = Defaults::keyed(true, Algorithm::Sha256, Encoding::Base64);

    /// DER `SEQUENCE { r, s }`: at most 72 bytes for P-256.
    const SIGNATURE_LEN: Option<(usize, usize)> = Some((8, 72));

    fn check_key(key: &[u8]) -> Result<(), String> {
        public_key(key).map(|_| ())
    }

    fn verify(ctx: &Ctx<'_, '_>) -> Result<Option<usize>, VerifyError> {
        verify_with(ctx, Some(&check)).map(Some)
    }

    fn sign(s: &Signer<'_>, out: &mut Signed) -> Result<(), String> {
        let pem = s.req.private_key.ok_or(
            "ECDSA providers sign with their own private key: pass --private-key (a test P-256 key)",
        )?;
        let key = private_key(pem)?;
        sign_with(s, out, Some(&|msg| {
            let sig: Signature = key.sign(msg);
            Ok(sig.to_der().as_bytes().to_vec())
        }))
    }

    fn covers(provider: &Provider, part: Part<'_>) -> Cover {
        super::hmac::template_covers(provider, &provider.signature.content, part)
    }
}

/// A configured P-256 public key (PEM or base64 DER SubjectPublicKeyInfo).
pub fn public_key(key: &[u8]) -> Result<VerifyingKey, String> {
    let der = spki_der(key)?;
    VerifyingKey::from_public_key_der(&der).map_err(|_| "not a P-256 public key".into())
}

/// Whether the DER `signature` is `key`'s over `message` (SHA-256). A
/// high-S signature is accepted as it is: SendGrid's signers do not
/// normalise S, and ECDSA's malleability does not let anyone sign a
/// different message.
fn check(key: &[u8], message: &[u8], signature: &[u8]) -> bool {
    let (Ok(key), Ok(sig)) = (public_key(key), Signature::from_der(signature)) else {
        return false;
    };
    key.verify(message, &sig).is_ok()
}

/// A test's private key: PKCS#8 or SEC1 PEM.
pub fn private_key(pem: &str) -> Result<SigningKey, String> {
    p256::SecretKey::from_pkcs8_pem(pem)
        .or_else(|_| p256::SecretKey::from_sec1_pem(pem))
        .map(SigningKey::from)
        .map_err(|_| "--private-key is not a P-256 private key (PEM)".into())
}
