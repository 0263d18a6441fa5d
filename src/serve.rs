//! The accept loop: hyper's connection builder with the timeouts axum's
//! `serve` does not expose, a cap on open connections, and graceful drain.
//!
//! Rule: transport only. What is served is `http`'s router; what happens at
//! shutdown after the drain is `app`'s business. Handlers that read a body
//! themselves (webhooks, the proxy) read it through [`read_body`].
//!
//! Limits (docs/operations.md, "Security model"):
//! - `header_read_timeout`: a client must finish a request's headers in
//!   time; on HTTP/1 the same timer runs while a kept-alive connection waits
//!   for its next request, so it is also the idle limit;
//! - `idle_timeout`: HTTP/2 keep-alive pings; a peer that does not answer
//!   is dropped;
//! - `max_connections`: at most this many connections are open per
//!   listener; the loop stops accepting (the kernel queues the rest) until
//!   one closes.
//!
//! With `server.tls_cert` set every connection is TLS: the handshake runs in
//! the connection's own task (a slow client never holds the accept loop)
//! and must finish within `header_read_timeout`.

use crate::tls::Certs;
use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use bytes::Bytes;
use http::{HeaderMap, header};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// Why a request body could not be read whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    /// Over the limit: declared so by `Content-Length`, or found so while
    /// reading (413).
    TooLarge,
    /// The client's stream failed (reset, malformed chunking) (400).
    Unreadable,
}

/// The request body, at most `max` bytes. A declared `Content-Length` over
/// `max` is refused before a byte is read; an undeclared or understated one
/// is cut off at `max`.
pub async fn read_body(body: Body, headers: &HeaderMap, max: usize) -> Result<Bytes, BodyError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(BodyError::TooLarge);
    }
    axum::body::to_bytes(body, max).await.map_err(|e| {
        if std::error::Error::source(&e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>())
        {
            BodyError::TooLarge
        } else {
            BodyError::Unreadable
        }
    })
}

/// Transport limits of one listener.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
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
    let builder = Arc::new(builder(limits));
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
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
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            // The peer address feeds per-source `allow_ips`.
            req.extensions_mut().insert(ConnectInfo(peer));
            router.clone().oneshot(req)
        });
        let Some(certs) = &tls else {
            let conn = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                .into_owned();
            let conn = graceful.watch(conn);
            conns.spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, %peer, "connection ended with an error");
                }
                drop(permit);
            });
            continue;
        };
        let (acceptor, builder) = (certs.acceptor(), builder.clone());
        let watcher = graceful.watcher();
        let handshake_timeout = limits.header_read_timeout;
        conns.spawn(async move {
            let stream =
                match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, %peer, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                };
            let conn = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                .into_owned();
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(error = %e, %peer, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    while conns.join_next().await.is_some() {}
}

fn builder(limits: Limits) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    b.http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(limits.idle_timeout))
        .keep_alive_timeout(limits.idle_timeout)
        .max_concurrent_streams(256);
    b
}
