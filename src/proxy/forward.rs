//! The upstream call: the request as received (body bytes, headers minus
//! hop-by-hop ones, RFC 9110 §7.6.1), one deadline for the whole exchange.
//! An answer to be stored is read whole under the answer budget
//! ([`Answer::read_whole`]); any other is streamed to the client
//! ([`Answer::into_stream`]), never held.

use crate::config::apis::Api;
use crate::primitives::budget::Lease;
use axum::http::{HeaderMap, HeaderName, Method, StatusCode, header};
use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::time::Instant;

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
    /// Buffering the answer would exceed `server.max_buffered_answer_bytes`.
    #[error("answer budget spent")]
    Busy,
}

/// An upstream answer whose status and headers have arrived; its body is
/// still to be read, by the deadline of the whole exchange.
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    res: reqwest::Response,
    deadline: Instant,
}

/// Sends the request to `<upstream>/<rest>[?query]` and waits for the
/// answer's head. The API's `timeout` bounds the whole exchange: connect,
/// send, and the answer's body however it is read.
pub async fn forward(
    client: &reqwest::Client,
    api: &Api,
    method: Method,
    path_and_query: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Answer, ForwardError> {
    let url = format!("{}{path_and_query}", api.upstream);
    let mut outgoing = without_hop_by_hop(headers);
    outgoing.remove(header::HOST);
    outgoing.remove(header::CONTENT_LENGTH);
    let deadline = Instant::now() + api.timeout;
    let call = async {
        client
            .request(method, url)
            .headers(outgoing)
            .body(body)
            .send()
            .await
            .map_err(|e| ForwardError::Connect(e.to_string()))
    };
    let res = tokio::time::timeout_at(deadline, call)
        .await
        .unwrap_or(Err(ForwardError::Timeout))?;
    Ok(Answer {
        status: res.status(),
        headers: without_hop_by_hop(res.headers()),
        res,
        deadline,
    })
}

impl Answer {
    /// The whole answer, at most [`MAX_RESPONSE_BYTES`], each byte taken
    /// from `lease` (the answer budget) as it arrives.
    pub async fn read_whole(self, lease: &mut Lease) -> Result<Upstream, ForwardError> {
        let Answer {
            status,
            headers,
            mut res,
            deadline,
        } = self;
        let read = async {
            let mut buf = BytesMut::new();
            while let Some(chunk) = res
                .chunk()
                .await
                .map_err(|e| ForwardError::Connect(e.to_string()))?
            {
                if buf.len() + chunk.len() > MAX_RESPONSE_BYTES {
                    return Err(ForwardError::TooLarge);
                }
                if !lease.grow(chunk.len()) {
                    return Err(ForwardError::Busy);
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(buf.freeze())
        };
        let body = tokio::time::timeout_at(deadline, read)
            .await
            .unwrap_or(Err(ForwardError::Timeout))?;
        Ok(Upstream {
            status,
            headers,
            body,
        })
    }

    /// Status, headers and a body that passes the upstream's bytes on as
    /// they come (the client's pace holds the upstream back, nothing
    /// piles up here) and fails at the exchange's deadline.
    pub fn into_stream(self) -> (StatusCode, HeaderMap, axum::body::Body) {
        let body = http::Response::<reqwest::Body>::from(self.res).into_body();
        let body = Deadline {
            body: Box::pin(body),
            sleep: Box::pin(tokio::time::sleep_until(self.deadline)),
        };
        (self.status, self.headers, axum::body::Body::new(body))
    }
}

/// A streamed answer body cut off at a deadline, so a client that stops
/// reading does not hold the upstream connection (and its own slot)
/// forever.
struct Deadline<B> {
    body: Pin<Box<B>>,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl<B> Body for Deadline<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.sleep.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err("upstream answer not passed on in time".into())));
        }
        self.body.as_mut().poll_frame(cx).map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
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
