//! Reading values out of a request for templates and event ids: headers,
//! JSON pointers, form fields. The body is parsed lazily, at most once, and
//! only after the signature has been checked or when the template needs it.

use super::VerifyError;
use super::provider::{Locator, Lookup};
use http::HeaderMap;
use std::cell::OnceCell;

pub struct Fields<'a> {
    headers: &'a HeaderMap,
    body: &'a [u8],
    json: OnceCell<Option<serde_json::Value>>,
    form: OnceCell<Vec<(String, String)>>,
}

impl<'a> Fields<'a> {
    pub fn new(headers: &'a HeaderMap, body: &'a [u8]) -> Self {
        Self {
            headers,
            body,
            json: OnceCell::new(),
            form: OnceCell::new(),
        }
    }

    fn json(&self) -> Option<&serde_json::Value> {
        self.json
            .get_or_init(|| serde_json::from_slice(self.body).ok())
            .as_ref()
    }

    /// A clear 400 when the body cannot hold the value `lookup` wants.
    pub fn check_body_for(&self, lookup: &Lookup) -> Result<(), VerifyError> {
        let wants_json = lookup.0.iter().any(|l| matches!(l, Locator::Json(_)));
        let wants_form = lookup.0.iter().any(|l| matches!(l, Locator::Form(_)));
        if wants_json && self.lookup(lookup, &[]).is_none() {
            match self.json() {
                None if std::str::from_utf8(self.body).is_err() => {
                    return Err(VerifyError::BadBody("body is not UTF-8 JSON"));
                }
                None => return Err(VerifyError::BadBody("body is not valid JSON")),
                Some(v) if !v.is_object() => {
                    return Err(VerifyError::BadBody("JSON body is not an object"));
                }
                Some(_) => {}
            }
        }
        if wants_form && std::str::from_utf8(self.body).is_err() {
            return Err(VerifyError::BadBody("form body is not UTF-8"));
        }
        Ok(())
    }

    /// The first present alternative of `lookup`, as text.
    pub fn lookup(&self, lookup: &Lookup, pairs: &[(&str, &str)]) -> Option<String> {
        lookup.0.iter().find_map(|l| self.locate(l, pairs))
    }

    fn locate(&self, locator: &Locator, pairs: &[(&str, &str)]) -> Option<String> {
        match locator {
            Locator::Header(name) => self
                .headers
                .get(name.as_str())
                .and_then(|v| v.to_str().ok())
                .map(|s| s.trim().to_owned()),
            Locator::Signature(key) => pairs
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| (*v).to_owned()),
            Locator::Json(pointer) => match self.json()?.pointer(pointer)? {
                serde_json::Value::String(s) => Some(s.clone()),
                serde_json::Value::Number(n) => Some(n.to_string()),
                serde_json::Value::Bool(b) => Some(b.to_string()),
                _ => None,
            },
            Locator::Form(name) => self
                .form
                .get_or_init(|| {
                    form_urlencoded::parse(self.body)
                        .map(|(k, v)| (k.into_owned(), v.into_owned()))
                        .collect()
                })
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone()),
        }
    }
}

/// Headers that describe this hop, not the event, and are never forwarded.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "expect",
];

/// The provider's headers as they will be forwarded: hop-by-hop headers,
/// Host, Content-Length and any client-sent `Hookgate-*` removed.
pub fn forwardable(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| {
            let n = name.as_str();
            !HOP_BY_HOP.contains(&n) && !n.starts_with("hookgate-")
        })
        .filter_map(|(name, value)| {
            Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
        })
        .collect()
}
