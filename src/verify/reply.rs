//! What hookgate answers a verified request: the provider's required body
//! (Adyen `[accepted]`, Robokassa `OK{InvId}`, …) and challenge echoes
//! (Slack `url_verification`, Zoom `endpoint.url_validation`). Rendered from
//! the request itself, so a duplicate gets exactly the same answer.

use super::VerifyError;
use super::fields::Fields;
use super::locator::ReplyPart;
use super::provider::{Control, Provider, Response, Signature};
use super::spec::ControlMethod;
use crate::primitives::crypto::{Algorithm, SigningKey, mac_eq};
use crate::primitives::secret::Secret;

/// The key that verified the request, with the provider's MAC settings
/// (for `${mac:…}`).
pub type MacKey<'a> = Option<(&'a SigningKey, &'a Signature)>;

/// Longest value inserted into a reply; a provider's challenge is far shorter.
const MAX_VALUE: usize = 1024;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub body: String,
    pub content_type: Option<String>,
    /// Extra response headers (a handshake's echo, `nosniff`).
    pub headers: Vec<(http::HeaderName, String)>,
    /// A secret the handshake hands over, to be stored for the source
    /// (Asana's `X-Hook-Secret`); ingest stores it before answering.
    pub learn: Option<Secret>,
}

/// The first control request of `provider` this request is (sent with
/// `method`), answered. `signed` selects the controls checked after (true)
/// or without (false) a signature; `key` is the key that verified the
/// request; `verify_token` is the source's, for controls that carry one
/// (a wrong or missing token is refused).
pub fn control(
    provider: &Provider,
    fields: &Fields<'_>,
    method: ControlMethod,
    signed: bool,
    key: MacKey<'_>,
    verify_token: Option<&Secret>,
) -> Result<Option<Reply>, VerifyError> {
    let Some(c) = matching(provider, fields, method, signed) else {
        return Ok(None);
    };
    if let Some(at) = &c.token {
        let given = fields
            .lookup(at, &[])
            .ok_or(VerifyError::WrongVerifyToken)?;
        let want = verify_token.ok_or(VerifyError::WrongVerifyToken)?;
        // Compared as digests: neither content nor length leaks by timing.
        let digest = |b: &[u8]| Algorithm::Sha256.digest(&[b]);
        if !mac_eq(&digest(given.as_bytes()), &digest(want.expose().as_bytes())) {
            return Err(VerifyError::WrongVerifyToken);
        }
    }
    let mut reply = render(&c.reply, fields, key);
    for (name, value) in &c.headers {
        reply
            .headers
            .push((name.clone(), render_parts(value, fields, key, false)));
    }
    if let Some(at) = &c.learn {
        let value = fields
            .lookup(at, &[])
            .filter(|v| !v.is_empty() && v.len() <= MAX_VALUE)
            .ok_or(VerifyError::BadBody("handshake secret missing or too long"))?;
        reply.learn = Some(Secret::new(value));
    }
    Ok(Some(reply))
}

/// The first control of `provider` for this request, if it is one.
pub fn matching<'p>(
    provider: &'p Provider,
    fields: &Fields<'_>,
    method: ControlMethod,
    signed: bool,
) -> Option<&'p Control> {
    provider
        .controls
        .iter()
        .filter(|c| c.signed == signed && c.method == method)
        .find(|c| match (fields.lookup(&c.when, &[]), &c.equals) {
            (None, _) => c.absent,
            (Some(_), _) if c.absent => false,
            (Some(v), Some(want)) => v == *want,
            (Some(_), None) => true,
        })
}

/// Renders a response template for this request.
pub fn render(r: &Response, fields: &Fields<'_>, key: MacKey<'_>) -> Reply {
    let json = r
        .content_type
        .as_deref()
        .is_some_and(|c| c.contains("json"));
    Reply {
        status: r.status,
        body: render_parts(&r.body, fields, key, json),
        content_type: r.content_type.clone(),
        headers: Vec::new(),
        learn: None,
    }
}

/// Whether `v` may be MACed into a reply: a challenge token as providers
/// send them (Zoom's `plainToken`, X's `crc_token`: short, URL-safe or
/// base64 characters). X MACs its CRC token with the key that signs
/// bodies, from an unsigned query parameter; a token of these characters
/// can never be a JSON document, so the answer cannot serve as the
/// signature of a forged event (every JSON body has `{`, `[` or `"`).
pub fn is_challenge_token(v: &str) -> bool {
    (1..=256).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.~+/=".contains(&b))
}

/// A template's text for this request; `json`: values escaped for a JSON
/// string literal. Header values drop what a header may not hold.
fn render_parts(parts: &[ReplyPart], fields: &Fields<'_>, key: MacKey<'_>, json: bool) -> String {
    let mut body = String::new();
    for part in parts {
        let value = match part {
            ReplyPart::Literal(t) => {
                body.push_str(t);
                continue;
            }
            ReplyPart::Value(l) => fields.lookup(l, &[]).unwrap_or_default(),
            ReplyPart::Mac(l) => match (key, fields.lookup(l, &[])) {
                (Some((k, sig)), Some(v)) if is_challenge_token(&v) => sig
                    .encoding
                    .encode(&sig.algorithm.mac(k.bytes(), &[v.as_bytes()])),
                _ => String::new(),
            },
        };
        let value: String = value.chars().take(MAX_VALUE).collect();
        if json {
            // Inside a JSON string literal: escape like JSON, without the quotes.
            let quoted = serde_json::to_string(&value).unwrap_or_default();
            body.push_str(&quoted[1..quoted.len() - 1]);
        } else {
            body.push_str(&value);
        }
    }
    body
}
