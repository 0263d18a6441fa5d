//! Cryptographic primitives every scheme builds on, and that delivery (the
//! gateway's own signature) and admin (the token check) use too: MAC and
//! digest algorithms, signature and secret encodings, [`SigningKey`] and
//! the constant-time comparison.
//!
//! Rule: knows neither schemes nor providers; all MAC comparison goes
//! through [`mac_eq`].

use base64::Engine;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::{DecodePaddingMode, general_purpose};
use hmac::{KeyInit, Mac};
use serde::Deserialize;
use std::fmt;
use subtle::ConstantTimeEq;

use super::secret::Secret;

/// Standard base64 that accepts input with or without padding.
pub const BASE64_LENIENT: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// URL-safe base64 that accepts input with or without padding.
pub const BASE64URL_LENIENT: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// MAC algorithm named in a provider file (`algorithm = "hmac-sha256"`).
/// The plain digests are for schemes that put the secret into the hashed
/// text themselves (T-Bank, Robokassa); the `hmac` scheme refuses them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    /// Patreon signs with HMAC-MD5 (still a sound MAC, though MD5 is not
    /// collision resistant).
    HmacMd5,
    HmacSha1,
    HmacSha256,
    HmacSha512,
    Md5,
    Sha1,
    Sha256,
    Sha384,
    Sha512,
}

impl Algorithm {
    pub fn is_hmac(self) -> bool {
        matches!(
            self,
            Self::HmacMd5 | Self::HmacSha1 | Self::HmacSha256 | Self::HmacSha512
        )
    }

    /// Plain digest of the concatenation of `parts` (the key is not used).
    pub fn digest(self, parts: &[&[u8]]) -> Vec<u8> {
        fn run<D: sha2::Digest>(parts: &[&[u8]]) -> Vec<u8> {
            let mut d = D::new();
            for p in parts {
                d.update(p);
            }
            d.finalize().to_vec()
        }
        match self {
            Self::Md5 | Self::HmacMd5 => run::<md5::Md5>(parts),
            Self::Sha1 | Self::HmacSha1 => run::<sha1::Sha1>(parts),
            Self::Sha256 | Self::HmacSha256 => run::<sha2::Sha256>(parts),
            Self::Sha384 => run::<sha2::Sha384>(parts),
            Self::Sha512 | Self::HmacSha512 => run::<sha2::Sha512>(parts),
        }
    }

    /// MAC of the concatenation of `parts` (no copy of the signed content is
    /// made); for a plain digest, the digest of `parts`.
    pub fn mac(self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        fn run<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
            // HMAC accepts keys of any length, so this cannot fail.
            let mut m = <M as KeyInit>::new_from_slice(key).expect("hmac takes any key length");
            for p in parts {
                m.update(p);
            }
            m.finalize().into_bytes().to_vec()
        }
        match self {
            Self::HmacMd5 => run::<hmac::Hmac<md5::Md5>>(key, parts),
            Self::HmacSha1 => run::<hmac::Hmac<sha1::Sha1>>(key, parts),
            Self::HmacSha256 => run::<hmac::Hmac<sha2::Sha256>>(key, parts),
            Self::HmacSha512 => run::<hmac::Hmac<sha2::Sha512>>(key, parts),
            plain => plain.digest(parts),
        }
    }

    pub fn output_len(self) -> usize {
        match self {
            Self::Md5 | Self::HmacMd5 => 16,
            Self::HmacSha1 | Self::Sha1 => 20,
            Self::HmacSha256 | Self::Sha256 => 32,
            Self::Sha384 => 48,
            Self::HmacSha512 | Self::Sha512 => 64,
        }
    }
}

/// How signature bytes are written in a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    Hex,
    Base64,
    /// The URL-safe alphabet (`-`, `_`), written without padding (Sanity).
    Base64url,
}

impl Encoding {
    pub fn encode(self, bytes: &[u8]) -> String {
        match self {
            Self::Hex => hex::encode(bytes),
            Self::Base64 => general_purpose::STANDARD.encode(bytes),
            Self::Base64url => general_purpose::URL_SAFE_NO_PAD.encode(bytes),
        }
    }

    /// `None` for text that is not valid in this encoding (e.g. truncated).
    pub fn decode(self, text: &str) -> Option<Vec<u8>> {
        match self {
            // Into a buffer of the final size: `hex::decode` collects an
            // iterator of results, which costs far more per byte on a
            // path every hex signature takes. Odd or invalid text fails.
            Self::Hex => {
                let mut out = vec![0; text.len() / 2];
                hex::decode_to_slice(text, &mut out).ok().map(|()| out)
            }
            Self::Base64 => BASE64_LENIENT.decode(text).ok(),
            Self::Base64url => BASE64URL_LENIENT.decode(text).ok(),
        }
    }
}

/// How the configured secret string becomes key bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SecretEncoding {
    /// The UTF-8 bytes of the secret as written (Stripe keeps its `whsec_`).
    #[default]
    Raw,
    /// Base64 after stripping a prefix (Standard Webhooks `whsec_…`).
    Base64,
    /// Hex (Adyen HMAC keys).
    Hex,
    /// The SHA-1 digest of the secret's UTF-8 bytes (Braintree keys its
    /// HMAC with SHA-1 of the private key).
    Sha1,
}

/// Key bytes derived from a secret. Prints `[redacted]`.
#[derive(Clone)]
pub struct SigningKey(Vec<u8>);

impl SigningKey {
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }

    /// Decodes `secret` per `encoding` after removing the first matching prefix.
    pub fn decode(
        secret: &Secret,
        encoding: SecretEncoding,
        strip_prefixes: &[String],
    ) -> Result<Self, String> {
        let mut text = secret.expose();
        if let Some(p) = strip_prefixes.iter().find(|p| text.starts_with(p.as_str())) {
            text = &text[p.len()..];
        }
        let bytes = match encoding {
            SecretEncoding::Raw => text.as_bytes().to_vec(),
            SecretEncoding::Base64 => BASE64_LENIENT
                .decode(text)
                .map_err(|_| "secret is not valid base64 (after its prefix)".to_owned())?,
            SecretEncoding::Hex => {
                hex::decode(text).map_err(|_| "secret is not valid hex".to_owned())?
            }
            SecretEncoding::Sha1 if text.is_empty() => vec![],
            SecretEncoding::Sha1 => Algorithm::Sha1.digest(&[text.as_bytes()]),
        };
        if bytes.is_empty() {
            return Err("secret is empty".into());
        }
        Ok(Self(bytes))
    }

    /// The key of a Standard Webhooks secret: `whsec_<base64>`; any other
    /// value is used as raw bytes (so a plain password works too).
    pub fn standard_webhooks(secret: &Secret) -> Self {
        let text = secret.expose();
        match text
            .strip_prefix("whsec_")
            .map(|b| BASE64_LENIENT.decode(b))
        {
            Some(Ok(bytes)) if !bytes.is_empty() => Self(bytes),
            _ => Self(text.as_bytes().to_vec()),
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningKey([redacted])")
    }
}

/// Constant-time equality of two MACs (lengths are public).
pub fn mac_eq(expected: &[u8], given: &[u8]) -> bool {
    expected.len() == given.len() && bool::from(expected.ct_eq(given))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_accepts_missing_padding_and_rejects_truncation() {
        assert_eq!(Encoding::Base64.decode("YWJj").unwrap(), b"abc");
        assert_eq!(Encoding::Base64.decode("YWI").unwrap(), b"ab");
        assert!(Encoding::Base64.decode("Y").is_none());
        // URL-safe: `-` and `_` for `+` and `/`, padding optional.
        assert_eq!(Encoding::Base64url.decode("-_8").unwrap(), vec![0xfb, 0xff]);
        assert_eq!(
            Encoding::Base64url.decode("-_8=").unwrap(),
            vec![0xfb, 0xff]
        );
        assert_eq!(Encoding::Base64url.encode(&[0xfb, 0xff]), "-_8");
        assert!(Encoding::Base64url.decode("+/8=").is_none());
        assert!(Encoding::Hex.decode("abc").is_none());
        assert_eq!(Encoding::Hex.decode("ABcd").unwrap(), vec![0xab, 0xcd]);
    }

    #[test]
    fn hex_decodes_as_the_hex_crate_does() {
        for text in [
            "",
            "00",
            "ff00",
            "0g",
            "abc",
            "a",
            " ab",
            "ab ",
            "é0",
            "0123456789abcdefABCDEF",
        ] {
            assert_eq!(
                Encoding::Hex.decode(text),
                hex::decode(text).ok(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn mac_of_parts_equals_mac_of_concatenation() {
        let a = Algorithm::HmacSha256.mac(b"k", &[b"12", b".", b"body"]);
        let b = Algorithm::HmacSha256.mac(b"k", &[b"12.body"]);
        assert_eq!(a, b);
        assert_eq!(a.len(), Algorithm::HmacSha256.output_len());
        assert_eq!(Algorithm::HmacSha1.mac(b"k", &[b"x"]).len(), 20);
        assert_eq!(Algorithm::HmacSha512.mac(b"k", &[b"x"]).len(), 64);
        // RFC 2202 test case 2 for HMAC-MD5.
        assert_eq!(
            hex::encode(Algorithm::HmacMd5.mac(b"Jefe", &[b"what do ya want ", b"for nothing?"])),
            "750c783e6ab0b503eaa86e310a5db738"
        );
        for a in [
            Algorithm::Md5,
            Algorithm::Sha1,
            Algorithm::Sha256,
            Algorithm::Sha384,
            Algorithm::Sha512,
        ] {
            assert_eq!(a.mac(b"ignored", &[b"x"]).len(), a.output_len());
            assert!(!a.is_hmac());
        }
        // md5("abc"), RFC 1321 test suite.
        assert_eq!(
            hex::encode(Algorithm::Md5.digest(&[b"a", b"bc"])),
            "900150983cd24fb0d6963f7d28e17f72"
        );
    }

    #[test]
    fn constant_time_compare_checks_length_and_bytes() {
        assert!(mac_eq(b"abc", b"abc"));
        assert!(!mac_eq(b"abc", b"abd"));
        assert!(!mac_eq(b"abc", b"ab"));
    }

    #[test]
    fn signing_key_debug_is_redacted() {
        let k = SigningKey::from_bytes(b"hunter2".to_vec());
        assert!(!format!("{k:?}").contains("hunter2"));
    }

    #[test]
    fn standard_webhooks_secret_is_base64_after_prefix() {
        let k = SigningKey::standard_webhooks(&Secret::new("whsec_aGVsbG8="));
        assert_eq!(k.bytes(), b"hello");
        let raw = SigningKey::standard_webhooks(&Secret::new("plain"));
        assert_eq!(raw.bytes(), b"plain");
    }
}
