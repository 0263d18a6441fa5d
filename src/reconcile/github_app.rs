//! GitHub App hooks: their API takes a JWT that the App signs with its
//! private key, as "Generating a JSON Web Token (JWT) for a GitHub App"
//! documents
//! (<https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/generating-a-json-web-token-jwt-for-a-github-app>):
//! signed RS256; `iat` 60 s in the past against clock drift; `exp` no more
//! than 10 minutes into the future; `iss` the App's client id or app id;
//! sent as `Authorization: Bearer <jwt>`. The token is the three parts of
//! RFC 7519 (header, claims, signature), each base64url without padding.
//!
//! Rule: a run mints its JWT on the first call and mints a new one whenever
//! less than [`REMINT_BEFORE`] of its life is left, so no call of a long run
//! (many pages, rate-limit waits) carries an expired token.

use super::ReconcileError;
use crate::config::reconcile::GitHubApp;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rsa::signature::{SignatureEncoding, Signer};
use std::sync::{Mutex, PoisonError};

/// How far `iat` lies in the past (GitHub's recommendation).
const BACKDATE: i64 = 60;
/// `exp - iat`: GitHub's limit of 10 minutes. With the backdated `iat`, the
/// token expires 9 minutes from now.
const LIFETIME: i64 = 600;
/// A token with less left than this is replaced before a call: a call
/// (30 s timeout) then never outlives it, with room for clock skew.
pub const REMINT_BEFORE: i64 = 120;

/// A run's JWT for one App, minted lazily.
pub struct AppJwt {
    app: GitHubApp,
    /// The current token and its `exp`. A std mutex: held only to compare
    /// and, rarely, to sign (no `.await` inside).
    current: Mutex<Option<(String, i64)>>,
}

impl AppJwt {
    pub fn new(app: GitHubApp) -> Self {
        Self {
            app,
            current: Mutex::new(None),
        }
    }

    /// The token to send at `now` (Unix seconds).
    pub fn bearer(&self, now: i64) -> Result<String, ReconcileError> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((token, exp)) = current.as_ref()
            && exp - now >= REMINT_BEFORE
        {
            return Ok(token.clone());
        }
        let (token, exp) = mint(&self.app, now)?;
        *current = Some((token.clone(), exp));
        Ok(token)
    }
}

/// A JWT issued at `now` (Unix seconds), and its `exp`.
pub fn mint(app: &GitHubApp, now: i64) -> Result<(String, i64), ReconcileError> {
    let iat = now - BACKDATE;
    let exp = iat + LIFETIME;
    let header = serde_json::json!({ "alg": "RS256", "typ": "JWT" });
    let claims = serde_json::json!({ "iat": iat, "exp": exp, "iss": app.id });
    let signing_input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let signature = app
        .key
        .try_sign(signing_input.as_bytes())
        .map_err(|_| ReconcileError::AppJwt)?;
    let token = format!(
        "{signing_input}.{}",
        URL_SAFE_NO_PAD.encode(signature.to_bytes())
    );
    Ok((token, exp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsa::pkcs1::DecodeRsaPrivateKey;
    use rsa::pkcs1v15::{Signature, VerifyingKey};
    use rsa::signature::Verifier;
    use sha2::Sha256;
    use std::sync::Arc;

    fn app() -> GitHubApp {
        let pem = include_str!("../../tests/fixtures/github-app/app-key.pem");
        let key = rsa::PrivateKey::from_pkcs1_pem(pem).unwrap();
        GitHubApp {
            id: "Iv23liTestClient0".into(),
            key: Arc::new(rsa::pkcs1v15::SigningKey::new(key)),
        }
    }

    fn part(token: &str, n: usize) -> Vec<u8> {
        URL_SAFE_NO_PAD
            .decode(token.split('.').nth(n).unwrap())
            .unwrap()
    }

    #[test]
    fn the_jwt_is_rs256_over_githubs_claims_and_verifies_with_the_public_key() {
        let app = app();
        let now = 1_700_000_000;
        let (token, exp) = mint(&app, now).unwrap();
        assert_eq!(token.split('.').count(), 3);
        let header: serde_json::Value = serde_json::from_slice(&part(&token, 0)).unwrap();
        assert_eq!(header, serde_json::json!({ "alg": "RS256", "typ": "JWT" }));
        let claims: serde_json::Value = serde_json::from_slice(&part(&token, 1)).unwrap();
        assert_eq!(
            claims,
            serde_json::json!({ "iat": now - 60, "exp": now + 540, "iss": "Iv23liTestClient0" })
        );
        assert_eq!(exp, now + 540);

        let public = VerifyingKey::<Sha256>::new(rsa::PublicKey::from(
            rsa::PrivateKey::from_pkcs1_pem(include_str!(
                "../../tests/fixtures/github-app/app-key.pem"
            ))
            .unwrap(),
        ));
        let (input, _) = token.rsplit_once('.').unwrap();
        let sig = Signature::try_from(part(&token, 2).as_slice()).unwrap();
        assert!(public.verify(input.as_bytes(), &sig).is_ok());
        let tampered = input.replacen('.', ".e", 1);
        assert!(public.verify(tampered.as_bytes(), &sig).is_err());
    }

    #[test]
    fn a_run_reuses_its_jwt_until_it_nears_expiry() {
        let jwt = AppJwt::new(app());
        let t0 = 1_700_000_000;
        let first = jwt.bearer(t0).unwrap();
        // Still more than REMINT_BEFORE left at exp = t0 + 540.
        assert_eq!(jwt.bearer(t0 + 540 - REMINT_BEFORE).unwrap(), first);
        let later = jwt.bearer(t0 + 540 - REMINT_BEFORE + 1).unwrap();
        assert_ne!(later, first);
        let claims: serde_json::Value = serde_json::from_slice(&part(&later, 1)).unwrap();
        assert_eq!(claims["iat"], t0 + 540 - REMINT_BEFORE + 1 - 60);
    }
}
