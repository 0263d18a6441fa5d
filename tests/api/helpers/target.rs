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
    /// The status this request was answered with.
    pub status: u16,
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
    /// When each request arrived, with its `Hookgate-Event-Id`.
    arrivals: Mutex<Vec<(std::time::Instant, String)>>,
    /// Answer this share of requests (0.0–1.0, at random) with 503, after
    /// the plan and before `always`.
    fail_ratio: Mutex<f64>,
    /// Event ids answered 503 every time (a poison event).
    poison: Mutex<Vec<String>>,
    /// Requests being answered right now, and the most at once.
    in_flight: std::sync::atomic::AtomicUsize,
    peak: std::sync::atomic::AtomicUsize,
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

    /// Arrival time and `Hookgate-Event-Id` of every request, in order
    /// (recorded on arrival, whether or not it was answered).
    pub fn arrivals(&self) -> Vec<(std::time::Instant, String)> {
        self.inner.arrivals.lock().unwrap().clone()
    }

    /// Fail this share of requests (503) at random.
    pub fn fail_ratio(&self, ratio: f64) {
        *self.inner.fail_ratio.lock().unwrap() = ratio;
    }

    /// Answer 503 to every request for event `id` (`Hookgate-Event-Id`).
    pub fn poison(&self, id: &str) {
        self.inner.poison.lock().unwrap().push(id.to_owned());
    }

    /// Forget every poisoned id.
    pub fn cure(&self) {
        self.inner.poison.lock().unwrap().clear();
    }

    /// How many requests (whatever their answer) each `Hookgate-Event-Id` got.
    pub fn sends_per_id(&self) -> std::collections::HashMap<String, usize> {
        let mut n = std::collections::HashMap::new();
        for r in self.received() {
            let id = r.headers["hookgate-event-id"].to_str().unwrap().to_owned();
            *n.entry(id).or_default() += 1;
        }
        n
    }

    /// How many requests arrived for each `Hookgate-Event-Id`, answered or not.
    pub fn sends_per_id_arrived(&self) -> std::collections::HashMap<String, usize> {
        let mut n = std::collections::HashMap::new();
        for (_, id) in self.arrivals() {
            *n.entry(id).or_default() += 1;
        }
        n
    }

    /// The most requests this target was answering at once.
    pub fn peak_in_flight(&self) -> usize {
        self.inner.peak.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Starts counting the most requests at once afresh (from those in
    /// flight now).
    pub fn reset_peak(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.inner.in_flight.load(SeqCst);
        self.inner.peak.store(now, SeqCst);
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
    use std::sync::atomic::Ordering::SeqCst;
    inner.times.lock().unwrap().push(std::time::Instant::now());
    let now = inner.in_flight.fetch_add(1, SeqCst) + 1;
    inner.peak.fetch_max(now, SeqCst);
    let id = headers
        .get("hookgate-event-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    inner
        .arrivals
        .lock()
        .unwrap()
        .push((std::time::Instant::now(), id.clone()));
    let hang = *inner.hang.lock().unwrap();
    if let Some(d) = hang {
        tokio::time::sleep(d).await;
    }
    let poisoned = inner.poison.lock().unwrap().contains(&id);
    let ratio = *inner.fail_ratio.lock().unwrap();
    let status = inner
        .plan
        .lock()
        .unwrap()
        .pop_front()
        .or_else(|| (poisoned || (ratio > 0.0 && rand::random::<f64>() < ratio)).then_some(503))
        .or(*inner.always.lock().unwrap())
        .unwrap_or(200);
    // Every request is recorded, whatever it is answered.
    inner.received.lock().unwrap().push(Received {
        headers,
        body,
        status,
    });
    inner.in_flight.fetch_sub(1, SeqCst);
    let mut out = HeaderMap::new();
    if status >= 300
        && let Some(secs) = *inner.retry_after.lock().unwrap()
    {
        out.insert("retry-after", secs.to_string().parse().unwrap());
    }
    (StatusCode::from_u16(status).unwrap(), out)
}
