//! What hookgate answers a verified request: the provider's required body
//! (Adyen `[accepted]`, Robokassa `OK{InvId}`, …) and challenge echoes
//! (Slack `url_verification`, Zoom `endpoint.url_validation`). Rendered from
//! the request itself, so a duplicate gets exactly the same answer.

use super::fields::Fields;
use super::locator::ReplyPart;
use super::provider::{Provider, Response, Signature};
use crate::primitives::crypto::SigningKey;

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
}

/// The first control request of `provider` this request is, answered.
/// `signed` selects the controls checked after (true) or without (false)
/// a signature; `key` is the key that verified the request.
pub fn control(
    provider: &Provider,
    fields: &Fields<'_>,
    signed: bool,
    key: MacKey<'_>,
) -> Option<Reply> {
    provider
        .controls
        .iter()
        .filter(|c| c.signed == signed)
        .find(|c| match (fields.lookup(&c.when, &[]), &c.equals) {
            (Some(v), Some(want)) => v == *want,
            (Some(_), None) => true,
            (None, _) => false,
        })
        .map(|c| render(&c.reply, fields, key))
}

/// Renders a response template for this request.
pub fn render(r: &Response, fields: &Fields<'_>, key: MacKey<'_>) -> Reply {
    let json = r
        .content_type
        .as_deref()
        .is_some_and(|c| c.contains("json"));
    let mut body = String::new();
    for part in &r.body {
        let value = match part {
            ReplyPart::Literal(t) => {
                body.push_str(t);
                continue;
            }
            ReplyPart::Value(l) => fields.lookup(l, &[]).unwrap_or_default(),
            ReplyPart::Mac(l) => match (key, fields.lookup(l, &[])) {
                (Some((k, sig)), Some(v)) => sig
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
    Reply {
        status: r.status,
        body,
        content_type: r.content_type.clone(),
    }
}
