//! RSASSA-PKCS1-v1_5 / SHA-256 over the provider's signed-content
//! template, checked with a public key the provider publishes (Wise signs
//! the body; its live and sandbox keys are printed in its docs).
//!
//! Rule: the source's `secrets` hold the provider's public key (PEM, or
//! base64 DER SubjectPublicKeyInfo), never a private key; signing takes a
//! test's own key. Headers, template and timestamp are read as the `hmac`
//! scheme reads them; only the check differs.

use super::hmac::{sign_with, verify_with};
use super::{Cover, Ctx, Defaults, Part, SchemeDef};
use crate::primitives::crypto::{Algorithm, Encoding};
use crate::verify::VerifyError;
use crate::verify::provider::Provider;
use crate::verify::sign::{Signed, Signer};
use base64::Engine;
use rsa::pkcs1v15::{Signature, SigningKey, VerifyingKey};
use rsa::pkcs8::DecodePublicKey;
use rsa::signature::{SignatureEncoding, Signer as _, Verifier as _};
use sha2::Sha256;

/// RSA keys below this size are refused (NIST SP 800-131A disallows
/// signatures with anything shorter than 2048 bits).
const MIN_BITS: usize = 2048;

pub struct Pkcs1;

impl SchemeDef for Pkcs1 {
    const SUMMARY: &'static str =
        "RSA PKCS#1 v1.5/SHA-256 with the provider's public key over the signed-content template";

    const DEFAULTS: Defaults = Defaults::keyed(true, Algorithm::Sha256, Encoding::Base64);

    /// 2048- to 8192-bit moduli.
    const SIGNATURE_LEN: Option<(usize, usize)> = Some((256, 1024));

    fn check_key(key: &[u8]) -> Result<(), String> {
        public_key(key).map(|_| ())
    }

    fn verify(ctx: &Ctx<'_, '_>) -> Result<Option<usize>, VerifyError> {
        verify_with(ctx, Some(&check)).map(Some)
    }

    fn sign(s: &Signer<'_>, out: &mut Signed) -> Result<(), String> {
        let pem = s.req.private_key.ok_or(
            "RSA providers sign with their own private key: pass --private-key (a test key)",
        )?;
        let key = SigningKey::<Sha256>::new(private_key(pem)?);
        sign_with(s, out, Some(&|msg| Ok(key.sign(msg).to_vec())))
    }

    fn covers(provider: &Provider, part: Part<'_>) -> Cover {
        super::hmac::template_covers(provider, &provider.signature.content, part)
    }
}

/// DER SubjectPublicKeyInfo from a configured key: PEM (`-----BEGIN PUBLIC
/// KEY-----`), or its base64 body alone, line breaks allowed, as providers
/// print their keys.
pub fn spki_der(key: &[u8]) -> Result<Vec<u8>, String> {
    let text = std::str::from_utf8(key).map_err(|_| "a public key is text (PEM or base64)")?;
    let body: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("-----"))
        .flat_map(|l| l.chars().filter(|c| !c.is_whitespace()))
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(|_| "a public key is PEM or base64 DER".into())
}

/// A configured RSA public key of at least [`MIN_BITS`].
pub fn public_key(key: &[u8]) -> Result<rsa::PublicKey, String> {
    let der = spki_der(key)?;
    let key = rsa::PublicKey::from_public_key_der(&der).map_err(|_| "not an RSA public key")?;
    let bits = rsa::traits::PublicKeyParts::size(&key) * 8;
    if bits < MIN_BITS {
        return Err(format!("an RSA key of {bits} bits is too short (at least {MIN_BITS})"));
    }
    Ok(key)
}

fn check(key: &[u8], message: &[u8], signature: &[u8]) -> bool {
    let (Ok(key), Ok(sig)) = (public_key(key), Signature::try_from(signature)) else {
        return false;
    };
    VerifyingKey::<Sha256>::new(key).verify(message, &sig).is_ok()
}

/// A test's RSA private key: PKCS#8 or PKCS#1 PEM.
pub fn private_key(pem: &str) -> Result<rsa::PrivateKey, String> {
    use rsa::pkcs1::DecodeRsaPrivateKey;
    use rsa::pkcs8::DecodePrivateKey;
    rsa::PrivateKey::from_pkcs8_pem(pem)
        .or_else(|_| rsa::PrivateKey::from_pkcs1_pem(pem))
        .map_err(|_| "--private-key is not an RSA private key (PEM)".to_owned())
}
