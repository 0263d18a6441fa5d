//! The keys a scheme fetches by what a request names (PayPal's and SNS's
//! certificate URLs, Plaid's `kid`): remembered until they expire, with what a failed
//! fetch concluded remembered for a while too.
//!
//! Rule: a name costs at most one fetch at a time (concurrent requests for
//! it wait for that one fetch), every fetch is taken from the source's
//! [`FetchBudget`] first (a failed one from the failure budgets, so
//! made-up names cannot use up the fetches of genuine ones), and only conclusions the fetcher marks as
//! lasting are remembered, so a provider that is busy or down is asked
//! again on the next request. Expiry is judged by the caller's clock
//! (`now`, unix seconds) as everywhere in verification; the cache's own
//! timer only drops what is past it, and its size bound evicts the
//! least-used names first.

use super::VerifyError;
use super::fetch_budget::FetchBudget;
use moka::future::Cache;
use moka::ops::compute::Op;
use std::future::Future;
use std::hash::Hash;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How long a key host may take to answer.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// What one fetch concluded, and until when (unix seconds, exclusive) that
/// conclusion stands: a key, or a lasting refusal (an unknown `kid`, a
/// certificate that failed).
#[derive(Debug, Clone)]
pub struct Fetched<V> {
    pub found: Result<V, VerifyError>,
    pub until: i64,
}

/// A remembered conclusion, with the time the cache keeps it for.
#[derive(Clone)]
struct Entry<V> {
    fetched: Fetched<V>,
    keep_for: Duration,
}

struct KeepFor;

impl<K, V> moka::Expiry<K, Entry<V>> for KeepFor {
    fn expire_after_create(&self, _: &K, e: &Entry<V>, _: Instant) -> Option<Duration> {
        Some(e.keep_for)
    }
}

/// A key a fetch found, as the provider served it, for the ledger
/// (`store::provider_keys`): a restart puts it back with
/// [`RemoteKeys::warm`].
#[derive(Debug, Clone)]
pub struct LearnedKey {
    pub name: String,
    pub material: Vec<u8>,
    /// Unix seconds (exclusive).
    pub until: i64,
}

/// Where a source's newly found keys go (a task of `app` writes them).
pub type Learned = tokio::sync::mpsc::Sender<LearnedKey>;

/// A scheme's keys fetched by name, as the application wires them: put
/// back the ones the ledger kept, and report new ones.
#[async_trait::async_trait]
pub trait RemoteKeys: Send + Sync {
    /// Puts a remembered key back (parsed and checked again); `false` when
    /// it is no longer usable at `now`.
    async fn warm(&self, key: &LearnedKey, now: i64) -> bool;
    /// Every key found by a fetch from now on is also sent to `to` (at most
    /// once per fetch; dropped if `to` is full).
    fn report_to(&self, to: Learned);
}

/// Sends a found key to the sink set with [`RemoteKeys::report_to`], if any.
pub fn report(sink: &std::sync::OnceLock<Learned>, key: LearnedKey) {
    if let Some(tx) = sink.get() {
        let _ = tx.try_send(key);
    }
}

/// One source's fetched keys.
pub struct KeyCache<K, V> {
    entries: Cache<K, Entry<V>>,
    budget: FetchBudget,
}

impl<K, V> KeyCache<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// Remembers at most `capacity` names (keys and refusals together).
    pub fn new(capacity: u64) -> Self {
        Self {
            entries: Cache::builder()
                .max_capacity(capacity)
                .expire_after(KeepFor)
                .build(),
            budget: FetchBudget::default(),
        }
    }

    /// Remembers `value` for `name` until `until` (unix seconds), as if a
    /// fetch at `now` had found it.
    pub async fn insert(&self, name: K, value: V, until: i64, now: i64) {
        let keep_for = Duration::from_secs(until.saturating_sub(now).max(0) as u64);
        let fetched = Fetched {
            found: Ok(value),
            until,
        };
        self.entries.insert(name, Entry { fetched, keep_for }).await;
    }

    /// The remembered conclusion for `name` if it still stands at `now`,
    /// without fetching.
    pub async fn cached(&self, name: &K, now: i64) -> Option<Result<V, VerifyError>> {
        self.entries
            .get(name)
            .await
            .filter(|e| e.fetched.until > now)
            .map(|e| e.fetched.found)
    }

    /// The key for `name`: remembered, or fetched by `fetch` at `now`.
    /// `fetch` gives `Ok` for a conclusion to remember (a key or a lasting
    /// refusal) and `Err` for one that must not be (the provider busy or
    /// unreachable); an empty budget is such an error too
    /// ([`VerifyError::CertificateUnavailable`], answered 503).
    pub async fn get_or_fetch<F>(
        &self,
        name: K,
        now: i64,
        client: Option<IpAddr>,
        fetch: F,
    ) -> Result<V, VerifyError>
    where
        F: Future<Output = Result<Fetched<V>, VerifyError>>,
    {
        match self.entries.get(&name).await {
            Some(e) if e.fetched.until > now => return e.fetched.found,
            // Past its time by `now`, not yet dropped by the cache's timer:
            // dropped now, unless a fetch just replaced it.
            Some(_) => {
                self.entries
                    .entry(name.clone())
                    .and_compute_with(|e| async move {
                        match e {
                            Some(e) if e.value().fetched.until <= now => Op::Remove,
                            _ => Op::Nop,
                        }
                    })
                    .await;
            }
            None => {}
        }
        let load = async {
            let Some(ticket) = self.budget.take(now, client) else {
                return Err(VerifyError::CertificateUnavailable);
            };
            let fetched = fetch.await;
            let found = matches!(&fetched, Ok(Fetched { found: Ok(_), .. }));
            self.budget.settle(ticket, found, now);
            let fetched = fetched?;
            let keep_for = Duration::from_secs(fetched.until.saturating_sub(now).max(0) as u64);
            Ok(Entry { fetched, keep_for })
        };
        match self.entries.try_get_with(name, load).await {
            Ok(e) => e.fetched.found,
            Err(e) => Err(*e),
        }
    }
}

/// The HTTP client for a key host: no redirects (a key is fetched only
/// from the host that was checked) and a short deadline.
pub fn client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(FETCH_TIMEOUT)
        .build()
        .map_err(|e| format!("HTTP client: {e}"))
}

/// A key host's answer body, at most `max` bytes; past that, or when the
/// connection fails, the key is unavailable.
pub async fn read_capped(mut res: reqwest::Response, max: usize) -> Result<Vec<u8>, VerifyError> {
    let mut out = Vec::new();
    while let Some(chunk) = res
        .chunk()
        .await
        .map_err(|_| VerifyError::CertificateUnavailable)?
    {
        out.extend_from_slice(&chunk);
        if out.len() > max {
            return Err(VerifyError::CertificateUnavailable);
        }
    }
    Ok(out)
}

/// `localhost` or a loopback address (`127.0.0.1`, `[::1]`): the only
/// hosts besides the provider's own that tests may point a key fetch at.
pub fn is_loopback_host(host: &str) -> bool {
    host == "localhost"
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const NOW: i64 = 1_700_000_000;

    async fn get(
        c: &KeyCache<String, u32>,
        name: &str,
        now: i64,
        calls: &Arc<AtomicUsize>,
        answer: Result<Fetched<u32>, VerifyError>,
    ) -> Result<u32, VerifyError> {
        let calls = calls.clone();
        // Each call from its own address: the per-client failure budget is
        // tested in `fetch_budget`.
        let n = calls.load(Ordering::SeqCst) as u8;
        let client = Some(std::net::IpAddr::from([10, 0, 0, n]));
        c.get_or_fetch(name.to_owned(), now, client, async move {
            calls.fetch_add(1, Ordering::SeqCst);
            answer
        })
        .await
    }

    #[tokio::test]
    async fn a_key_is_fetched_once_and_again_only_after_its_time() {
        let c = KeyCache::new(8);
        let calls = Arc::new(AtomicUsize::new(0));
        let key = || {
            Ok(Fetched {
                found: Ok(7),
                until: NOW + 60,
            })
        };
        assert_eq!(get(&c, "a", NOW, &calls, key()).await, Ok(7));
        assert_eq!(get(&c, "a", NOW + 59, &calls, key()).await, Ok(7));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(get(&c, "a", NOW + 60, &calls, key()).await, Ok(7));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn lasting_refusals_are_remembered_and_passing_failures_are_not() {
        let c = KeyCache::new(8);
        let calls = Arc::new(AtomicUsize::new(0));
        let unknown = VerifyError::MalformedSignature("unknown signing key id");
        let refusal = || {
            Ok(Fetched {
                found: Err(unknown),
                until: NOW + 300,
            })
        };
        for _ in 0..3 {
            assert_eq!(get(&c, "x", NOW, &calls, refusal()).await, Err(unknown));
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let down = VerifyError::CertificateUnavailable;
        for _ in 0..3 {
            assert_eq!(get(&c, "y", NOW, &calls, Err(down)).await, Err(down));
        }
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn an_empty_budget_refuses_without_fetching_or_remembering() {
        let c = KeyCache::new(64);
        let calls = Arc::new(AtomicUsize::new(0));
        let n = crate::verify::fetch_budget::FETCHES_PER_WINDOW as usize;
        for i in 0..n + 3 {
            let answer = Ok(Fetched {
                found: Ok(1),
                until: NOW + 60,
            });
            let got = get(&c, &format!("k{i}"), NOW, &calls, answer).await;
            let want = if i < n {
                Ok(1)
            } else {
                Err(VerifyError::CertificateUnavailable)
            };
            assert_eq!(got, want, "#{i}");
        }
        assert_eq!(calls.load(Ordering::SeqCst), n);
        assert_eq!(c.cached(&format!("k{n}"), NOW).await, None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_requests_for_one_name_share_one_fetch() {
        let c = Arc::new(KeyCache::new(8));
        let calls = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Notify::new());
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (c, calls, gate) = (c.clone(), calls.clone(), gate.clone());
            tasks.push(tokio::spawn(async move {
                c.get_or_fetch("same".to_owned(), NOW, None, async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    gate.notified().await;
                    Ok(Fetched {
                        found: Ok(5u32),
                        until: NOW + 60,
                    })
                })
                .await
            }));
        }
        // Let every task reach the cache, then let the one fetch finish.
        while calls.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        gate.notify_one();
        for t in tasks {
            assert_eq!(t.await.unwrap(), Ok(5));
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn loopback_hosts() {
        for ok in ["localhost", "127.0.0.1", "127.9.9.9", "[::1]", "::1"] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in ["10.0.0.1", "example.com", "localhost.example", "[::2]", ""] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }
}
