//! Plaid's verification keys: pinned in the config, or fetched by `kid`
//! from `POST /webhook_verification_key/get` on Plaid's API host and cached.
//!
//! Rule: keys are only ever requested from `production.plaid.com` or
//! `sandbox.plaid.com` over HTTPS (a loopback `api_base` is accepted for
//! tests only). An unknown `kid` costs one request: a `kid` is fetched once
//! at a time ([`KeyCache`]), a `kid` Plaid does not know is remembered for
//! a while, and the source's fetch budget caps the rest, so forged tokens
//! cannot make us hammer Plaid.
//! With pinned keys nothing is ever fetched. The credentials never leave
//! this module except in the request body to Plaid.

use super::{Jwk, Key, Token, header_value};
use crate::primitives::secret::Secret;
use crate::verify::VerifyError;
use crate::verify::key_cache::{self, Fetched, KeyCache, Learned, LearnedKey};
use http::HeaderMap;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

const PATH: &str = "/webhook_verification_key/get";
const MAX_RESPONSE: usize = 64 * 1024;
/// `kid`s remembered per source, with a key or as unknown.
const MAX_CACHED: u64 = 320;
/// Longest a fetched key is trusted without asking again (rotation).
const MAX_AGE: i64 = 24 * 3600;
/// How long a `kid` Plaid did not know is answered without asking again.
const UNKNOWN_FOR: i64 = 300;

/// Which Plaid API host holds the keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Environment {
    Production,
    Sandbox,
}

impl Environment {
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "production" => Ok(Self::Production),
            "sandbox" => Ok(Self::Sandbox),
            _ => Err(format!(
                "unknown environment `{name}` (use production or sandbox)"
            )),
        }
    }
    fn base(self) -> &'static str {
        match self {
            Self::Production => "https://production.plaid.com",
            Self::Sandbox => "https://sandbox.plaid.com",
        }
    }
}

/// Client credentials for the key endpoint.
pub struct Credentials {
    pub client_id: Secret,
    pub secret: Secret,
}

/// A source's Plaid settings (`[sources.<name>.plaid]`).
pub struct Settings {
    credentials: Option<Credentials>,
    url: reqwest::Url,
    pinned: HashMap<String, Arc<Key>>,
    /// kid → its key until [`MAX_AGE`] (or the key's own expiry), or
    /// "unknown" for [`UNKNOWN_FOR`] seconds.
    keys: KeyCache<String, Arc<Key>>,
    client: reqwest::Client,
    /// Where keys found by a fetch are reported (the ledger).
    learned: std::sync::OnceLock<Learned>,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("plaid::Settings")
            .field("url", &self.url.as_str())
            .field(
                "credentials",
                &self.credentials.as_ref().map(|_| "[redacted]"),
            )
            .field("pinned", &self.pinned.len())
            .finish()
    }
}

impl Settings {
    /// `pinned`: JWK JSON texts (then nothing is fetched); `api_base`:
    /// replaces the environment's host, loopback only (tests).
    pub fn new(
        credentials: Option<Credentials>,
        environment: Environment,
        pinned: &[String],
        api_base: Option<&str>,
    ) -> Result<Self, String> {
        let mut keys = HashMap::new();
        for (i, text) in pinned.iter().enumerate() {
            let jwk: Jwk = serde_json::from_str(text).map_err(|e| format!("keys[{i}]: {e}"))?;
            let key = jwk.into_key().map_err(|e| format!("keys[{i}]: {e}"))?;
            keys.insert(key.kid.clone(), Arc::new(key));
        }
        if keys.is_empty() && credentials.is_none() {
            return Err("set client_id and secret (or pin keys)".into());
        }
        let base = match api_base {
            Some(b) => loopback_base(b)?,
            None => environment.base().to_owned(),
        };
        let url = reqwest::Url::parse(&format!("{}{PATH}", base.trim_end_matches('/')))
            .map_err(|e| format!("api_base: {e}"))?;
        let client = key_cache::client()?;
        Ok(Self {
            credentials,
            url,
            pinned: keys,
            keys: KeyCache::new(MAX_CACHED),
            client,
            learned: std::sync::OnceLock::new(),
        })
    }

    /// The key for this request's token: pinned, cached or fetched. The
    /// token's claims are checked first, so a stale or mismatched request
    /// never causes a fetch.
    pub async fn key_for(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        tolerance: Duration,
        client: Option<std::net::IpAddr>,
        now: i64,
    ) -> Result<Arc<Key>, VerifyError> {
        let token = Token::parse(header_value(headers)?)?;
        if !self.pinned.is_empty() {
            return self.pinned.get(&token.kid).cloned().ok_or_else(unknown_kid);
        }
        if let Some(Ok(k)) = self.keys.cached(&token.kid, now).await {
            return Ok(k);
        }
        token.check_claims(body, now, tolerance)?;
        let fetch = self.fetch_key(&token.kid, now);
        self.keys
            .get_or_fetch(token.kid.clone(), now, client, fetch)
            .await
    }

    /// The key until [`MAX_AGE`] from now (or its own expiry, if sooner),
    /// or "unknown" for [`UNKNOWN_FOR`] seconds: both are remembered;
    /// Plaid busy or unreachable is not.
    async fn fetch_key(&self, kid: &str, now: i64) -> Result<Fetched<Arc<Key>>, VerifyError> {
        Ok(match self.fetch(kid).await? {
            Some((key, jwk)) => {
                let until = key.expired_at.unwrap_or(i64::MAX).min(now + MAX_AGE);
                key_cache::report(
                    &self.learned,
                    LearnedKey {
                        name: kid.to_owned(),
                        material: jwk,
                        until,
                    },
                );
                Fetched {
                    until,
                    found: Ok(Arc::new(key)),
                }
            }
            None => Fetched {
                found: Err(unknown_kid()),
                until: now + UNKNOWN_FOR,
            },
        })
    }

    /// The key and its JWK text; `Ok(None)`: Plaid answered but has no
    /// such key (or refused us).
    async fn fetch(&self, kid: &str) -> Result<Option<(Key, Vec<u8>)>, VerifyError> {
        let down = |_| VerifyError::CertificateUnavailable;
        let Some(c) = &self.credentials else {
            return Ok(None);
        };
        let request = serde_json::json!({
            "client_id": c.client_id.expose(),
            "secret": c.secret.expose(),
            "key_id": kid,
        });
        let res = self
            .client
            .post(self.url.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(request.to_string())
            .send()
            .await
            .map_err(down)?;
        // 429 (rate limited) and 5xx are Plaid being busy or down: the
        // key may well exist, so "temporarily unavailable", never
        // "unknown key" (which would be remembered).
        if res.status() == http::StatusCode::TOO_MANY_REQUESTS {
            return Err(VerifyError::CertificateUnavailable);
        }
        if res.status().is_client_error() {
            return Ok(None);
        }
        if !res.status().is_success() {
            return Err(VerifyError::CertificateUnavailable);
        }
        let out = key_cache::read_capped(res, MAX_RESPONSE).await?;
        #[derive(serde::Deserialize)]
        struct Response {
            key: Box<serde_json::value::RawValue>,
        }
        let r: Response =
            serde_json::from_slice(&out).map_err(|_| VerifyError::CertificateUnavailable)?;
        let jwk: Jwk =
            serde_json::from_str(r.key.get()).map_err(|_| VerifyError::CertificateUnavailable)?;
        match jwk.into_key() {
            Ok(k) if k.kid == kid => Ok(Some((k, r.key.get().as_bytes().to_vec()))),
            _ => Ok(None),
        }
    }
}

#[async_trait::async_trait]
impl key_cache::RemoteKeys for Settings {
    /// A JWK the ledger kept, checked as a fetched one is.
    async fn warm(&self, key: &LearnedKey, now: i64) -> bool {
        if !self.pinned.is_empty() || key.until <= now {
            return false;
        }
        let Ok(jwk) = serde_json::from_slice::<Jwk>(&key.material) else {
            return false;
        };
        match jwk.into_key() {
            Ok(k) if k.kid == key.name && k.expired_at.is_none_or(|e| e > now) => {
                let until = k.expired_at.unwrap_or(i64::MAX).min(key.until);
                self.keys.insert(key.name.clone(), Arc::new(k), until, now).await;
                true
            }
            _ => false,
        }
    }

    fn report_to(&self, to: Learned) {
        let _ = self.learned.set(to);
    }
}

fn unknown_kid() -> VerifyError {
    VerifyError::MalformedSignature("unknown signing key id")
}

/// `http://127.0.0.1:PORT`-style bases only: the override exists so tests
/// can stand in for Plaid, never to send credentials elsewhere.
fn loopback_base(base: &str) -> Result<String, String> {
    let u = reqwest::Url::parse(base).map_err(|e| format!("api_base: {e}"))?;
    let loopback = key_cache::is_loopback_host(u.host_str().unwrap_or_default());
    if !loopback || !matches!(u.scheme(), "http" | "https") || !u.username().is_empty() {
        return Err("api_base must be a loopback URL (tests only)".into());
    }
    Ok(base.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_base_is_loopback_only_and_environments_pick_plaid_hosts() {
        assert!(loopback_base("http://127.0.0.1:9").is_ok());
        assert!(loopback_base("http://[::1]:9").is_ok());
        for bad in [
            "https://evil.example",
            "http://10.0.0.1",
            "http://u@127.0.0.1",
            "nope",
        ] {
            assert!(loopback_base(bad).is_err(), "{bad}");
        }
        let creds = || Credentials {
            client_id: Secret::new("id"),
            secret: Secret::new("shh"),
        };
        let s = Settings::new(Some(creds()), Environment::Sandbox, &[], None).unwrap();
        assert_eq!(
            s.url.as_str(),
            "https://sandbox.plaid.com/webhook_verification_key/get"
        );
        let s = Settings::new(Some(creds()), Environment::Production, &[], None).unwrap();
        assert_eq!(s.url.host_str(), Some("production.plaid.com"));
        assert!(!format!("{s:?}").contains("shh"));
        assert!(Settings::new(None, Environment::Production, &[], None).is_err());
        assert_eq!(
            Environment::parse("development").unwrap_err(),
            "unknown environment `development` (use production or sandbox)"
        );
    }
}
