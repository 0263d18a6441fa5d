//! PayPal offline verification: RSASSA-PKCS1-v1_5 / SHA-256 over
//! `{transmission_id}|{transmission_time}|{webhook_id}|{crc32 of the body,
//! unsigned decimal}`, with the public key of the certificate named by
//! `PAYPAL-CERT-URL`.
//!
//! Rule: a certificate is only ever fetched from PayPal's certificate hosts
//! over HTTPS (a URL anywhere else is rejected before any traffic), at most
//! once per URL while it is valid ([`KeyCache`]), and must name a
//! `*.paypal.com` subject.
//! Air-gapped installs pin the certificate in the config and never fetch.
//! Chain trust comes from the TLS connection to PayPal's own host.

use super::{Cover, Ctx, Defaults, FetchedKey, Part, Scheme, SchemeDef, SchemeSettings};
use crate::verify::locator::Locator;
use crate::verify::provider::Provider;
use crate::primitives::secret::Secret;
use crate::primitives::crypto::{Algorithm, Encoding};
use crate::verify::sign::{PaypalSign, SignRequest, Signed, Signer};
use crate::verify::source::{Resolve, SettingsTable, Source};
use crate::verify::key_cache::{self, Fetched, KeyCache, Learned, LearnedKey};
use crate::verify::{Incoming, VerifyError};
use http::HeaderMap;
use rsa::PublicKey as RsaPublicKey;
use rsa::pkcs1v15::{Signature, VerifyingKey};
use rsa::pkcs8::DecodePublicKey;
use sha2::Sha256;
use rsa::signature::Verifier;
use serde::Deserialize;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use x509_cert::Certificate;
use x509_cert::der::Encode;

pub const TRANSMISSION_ID: &str = "paypal-transmission-id";
pub const TRANSMISSION_TIME: &str = "paypal-transmission-time";
pub const TRANSMISSION_SIG: &str = "paypal-transmission-sig";
pub const CERT_URL: &str = "paypal-cert-url";
pub const AUTH_ALGO: &str = "paypal-auth-algo";

/// Where PayPal serves its webhook certificates (live and sandbox).
pub const DEFAULT_CERT_HOSTS: &[&str] = &[
    "api.paypal.com",
    "api-m.paypal.com",
    "api.sandbox.paypal.com",
    "api-m.sandbox.paypal.com",
];
const CERT_PATH: &str = "/v1/notifications/certs/";
const MAX_CERT_BYTES: usize = 64 * 1024;
/// Certificate URLs remembered per source, with a key or a failure.
const MAX_CACHED: u64 = 64;
const MAX_URL: usize = 2048;
/// Seconds a certificate URL that failed is not fetched again.
const FAILED_FOR: i64 = 60;

pub struct Paypal;

impl SchemeDef for Paypal {
    const SUMMARY: &'static str = "RSA-SHA256 with the certificate PayPal names, over `{id}|{time}|{webhook_id}|{crc32 of body}`";

    const DEFAULTS: Defaults = Defaults {
        needs_secret: false,
        ..Defaults::keyed(false, Algorithm::Sha256, Encoding::Base64)
    };

    /// The transmission id and time headers; the body only through its
    /// CRC-32.
    fn covers(_: &Provider, part: Part<'_>) -> Cover {
        match part {
            Part::Body | Part::At(Locator::Json(_) | Locator::Form(_)) => Cover::Checksum,
            Part::At(Locator::Header(h)) if h == TRANSMISSION_ID || h == TRANSMISSION_TIME => {
                Cover::Signed
            }
            _ => Cover::Unsigned,
        }
    }

    fn verify(ctx: &Ctx<'_, '_>) -> Result<Option<usize>, VerifyError> {
        verify(ctx).map(|()| None)
    }

    /// PayPal signs with its own private key, so this needs a test key.
    fn sign(s: &Signer<'_>, out: &mut Signed) -> Result<(), String> {
        let Signer { req, .. } = *s;
        let p = req
            .paypal
            .as_ref()
            .ok_or("PayPal signs with its own private key: pass --private-key (a test key)")?;
        out.headers.extend(sign(p, req)?);
        Ok(())
    }

    async fn fetch(
        source: &Source,
        incoming: &Incoming<'_>,
        now: i64,
    ) -> Result<Option<FetchedKey>, VerifyError> {
        match &source.settings {
            // Boxed: see `SchemeDef::fetch`.
            Some(SchemeSettings::Paypal(settings)) => Ok(Some(FetchedKey::Paypal(
                Box::pin(settings.key_for(&incoming.headers, incoming.client_ip, now)).await?,
            ))),
            _ => Ok(None),
        }
    }
}

/// `[sources.<name>.paypal]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Raw {
    /// The webhook's ID in the PayPal dashboard (literal or `env:NAME`).
    pub webhook_id: String,
    /// A pinned signing certificate (PEM, `file:PATH` or `env:NAME`): no
    /// certificate is ever fetched (air-gapped installs).
    pub cert: Option<String>,
    /// Hosts certificates may be fetched from. Default: PayPal's live and
    /// sandbox API hosts. Only change this for tests.
    pub cert_hosts: Option<Vec<String>>,
}

impl SettingsTable for Raw {
    const SCHEME: Scheme = Scheme::Paypal;
    const TABLE: &'static str = "paypal";
    const TITLE: &'static str = "PayPal";

    fn build(&self, key: &str, cx: &mut dyn Resolve) -> Option<SchemeSettings> {
        let webhook_id = cx.secret(&format!("{key}.webhook_id"), &self.webhook_id)?;
        let cert = match &self.cert {
            Some(r) => Some(cx.secret(&format!("{key}.cert"), r)?),
            None => None,
        };
        Settings::new(
            webhook_id.expose().to_owned(),
            cert.as_ref().map(Secret::expose),
            self.cert_hosts.clone(),
        )
        .map(|s| SchemeSettings::Paypal(Box::new(s)))
        .map_err(|e| cx.problem(key, e))
        .ok()
    }

    fn missing(key: &str, cx: &mut dyn Resolve) {
        cx.problem(key, "set [sources.<name>.paypal] webhook_id".into());
    }
}

/// A source's PayPal settings (`[sources.<name>.paypal]`).
pub struct Settings {
    /// The webhook's ID from the PayPal dashboard (part of the signed text).
    pub webhook_id: String,
    pinned: Option<Arc<RsaPublicKey>>,
    cert_hosts: Vec<String>,
    /// Canonical certificate URL → its key until the certificate's
    /// not-after, or why it failed for [`FAILED_FOR`] seconds.
    keys: KeyCache<String, Arc<RsaPublicKey>>,
    client: reqwest::Client,
    /// Where certificates found by a fetch are reported (the ledger).
    learned: std::sync::OnceLock<Learned>,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("paypal::Settings")
            .field("webhook_id", &self.webhook_id)
            .field("pinned", &self.pinned.is_some())
            .field("cert_hosts", &self.cert_hosts)
            .finish()
    }
}

impl Settings {
    /// `pinned_pem`: a certificate to use instead of fetching;
    /// `cert_hosts`: replaces [`DEFAULT_CERT_HOSTS`] (`host` or `host:port`).
    pub fn new(
        webhook_id: String,
        pinned_pem: Option<&str>,
        cert_hosts: Option<Vec<String>>,
    ) -> Result<Self, String> {
        if webhook_id.trim().is_empty() {
            return Err("webhook_id is empty".into());
        }
        let pinned = pinned_pem
            .map(|pem| parse_cert(pem.as_bytes()).map(|(k, _, _)| Arc::new(k)))
            .transpose()
            .map_err(|e| format!("cert: {e}"))?;
        let client = key_cache::client()?;
        let cert_hosts = cert_hosts
            .unwrap_or_else(|| DEFAULT_CERT_HOSTS.iter().map(|h| (*h).to_owned()).collect())
            .into_iter()
            .map(|h| h.to_ascii_lowercase())
            .collect();
        Ok(Self {
            webhook_id,
            pinned,
            cert_hosts,
            keys: KeyCache::new(MAX_CACHED),
            client,
            learned: std::sync::OnceLock::new(),
        })
    }

    /// The key for this request's certificate: pinned, cached or fetched.
    /// The caches are keyed on the canonical URL (no query, no fragment),
    /// which is also what is fetched, so query variants can neither flush
    /// the genuine certificate nor cost a fetch each. A URL is fetched once
    /// at a time, failures are remembered for [`FAILED_FOR`] seconds, and
    /// fetches are held to the source's budgets, failures apart from
    /// successes (`verify::fetch_budget`; over them, 503 + Retry-After).
    pub async fn key_for(
        &self,
        headers: &HeaderMap,
        client: Option<std::net::IpAddr>,
        now: i64,
    ) -> Result<Arc<RsaPublicKey>, VerifyError> {
        let url = header(headers, CERT_URL)?;
        let mut parsed = self.check_url(url)?;
        if let Some(k) = &self.pinned {
            return Ok(k.clone());
        }
        parsed.set_query(None);
        parsed.set_fragment(None);
        let canonical = parsed.as_str().to_owned();
        self.keys
            .get_or_fetch(canonical, now, client, self.fetch_key(parsed, now))
            .await
    }

    /// The certificate's key until its not-after, or any failure for
    /// [`FAILED_FOR`] seconds: both are remembered.
    async fn fetch_key(
        &self,
        url: reqwest::Url,
        now: i64,
    ) -> Result<Fetched<Arc<RsaPublicKey>>, VerifyError> {
        let name = url.as_str().to_owned();
        Ok(match self.certificate_key(url, now).await {
            Ok((key, not_after, pem)) => {
                // Valid through its not-after second.
                let until = not_after.saturating_add(1);
                key_cache::report(
                    &self.learned,
                    LearnedKey {
                        name,
                        material: pem,
                        until,
                    },
                );
                Fetched {
                    found: Ok(key),
                    until,
                }
            }
            Err(e) => Fetched {
                found: Err(e),
                until: now + FAILED_FOR,
            },
        })
    }

    async fn certificate_key(
        &self,
        url: reqwest::Url,
        now: i64,
    ) -> Result<(Arc<RsaPublicKey>, i64, Vec<u8>), VerifyError> {
        let pem = self.fetch(url).await?;
        let (key, not_after) = usable_cert(&pem, now)?;
        Ok((key, not_after, pem))
    }

    /// Only `https://<cert host>/v1/notifications/certs/…` (plain http only
    /// for a loopback host someone listed on purpose, i.e. tests).
    fn check_url(&self, url: &str) -> Result<reqwest::Url, VerifyError> {
        let off = VerifyError::MalformedSignature("certificate URL is not on PayPal's hosts");
        if url.len() > MAX_URL {
            return Err(off);
        }
        let u = reqwest::Url::parse(url).map_err(|_| off)?;
        let host = u.host_str().unwrap_or_default().to_ascii_lowercase();
        let authority = match u.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.clone(),
        };
        let loopback = key_cache::is_loopback_host(&host);
        let scheme_ok = u.scheme() == "https" || (u.scheme() == "http" && loopback);
        let listed = self.cert_hosts.contains(&authority);
        if !scheme_ok
            || !listed
            || !u.username().is_empty()
            || u.password().is_some()
            || !u.path().starts_with(CERT_PATH)
        {
            return Err(off);
        }
        Ok(u)
    }

    async fn fetch(&self, url: reqwest::Url) -> Result<Vec<u8>, VerifyError> {
        let unavailable = |_| VerifyError::CertificateUnavailable;
        let res = self.client.get(url).send().await.map_err(unavailable)?;
        if !res.status().is_success() {
            return Err(VerifyError::CertificateUnavailable);
        }
        key_cache::read_capped(res, MAX_CERT_BYTES).await
    }
}

/// The key and not-after of a PayPal certificate valid at `now`.
fn usable_cert(pem: &[u8], now: i64) -> Result<(Arc<RsaPublicKey>, i64), VerifyError> {
    let (key, not_before, not_after) = parse_cert(pem)
        .map_err(|_| VerifyError::MalformedSignature("certificate is not usable"))?;
    if now < not_before || now > not_after {
        return Err(VerifyError::MalformedSignature("certificate is expired"));
    }
    Ok((Arc::new(key), not_after))
}

#[async_trait::async_trait]
impl key_cache::RemoteKeys for Settings {
    /// A certificate the ledger kept, checked as a fetched one is.
    async fn warm(&self, key: &LearnedKey, now: i64) -> bool {
        if self.pinned.is_some() {
            return false;
        }
        match usable_cert(&key.material, now) {
            Ok((k, not_after)) => {
                let until = not_after.saturating_add(1).min(key.until);
                self.keys.insert(key.name.clone(), k, until, now).await;
                true
            }
            Err(_) => false,
        }
    }

    fn report_to(&self, to: Learned) {
        let _ = self.learned.set(to);
    }
}

/// The RSA key and validity (unix seconds) of the first certificate in a
/// PEM chain, if its subject is PayPal's.
fn parse_cert(pem: &[u8]) -> Result<(RsaPublicKey, i64, i64), String> {
    let chain = Certificate::load_pem_chain(pem).map_err(|e| e.to_string())?;
    let cert = chain.first().ok_or("no certificate in PEM")?;
    let tbs = cert.tbs_certificate();
    let subject = tbs.subject().to_string();
    let cn_ok = subject.split(',').any(|rdn| {
        rdn.trim()
            .strip_prefix("CN=")
            .is_some_and(|cn| cn.to_ascii_lowercase().ends_with(".paypal.com"))
    });
    if !cn_ok {
        return Err("certificate subject is not *.paypal.com".into());
    }
    let spki = tbs
        .subject_public_key_info()
        .to_der()
        .map_err(|e| e.to_string())?;
    let key = RsaPublicKey::from_public_key_der(&spki).map_err(|e| e.to_string())?;
    let secs = |t: x509_cert::time::Time| t.to_unix_duration().as_secs() as i64;
    Ok((
        key,
        secs(tbs.validity().not_before),
        secs(tbs.validity().not_after),
    ))
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Result<&'h str, VerifyError> {
    let v = headers.get(name).ok_or(VerifyError::MissingSignature)?;
    if v.len() > super::hmac::MAX_SIGNATURE_HEADER {
        return Err(VerifyError::MalformedSignature("header too long"));
    }
    v.to_str()
        .map(str::trim)
        .map_err(|_| VerifyError::MalformedSignature("not visible ASCII"))
}

/// The text PayPal signs.
pub fn message(transmission_id: &str, time: &str, webhook_id: &str, body: &[u8]) -> String {
    format!(
        "{transmission_id}|{time}|{webhook_id}|{}",
        crc32fast::hash(body)
    )
}

fn verify(ctx: &Ctx<'_, '_>) -> Result<(), VerifyError> {
    let headers = ctx.fields.headers();
    let Some(SchemeSettings::Paypal(settings)) = &ctx.source.settings else {
        return Err(VerifyError::MissingSignature);
    };
    let Some(FetchedKey::Paypal(key)) = ctx.fetched else {
        return Err(VerifyError::MissingSignature);
    };
    let sig_b64 = header(headers, TRANSMISSION_SIG)?;
    let id = header(headers, TRANSMISSION_ID)?;
    let time = header(headers, TRANSMISSION_TIME)?;
    if let Ok(algo) = header(headers, AUTH_ALGO)
        && !algo.eq_ignore_ascii_case("SHA256withRSA")
    {
        return Err(VerifyError::MalformedSignature(
            "unsupported auth algorithm",
        ));
    }
    if id.contains('|') || time.contains('|') {
        return Err(VerifyError::MalformedSignature(
            "`|` in a transmission header",
        ));
    }
    let raw = ctx
        .sig
        .encoding
        .decode(sig_b64)
        .ok_or(VerifyError::MalformedSignature(
            "signature is not valid encoding",
        ))?;
    let signature = Signature::try_from(raw.as_slice())
        .map_err(|_| VerifyError::MalformedSignature("signature is not valid encoding"))?;
    let msg = message(id, time, &settings.webhook_id, ctx.fields.body());
    VerifyingKey::<Sha256>::new(RsaPublicKey::clone(key))
        .verify(msg.as_bytes(), &signature)
        .map_err(|_| VerifyError::InvalidSignature)?;
    let sent = humantime::parse_rfc3339_weak(time).map_err(|_| VerifyError::MalformedTimestamp)?;
    let secs = sent
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| VerifyError::MalformedTimestamp)?
        .as_secs() as i64;
    crate::verify::check_window(secs, ctx.now, ctx.source.tolerance, true)
}

/// The PayPal headers for `req`, signed with a test key.
fn sign(p: &PaypalSign<'_>, req: &SignRequest<'_>) -> Result<Vec<(String, String)>, String> {
    use rsa::pkcs1::DecodeRsaPrivateKey;
    use rsa::pkcs8::DecodePrivateKey;
    use rsa::signature::{SignatureEncoding, Signer};
    let key = rsa::PrivateKey::from_pkcs8_pem(p.private_key_pem)
        .or_else(|_| rsa::PrivateKey::from_pkcs1_pem(p.private_key_pem))
        .map_err(|_| "--private-key is not an RSA private key (PEM)".to_owned())?;
    let id = crate::primitives::token::random_uuid();
    let when = std::time::UNIX_EPOCH + Duration::from_secs(req.timestamp.max(0) as u64);
    let time = humantime::format_rfc3339_seconds(when).to_string();
    let msg = message(&id, &time, p.webhook_id, req.body);
    let signer = rsa::pkcs1v15::SigningKey::<sha2::Sha256>::new(key);
    let sig = signer.sign(msg.as_bytes()).to_bytes();
    Ok(vec![
        (TRANSMISSION_ID.into(), id),
        (TRANSMISSION_TIME.into(), time),
        (TRANSMISSION_SIG.into(), Encoding::Base64.encode(&sig)),
        (CERT_URL.into(), p.cert_url.to_owned()),
        (AUTH_ALGO.into(), "SHA256withRSA".into()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(hosts: Option<Vec<String>>) -> Settings {
        Settings::new("WH-1".into(), None, hosts).unwrap()
    }

    #[test]
    fn only_paypal_certificate_urls_are_accepted() {
        let s = settings(None);
        for ok in [
            "https://api.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-1d93a270",
            "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-1",
            "https://API-M.PAYPAL.COM/v1/notifications/certs/CERT-1",
        ] {
            assert!(s.check_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://api.paypal.com/v1/notifications/certs/CERT-1",
            "https://api.paypal.com.evil.example/v1/notifications/certs/CERT-1",
            "https://evil.example/v1/notifications/certs/CERT-1",
            "https://api.paypal.com@evil.example/v1/notifications/certs/CERT-1",
            "https://user@api.paypal.com/v1/notifications/certs/CERT-1",
            "https://api.paypal.com:8443/v1/notifications/certs/CERT-1",
            "https://api.paypal.com/v1/other",
            "http://127.0.0.1:9/v1/notifications/certs/CERT-1",
            "not a url",
        ] {
            assert!(s.check_url(bad).is_err(), "{bad}");
        }
        let long = format!("https://api.paypal.com{CERT_PATH}{}", "a".repeat(3000));
        assert!(s.check_url(&long).is_err());
        let local = settings(Some(vec!["127.0.0.1:9".into()]));
        assert!(
            local
                .check_url("http://127.0.0.1:9/v1/notifications/certs/CERT-1")
                .is_ok()
        );
    }

    #[test]
    fn message_uses_unsigned_decimal_crc32() {
        // crc32("hello") = 0x3610a686 = 907060870.
        assert_eq!(
            message("tid", "2016-09-21T22:00:46Z", "WH", b"hello"),
            "tid|2016-09-21T22:00:46Z|WH|907060870"
        );
    }

    #[test]
    fn settings_debug_does_not_dump_keys() {
        let s = settings(None);
        assert!(format!("{s:?}").contains("pinned: false"));
    }
}
