//! Signature schemes. `hmac` is driven entirely by the provider file; the
//! others exist because their signed content cannot be described as a
//! template (Adyen's per-item fields, Twilio's sorted parameters, PayPal's
//! certificates, …). A provider picks one with `[signature] scheme = "…"`.
//!
//! Rule: one file per scheme, holding its verification, its signer (the
//! inverse, for `hookgate sign` and the tests) and, if it has any, its
//! `[sources.<name>.<scheme>]` settings. The file implements [`SchemeDef`];
//! the [`schemes!`] list below is the only place that names every scheme,
//! so adding one is a new file plus one line there.

use super::fields::Fields;
use super::locator::Locator;
use super::provider::{Provider, Signature};
use super::sign::{SignRequest, Signed, Signer};
use super::source::Source;
use super::{GetAnswer, Incoming, VerifyError};
use crate::primitives::crypto::{Algorithm, Encoding, SigningKey, mac_eq};
use serde::Deserialize;
use std::future::Future;

/// What a scheme is: the functions every scheme file provides.
pub trait SchemeDef {
    /// What the scheme assumes and requires (see [`Defaults`]).
    const DEFAULTS: Defaults;

    /// Checks the request; `Ok(Some(i))` names the configured key that
    /// matched, `Ok(None)` a scheme that uses no configured key.
    fn verify(ctx: &Ctx<'_, '_>) -> Result<Option<usize>, VerifyError>;

    /// The inverse of [`SchemeDef::verify`]: adds the signature of
    /// `req.body` to `out` (headers, query, or a rewritten body).
    fn sign(s: &Signer<'_>, out: &mut Signed) -> Result<(), String>;

    /// The key the request names (PayPal's certificate, Plaid's JWK),
    /// obtained before the synchronous check. Most schemes need none. A
    /// scheme that awaits I/O here boxes that future: every scheme's fetch
    /// is inlined into the request's future, which is moved whole through
    /// the server's layers, so one inline HTTP client future sizes them all.
    fn fetch(
        source: &Source,
        incoming: &Incoming<'_>,
        now: i64,
    ) -> impl Future<Output = Result<Option<FetchedKey>, VerifyError>> + Send {
        let _ = (source, incoming, now);
        async { Ok(None) }
    }

    /// The answer to a `GET /webhooks/<source>`; only schemes that verify
    /// the URL with a GET challenge offer one.
    fn answer_get(source: &Source, query: Option<&str>) -> GetAnswer {
        let _ = (source, query);
        GetAnswer::NotOffered
    }

    /// What the scheme checks, in one line, for the catalogue
    /// (`docs/providers.md`); `hmac` describes itself from the provider file.
    const SUMMARY: &'static str;

    /// The verification exchange the scheme answers itself (Braintree's
    /// GET challenge), for the catalogue.
    const HANDSHAKE: Option<&'static str> = None;

    /// Where [`SchemeDef::event_type`] finds the type, for `check-config`;
    /// `None`: the scheme reads none.
    const TYPE_FROM: Option<&'static str> = None;

    /// The event type, for a scheme whose envelope hides it from locators
    /// (Braintree's base64 XML). Used only when the provider file names
    /// no `event_type`; read after verification, never decides acceptance.
    fn event_type(fields: &Fields<'_>) -> Option<String> {
        let _ = fields;
        None
    }

    /// The lengths (bytes, inclusive) a decoded signature may have, for
    /// schemes whose signatures are not a MAC of the provider's algorithm.
    const SIGNATURE_LEN: Option<(usize, usize)> = None;

    /// Checks a configured key (the decoded secret) when the config is
    /// loaded: public-key schemes parse it here.
    fn check_key(key: &[u8]) -> Result<(), String> {
        let _ = key;
        Ok(())
    }

    /// How far this scheme's signature, as `provider` configures it,
    /// covers `part` of a request (`check-config`, `/stats`: whether a
    /// source's event id and type are signed; `verify::signedness`). Every
    /// scheme answers: what it signs is its own knowledge.
    fn covers(provider: &Provider, part: Part<'_>) -> Cover;
}

/// A part of a request, as [`SchemeDef::covers`] is asked about it.
#[derive(Debug, Clone, Copy)]
pub enum Part<'a> {
    /// The body as a whole (an event id that is the body's hash).
    Body,
    /// One value a locator names.
    At(&'a Locator),
    /// The type the scheme itself reads ([`SchemeDef::event_type`]).
    OwnType,
}

/// How far a signature covers a part of the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cover {
    /// Outside the signature: whoever relays the request can change it.
    Unsigned,
    /// Covered through a CRC-32 of the body only (PayPal): not collision
    /// resistant, so a body with another value and the same CRC-32 passes.
    Checksum,
    /// A MAC or signature covers it.
    Signed,
}

impl Cover {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unsigned => "unsigned",
            Self::Checksum => "crc32",
            Self::Signed => "signed",
        }
    }

    /// `Signed` when `yes`.
    pub fn signed_if(yes: bool) -> Self {
        if yes { Self::Signed } else { Self::Unsigned }
    }
}

/// Declares the scheme modules and the [`Scheme`] enum, and dispatches each
/// [`SchemeDef`] function over it. The module name is the scheme's name in
/// provider files.
macro_rules! schemes {
    ($($(#[$attr:meta])* $variant:ident => $module:ident :: $def:ident,)*) => {
        $(pub mod $module;)*

        #[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
        #[serde(rename_all = "lowercase")]
        pub enum Scheme {
            $($(#[$attr])* $variant,)*
        }

        impl Scheme {
            /// Every scheme, in list order.
            pub const ALL: &[Scheme] = &[$(Self::$variant),*];

            pub fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => stringify!($module),)*
                }
            }

            pub fn defaults(self) -> Defaults {
                match self {
                    $(Self::$variant => <$module::$def as SchemeDef>::DEFAULTS,)*
                }
            }

            /// Checks the request; see [`SchemeDef::verify`].
            pub fn verify(self, ctx: &Ctx<'_, '_>) -> Result<Option<usize>, VerifyError> {
                match self {
                    $(Self::$variant => <$module::$def as SchemeDef>::verify(ctx),)*
                }
            }

            /// Signs a request; see [`SchemeDef::sign`].
            pub fn sign(
                self,
                provider: &Provider,
                key: &SigningKey,
                req: &SignRequest<'_>,
                out: &mut Signed,
            ) -> Result<(), String> {
                let s = Signer { provider, key, req };
                match self {
                    $(Self::$variant => <$module::$def as SchemeDef>::sign(&s, out),)*
                }
            }

            /// The key the request names, if the scheme fetches one.
            pub async fn fetch(
                self,
                source: &Source,
                incoming: &Incoming<'_>,
                now: i64,
            ) -> Result<Option<FetchedKey>, VerifyError> {
                match self {
                    $(Self::$variant => <$module::$def as SchemeDef>::fetch(source, incoming, now).await,)*
                }
            }

            /// What the scheme checks; see [`SchemeDef::SUMMARY`].
            pub fn summary(self) -> &'static str {
                match self {
                    $(Self::$variant => <$module::$def as SchemeDef>::SUMMARY,)*
                }
            }

            /// The exchange the scheme answers; see [`SchemeDef::HANDSHAKE`].
            pub fn handshake(self) -> Option<&'static str> {
                match self {
                    $(Self::$variant => <$module::$def as SchemeDef>::HANDSHAKE,)*
                }
            }

            /// Where the scheme reads its own event type; see [`SchemeDef::TYPE_FROM`].
            pub fn type_from(self) -> Option<&'static str> {
                match self {
                    $(Self::$variant => <$module::$def as SchemeDef>::TYPE_FROM,)*
                }
            }

            /// The scheme's own event type; see [`SchemeDef::event_type`].
            pub fn event_type(self, fields: &Fields<'_>) -> Option<String> {
                match self {
                    $(Self::$variant => <$module::$def as SchemeDef>::event_type(fields),)*
                }
            }

            /// See [`SchemeDef::SIGNATURE_LEN`].
            pub fn signature_len(self) -> Option<(usize, usize)> {
                match self {
                    $(Self::$variant => <$module::$def as SchemeDef>::SIGNATURE_LEN,)*
                }
            }

            /// See [`SchemeDef::check_key`].
            pub fn check_key(self, key: &[u8]) -> Result<(), String> {
                match self {
                    $(Self::$variant => <$module::$def as SchemeDef>::check_key(key),)*
                }
            }

            /// What the signature covers; see [`SchemeDef::covers`].
            pub fn covers(self, provider: &Provider, part: Part<'_>) -> Cover {
                match self {
                    $(Self::$variant => <$module::$def as SchemeDef>::covers(provider, part),)*
                }
            }

            /// Answers a GET challenge; see [`SchemeDef::answer_get`].
            pub fn answer_get(self, source: &Source, query: Option<&str>) -> GetAnswer {
                match self {
                    $(Self::$variant => <$module::$def as SchemeDef>::answer_get(source, query),)*
                }
            }
        }
    };
}

schemes! {
    /// MAC over a signed-content template (most providers).
    #[default]
    Hmac => hmac::Hmac,
    /// HMAC over eight fields of every notification item, in the body.
    Adyen => adyen::Adyen,
    /// RSA-SHA256 with PayPal's certificate over `id|time|webhook_id|crc32`.
    Paypal => paypal::Paypal,
    /// ES256 JWS in `Plaid-Verification` with a body-hash claim; keys by `kid`.
    Plaid => plaid::Plaid,
    /// HMAC-SHA1 over the public URL plus sorted form parameters.
    Twilio => twilio::Twilio,
    /// HMAC-SHA1 (key = SHA-1 of the private key) over the `bt_payload` field.
    Braintree => braintree::Braintree,
    /// SHA-256 over sorted root values plus the terminal password (`Token`).
    Tbank => tbank::Tbank,
    /// Digest of `OutSum:InvId:Password2[:Shp_…]` (`SignatureValue`).
    Robokassa => robokassa::Robokassa,
    /// HMAC-SHA256 over the secret key and the fields of iyzico's payment
    /// notification format (direct or hosted page).
    Iyzico => iyzico::Iyzico,
    /// Ed25519 over the signed-content template (Discord, Telnyx).
    Ed25519 => ed25519::Ed25519,
    /// ECDSA P-256 / SHA-256 over the signed-content template (SendGrid).
    Ecdsa => ecdsa::Ecdsa,
    /// RSASSA-PKCS1-v1_5 / SHA-256 with a configured public key over the
    /// signed-content template (Wise).
    Pkcs1 => pkcs1::Pkcs1,
    /// RSA with the certificate SNS names, fetched from SNS hosts only,
    /// over the canonical string of the message's fields.
    Sns => sns::Sns,
    /// HMAC over a canonical request: method, path or URL, a header set
    /// and the body (Contentful, HubSpot v3).
    Canonical => canonical::Canonical,
    /// A shared token in a header or query parameter.
    Token => token::Token,
    /// An HS256 JWT with the shared secret in a header (monday.com).
    Jwt => jwt::Jwt,
    /// HTTP Basic credentials.
    Basic => basic::Basic,
    /// No signature: the source must restrict `allow_ips`.
    None => none::Unsigned,
}

/// What a scheme assumes when the provider file leaves a field out, and
/// what it requires of a source.
pub struct Defaults {
    pub needs_header: bool,
    pub algorithm: Option<Algorithm>,
    pub encoding: Option<Encoding>,
    /// Verifies with the source's `secrets` (PayPal and Plaid use the
    /// provider's own keys, unsigned sources none).
    pub needs_secret: bool,
    /// Signs the URL the provider called, so the source needs `public_url`.
    pub signs_url: bool,
    /// Unsigned: only safe behind a source IP allowlist.
    pub needs_allow_ips: bool,
}

impl Defaults {
    /// A scheme that takes its MAC from a secret and reads no URL.
    pub const fn keyed(needs_header: bool, algorithm: Algorithm, encoding: Encoding) -> Self {
        Self {
            needs_header,
            algorithm: Some(algorithm),
            encoding: Some(encoding),
            needs_secret: true,
            signs_url: false,
            needs_allow_ips: false,
        }
    }
}

/// A source's scheme-specific settings (`[sources.<name>.<scheme>]`), built
/// by the scheme's own `Raw::build` during config validation.
#[derive(Debug)]
pub enum SchemeSettings {
    /// Boxed: the certificate caches and fetch state are large.
    Paypal(Box<paypal::Settings>),
    /// Boxed: the key cache is several times larger than the others.
    Plaid(Box<plaid::keys::Settings>),
    Braintree(braintree::Settings),
    /// Boxed: the certificate cache and HTTP client, as PayPal's.
    Sns(Box<sns::Settings>),
}

impl SchemeSettings {
    /// The keys this scheme fetches by name, if it fetches any.
    pub fn remote_keys(&self) -> Option<&dyn crate::verify::key_cache::RemoteKeys> {
        match self {
            Self::Paypal(s) => Some(s.as_ref()),
            Self::Plaid(s) => Some(s.as_ref()),
            // SNS certificates are cached and budgeted like PayPal's, but
            // not yet kept in the ledger.
            Self::Braintree(_) | Self::Sns(_) => None,
        }
    }
}

/// Everything a scheme may look at.
pub struct Ctx<'a, 'f> {
    pub source: &'a Source,
    pub sig: &'a Signature,
    pub fields: &'a Fields<'f>,
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
    Paypal(std::sync::Arc<rsa::PublicKey>),
    Plaid(std::sync::Arc<plaid::Key>),
    Sns(std::sync::Arc<rsa::PublicKey>),
}

/// The index of the first key whose MAC of `parts` equals a candidate.
/// Every key is tried against every candidate (rotation).
pub fn matching_key(ctx: &Ctx<'_, '_>, parts: &[&[u8]], candidates: &[Vec<u8>]) -> Option<usize> {
    ctx.source.keys.iter().position(|key| {
        let expected = ctx.sig.algorithm.mac(key.bytes(), parts);
        candidates.iter().any(|c| mac_eq(&expected, c))
    })
}

/// The first configured secret whose digest (computed by `digest` from the
/// secret's text) equals `given`: for schemes that hash the secret into the
/// signed text (T-Bank, Robokassa).
pub fn secret_position(
    ctx: &Ctx<'_, '_>,
    digest: impl Fn(&str) -> Vec<u8>,
    given: &[u8],
) -> Result<usize, VerifyError> {
    ctx.source
        .keys
        .iter()
        .position(|k| mac_eq(&digest(&password(k)), given))
        .ok_or(VerifyError::InvalidSignature)
}

/// The raw secret as configured (T-Bank password, Robokassa password #2,
/// tokens): raw secrets are the UTF-8 text as written.
pub fn password(key: &SigningKey) -> String {
    String::from_utf8_lossy(key.bytes()).into_owned()
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

/// The first signature header the provider names, for schemes that sign
/// into one header.
pub fn first_header(sig: &Signature) -> String {
    sig.first_header().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scheme_name_is_its_provider_file_spelling() {
        for s in Scheme::ALL {
            let parsed: Scheme = serde_json::from_value(s.name().into()).unwrap();
            assert_eq!(parsed, *s);
        }
        assert_eq!(Scheme::default(), Scheme::Hmac);
    }
}
