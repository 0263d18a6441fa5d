//! A target: a real HTTP server on loopback that records what it gets and
//! answers from a programmable plan (status codes, hangs).

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Received {
    pub headers: HeaderMap,
    pub body: Bytes,
}

#[derive(Default)]
struct Inner {
    received: Mutex<Vec<Received>>,
    /// Statuses to answer, in order; empty = 200.
    plan: Mutex<VecDeque<u16>>,
    /// Answer every request with this status (after the plan).
    always: Mutex<Option<u16>>,
    hang: Mutex<Option<Duration>>,
    /// `Retry-After` seconds sent with non-2xx answers.
    retry_after: Mutex<Option<u64>>,
    /// When each request arrived.
    times: Mutex<Vec<std::time::Instant>>,
}

#[derive(Clone)]
pub struct TestTarget {
    pub url: String,
    inner: Arc<Inner>,
}

impl TestTarget {
    pub async fn start() -> Self {
        let inner = Arc::new(Inner::default());
        let app = Router::new()
            .route("/hook", post(handle))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, inner }
    }

    pub fn received(&self) -> Vec<Received> {
        self.inner.received.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.inner.received.lock().unwrap().len()
    }

    /// Answer these statuses first, then 200 (or `always`).
    pub fn plan(&self, statuses: &[u16]) {
        self.inner.plan.lock().unwrap().extend(statuses);
    }

    pub fn always(&self, status: Option<u16>) {
        *self.inner.always.lock().unwrap() = status;
    }

    pub fn retry_after(&self, secs: Option<u64>) {
        *self.inner.retry_after.lock().unwrap() = secs;
    }

    /// Arrival times of every request, in order.
    pub fn times(&self) -> Vec<std::time::Instant> {
        self.inner.times.lock().unwrap().clone()
    }

    /// Every request waits this long before answering.
    pub fn hang(&self, d: Option<Duration>) {
        *self.inner.hang.lock().unwrap() = d;
    }
}

async fn handle(
    State(inner): State<Arc<Inner>>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, HeaderMap) {
    inner.times.lock().unwrap().push(std::time::Instant::now());
    let hang = *inner.hang.lock().unwrap();
    if let Some(d) = hang {
        tokio::time::sleep(d).await;
    }
    let status = inner
        .plan
        .lock()
        .unwrap()
        .pop_front()
        .or(*inner.always.lock().unwrap())
        .unwrap_or(200);
    // Every request is recorded, whatever it is answered.
    inner
        .received
        .lock()
        .unwrap()
        .push(Received { headers, body });
    let mut out = HeaderMap::new();
    if status >= 300
        && let Some(secs) = *inner.retry_after.lock().unwrap()
    {
        out.insert("retry-after", secs.to_string().parse().unwrap());
    }
    (StatusCode::from_u16(status).unwrap(), out)
}
