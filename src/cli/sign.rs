//! `hookgate sign`: the headers (and body, where the signature travels in
//! it) a provider would send, plus a ready curl line. `--source` takes the
//! provider, secret and URL from a configured source.

use crate::primitives::crypto::SigningKey;
use crate::primitives::secret::Secret;
use crate::primitives::time::Millis;
use crate::verify::provider::Provider;
use crate::verify::registry::Registry;
use crate::verify::schemes::Scheme;
use crate::verify::schemes::plaid::signing_key_jwk as plaid_public_jwk;
use crate::verify::sign::{PaypalSign, PlaidSign, SignRequest, sign};
use anyhow::{Context, bail};
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct SignArgs {
    /// Provider name (see `hookgate providers` for the list).
    #[arg(long, required_unless_present = "source", conflicts_with = "source")]
    provider: Option<String>,
    /// A source of the config (`--config`): its provider (with the source's
    /// overrides), its first secret, and its URL on this gateway.
    #[arg(long)]
    source: Option<String>,
    /// Secret as configured at the provider: literal, `env:NAME` or `file:PATH`
    /// (not used by PayPal, which signs with --private-key). With --source:
    /// instead of the source's first secret.
    #[arg(long)]
    secret: Option<String>,
    /// File holding the exact body to sign.
    #[arg(long)]
    body: PathBuf,
    /// Where the curl line sends it (default: `/webhooks/<provider>` on
    /// 127.0.0.1:8080; with --source, `/webhooks/<source>` on the config's
    /// listen address).
    #[arg(long)]
    to: Option<String>,
    /// The event type, sent in the header the provider carries it in
    /// (GitHub `X-GitHub-Event`, Shopify `X-Shopify-Topic`); routes match on it.
    #[arg(long)]
    event_type: Option<String>,
    /// Unix timestamp to sign (default: now).
    #[arg(long)]
    timestamp: Option<i64>,
    /// Event id for providers that send it in a header (default: random).
    #[arg(long)]
    event_id: Option<String>,
    /// Public URL for schemes that sign the URL (default: --to).
    #[arg(long)]
    public_url: Option<String>,
    /// Directory of extra provider definitions.
    #[arg(long)]
    providers_dir: Option<PathBuf>,
    /// PayPal and SNS: an RSA private key (PEM file) matching the
    /// certificate the source pins or is served; Plaid: a P-256 private
    /// key whose public JWK the source pins; Ed25519 (Discord, Telnyx),
    /// ECDSA (SendGrid) and RSA (Wise) providers: a private key whose
    /// public half is the source's secret (printed). The providers' own
    /// keys are theirs: tests only.
    #[arg(long)]
    private_key: Option<PathBuf>,
    /// Plaid only: the `kid` the token names (pin the printed JWK under it).
    #[arg(long, default_value = "hookgate-test")]
    key_id: String,
    /// PayPal only: the webhook id the source is configured with.
    #[arg(long, default_value = "WEBHOOK_ID")]
    webhook_id: String,
    /// PayPal and SNS: the certificate URL to send (SNS: when the body
    /// names no `SigningCertURL`).
    #[arg(
        long,
        default_value = "https://api.paypal.com/v1/notifications/certs/CERT-hookgate-test"
    )]
    cert_url: String,
    /// Where to write the signed body when signing changes it (Adyen,
    /// T-Bank, Robokassa, Braintree). Default: next to --body, `.signed`.
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(args: SignArgs, config: &Option<PathBuf>) -> anyhow::Result<()> {
    let SignArgs {
        provider,
        source,
        secret,
        body,
        to,
        event_type,
        timestamp,
        event_id,
        public_url,
        providers_dir,
        private_key,
        key_id,
        webhook_id,
        cert_url,
        out,
    } = args;
    let target = match &source {
        Some(name) => from_source(name, config, secret.as_deref(), private_key.is_some())?,
        None => {
            let name = provider.unwrap_or_default();
            let mut registry = Registry::builtin();
            if let Some(dir) = providers_dir {
                registry.load_dir(&dir)?;
            }
            let p = registry.get(&name).with_context(|| {
                format!(
                    "unknown provider `{name}` (known: {})",
                    registry.names().join(", ")
                )
            })?;
            let key = signing_key(&p, secret.as_deref(), private_key.is_some(), &name)?;
            Signer {
                to: format!("http://127.0.0.1:8080/webhooks/{name}"),
                public_url: None,
                provider: p,
                key,
            }
        }
    };
    let Signer {
        provider: p, key, ..
    } = &target;
    let pem = match &private_key {
        Some(p) => {
            Some(std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?)
        }
        None => None,
    };
    let bytes = std::fs::read(&body).with_context(|| format!("reading {}", body.display()))?;
    let to = to.unwrap_or_else(|| target.to.clone());
    let url = public_url
        .or_else(|| target.public_url.clone())
        .unwrap_or_else(|| to.clone());
    let ts = timestamp.unwrap_or_else(|| Millis::now().as_secs());
    let query = url.split_once('?').map(|(_, q)| q.to_owned());
    let req = SignRequest {
        body: &bytes,
        timestamp: ts,
        event_id,
        url: Some(&url),
        query: query.as_deref(),
        paypal: pem.as_deref().map(|pem| PaypalSign {
            private_key_pem: pem,
            webhook_id: &webhook_id,
            cert_url: &cert_url,
        }),
        plaid: pem.as_deref().map(|pem| PlaidSign {
            private_key_pem: pem,
            kid: &key_id,
        }),
        private_key: pem.as_deref(),
        cert_url: Some(&cert_url),
    };
    let mut signed = sign(p, key, &req).map_err(|e| anyhow::anyhow!(e))?;
    type_header(p, event_type.as_deref(), &mut signed.headers);
    if let (Some(plaid), Scheme::Plaid) = (&req.plaid, p.signature.scheme) {
        let jwk = plaid_public_jwk(plaid).map_err(|e| anyhow::anyhow!(e))?;
        eprintln!("pin this key in [sources.<name>.plaid] keys: {jwk}");
    }
    if let Some(pem) = pem.as_deref()
        && let Some(public) = public_key_secret(p, pem).map_err(|e| anyhow::anyhow!(e))?
    {
        eprintln!("configure this public key as the source's secret: {public}");
    }
    let mut to = to;
    if let Some(q) = &signed.query {
        to.push(if to.contains('?') { '&' } else { '?' });
        to.push_str(q);
    }
    let mut body = body;
    if let Some(new_body) = &signed.body {
        let path = out.unwrap_or_else(|| body.with_extension("signed"));
        std::fs::write(&path, new_body).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("signed body written to {}", path.display());
        body = path;
    }
    let json =
        serde_json::from_slice::<serde_json::Value>(signed.body.as_deref().unwrap_or(&bytes))
            .is_ok();
    print_request(&signed.headers, &to, &body, json);
    Ok(())
}

/// What a request is signed as and sent to.
struct Signer {
    provider: std::sync::Arc<Provider>,
    key: SigningKey,
    /// The curl line's URL unless `--to` is given.
    to: String,
    /// The URL signed by schemes that sign it, unless `--public-url` is given.
    public_url: Option<String>,
}

/// `--source NAME`: the configured source's provider (with its overrides),
/// its first secret (or `--secret`), and its URL on the listen address.
fn from_source(
    name: &str,
    config: &Option<PathBuf>,
    secret: Option<&str>,
    private_key: bool,
) -> anyhow::Result<Signer> {
    let config = super::load(config)?;
    let Some(s) = config.sources.get(name) else {
        let known: Vec<&str> = config.sources.keys().map(String::as_str).collect();
        bail!(
            "unknown source `{name}` in {} (configured: {})",
            config.origin,
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        );
    };
    let key = match (secret, s.keys.first()) {
        (Some(_), _) | (None, None) => {
            signing_key(&s.provider, secret, private_key, &s.provider.name)?
        }
        (None, Some(k)) => k.clone(),
    };
    // A wildcard listen address is not where a client connects.
    let mut addr = config.server.listen;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    Ok(Signer {
        provider: s.provider.clone(),
        key,
        to: format!("http://{addr}/webhooks/{name}"),
        public_url: s.public_url.clone(),
    })
}

/// Adds the header the provider carries its event type in (GitHub's
/// `X-GitHub-Event`, Shopify's `X-Shopify-Topic`), first among the type's
/// parts, when `--event-type` gives a value. Neither provider signs it
/// (both sign the body alone), so it goes in after signing.
fn type_header(p: &Provider, event_type: Option<&str>, headers: &mut Vec<(String, String)>) {
    let Some(name) = p
        .event_type
        .as_ref()
        .and_then(|t| t.parts.first())
        .and_then(|l| l.header())
    else {
        if event_type.is_some() {
            eprintln!(
                "note: provider `{}` does not send its event type in a header; --event-type ignored",
                p.name
            );
        }
        return;
    };
    match event_type {
        Some(t) => headers.insert(0, (name.to_owned(), t.to_owned())),
        None => eprintln!(
            "note: no --event-type: `{name}` not sent (routes with `events` will not match)"
        ),
    }
}

/// The key `--secret` gives, decoded as the provider's sources decode theirs.
/// A public-key provider's secret is its public key, which signing does
/// not use: `--private-key` stands in for it.
fn signing_key(
    p: &Provider,
    secret: Option<&str>,
    private_key: bool,
    name: &str,
) -> anyhow::Result<SigningKey> {
    let public_key_scheme = matches!(
        p.signature.scheme,
        Scheme::Ed25519 | Scheme::Ecdsa | Scheme::Pkcs1
    );
    if public_key_scheme && !private_key {
        bail!("provider `{name}` signs with its own private key: pass --private-key (a test key)");
    }
    match (secret, p.needs_secret() && !public_key_scheme) {
        (Some(secret), _) => {
            let secret = Secret::resolve(secret, std::path::Path::new("."))
                .map_err(|e| anyhow::anyhow!("--secret: {e}"))?;
            p.signing_key(&secret)
                .map_err(|e| anyhow::anyhow!("--secret: {e}"))
        }
        (None, false) => Ok(SigningKey::from_bytes(Vec::new())),
        (None, true) => bail!("--secret is required for provider `{name}`"),
    }
}

/// The public half of a test's `--private-key`, written as the provider's
/// sources take their secret, for the public-key schemes.
fn public_key_secret(p: &Provider, pem: &str) -> Result<Option<String>, String> {
    use crate::primitives::crypto::{Encoding, SecretEncoding};
    use crate::verify::schemes::{ecdsa, ed25519, pkcs1};
    use p256::pkcs8::EncodePublicKey as _;
    let b64 = |der: &[u8]| Encoding::Base64.encode(der);
    Ok(Some(match p.signature.scheme {
        Scheme::Ed25519 => {
            let public = ed25519::private_key(pem)?.verifying_key().to_bytes();
            match p.signature.secret_encoding {
                SecretEncoding::Base64 => b64(&public),
                _ => hex::encode(public),
            }
        }
        Scheme::Ecdsa => {
            let key = ecdsa::private_key(pem)?;
            let der = key
                .verifying_key()
                .to_public_key_der()
                .map_err(|e| e.to_string())?;
            b64(der.as_bytes())
        }
        Scheme::Pkcs1 => {
            use rsa::pkcs8::EncodePublicKey as _;
            let key = pkcs1::private_key(pem)?;
            let der = key
                .to_public_key()
                .to_public_key_der()
                .map_err(|e| e.to_string())?;
            b64(der.as_bytes())
        }
        _ => return Ok(None),
    }))
}

/// Prints the headers, then a curl line that sends `body` with them to `to`.
fn print_request(headers: &[(String, String)], to: &str, body: &std::path::Path, json: bool) {
    let content_type = if json {
        "application/json"
    } else {
        "application/x-www-form-urlencoded"
    };
    let mut curl = format!("curl -sS -i -X POST '{to}' -H 'content-type: {content_type}'");
    for (k, v) in headers {
        println!("{k}: {v}");
        let _ = write!(curl, " -H '{k}: {v}'");
    }
    let _ = write!(curl, " --data-binary @'{}'", body.display());
    println!("\n{curl}");
}
