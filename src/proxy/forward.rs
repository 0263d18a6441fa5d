//! The upstream call: the request as received (body bytes, headers minus
//! hop-by-hop ones, RFC 9110 §7.6.1), one deadline, the answer read whole.

use crate::config::apis::Api;
use axum::http::{HeaderMap, HeaderName, Method, StatusCode, header};
use bytes::Bytes;

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

/// Sends the request to `<upstream>/<rest>[?query]`.
pub async fn forward(
    client: &reqwest::Client,
    api: &Api,
    method: Method,
    path_and_query: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Upstream, ForwardError> {
    let url = format!("{}{path_and_query}", api.upstream);
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
