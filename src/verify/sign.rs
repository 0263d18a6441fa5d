//! Builds the request a provider would send for a body: `hookgate sign` and
//! the tests use it to exercise a source end to end. It is the inverse of
//! `verify` and is driven by the same provider definition.
//!
//! Rule: each scheme signs in its own file (`SchemeDef::sign`), dispatched
//! through the same [`Scheme`](super::schemes::Scheme) that verifies. Some
//! schemes carry the signature in the body (Adyen, T-Bank, Robokassa,
//! Braintree): then [`Signed::body`] is the body to send instead.

use super::provider::Provider;
use crate::primitives::crypto::SigningKey;

/// What to sign.
#[derive(Default)]
pub struct SignRequest<'a> {
    pub body: &'a [u8],
    /// Unix seconds, for timestamped schemes.
    pub timestamp: i64,
    /// Event id for providers that carry it in a header; generated if `None`.
    pub event_id: Option<String>,
    /// The public URL, for schemes that sign it.
    pub url: Option<&'a str>,
    /// The query string the request will carry (Mercado Pago's `data.id`).
    pub query: Option<&'a str>,
    /// PayPal only: PayPal's private key is PayPal's, so a test key.
    pub paypal: Option<PaypalSign<'a>>,
    /// Plaid only: likewise a test P-256 key and the `kid` to name.
    pub plaid: Option<PlaidSign<'a>>,
    /// The public-key schemes (`ed25519`, `ecdsa`, `pkcs1`, `sns`): the
    /// provider signs with its own private key, so a test's key (PEM; for
    /// Ed25519 also a hex seed) whose public half the source configures.
    pub private_key: Option<&'a str>,
    /// `sns` only: the `SigningCertURL` to name when the body has none.
    pub cert_url: Option<&'a str>,
}

/// Plaid signs with its own P-256 key; tests pin the public half.
pub struct PlaidSign<'a> {
    /// PKCS#8 or SEC1 PEM of a P-256 private key.
    pub private_key_pem: &'a str,
    pub kid: &'a str,
}

/// PayPal needs an RSA private key, the webhook id and a certificate URL.
pub struct PaypalSign<'a> {
    /// PKCS#8 or PKCS#1 PEM.
    pub private_key_pem: &'a str,
    pub webhook_id: &'a str,
    pub cert_url: &'a str,
}

/// What a scheme's signer works from.
pub struct Signer<'a> {
    pub provider: &'a Provider,
    pub key: &'a SigningKey,
    pub req: &'a SignRequest<'a>,
}

/// The signed request.
#[derive(Debug, Default)]
pub struct Signed {
    pub headers: Vec<(String, String)>,
    /// The body to send when signing changed it.
    pub body: Option<Vec<u8>>,
    /// Query parameters to add to the URL (Twilio's `bodySHA256`).
    pub query: Option<String>,
}

/// Signs `req.body` as `provider` would with `key`: the event id header
/// (if the provider carries one), then whatever the scheme adds.
pub fn sign(
    provider: &Provider,
    key: &SigningKey,
    req: &SignRequest<'_>,
) -> Result<Signed, String> {
    if let Some(why) = &provider.incomplete {
        return Err(why.clone());
    }
    let mut out = Signed::default();
    if let Some(h) = provider.event_id.header() {
        let id = req
            .event_id
            .clone()
            .unwrap_or_else(|| format!("evt_{}", crate::primitives::token::random_hex()));
        out.headers.push((h.to_owned(), id));
    }
    provider
        .signature
        .scheme
        .sign(provider, key, req, &mut out)?;
    Ok(out)
}
