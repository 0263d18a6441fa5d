//! A watchdog per connection: what hyper's own timers do not bound.
//!
//! Rule: a connection with no request open must be doing something that
//! has a deadline, or it is closed:
//! - before its first request, and on HTTP/2 whenever no stream is open:
//!   `header_read_timeout` (an HTTP/2 client otherwise answers keep-alive
//!   pings forever and holds its slot);
//! - on HTTP/1 after an answer: `keep_alive_timeout` while nothing
//!   arrives, and `header_read_timeout` from the first byte of the next
//!   request's headers.
//!
//! A request being served is bounded by its route (`request_timeout`, the
//! proxy's deadlines), not here. Closing is graceful (HTTP/2 `GOAWAY`, an
//! HTTP/1 connection between requests is just closed); a connection still
//! open [`CLOSE_GRACE`] later with no request open is dropped.

use hyper::body::{Body, Frame, SizeHint};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long a connection asked to close may take before it is dropped.
pub const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The deadlines a watchdog applies.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub header_read: Duration,
    pub keep_alive: Duration,
}

/// What one connection is doing, updated by its reads and its requests.
pub struct Activity {
    start: Instant,
    /// Requests being served (answers not yet sent whole).
    open: AtomicUsize,
    seen_request: AtomicBool,
    h2: AtomicBool,
    /// Milliseconds after `start` when the last request closed.
    idle_since: AtomicU64,
    /// Milliseconds after `start`, plus one, of the first byte read since
    /// then; 0: none yet.
    first_byte: AtomicU64,
}

impl Activity {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            open: AtomicUsize::new(0),
            seen_request: AtomicBool::new(false),
            h2: AtomicBool::new(false),
            idle_since: AtomicU64::new(0),
            first_byte: AtomicU64::new(0),
        })
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn at(&self, ms: u64) -> Instant {
        self.start + Duration::from_millis(ms)
    }

    /// A request starts; it stays open until the returned guard (moved
    /// into its answer's body) is dropped.
    pub fn begin(self: &Arc<Self>, version: http::Version) -> InUse {
        self.open.fetch_add(1, Ordering::AcqRel);
        self.seen_request.store(true, Ordering::Relaxed);
        if version == http::Version::HTTP_2 {
            self.h2.store(true, Ordering::Relaxed);
        }
        InUse(self.clone())
    }

    fn read_some(&self) {
        if self.open.load(Ordering::Acquire) == 0 && self.first_byte.load(Ordering::Relaxed) == 0 {
            self.first_byte.store(self.now_ms() + 1, Ordering::Relaxed);
        }
    }

    /// When the connection must be closed if nothing changes, or `None`
    /// while a request is open.
    fn deadline(&self, t: Timing) -> Option<Instant> {
        if self.open.load(Ordering::Acquire) > 0 {
            return None;
        }
        let idle = self.idle_since.load(Ordering::Relaxed);
        if !self.seen_request.load(Ordering::Relaxed) || self.h2.load(Ordering::Relaxed) {
            return Some(self.at(idle) + t.header_read);
        }
        match self.first_byte.load(Ordering::Relaxed) {
            0 => Some(self.at(idle) + t.keep_alive),
            first => Some(self.at(first - 1) + t.header_read),
        }
    }

    fn is_idle(&self) -> bool {
        self.open.load(Ordering::Acquire) == 0
    }
}

/// One open request; see [`Activity::begin`].
pub struct InUse(Arc<Activity>);

impl InUse {
    /// `body`, holding the request open until it is sent or dropped.
    pub fn hold<B>(self, body: B) -> Held<B> {
        Held {
            body,
            _in_use: self,
        }
    }
}

impl Drop for InUse {
    fn drop(&mut self) {
        let a = &self.0;
        if a.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            a.first_byte.store(0, Ordering::Relaxed);
            a.idle_since.store(a.now_ms(), Ordering::Relaxed);
        }
    }
}

/// An answer body that keeps its request open ([`InUse`]).
pub struct Held<B> {
    body: B,
    _in_use: InUse,
}

impl<B: Body + Unpin> Body for Held<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The connection's socket, telling its [`Activity`] when bytes arrive.
pub struct Counted<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T> Counted<T> {
    pub fn new(inner: T, activity: Arc<Activity>) -> Self {
        Self { inner, activity }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let res = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(res, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read_some();
        }
        res
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Runs `conn` to its end under the watchdog; `close` asks it to close
/// gracefully (at a deadline, or once `stop` is cancelled).
pub async fn drive<C, E>(
    conn: C,
    close: impl Fn(Pin<&mut C>),
    activity: &Activity,
    t: Timing,
    stop: CancellationToken,
) -> Result<(), E>
where
    C: Future<Output = Result<(), E>>,
{
    let mut conn = std::pin::pin!(conn);
    // Set once the connection was asked to close.
    let mut closing: Option<Instant> = None;
    loop {
        let wake = match closing {
            Some(asked) => asked + CLOSE_GRACE,
            // While a request is open, look again after a while.
            None => activity
                .deadline(t)
                .unwrap_or_else(|| Instant::now() + t.header_read),
        };
        tokio::select! {
            res = conn.as_mut() => return res,
            _ = stop.cancelled(), if closing.is_none() => {
                close(conn.as_mut());
                closing = Some(Instant::now());
            }
            _ = tokio::time::sleep_until(wake) => match closing {
                Some(_) if activity.is_idle() => {
                    tracing::debug!("connection did not close in time; dropped");
                    return Ok(());
                }
                // A request still open finishes under its own deadline.
                Some(_) => closing = Some(Instant::now()),
                None => {
                    if activity.deadline(t).is_some_and(|d| d <= Instant::now()) {
                        metrics::counter!("hookgate_connections_closed_idle_total").increment(1);
                        close(conn.as_mut());
                        closing = Some(Instant::now());
                    }
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timing = Timing {
        header_read: Duration::from_secs(10),
        keep_alive: Duration::from_secs(75),
    };

    #[tokio::test(start_paused = true)]
    async fn deadlines_follow_what_the_connection_is_doing() {
        let a = Activity::new();
        let start = Instant::now();
        // Nothing yet: the header deadline from the start.
        assert_eq!(a.deadline(T), Some(start + T.header_read));
        tokio::time::advance(Duration::from_secs(1)).await;
        let req = a.begin(http::Version::HTTP_11);
        assert_eq!(a.deadline(T), None);
        tokio::time::advance(Duration::from_secs(1)).await;
        drop(req);
        // HTTP/1 between requests: the keep-alive limit.
        assert_eq!(
            a.deadline(T),
            Some(start + Duration::from_secs(2) + T.keep_alive)
        );
        tokio::time::advance(Duration::from_secs(5)).await;
        a.read_some();
        // The next request's headers started: the header deadline from there.
        assert_eq!(
            a.deadline(T),
            Some(start + Duration::from_secs(7) + T.header_read)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_http2_connection_without_open_streams_has_the_header_deadline() {
        let a = Activity::new();
        let start = Instant::now();
        let req = a.begin(http::Version::HTTP_2);
        tokio::time::advance(Duration::from_secs(3)).await;
        drop(req);
        a.read_some(); // pings and window updates do not matter
        assert_eq!(
            a.deadline(T),
            Some(start + Duration::from_secs(3) + T.header_read)
        );
    }
}
