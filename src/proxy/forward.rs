//! The upstream call: the request as received (body bytes, headers minus
//! hop-by-hop ones, RFC 9110 §7.6.1, and with forwarding headers only a
//! trusted proxy may set), one deadline, the answer read whole; and what
//! every proxied answer carries on its way back.

use crate::config::apis::Api;
use crate::verify::client_ip;
use crate::verify::forwarded_headers::PROXY_HEADERS;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use bytes::Bytes;
use ipnet::IpNet;
use reqwest::Url;
use std::net::IpAddr;

/// Largest upstream answer read; a larger one is a 502 and is not stored.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Response headers stored and replayed besides `[apis.*].replay_headers`.
const REPLAY_HEADERS: [&str; 9] = [
    "content-type",
    "content-encoding",
    "content-language",
    "content-disposition",
    "location",
    "etag",
    "last-modified",
    "cache-control",
    "link",
];

/// An upstream answer.
#[derive(Debug)]
pub struct Upstream {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("upstream timed out")]
    Timeout,
    #[error("upstream unreachable: {0}")]
    Connect(String),
    #[error("upstream answer larger than {MAX_RESPONSE_BYTES} bytes")]
    TooLarge,
}

/// Sends the request to `url` (`<upstream>/<rest>[?query]`, checked by
/// `proxy::path::join`).
pub async fn forward(
    client: &reqwest::Client,
    api: &Api,
    method: Method,
    url: Url,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Upstream, ForwardError> {
    let mut outgoing = without_hop_by_hop(headers);
    outgoing.remove(header::HOST);
    outgoing.remove(header::CONTENT_LENGTH);
    let call = async {
        let mut res = client
            .request(method, url)
            .headers(outgoing)
            .body(body)
            .send()
            .await
            .map_err(|e| ForwardError::Connect(e.to_string()))?;
        let mut buf = Vec::new();
        while let Some(chunk) = res
            .chunk()
            .await
            .map_err(|e| ForwardError::Connect(e.to_string()))?
        {
            if buf.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(ForwardError::TooLarge);
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(Upstream {
            status: res.status(),
            headers: without_hop_by_hop(res.headers()),
            body: Bytes::from(buf),
        })
    };
    // One deadline for connect, send and the whole answer.
    tokio::time::timeout(api.timeout, call)
        .await
        .unwrap_or(Err(ForwardError::Timeout))
}

/// The request headers with the forwarding headers a client may not set
/// (RFC 7239 `Forwarded`, `X-Forwarded-*`, `X-Real-IP`) removed unless the
/// peer is one of `trusted` proxies, and the peer's address appended to
/// `X-Forwarded-For`. From an untrusted peer, `X-Forwarded-Host` and
/// `-Proto` are set from what hookgate itself received (hookgate serves
/// plain HTTP; a TLS terminator in front is a trusted proxy and keeps its
/// own).
pub fn forwarding_headers(
    mut headers: HeaderMap,
    peer: Option<IpAddr>,
    trusted: &[IpNet],
) -> HeaderMap {
    // `client_ip` with no headers is the peer itself, in canonical form
    // (`::ffff:10.0.0.1` is `10.0.0.1`).
    let peer = peer.and_then(|p| client_ip::client_ip(Some(p), &HeaderMap::new(), &[]));
    let trusted_peer = peer.is_some_and(|p| trusted.iter().any(|n| n.contains(&p)));
    if !trusted_peer {
        for h in PROXY_HEADERS {
            headers.remove(*h);
        }
        if let Some(host) = headers.get(header::HOST).cloned() {
            headers.insert("x-forwarded-host", host);
        }
        headers.insert("x-forwarded-proto", HeaderValue::from_static("http"));
    }
    if let Some(peer) = peer {
        let prior: Vec<String> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_owned)
            .collect();
        let mut chain = prior.join(", ");
        if !chain.is_empty() {
            chain.push_str(", ");
        }
        chain.push_str(&peer.to_string());
        if let Ok(v) = HeaderValue::from_str(&chain) {
            headers.insert("x-forwarded-for", v);
        }
    }
    headers
}

/// What every proxied answer (first call, pass-through or replay) carries
/// back to the client: the upstream's pages are served from hookgate's
/// origin, so they are sandboxed (`Content-Security-Policy: sandbox` runs
/// no script with that origin's storage; appended, so an upstream's own
/// policy still applies too) and never content-sniffed, and a `Set-Cookie`
/// that would land on hookgate's origin is dropped unless the API opts in
/// (`forward_set_cookie`).
pub fn harden_answer(api: &Api, headers: &mut HeaderMap) {
    headers.append(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if !api.forward_set_cookie {
        headers.remove(header::SET_COOKIE);
    }
}

/// `headers` minus hop-by-hop fields and those named in `Connection`.
pub fn without_hop_by_hop(headers: &HeaderMap) -> HeaderMap {
    const HOP: [&str; 8] = [
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ];
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .collect();
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let n = name.as_str();
        if !HOP.contains(&n) && !named.iter().any(|c| c == n) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

/// The response headers a replay carries: the built-in allow-list plus the
/// API's own.
pub fn replayable_headers(api: &Api, headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(n, _)| {
            REPLAY_HEADERS.contains(&n.as_str())
                || api.replay_headers.iter().any(|h| h == n.as_str())
        })
        .filter_map(|(n, v)| Some((n.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect()
}

/// Parses stored header pairs back (invalid ones are skipped).
pub fn header_map(pairs: &[(String, String)]) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(pairs.len());
    for (n, v) in pairs {
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(n.as_bytes()), v.parse()) {
            out.append(n, v);
        }
    }
    out
}
