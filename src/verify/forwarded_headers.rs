//! Which of the provider's request headers are stored with an event and
//! forwarded to its targets.
//!
//! Rule: hop-by-hop headers and client-sent `Hookgate-*` never are;
//! credentials and proxy headers only for a source with a target that asks
//! for them (`forward_credentials`, `forward_proxy_headers`). Config
//! validation computes each source's withheld list here once; verification
//! applies it to each stored event.

use super::provider::Provider;
use super::schemes::Scheme;
use crate::primitives::headers::StoredHeaders;
use http::HeaderMap;

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

/// Headers a client (or a proxy in front of hookgate) uses to name the
/// client; passed on only to targets with `forward_proxy_headers`.
pub const PROXY_HEADERS: &[&str] = &[
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-port",
    "x-forwarded-proto",
    "x-forwarded-prefix",
    "x-real-ip",
];

/// Headers that carry a credential whatever the scheme: never stored or
/// forwarded unless a target of the source sets `forward_credentials`.
const ALWAYS_CREDENTIALS: &[&str] = &["authorization", "cookie"];

/// Which of the normally withheld headers a source stores (because one of
/// its targets forwards them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Keep {
    pub credentials: bool,
    pub proxy_headers: bool,
}

/// The headers holding `provider`'s credential: `Authorization` and
/// `Cookie` always, plus the header a shared-secret scheme (bearer, token,
/// basic) reads its secret from. A MAC signature is not a credential (it
/// only vouches for this one body) and is forwarded.
pub fn credential_headers(provider: &Provider) -> Vec<String> {
    let mut out: Vec<String> = ALWAYS_CREDENTIALS.iter().map(|h| (*h).to_owned()).collect();
    if matches!(provider.signature.scheme, Scheme::Token | Scheme::Basic) {
        for h in &provider.signature.headers {
            let h = h.to_ascii_lowercase();
            if !out.contains(&h) {
                out.push(h);
            }
        }
    }
    out
}

/// The header names withheld from a destination that does (or does not)
/// take credentials and proxy headers.
pub fn withheld(provider: &Provider, keep: Keep) -> Vec<String> {
    let mut out = Vec::new();
    if !keep.credentials {
        out.extend(credential_headers(provider));
    }
    if !keep.proxy_headers {
        out.extend(PROXY_HEADERS.iter().map(|h| (*h).to_owned()));
    }
    out
}

/// The provider's headers as they will be stored and forwarded: hop-by-hop
/// headers, the headers the client's `Connection` header names, Host,
/// Content-Length, any client-sent `Hookgate-*`, and every name in
/// `withheld` removed. A value that is not ASCII is kept: as text when it
/// is UTF-8, otherwise read as ISO-8859-1 (RFC 9110 §5.5's `obs-text`).
///
/// The names and values move out of the request's map, uncopied: this runs
/// for every new event.
pub fn forwardable(headers: HeaderMap, withheld: &[String]) -> StoredHeaders {
    let named_by_connection: Vec<String> = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    let forwarded = |n: &str| {
        !HOP_BY_HOP.contains(&n)
            && !n.starts_with("hookgate-")
            && !named_by_connection.iter().any(|c| c == n)
            && !withheld.iter().any(|w| w == n)
    };
    let mut out = StoredHeaders::with_capacity(headers.len());
    // A name comes once, with its first value; its further values follow
    // with `None`, so the name is copied only for those.
    let mut values = headers.into_iter().peekable();
    let mut name: Option<http::HeaderName> = None;
    while let Some((first, value)) = values.next() {
        if first.is_some() {
            name = first;
        }
        let Some(n) = &name else { continue };
        if !forwarded(n.as_str()) {
            continue;
        }
        let more = matches!(values.peek(), Some((None, _)));
        let n = if more {
            n.clone()
        } else {
            name.take().expect("matched above")
        };
        out.push(n, value);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn headers_named_by_connection_and_withheld_ones_are_not_forwarded() {
        let mut h = HeaderMap::new();
        h.insert("connection", HeaderValue::from_static("keep-alive, X-Hop"));
        h.insert("x-hop", HeaderValue::from_static("1"));
        h.insert("x-forwarded-for", HeaderValue::from_static("203.0.113.9"));
        h.insert("authorization", HeaderValue::from_static("Bearer t"));
        h.insert("x-kept", HeaderValue::from_static("yes"));
        let withheld = vec!["authorization".to_owned(), "x-forwarded-for".to_owned()];
        let out = forwarded_pairs(&h, &withheld);
        assert_eq!(out, vec![("x-kept".to_owned(), "yes".to_owned())]);
    }

    #[test]
    fn non_ascii_header_values_survive() {
        let mut h = HeaderMap::new();
        h.insert("x-name", HeaderValue::from_bytes("Zoë".as_bytes()).unwrap());
        h.insert("x-latin1", HeaderValue::from_bytes(b"caf\xe9").unwrap());
        let out = forwarded_pairs(&h, &[]);
        assert!(out.contains(&("x-name".to_owned(), "Zoë".to_owned())));
        assert!(out.contains(&("x-latin1".to_owned(), "café".to_owned())));
    }

    /// What the ledger stores: quotes escaped, a repeated header kept in
    /// order, `[]` for none.
    #[test]
    fn forwarded_headers_are_json_pairs() {
        let mut h = HeaderMap::new();
        h.insert("x-name", HeaderValue::from_static("a \"q\""));
        h.append("x-twice", HeaderValue::from_static("1"));
        h.append("x-twice", HeaderValue::from_static("2"));
        assert_eq!(
            forwardable(h, &[]).to_json(),
            r#"[["x-name","a \"q\""],["x-twice","1"],["x-twice","2"]]"#
        );
        assert_eq!(forwardable(HeaderMap::new(), &[]).to_json(), "[]");
    }

    fn forwarded_pairs(h: &HeaderMap, withheld: &[String]) -> Vec<(String, String)> {
        let stored = forwardable(h.clone(), withheld);
        serde_json::from_str(&stored.to_json()).unwrap()
    }
}
