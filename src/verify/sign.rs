//! Builds the request a provider would send for a body: `hookgate sign` and
//! the tests use it to exercise a source end to end. It is the inverse of
//! `verify` and is driven by the same provider definition.
//!
//! Some schemes carry the signature in the body (Adyen, T-Bank, Robokassa,
//! Braintree): then [`Signed::body`] is the body to send instead.

use super::provider::{HeaderFormat, Locator, Lookup, Provider, Scheme, Segment};
use super::request::Fields;
use super::scheme::{Algorithm, Encoding, SigningKey};
use super::schemes::{self, adyen, digest_forms, paypal, twilio};
use base64::Engine;
use http::HeaderMap;

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

/// The signed request.
#[derive(Debug, Default)]
pub struct Signed {
    pub headers: Vec<(String, String)>,
    /// The body to send when signing changed it.
    pub body: Option<Vec<u8>>,
    /// Query parameters to add to the URL (Twilio's `bodySHA256`).
    pub query: Option<String>,
}

/// Signs `req.body` as `provider` would with `key`.
pub fn sign(
    provider: &Provider,
    key: &SigningKey,
    req: &SignRequest<'_>,
) -> Result<Signed, String> {
    if let Some(why) = &provider.incomplete {
        return Err(why.clone());
    }
    let sig = &provider.signature;
    let mut out = Signed::default();
    if let Some(h) = provider.event_id.header() {
        let id = req
            .event_id
            .clone()
            .unwrap_or_else(|| format!("evt_{}", uuid::Uuid::new_v4().simple()));
        out.headers.push((h.to_owned(), id));
    }
    let first_header = || sig.headers.first().cloned().unwrap_or_default();
    match sig.scheme {
        Scheme::Hmac => {
            let (name, value) = sign_hmac(provider, key, req, &mut out.headers)?;
            out.headers.push((name, value));
        }
        Scheme::Twilio => {
            let url = req.url.ok_or("twilio signs the URL: pass the public URL")?;
            let text = std::str::from_utf8(req.body).map_err(|_| "body is not UTF-8")?;
            let (url, params) = if serde_json::from_str::<serde_json::Value>(text).is_ok() {
                let hash = hex::encode(Algorithm::Sha256.digest(&[req.body]));
                let q = format!("bodySHA256={hash}");
                out.query = Some(q.clone());
                let sep = if url.contains('?') { '&' } else { '?' };
                (format!("{url}{sep}{q}"), String::new())
            } else {
                let params: Vec<(String, String)> = form_urlencoded::parse(req.body)
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect();
                (url.to_owned(), twilio::sorted_params(&params))
            };
            let mac = sig
                .algorithm
                .mac(key.bytes(), &[url.as_bytes(), params.as_bytes()]);
            out.headers
                .push((first_header(), sig.encoding.encode(&mac)));
        }
        Scheme::Adyen => {
            let mut json: serde_json::Value =
                serde_json::from_slice(req.body).map_err(|e| format!("body: {e}"))?;
            let items = json
                .get_mut("notificationItems")
                .and_then(|v| v.as_array_mut())
                .ok_or("body has no notificationItems")?;
            for item in items {
                let nri = item
                    .get_mut("NotificationRequestItem")
                    .ok_or("item without NotificationRequestItem")?;
                let content = adyen::signed_fields(nri);
                let mac = sig.algorithm.mac(key.bytes(), &[content.as_bytes()]);
                let obj = nri.as_object_mut().ok_or("item is not an object")?;
                let extra = obj
                    .entry("additionalData")
                    .or_insert_with(|| serde_json::json!({}));
                extra["hmacSignature"] = sig.encoding.encode(&mac).into();
            }
            out.body = Some(serde_json::to_vec(&json).map_err(|e| e.to_string())?);
        }
        Scheme::Braintree => {
            let payload = base64::engine::general_purpose::STANDARD.encode(req.body);
            let mac = sig.algorithm.mac(key.bytes(), &[payload.as_bytes()]);
            let body = form_urlencoded::Serializer::new(String::new())
                .append_pair("bt_signature", &format!("hookgate|{}", hex::encode(mac)))
                .append_pair("bt_payload", &payload)
                .finish();
            out.body = Some(body.into_bytes());
        }
        Scheme::Tbank => {
            let mut json: serde_json::Value =
                serde_json::from_slice(req.body).map_err(|e| format!("body: {e}"))?;
            let obj = json.as_object_mut().ok_or("body is not a JSON object")?;
            let content = digest_forms::tbank_content(obj, &password(key));
            let digest = sig.algorithm.digest(&[content.as_bytes()]);
            obj.insert("Token".into(), hex::encode(digest).into());
            out.body = Some(serde_json::to_vec(&json).map_err(|e| e.to_string())?);
        }
        Scheme::Robokassa => {
            let fields: Vec<(String, String)> = form_urlencoded::parse(req.body)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect();
            let content = digest_forms::robokassa_content(&fields, &password(key))
                .ok_or("body needs OutSum and InvId")?;
            let digest = hex::encode_upper(sig.algorithm.digest(&[content.as_bytes()]));
            let mut body = req.body.to_vec();
            body.extend_from_slice(format!("&SignatureValue={digest}").as_bytes());
            out.body = Some(body);
        }
        Scheme::Token => match (sig.headers.first(), &sig.query) {
            (Some(h), _) => out
                .headers
                .push((h.clone(), format!("{}{}", sig.prefix, password(key)))),
            (None, Some(q)) => {
                out.query = Some(
                    form_urlencoded::Serializer::new(String::new())
                        .append_pair(q, &password(key))
                        .finish(),
                )
            }
            (None, None) => return Err("token has neither header nor query".into()),
        },
        Scheme::Basic => {
            let creds = base64::engine::general_purpose::STANDARD.encode(key.bytes());
            out.headers.push((first_header(), format!("Basic {creds}")));
        }
        Scheme::Paypal => {
            let p = req
                .paypal
                .as_ref()
                .ok_or("PayPal signs with its own private key: pass --private-key (a test key)")?;
            out.headers.extend(sign_paypal(p, req)?);
        }
        Scheme::Plaid => {
            let p = req.plaid.as_ref().ok_or(
                "Plaid signs with its own private key: pass --private-key (a test P-256 key)",
            )?;
            out.headers.push((first_header(), sign_plaid(p, req)?));
        }
        Scheme::None => {}
    }
    Ok(out)
}

/// The raw secret as configured (T-Bank password, Robokassa password #2, tokens).
fn password(key: &SigningKey) -> String {
    String::from_utf8_lossy(key.bytes()).into_owned()
}

fn sign_hmac(
    provider: &Provider,
    key: &SigningKey,
    req: &SignRequest<'_>,
    out: &mut Vec<(String, String)>,
) -> Result<(String, String), String> {
    let sig = &provider.signature;
    let ts = match provider.timestamp.as_ref().map(|t| t.unit) {
        Some(super::provider::TimeUnit::Millis) => (req.timestamp * 1000).to_string(),
        _ => req.timestamp.to_string(),
    };
    let mut ts_pair_key = None;
    let mut ts_value = ts.clone();
    if let Some(t) = &provider.timestamp {
        match t.from.alternatives.first() {
            Some(Locator::Header(h)) => out.push((h.clone(), ts.clone())),
            Some(Locator::Signature(k)) => ts_pair_key = Some(k.clone()),
            // Carried in the body (Linear): the body already holds it.
            Some(Locator::Json(_)) => {
                let empty = HeaderMap::new();
                ts_value = Fields::new(&empty, req.body)
                    .lookup(&t.from, &[])
                    .ok_or("the body has no timestamp")?;
            }
            _ => return Err("cannot place the timestamp of this provider".into()),
        }
    }
    let empty = HeaderMap::new();
    let fields = Fields::with_query(&empty, req.body, req.query.unwrap_or_default());
    let mut values: Vec<Vec<u8>> = Vec::new();
    for seg in &sig.content {
        if let Segment::Value(l) = seg {
            values.push(value_for(l, out, &fields)?.into_bytes());
        }
    }
    let mut next = values.iter();
    let url = req.url.unwrap_or_default();
    let parts: Vec<&[u8]> = sig
        .content
        .iter()
        .map(|seg| match seg {
            Segment::Literal(b) => b.as_slice(),
            Segment::Body => req.body,
            Segment::Timestamp => ts_value.as_bytes(),
            Segment::Url => url.as_bytes(),
            Segment::Value(_) => next.next().map(Vec::as_slice).unwrap_or_default(),
        })
        .collect();
    let mac = sig.encoding.encode(&sig.algorithm.mac(key.bytes(), &parts));
    let first_key = sig.keys.first().map(String::as_str).unwrap_or("v1");
    let value = match sig.format {
        HeaderFormat::Value => format!("{}{mac}", sig.prefix),
        HeaderFormat::Pairs => match &ts_pair_key {
            Some(k) => format!("{k}={ts}{}{first_key}={mac}", sig.separator),
            None => format!("{first_key}={mac}"),
        },
        HeaderFormat::Tagged => format!("{first_key},{mac}"),
    };
    let header = sig.headers.first().ok_or("the provider names no header")?;
    Ok((header.clone(), value))
}

fn sign_paypal(p: &PaypalSign<'_>, req: &SignRequest<'_>) -> Result<Vec<(String, String)>, String> {
    use rsa::pkcs1::DecodeRsaPrivateKey;
    use rsa::pkcs8::DecodePrivateKey;
    use rsa::signature::{SignatureEncoding, Signer};
    let key = rsa::RsaPrivateKey::from_pkcs8_pem(p.private_key_pem)
        .or_else(|_| rsa::RsaPrivateKey::from_pkcs1_pem(p.private_key_pem))
        .map_err(|_| "--private-key is not an RSA private key (PEM)".to_owned())?;
    let id = uuid::Uuid::new_v4().to_string();
    let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(req.timestamp.max(0) as u64);
    let time = humantime::format_rfc3339_seconds(when).to_string();
    let msg = paypal::message(&id, &time, p.webhook_id, req.body);
    let signer = rsa::pkcs1v15::SigningKey::<rsa::sha2::Sha256>::new(key);
    let sig = signer.sign(msg.as_bytes()).to_bytes();
    Ok(vec![
        (paypal::TRANSMISSION_ID.into(), id),
        (paypal::TRANSMISSION_TIME.into(), time),
        (
            paypal::TRANSMISSION_SIG.into(),
            Encoding::Base64.encode(&sig),
        ),
        (paypal::CERT_URL.into(), p.cert_url.to_owned()),
        (paypal::AUTH_ALGO.into(), "SHA256withRSA".into()),
    ])
}

/// A `Plaid-Verification` token: ES256 over `{"alg","kid","typ"}` and
/// `{"iat","request_body_sha256"}`.
pub fn sign_plaid(p: &PlaidSign<'_>, req: &SignRequest<'_>) -> Result<String, String> {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
    use p256::ecdsa::signature::Signer;
    let key = plaid_secret_key(p)?;
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

fn plaid_secret_key(p: &PlaidSign<'_>) -> Result<p256::SecretKey, String> {
    use p256::pkcs8::DecodePrivateKey;
    p256::SecretKey::from_pkcs8_pem(p.private_key_pem)
        .or_else(|_| p256::SecretKey::from_sec1_pem(p.private_key_pem))
        .map_err(|_| "--private-key is not a P-256 private key (PEM)".to_owned())
}

/// The JWK a source pins (`[sources.<name>.plaid] keys`) to accept what
/// [`sign_plaid`] signs with this key.
pub fn plaid_public_jwk(p: &PlaidSign<'_>) -> Result<String, String> {
    let public = plaid_secret_key(p)?.public_key();
    Ok(schemes::plaid::public_jwk(
        p.kid,
        &p256::ecdsa::VerifyingKey::from(public),
    ))
}

/// A signed value: from a header already generated, from the body, or a
/// fresh id for a header nobody set yet.
fn value_for(
    lookup: &Lookup,
    out: &mut Vec<(String, String)>,
    fields: &Fields<'_>,
) -> Result<String, String> {
    for l in &lookup.alternatives {
        if let Locator::Header(h) = l
            && let Some((_, v)) = out.iter().find(|(n, _)| n == h)
        {
            return Ok(v.clone());
        }
    }
    if let Some(v) = fields.lookup(lookup, &[]) {
        return Ok(v);
    }
    match lookup.header() {
        Some(h) => {
            let v = uuid::Uuid::new_v4().to_string();
            out.push((h.to_owned(), v.clone()));
            Ok(v)
        }
        None => Err(format!("the body has no value for {lookup:?}")),
    }
}
