//! The refused-request log's writer: requests of a configured source that
//! failed verification (a bad or missing signature, a stale timestamp, a
//! missing or invalid event id…), kept so an operator can see what was
//! refused, why and from where, and re-verify it after fixing a secret
//! (`admin::refused`).
//!
//! Written like duplicate arrivals (`dedup::arrivals`): the request pushes
//! its row into a bounded in-memory queue (no await, no lock held across
//! I/O) and a background task writes whatever is queued every
//! [`FLUSH_EVERY`], at most [`MAX_BATCH`] rows a flush, then prunes the
//! table to `[refused] keep` and `max_rows`. A flood of forged requests
//! therefore costs the database at most one batch per flush, and the table
//! stays at its cap. Best effort, by design: when the queue is full the
//! row is dropped and counted (`hookgate_refused_dropped_total`), a failed
//! write drops its batch (counted the same way), and a crash loses what was
//! queued.
//!
//! Headers: with `capture_body` on they are kept as received, because
//! re-verification needs the signature headers (the API and the console
//! show them redacted); with it off nothing can be re-verified, and every
//! credential-bearing value is redacted before the row is built.
//!
//! Rule: nothing on the request path waits for this writer or its database.

use crate::config;
use crate::primitives::time::Millis;
use crate::store::RefusedLog;
use crate::store::refused::NewRefused;
use crate::verify::VerifyError;
use axum::http::HeaderMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Most refused requests waiting in memory; beyond this they are dropped.
pub const CAPACITY: usize = 1024;
/// Most rows written by one flush; the rest wait for the next one.
pub const MAX_BATCH: usize = 256;
/// How often queued rows are written and the table pruned.
pub const FLUSH_EVERY: Duration = Duration::from_millis(250);
/// How often the table is pruned by age when nothing is written.
pub const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// This process's counts (`/stats` "refused").
#[derive(Debug, Default)]
pub struct Counts {
    /// Rows written.
    pub logged: AtomicU64,
    /// Rows dropped: the queue was full, or their write failed.
    pub dropped: AtomicU64,
    /// Refused requests that verified on a later try and were admitted.
    pub reverified: AtomicU64,
}

/// Handle to the refused-request queue; cheap to clone.
#[derive(Clone)]
pub struct Refused {
    tx: mpsc::Sender<NewRefused>,
    counts: Arc<Counts>,
}

/// What the request path knows about a refused request.
pub struct Request<'a> {
    pub source: &'a str,
    pub error: VerifyError,
    pub peer: Option<std::net::IpAddr>,
    pub query: Option<&'a str>,
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
    pub at: Millis,
}

impl Refused {
    /// Starts the writer; it drains the queue once more after `stop`.
    /// `settings` gives the loaded `[refused]` section at each prune.
    pub fn start(
        log: Arc<dyn RefusedLog>,
        settings: impl Fn() -> config::Refused + Send + 'static,
        stop: CancellationToken,
    ) -> (Self, impl Future<Output = ()>) {
        let (tx, rx) = mpsc::channel(CAPACITY);
        let counts = Arc::new(Counts::default());
        let this = Self {
            tx,
            counts: counts.clone(),
        };
        (this, writer(log, rx, counts, settings, stop))
    }

    /// Queues one refused request; never waits. Nothing is built when the
    /// log is off or the queue is full.
    pub fn push(&self, settings: &config::Refused, r: Request<'_>) {
        if !settings.enabled {
            return;
        }
        let permit = match self.tx.try_reserve() {
            Ok(p) => p,
            Err(_) => {
                self.dropped(1);
                return;
            }
        };
        permit.send(row(settings, r));
    }

    fn dropped(&self, n: u64) {
        self.counts.dropped.fetch_add(n, Ordering::Relaxed);
        metrics::counter!("hookgate_refused_dropped_total").increment(n);
    }

    /// Counts a refused request admitted by re-verification.
    pub fn reverified(&self, source: &str) {
        self.counts.reverified.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("hookgate_refused_reverified_total", "source" => source.to_owned())
            .increment(1);
    }

    /// This process's counts.
    pub fn counts(&self) -> &Counts {
        &self.counts
    }
}

/// The row of one refused request.
fn row(settings: &config::Refused, r: Request<'_>) -> NewRefused {
    let capture = settings.capture_body;
    let headers: Vec<(&str, String)> = r
        .headers
        .iter()
        .map(|(name, value)| {
            let text = String::from_utf8_lossy(value.as_bytes());
            let text = if capture {
                text.into_owned()
            } else {
                crate::primitives::headers::redact(name.as_str(), &text)
            };
            (name.as_str(), text)
        })
        .collect();
    let body = capture.then(|| r.body[..r.body.len().min(settings.body_cap)].to_vec());
    NewRefused {
        received_at: r.at,
        source: r.source.to_owned(),
        reason: crate::error::reject_reason(r.error).as_str().to_owned(),
        detail: r.error.to_string(),
        peer: r.peer.map(|p| p.to_string()),
        query: r.query.map(str::to_owned),
        headers: serde_json::to_string(&headers).unwrap_or_else(|_| "[]".into()),
        body,
        body_size: i64::try_from(r.body.len()).unwrap_or(i64::MAX),
    }
}

async fn writer(
    log: Arc<dyn RefusedLog>,
    mut rx: mpsc::Receiver<NewRefused>,
    counts: Arc<Counts>,
    settings: impl Fn() -> config::Refused,
    stop: CancellationToken,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut last_prune = tokio::time::Instant::now();
    loop {
        let stopping = tokio::select! {
            _ = tokio::time::sleep(FLUSH_EVERY) => false,
            _ = stop.cancelled() => true,
        };
        // A stopping writer drains everything; a running one one batch.
        loop {
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(r) => batch.push(r),
                    Err(_) => break,
                }
            }
            let wrote = !batch.is_empty();
            if wrote {
                let n = batch.len() as u64;
                match log.record(&batch).await {
                    Ok(()) => {
                        counts.logged.fetch_add(n, Ordering::Relaxed);
                        metrics::counter!("hookgate_refused_logged_total").increment(n);
                    }
                    Err(e) => {
                        counts.dropped.fetch_add(n, Ordering::Relaxed);
                        metrics::counter!("hookgate_refused_dropped_total").increment(n);
                        tracing::debug!(error = %e, n, "refused requests not recorded");
                    }
                }
                batch.clear();
            }
            // After a write (the cap holds), or now and then (the age).
            if wrote || last_prune.elapsed() >= PRUNE_EVERY {
                last_prune = tokio::time::Instant::now();
                let s = settings();
                let before = Millis(Millis::now().0.saturating_sub(millis(s.keep)));
                if let Err(e) = log.prune(before, s.max_rows).await {
                    tracing::debug!(error = %e, "refused requests not pruned");
                }
            }
            if !stopping || !wrote {
                break;
            }
        }
        if stopping {
            return;
        }
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(capture_body: bool) -> config::Refused {
        config::Refused {
            enabled: true,
            keep: Duration::from_secs(60),
            max_rows: 10,
            capture_body,
            body_cap: 4,
        }
    }

    fn request<'a>(headers: &'a HeaderMap, body: &'a [u8]) -> Request<'a> {
        Request {
            source: "stripe",
            error: VerifyError::InvalidSignature,
            peer: Some([127, 0, 0, 1].into()),
            query: None,
            headers,
            body,
            at: Millis(1),
        }
    }

    #[test]
    fn without_body_capture_credentials_are_redacted_and_no_body_kept() {
        let mut h = HeaderMap::new();
        h.insert("stripe-signature", "t=1,v1=abc".parse().unwrap());
        h.insert("user-agent", "Stripe/1.0".parse().unwrap());
        let r = row(&settings(false), request(&h, b"{\"id\":1}"));
        assert_eq!(r.body, None);
        assert_eq!(r.body_size, 8);
        assert_eq!(r.reason, "invalid_signature");
        assert!(!r.headers.contains("v1=abc"), "{}", r.headers);
        assert!(r.headers.contains("Stripe/1.0"), "{}", r.headers);
        assert_eq!(r.peer.as_deref(), Some("127.0.0.1"));
    }

    #[test]
    fn with_body_capture_the_body_is_cut_at_the_cap_and_headers_kept() {
        let mut h = HeaderMap::new();
        h.insert("stripe-signature", "t=1,v1=abc".parse().unwrap());
        let r = row(&settings(true), request(&h, b"{\"id\":1}"));
        assert_eq!(r.body.as_deref(), Some(&b"{\"id"[..]));
        assert!(r.headers.contains("v1=abc"));
    }

    #[tokio::test]
    async fn a_full_queue_drops_and_counts() {
        let (tx, _rx) = mpsc::channel(2);
        let q = Refused {
            tx,
            counts: Default::default(),
        };
        let h = HeaderMap::new();
        for _ in 0..5 {
            q.push(&settings(false), request(&h, b"x"));
        }
        assert_eq!(q.counts().dropped.load(Ordering::Relaxed), 3);
        let mut off = settings(false);
        off.enabled = false;
        q.push(&off, request(&h, b"x"));
        assert_eq!(q.counts().dropped.load(Ordering::Relaxed), 3);
    }
}
