//! Plaid: the `Plaid-Verification` header is a compact JWS (a JWT) signed
//! with ES256 by the key named in its `kid`; its claims carry `iat` and
//! `request_body_sha256` (hex SHA-256 of the raw body).
//!
//! Rule: only `alg = "ES256"` is accepted (no `none`, no HMAC with the
//! public key as secret), the body hash is compared in constant time, and
//! `iat` must lie within the source's tolerance (default 5 minutes). Keys
//! come from [`keys`] (pinned, cached, or fetched from Plaid's API).

pub mod keys;

use super::{Cover, Ctx, Defaults, FetchedKey, Part, Scheme, SchemeDef, SchemeSettings, first_header};
use crate::primitives::crypto::{Algorithm, Encoding, mac_eq};
use crate::verify::locator::Locator;
use crate::verify::provider::Provider;
use crate::verify::sign::{PlaidSign, SignRequest, Signed, Signer};
use crate::verify::source::{Resolve, SettingsTable, Source};
use crate::verify::{Incoming, VerifyError};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use p256::ecdsa::signature::Verifier;
use p256::ecdsa::{Signature, VerifyingKey};
use serde::Deserialize;
use sha2::{Digest, Sha256};

pub const HEADER: &str = "plaid-verification";
/// A JWT of a few hundred bytes; anything far larger is not Plaid's.
const MAX_TOKEN: usize = 4096;
const MAX_KID: usize = 128;

pub struct Plaid;

impl SchemeDef for Plaid {
    const SUMMARY: &'static str = "ES256 JWS (key fetched by `kid`) with a SHA-256 claim of the body";

    const DEFAULTS: Defaults = Defaults {
        needs_secret: false,
        ..Defaults::keyed(true, Algorithm::Sha256, Encoding::Hex)
    };

    /// The body, through the JWT's `request_body_sha256` claim.
    fn covers(_: &Provider, part: Part<'_>) -> Cover {
        Cover::signed_if(matches!(
            part,
            Part::Body | Part::At(Locator::Json(_) | Locator::Form(_))
        ))
    }

    fn verify(ctx: &Ctx<'_, '_>) -> Result<Option<usize>, VerifyError> {
        verify(ctx).map(|()| None)
    }

    /// Plaid signs with its own P-256 key, so this needs a test key.
    fn sign(s: &Signer<'_>, out: &mut Signed) -> Result<(), String> {
        let Signer { provider, req, .. } = *s;
        let p = req.plaid.as_ref().ok_or(
            "Plaid signs with its own private key: pass --private-key (a test P-256 key)",
        )?;
        out.headers
            .push((first_header(&provider.signature), sign_token(p, req)?));
        Ok(())
    }

    async fn fetch(
        source: &Source,
        incoming: &Incoming<'_>,
        now: i64,
    ) -> Result<Option<FetchedKey>, VerifyError> {
        match &source.settings {
            Some(SchemeSettings::Plaid(settings)) => {
                // Boxed: see `SchemeDef::fetch`.
                let key = Box::pin(settings.key_for(
                    &incoming.headers,
                    &incoming.body,
                    source.tolerance,
                    incoming.client_ip,
                    now,
                ))
                .await?;
                Ok(Some(FetchedKey::Plaid(key)))
            }
            _ => Ok(None),
        }
    }
}

/// `[sources.<name>.plaid]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Raw {
    /// Plaid API client id (secret: `env:`, `file:` or literal). Required
    /// unless `keys` are pinned.
    pub client_id: Option<String>,
    /// Plaid API secret for the chosen environment (`env:`, `file:` or
    /// literal). Required unless `keys` are pinned.
    pub secret: Option<String>,
    /// `production` (default) or `sandbox`: which Plaid host the keys are
    /// fetched from (`production.plaid.com` / `sandbox.plaid.com`).
    #[serde(default = "default_environment")]
    pub environment: String,
    /// Pinned verification keys, each a JWK as JSON (or `file:PATH` /
    /// `env:NAME`): nothing is ever fetched (air-gapped installs).
    #[serde(default)]
    pub keys: Vec<String>,
    /// Replaces Plaid's API host; accepted for loopback URLs only (tests).
    pub api_base: Option<String>,
}

fn default_environment() -> String {
    "production".into()
}

impl SettingsTable for Raw {
    const SCHEME: Scheme = Scheme::Plaid;
    const TABLE: &'static str = "plaid";
    const TITLE: &'static str = "Plaid";

    fn build(&self, key: &str, cx: &mut dyn Resolve) -> Option<SchemeSettings> {
        let environment = keys::Environment::parse(&self.environment)
            .map_err(|e| cx.problem(&format!("{key}.environment"), e))
            .ok()?;
        let client_id = match &self.client_id {
            Some(r) => Some(cx.secret(&format!("{key}.client_id"), r)?),
            None => None,
        };
        let secret = match &self.secret {
            Some(r) => Some(cx.secret(&format!("{key}.secret"), r)?),
            None => None,
        };
        let credentials = match (client_id, secret) {
            (Some(client_id), Some(secret)) => Some(keys::Credentials { client_id, secret }),
            (None, None) => None,
            (Some(_), None) => {
                cx.problem(&format!("{key}.secret"), "set together with client_id".into());
                return None;
            }
            (None, Some(_)) => {
                cx.problem(&format!("{key}.client_id"), "set together with secret".into());
                return None;
            }
        };
        let mut pinned = Vec::new();
        for (i, r) in self.keys.iter().enumerate() {
            pinned.push(cx.secret(&format!("{key}.keys[{i}]"), r)?.expose().to_owned());
        }
        keys::Settings::new(credentials, environment, &pinned, self.api_base.as_deref())
            .map(|s| SchemeSettings::Plaid(Box::new(s)))
            .map_err(|e| cx.problem(key, e))
            .ok()
    }

    fn missing(key: &str, cx: &mut dyn Resolve) {
        cx.problem(
            key,
            "set [sources.<name>.plaid] client_id and secret (or pin keys)".into(),
        );
    }
}

/// One of Plaid's verification keys.
#[derive(Debug, Clone)]
pub struct Key {
    pub kid: String,
    pub key: VerifyingKey,
    /// Unix seconds after which Plaid no longer signs with this key.
    pub expired_at: Option<i64>,
}

/// A `Plaid-Verification` token, split but not yet verified.
pub struct Token<'a> {
    pub kid: String,
    /// `base64url(header) . base64url(claims)`: what the signature covers.
    signing_input: &'a str,
    signature: Vec<u8>,
    pub iat: i64,
    body_sha256: String,
}

#[derive(Deserialize)]
struct JoseHeader {
    alg: Option<String>,
    kid: Option<String>,
    /// Extensions we would have to understand (RFC 7515 §4.1.11).
    crit: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Claims {
    iat: Option<serde_json::Number>,
    request_body_sha256: Option<String>,
}

fn malformed(why: &'static str) -> VerifyError {
    VerifyError::MalformedSignature(why)
}

fn b64(part: &str) -> Result<Vec<u8>, VerifyError> {
    B64URL
        .decode(part.trim_end_matches('='))
        .map_err(|_| malformed("token is not base64url"))
}

impl<'a> Token<'a> {
    /// Splits and decodes the token; refuses any algorithm but ES256.
    pub fn parse(value: &'a str) -> Result<Self, VerifyError> {
        if value.len() > MAX_TOKEN {
            return Err(malformed("header too long"));
        }
        let value = value.trim();
        let mut parts = value.split('.');
        let (Some(h), Some(c), Some(s), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(malformed("not a compact JWS"));
        };
        let header: JoseHeader =
            serde_json::from_slice(&b64(h)?).map_err(|_| malformed("token header is not JSON"))?;
        if header.alg.as_deref() != Some("ES256") {
            return Err(malformed("token algorithm is not ES256"));
        }
        if header.crit.is_some() {
            return Err(malformed("token has critical extensions"));
        }
        let kid = header.kid.ok_or(malformed("token has no kid"))?;
        let kid_ok = !kid.is_empty()
            && kid.len() <= MAX_KID
            && kid
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !kid_ok {
            return Err(malformed("token kid is not usable"));
        }
        let claims: Claims =
            serde_json::from_slice(&b64(c)?).map_err(|_| malformed("token claims are not JSON"))?;
        let iat = claims
            .iat
            .and_then(|n| n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)))
            .ok_or(VerifyError::MissingTimestamp)?;
        let body_sha256 = claims
            .request_body_sha256
            .ok_or(malformed("token has no request_body_sha256"))?;
        Ok(Self {
            kid,
            signing_input: &value[..h.len() + 1 + c.len()],
            signature: b64(s)?,
            iat,
            body_sha256,
        })
    }

    /// The checks that need no key: `iat` within tolerance, body hash.
    pub fn check_claims(
        &self,
        body: &[u8],
        now: i64,
        tolerance: std::time::Duration,
    ) -> Result<(), VerifyError> {
        crate::verify::check_window(self.iat, now, tolerance, true)?;
        let claimed = hex::decode(self.body_sha256.trim())
            .map_err(|_| malformed("request_body_sha256 is not hex"))?;
        if !mac_eq(&Sha256::digest(body), &claimed) {
            return Err(VerifyError::InvalidSignature);
        }
        Ok(())
    }

    /// The ES256 signature (64 bytes, `r || s`) under `key`.
    pub fn check_signature(&self, key: &Key, now: i64) -> Result<(), VerifyError> {
        if key.kid != self.kid {
            return Err(VerifyError::InvalidSignature);
        }
        if key.expired_at.is_some_and(|t| t <= now) {
            return Err(malformed("signing key is expired"));
        }
        let sig = Signature::from_slice(&self.signature)
            .map_err(|_| malformed("signature is not valid encoding"))?;
        key.key
            .verify(self.signing_input.as_bytes(), &sig)
            .map_err(|_| VerifyError::InvalidSignature)
    }
}

/// The header value, bounded and visible ASCII.
pub fn header_value(headers: &http::HeaderMap) -> Result<&str, VerifyError> {
    let v = headers.get(HEADER).ok_or(VerifyError::MissingSignature)?;
    if v.len() > MAX_TOKEN {
        return Err(malformed("header too long"));
    }
    v.to_str().map_err(|_| malformed("not visible ASCII"))
}

fn verify(ctx: &Ctx<'_, '_>) -> Result<(), VerifyError> {
    let token = Token::parse(header_value(ctx.fields.headers())?)?;
    let Some(FetchedKey::Plaid(key)) = ctx.fetched else {
        return Err(VerifyError::MissingSignature);
    };
    token.check_signature(key, ctx.now)?;
    token.check_claims(ctx.fields.body(), ctx.now, ctx.source.tolerance)
}

/// A JWK as Plaid returns it (`kty`, `crv`, `x`, `y`, `kid`, `alg`,
/// `expired_at`, …; other members ignored).
#[derive(Deserialize)]
pub struct Jwk {
    kty: String,
    crv: String,
    kid: String,
    x: String,
    y: String,
    alg: Option<String>,
    expired_at: Option<i64>,
}

impl Jwk {
    pub fn into_key(self) -> Result<Key, String> {
        if self.kty != "EC" || self.crv != "P-256" {
            return Err("key is not an EC P-256 JWK".into());
        }
        if self.alg.as_deref().is_some_and(|a| a != "ES256") {
            return Err("key is not for ES256".into());
        }
        let coord = |c: &str| {
            B64URL
                .decode(c)
                .ok()
                .filter(|b| b.len() == 32)
                .ok_or("key coordinate is not 32 bytes of base64url")
        };
        let (x, y) = (coord(&self.x)?, coord(&self.y)?);
        let field = |b: &[u8]| p256::FieldBytes::try_from(b).map_err(|_| "key coordinate is not 32 bytes");
        let point = p256::Sec1Point::from_affine_coordinates(&field(&x)?, &field(&y)?, false);
        let key = VerifyingKey::from_sec1_point(&point).map_err(|_| "key is not on P-256")?;
        Ok(Key {
            kid: self.kid,
            key,
            expired_at: self.expired_at,
        })
    }
}

/// A key as JWK JSON, the form `[sources.<name>.plaid] keys` pins.
pub fn public_jwk(kid: &str, key: &VerifyingKey) -> String {
    let point = key.to_sec1_point(false);
    let coord =
        |c: Option<&p256::FieldBytes>| B64URL.encode(c.map(|b| b.to_vec()).unwrap_or_default());
    serde_json::json!({
        "kty": "EC",
        "crv": "P-256",
        "alg": "ES256",
        "use": "sig",
        "kid": kid,
        "x": coord(point.x()),
        "y": coord(point.y()),
        "expired_at": null,
    })
    .to_string()
}

/// A `Plaid-Verification` token: ES256 over `{"alg","kid","typ"}` and
/// `{"iat","request_body_sha256"}`.
pub fn sign_token(p: &PlaidSign<'_>, req: &SignRequest<'_>) -> Result<String, String> {
    use p256::ecdsa::signature::Signer;
    let key = secret_key(p)?;
    let header = serde_json::json!({"alg": "ES256", "kid": p.kid, "typ": "JWT"});
    let claims = serde_json::json!({
        "iat": req.timestamp,
        "request_body_sha256": hex::encode(Algorithm::Sha256.digest(&[req.body])),
    });
    let input = format!(
        "{}.{}",
        B64URL.encode(header.to_string()),
        B64URL.encode(claims.to_string())
    );
    let sig: p256::ecdsa::Signature = p256::ecdsa::SigningKey::from(key).sign(input.as_bytes());
    Ok(format!("{input}.{}", B64URL.encode(sig.to_bytes())))
}

fn secret_key(p: &PlaidSign<'_>) -> Result<p256::SecretKey, String> {
    use p256::pkcs8::DecodePrivateKey;
    p256::SecretKey::from_pkcs8_pem(p.private_key_pem)
        .or_else(|_| p256::SecretKey::from_sec1_pem(p.private_key_pem))
        .map_err(|_| "--private-key is not a P-256 private key (PEM)".to_owned())
}

/// The JWK a source pins (`[sources.<name>.plaid] keys`) to accept what
/// the signer signs with this test key.
pub fn signing_key_jwk(p: &PlaidSign<'_>) -> Result<String, String> {
    let public = secret_key(p)?.public_key();
    Ok(public_jwk(p.kid, &VerifyingKey::from(public)))
}
