//! What identifies a proxied request: the client's key (namespaced by API
//! and scope), and the fingerprint of the request it was first used with.

use crate::config::apis::{Api, Scope};
use crate::store::idempotency::IdemKey;
use axum::http::{HeaderMap, Method};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Longest key accepted (Stripe allows 255 characters).
pub const MAX_KEY_LEN: usize = 255;

/// Why a request cannot be handled idempotently: 400.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    #[error("this method requires the {0} header")]
    Missing(String),
    #[error("the {0} header must be 1 to 255 visible ASCII characters")]
    Malformed(String),
    #[error("the {0} header names the caller and is required with an idempotency key")]
    MissingScope(String),
}

/// The key of a covered request, `None` when there is none (and none is
/// required). A structured-field string (`"abc"`, per the IETF draft) is
/// unquoted.
pub fn client_key(api: &Api, headers: &HeaderMap) -> Result<Option<String>, KeyError> {
    let Some(raw) = headers.get(api.key_header.as_str()) else {
        return if api.required {
            Err(KeyError::Missing(api.key_header.clone()))
        } else {
            Ok(None)
        };
    };
    let text = raw
        .to_str()
        .map_err(|_| KeyError::Malformed(api.key_header.clone()))?
        .trim();
    let text = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    let ok =
        !text.is_empty() && text.len() <= MAX_KEY_LEN && text.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(Some(text.to_owned()))
    } else {
        Err(KeyError::Malformed(api.key_header.clone()))
    }
}

/// The full identity of `key` for this API and caller.
pub fn namespaced(api: &Api, headers: &HeaderMap, key: String) -> Result<IdemKey, KeyError> {
    let scope = match &api.scope {
        Scope::None => String::new(),
        Scope::Header(h) => headers
            .get(h.as_str())
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| KeyError::MissingScope(h.clone()))?
            .to_owned(),
    };
    Ok(IdemKey {
        api: api.name.clone(),
        scope,
        key,
    })
}

/// The claim-cache key: `<prefix>:idem:v1:<api>:<sha256(scope NUL key)>`
/// (hashed so any scope value and key make a safe, bounded Redis key; the
/// `idem` segment before `v1` keeps it apart from webhook keys
/// `<prefix>:v1:<source>:<event id>`).
pub fn cache_key(prefix: &str, k: &IdemKey) -> String {
    let mut h = Sha256::new();
    h.update(k.scope.as_bytes());
    h.update([0]);
    h.update(k.key.as_bytes());
    format!("{prefix}:idem:v1:{}:{}", k.api, hex::encode(h.finalize()))
}

/// SHA-256 over method, path + query and body (exact bytes, or canonical
/// JSON when asked and the body parses).
pub fn fingerprint(
    method: &Method,
    path_and_query: &str,
    body: &[u8],
    canonical: bool,
) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(method.as_str().as_bytes());
    h.update(b"\n");
    h.update(path_and_query.as_bytes());
    h.update(b"\n");
    match canonical
        .then(|| serde_json::from_slice::<Value>(body).ok())
        .flatten()
    {
        Some(v) => {
            let mut out = String::new();
            canonical_json(&v, &mut out);
            h.update(out.as_bytes());
        }
        None => h.update(body),
    }
    h.finalize().into()
}

/// Sorted object keys, no insignificant whitespace.
fn canonical_json(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical_json(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_ignores_key_order_and_whitespace_but_exact_bytes_do_not() {
        let a = br#"{"b": 1, "a": [1, {"y":2,"x":1}]}"#;
        let b = br#"{"a":[1,{"x":1,"y":2}],"b":1}"#;
        let m = Method::POST;
        assert_eq!(
            fingerprint(&m, "/x", a, true),
            fingerprint(&m, "/x", b, true)
        );
        assert_ne!(
            fingerprint(&m, "/x", a, false),
            fingerprint(&m, "/x", b, false)
        );
        assert_ne!(
            fingerprint(&m, "/x", b, true),
            fingerprint(&m, "/y", b, true)
        );
        assert_ne!(
            fingerprint(&m, "/x", b, true),
            fingerprint(&Method::PATCH, "/x", b, true)
        );
    }
}
