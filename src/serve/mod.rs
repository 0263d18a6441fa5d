//! The accept loop: hyper's connection builder with the limits axum's
//! `serve` does not expose, caps on open connections (in all and per
//! client), a watchdog per connection, and graceful drain.
//!
//! Rule: transport only. What is served is `http`'s router; what happens at
//! shutdown after the drain is `app`'s business. Handlers that read a body
//! themselves (webhooks, the proxy) read it through [`read_body`], under
//! the shared body budget.
//!
//! Limits (docs/operations.md, "Security model"):
//! - `header_read_timeout`: a client must finish a request's headers in
//!   time, counted from the first byte after the previous answer (or from
//!   the connection's start); an HTTP/2 connection with no open stream is
//!   closed after it too ([`watch`]);
//! - `keep_alive_timeout`: an HTTP/1 connection kept alive with nothing
//!   arriving is closed after it ([`watch`]);
//! - `idle_timeout`: HTTP/2 keep-alive pings; a peer that does not answer
//!   is dropped;
//! - `max_connections`: at most this many connections are open per
//!   listener; the loop stops accepting (the kernel queues the rest) until
//!   one closes;
//! - `max_connections_per_client`: at most this many of them from one
//!   client address ([`peers`]); a further connection is closed at once;
//! - HTTP/2: [`H2_MAX_STREAMS`] streams per connection, and windows of
//!   [`H2_STREAM_WINDOW`] / [`H2_CONN_WINDOW`] bytes.
//!
//! With `server.tls_cert` set every connection is TLS: the handshake runs in
//! the connection's own task (a slow client never holds the accept loop)
//! and must finish within `header_read_timeout`.

pub mod peers;
pub mod watch;

use crate::primitives::budget::Lease;
use crate::tls::Certs;
use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use bytes::{Bytes, BytesMut};
use http::{HeaderMap, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use ipnet::IpNet;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// Streams one HTTP/2 connection may have open at once. Each may hold a
/// body being read; fewer streams bound what one connection can make the
/// gateway hold, and webhook senders use one or a few.
pub const H2_MAX_STREAMS: u32 = 32;
/// Bytes a client may send on one stream before the gateway reads them
/// (the protocol's own default, RFC 9113 §6.9.2).
pub const H2_STREAM_WINDOW: u32 = 65_535;
/// Bytes a client may send on one connection, all streams together,
/// before the gateway reads them.
pub const H2_CONN_WINDOW: u32 = 256 * 1024;

/// Why a request body could not be read whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    /// Over the limit: declared so by `Content-Length`, or found so while
    /// reading (413).
    TooLarge,
    /// The client's stream failed (reset, malformed chunking) (400).
    Unreadable,
    /// Holding it would exceed the body budget, in all or for this client
    /// (503 + `Retry-After`).
    Busy,
}

/// The request body, at most `max` bytes, each byte taken from `lease`
/// (the body budget) as it arrives. A declared `Content-Length` over `max`
/// is refused before a byte is read; an undeclared or understated one is
/// cut off at `max`. Bytes count as they arrive, not as declared: a client
/// holds the budget only with bytes it really sent.
pub async fn read_body(
    body: Body,
    headers: &HeaderMap,
    max: usize,
    lease: &mut Lease,
) -> Result<Bytes, BodyError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(BodyError::TooLarge);
    }
    let mut body = body;
    // The pieces as they came (no copy, no buffer that grows by doubling
    // beyond what is counted); joined once at the end.
    let mut parts: Vec<Bytes> = Vec::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| BodyError::Unreadable)?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        if data.is_empty() {
            continue;
        }
        total = total.saturating_add(data.len());
        if total > max {
            return Err(BodyError::TooLarge);
        }
        if !lease.grow(data.len()) {
            return Err(BodyError::Busy);
        }
        parts.push(data);
    }
    match parts.len() {
        0 => Ok(Bytes::new()),
        // The usual webhook: one piece, kept as it came.
        1 => Ok(parts.pop().unwrap_or_default()),
        _ => {
            // The joined copy exists beside the pieces for a moment.
            if !lease.grow(total) {
                return Err(BodyError::Busy);
            }
            let mut joined = BytesMut::with_capacity(total);
            for p in parts.drain(..) {
                joined.extend_from_slice(&p);
            }
            lease.shrink(total);
            Ok(joined.freeze())
        }
    }
}

/// Transport limits of one listener.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_connections: usize,
    pub max_connections_per_client: usize,
    pub header_read_timeout: Duration,
    pub keep_alive_timeout: Duration,
    pub idle_timeout: Duration,
    /// Peers exempt from the per-client cap: the proxies in front.
    pub trusted_proxies: Vec<IpNet>,
}

/// Serves `router` on `listener` until `stop` is cancelled, then lets open
/// connections finish their requests (no new ones are read) and returns
/// when they have closed. The caller bounds the drain with its grace.
/// `tls`: speak HTTPS with the certificate loaded last.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    tls: Option<Certs>,
    stop: CancellationToken,
) {
    let builder = builder(&limits);
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let peers = peers::Peers::new(
        limits.max_connections_per_client,
        limits.trusted_proxies.clone(),
    );
    let timing = watch::Timing {
        header_read: limits.header_read_timeout,
        keep_alive: limits.keep_alive_timeout,
    };
    // Dropping this future (the caller's grace ran out) aborts every
    // connection still open.
    let mut conns = tokio::task::JoinSet::new();
    loop {
        while conns.try_join_next().is_some() {}
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = stop.cancelled() => break,
        };
        let (stream, peer) = tokio::select! {
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => break,
        };
        // Over its share: closed at once, so one client cannot hold the
        // slots every other client needs.
        let Some(share) = peers.admit(peer.ip()) else {
            metrics::counter!("hookgate_connections_refused_total", "reason" => "per_client")
                .increment(1);
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let builder = builder.clone();
        let stop = stop.clone();
        let acceptor = tls.as_ref().map(Certs::acceptor);
        let handshake_timeout = limits.header_read_timeout;
        conns.spawn(async move {
            let served = Served {
                peer,
                router,
                builder,
                timing,
                stop,
            };
            match acceptor {
                None => served.run(stream).await,
                Some(acceptor) => {
                    match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
                        Ok(Ok(s)) => served.run(s).await,
                        Ok(Err(e)) => tracing::debug!(error = %e, %peer, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                }
            }
            drop(share);
            drop(permit);
        });
    }
    drop(listener);
    while conns.join_next().await.is_some() {}
}

/// One accepted connection: what serving it needs.
struct Served {
    peer: std::net::SocketAddr,
    router: Router,
    builder: auto::Builder<TokioExecutor>,
    timing: watch::Timing,
    stop: CancellationToken,
}

impl Served {
    /// Serves HTTP on `stream` (plain TCP, or TLS after its handshake)
    /// under the connection's watchdog until it closes.
    async fn run<S>(self, stream: S)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Self {
            peer,
            router,
            builder,
            timing,
            stop,
        } = self;
        let activity = watch::Activity::new();
        let io = TokioIo::new(watch::Counted::new(stream, activity.clone()));
        let seen = activity.clone();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            let in_use = seen.begin(req.version());
            // The peer address feeds per-source `allow_ips` and the
            // per-client body budget.
            req.extensions_mut().insert(ConnectInfo(peer));
            let answer = router.clone().oneshot(req);
            async move {
                let res = answer.await?;
                // The request counts as open until its answer's body
                // is sent or dropped.
                Ok::<_, std::convert::Infallible>(res.map(|b| Body::new(in_use.hold(b))))
            }
        });
        let conn = builder.serve_connection_with_upgrades(io, service);
        let close = |c: std::pin::Pin<&mut _>| {
            hyper_util::server::conn::auto::UpgradeableConnection::graceful_shutdown(c)
        };
        if let Err(e) = watch::drive(conn, close, &activity, timing, stop).await {
            tracing::debug!(error = %e, %peer, "connection ended with an error");
        }
    }
}

fn builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    // hyper's own header timer is off: it also runs while a kept-alive
    // connection waits for its next request, so it could not be longer
    // than the header deadline. `watch` keeps both deadlines apart.
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .keep_alive(true);
    b.http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(limits.idle_timeout))
        .keep_alive_timeout(limits.idle_timeout)
        .max_concurrent_streams(H2_MAX_STREAMS)
        .initial_stream_window_size(H2_STREAM_WINDOW)
        .initial_connection_window_size(H2_CONN_WINDOW);
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::primitives::budget::ByteBudget;

    /// A body that arrives in the given pieces.
    struct Chunks(std::collections::VecDeque<Bytes>);

    impl hyper::body::Body for Chunks {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
            std::task::Poll::Ready(self.0.pop_front().map(|b| Ok(hyper::body::Frame::data(b))))
        }
    }

    fn chunked(parts: &[&'static [u8]]) -> Body {
        Body::new(Chunks(
            parts.iter().map(|p| Bytes::from_static(p)).collect(),
        ))
    }

    #[tokio::test]
    async fn a_body_is_read_whole_and_held_in_the_budget_until_the_lease_drops() {
        let budget = ByteBudget::new(1024, 1024);
        let mut lease = budget.lease(None);
        let got = read_body(
            chunked(&[b"ab", b"cd", b"e"]),
            &HeaderMap::new(),
            10,
            &mut lease,
        )
        .await
        .unwrap();
        assert_eq!(&got[..], b"abcde");
        assert_eq!(budget.used(), 5);
        drop(lease);
        assert_eq!(budget.used(), 0);
    }

    #[tokio::test]
    async fn a_body_over_the_budget_is_busy_and_over_the_limit_too_large() {
        let budget = ByteBudget::new(4, 4);
        let mut lease = budget.lease(None);
        let busy = read_body(chunked(&[b"ab", b"cde"]), &HeaderMap::new(), 10, &mut lease).await;
        assert_eq!(busy, Err(BodyError::Busy));
        let mut lease = budget.lease(None);
        let big = read_body(
            chunked(&[b"abcdefghijk"]),
            &HeaderMap::new(),
            10,
            &mut lease,
        )
        .await;
        assert_eq!(big, Err(BodyError::TooLarge));
        let mut declared = HeaderMap::new();
        declared.insert(header::CONTENT_LENGTH, "11".parse().unwrap());
        let mut lease = budget.lease(None);
        let early = read_body(chunked(&[b"a"]), &declared, 10, &mut lease).await;
        assert_eq!(early, Err(BodyError::TooLarge));
    }
}
