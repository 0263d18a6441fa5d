//! Signature schemes. `hmac` is driven entirely by the provider file; the
//! others exist because their signed content cannot be described as a
//! template (Adyen's per-item fields, Twilio's sorted parameters, PayPal's
//! certificates, …). A provider picks one with `[signature] scheme = "…"`.

pub mod adyen;
pub mod braintree;
pub mod digest_forms;
pub mod hmac;
pub mod paypal;
pub mod plaid;
pub mod plaid_keys;
pub mod token;
pub mod twilio;

use super::VerifyError;
use super::provider::Signature;
use super::request::Fields;
use super::scheme::{Algorithm, Encoding, mac_eq};
use crate::config::Source;
use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    /// MAC over a signed-content template (most providers).
    #[default]
    Hmac,
    /// HMAC over eight fields of every notification item, in the body.
    Adyen,
    /// RSA-SHA256 with PayPal's certificate over `id|time|webhook_id|crc32`.
    Paypal,
    /// ES256 JWS in `Plaid-Verification` with a body-hash claim; keys by `kid`.
    Plaid,
    /// HMAC-SHA1 over the public URL plus sorted form parameters.
    Twilio,
    /// HMAC-SHA1 (key = SHA-1 of the private key) over the `bt_payload` field.
    Braintree,
    /// SHA-256 over sorted root values plus the terminal password (`Token`).
    Tbank,
    /// Digest of `OutSum:InvId:Password2[:Shp_…]` (`SignatureValue`).
    Robokassa,
    /// A shared token in a header or query parameter.
    Token,
    /// HTTP Basic credentials.
    Basic,
    /// No signature: the source must restrict `allow_ips`.
    None,
}

/// What a scheme assumes when the provider file leaves a field out.
pub struct Defaults {
    pub needs_header: bool,
    pub algorithm: Option<Algorithm>,
    pub encoding: Option<Encoding>,
}

impl Scheme {
    pub fn name(self) -> &'static str {
        match self {
            Self::Hmac => "hmac",
            Self::Adyen => "adyen",
            Self::Paypal => "paypal",
            Self::Plaid => "plaid",
            Self::Twilio => "twilio",
            Self::Braintree => "braintree",
            Self::Tbank => "tbank",
            Self::Robokassa => "robokassa",
            Self::Token => "token",
            Self::Basic => "basic",
            Self::None => "none",
        }
    }

    pub fn defaults(self) -> Defaults {
        use Algorithm as A;
        use Encoding as E;
        let (needs_header, a, e) = match self {
            Self::Hmac => (true, None, None),
            Self::Twilio => (true, Some(A::HmacSha1), Some(E::Base64)),
            Self::Basic => (true, Some(A::Sha256), Some(E::Base64)),
            Self::Adyen => (false, Some(A::HmacSha256), Some(E::Base64)),
            Self::Paypal => (false, Some(A::Sha256), Some(E::Base64)),
            Self::Plaid => (true, Some(A::Sha256), Some(E::Hex)),
            Self::Braintree => (false, Some(A::HmacSha1), Some(E::Hex)),
            Self::Tbank => (false, Some(A::Sha256), Some(E::Hex)),
            Self::Robokassa => (false, Some(A::Md5), Some(E::Hex)),
            Self::Token | Self::None => (false, Some(A::Sha256), Some(E::Hex)),
        };
        Defaults {
            needs_header,
            algorithm: a,
            encoding: e,
        }
    }
}

/// Everything a scheme may look at.
pub struct Ctx<'a> {
    pub source: &'a Source,
    pub sig: &'a Signature,
    pub fields: &'a Fields<'a>,
    /// Unix seconds.
    pub now: i64,
    /// The URL the provider called: the source's `public_url` with the
    /// request's query string (never the Host header).
    pub url: Option<&'a str>,
    /// PayPal's certificate key or Plaid's JWK for this request, obtained
    /// before the synchronous check.
    pub fetched: Option<&'a FetchedKey>,
}

/// A key a scheme had to look up (pinned, cached or fetched) by something
/// the request names: PayPal's certificate URL, Plaid's `kid`.
#[derive(Debug, Clone)]
pub enum FetchedKey {
    Paypal(std::sync::Arc<rsa::RsaPublicKey>),
    Plaid(std::sync::Arc<plaid::Key>),
}

impl Ctx<'_> {
    pub fn paypal_key(&self) -> Option<&rsa::RsaPublicKey> {
        match self.fetched {
            Some(FetchedKey::Paypal(k)) => Some(k),
            _ => None,
        }
    }
    pub fn plaid_key(&self) -> Option<&plaid::Key> {
        match self.fetched {
            Some(FetchedKey::Plaid(k)) => Some(k),
            _ => None,
        }
    }
}

/// Checks the request; `Ok(Some(i))` names the configured key that matched.
pub fn verify(ctx: &Ctx<'_>) -> Result<Option<usize>, VerifyError> {
    match ctx.sig.scheme {
        Scheme::Hmac => hmac::verify(ctx).map(Some),
        Scheme::Adyen => adyen::verify(ctx).map(Some),
        Scheme::Paypal => paypal::verify(ctx).map(|()| None),
        Scheme::Plaid => plaid::verify(ctx).map(|()| None),
        Scheme::Twilio => twilio::verify(ctx).map(Some),
        Scheme::Braintree => braintree::verify(ctx).map(Some),
        Scheme::Tbank => digest_forms::verify_tbank(ctx).map(Some),
        Scheme::Robokassa => digest_forms::verify_robokassa(ctx).map(Some),
        Scheme::Token => token::verify_token(ctx).map(Some),
        Scheme::Basic => token::verify_basic(ctx).map(Some),
        Scheme::None => Ok(None),
    }
}

/// The index of the first key whose MAC of `parts` equals a candidate.
/// Every key is tried against every candidate (rotation).
pub fn matching_key(ctx: &Ctx<'_>, parts: &[&[u8]], candidates: &[Vec<u8>]) -> Option<usize> {
    ctx.source.keys.iter().position(|key| {
        let expected = ctx.sig.algorithm.mac(key.bytes(), parts);
        candidates.iter().any(|c| mac_eq(&expected, c))
    })
}

/// Decodes a hex digest case-insensitively (Robokassa sends uppercase).
pub fn decode_hex(text: &str, want: usize) -> Result<Vec<u8>, VerifyError> {
    match hex::decode(text.trim()) {
        Ok(b) if b.len() == want => Ok(b),
        _ => Err(VerifyError::MalformedSignature(
            "signature is not valid encoding",
        )),
    }
}
