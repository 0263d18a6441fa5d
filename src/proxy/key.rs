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

/// The full identity of `key` for this API and caller. The row's `scope` is
/// a SHA-256 over the scope header's value and the caller's credential
/// headers (`credential_headers`), salted with the API and the key, in hex:
/// a stored answer is replayed only to a request with the same credentials,
/// any scope value fits the index (a 6,000-character header used to make
/// PostgreSQL refuse the row), and the ledger holds no credential.
pub fn namespaced(api: &Api, headers: &HeaderMap, key: String) -> Result<IdemKey, KeyError> {
    let mut h = Sha256::new();
    let mut part = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_be_bytes());
        h.update(bytes);
    };
    part(b"hookgate idempotency scope v2");
    part(api.name.as_bytes());
    part(key.as_bytes());
    match &api.scope {
        Scope::None => part(b""),
        Scope::Header(name) => {
            let value = headers
                .get(name.as_str())
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| KeyError::MissingScope(name.clone()))?;
            part(value.as_bytes());
        }
    }
    for name in &api.credential_headers {
        // Every value, in order; an absent header is its own (empty) caller.
        let values: Vec<&[u8]> = headers
            .get_all(name.as_str())
            .iter()
            .map(|v| v.as_bytes())
            .collect();
        part(name.as_bytes());
        part(&(values.len() as u64).to_be_bytes());
        for v in values {
            part(v);
        }
    }
    Ok(IdemKey {
        api: api.name.clone(),
        scope: hex::encode(h.finalize()),
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
    use crate::config::Config;
    use std::path::Path;

    fn api(extra: &str) -> std::sync::Arc<Api> {
        let text = format!(
            "[server]\nadmin_listen = \"127.0.0.1:0\"\n[apis.pay]\nupstream = \"http://127.0.0.1:9\"\n{extra}"
        );
        Config::from_toml_str(&text, Path::new(".")).unwrap().apis["pay"].clone()
    }

    fn scope_of(api: &Api, headers: &[(&str, &str)]) -> String {
        let mut map = HeaderMap::new();
        for (n, v) in headers {
            map.append(
                http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        namespaced(api, &map, "k1".into()).unwrap().scope
    }

    #[test]
    fn the_scope_binds_the_credentials_and_is_a_bounded_hash() {
        let a = api("scope = \"header:X-User\"");
        let alice = scope_of(&a, &[("x-user", "u1"), ("authorization", "Bearer A")]);
        assert_eq!(alice.len(), 64);
        assert_eq!(
            alice,
            scope_of(&a, &[("x-user", "u1"), ("authorization", "Bearer A")])
        );
        for other in [
            vec![("x-user", "u1")],
            vec![("x-user", "u1"), ("authorization", "Bearer B")],
            vec![("x-user", "u2"), ("authorization", "Bearer A")],
            vec![
                ("x-user", "u1"),
                ("authorization", "Bearer A"),
                ("authorization", "x"),
            ],
        ] {
            assert_ne!(alice, scope_of(&a, &other), "{other:?}");
        }
        let long = "u".repeat(6000);
        assert_eq!(scope_of(&a, &[("x-user", &long)]).len(), 64);
        // Turned off: the credential no longer splits callers.
        let off = api("credential_headers = []");
        assert_eq!(
            scope_of(&off, &[("authorization", "A")]),
            scope_of(&off, &[("authorization", "B")])
        );
        let custom = api("credential_headers = [\"X-Api-Key\"]");
        assert_ne!(
            scope_of(&custom, &[("x-api-key", "A")]),
            scope_of(&custom, &[("x-api-key", "B")])
        );
    }

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
