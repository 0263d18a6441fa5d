//! Dedup: the state machine of docs/design.md, per source + event id.
//!
//! ```text
//! near cache (Redis only): this process marked the key done → Duplicate (no round trip)
//! claim (cache SET NX) ─ Owned ──→ ledger INSERT … ON CONFLICT DO NOTHING (+ deliveries), COMMIT
//!                      │             ├ inserted → New,       cache := done
//!                      │             ├ conflict → Duplicate, cache := done   (cache had lost it)
//!                      │             └ error    → release our claim → 503
//!                      ├ Done ───→ Duplicate (no database work)
//!                      ├ InFlight → wait ≤ inflight_wait, re-claiming; then 409
//!                      └ error ──→ straight to the ledger (it is the truth)
//! ```
//! A source with `dedup_by_body` first claims its body in the ledger
//! (`store::body_hashes`) in the owned section: a body held by another id
//! is a `Body` duplicate, our id claim is released and nothing is written.
//!
//! Crash safety: a claim dies with its TTL, so a crash before COMMIT lets the
//! provider's retry through; after COMMIT every copy is a duplicate. A
//! request cut short in the owned section (client hang-up, deadline) still
//! ends its claim: [`OpenClaim`] releases it, or marks it `done` once the
//! ledger answered.
//!
//! Rule: the ledger's unique key decides what is new; the cache only
//! answers early (a `done` id, a claim held elsewhere), and every claim
//! taken is ended, by the request or by its guard.

pub mod arrivals;
pub mod cache;
pub mod memory;
pub mod near;
pub mod redis;
pub mod writer;

use crate::config;
use crate::primitives::time::Millis;
use crate::primitives::token;
use crate::stats::Layer;
use crate::store::body_hashes::BodyClaim;
use crate::store::{EventLog, NewEvent, Recorded, StoreError};
use crate::verify::Verified;
use cache::{Claim, ClaimCache, Mark};
use near::NearCache;
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};
use writer::GroupCommit;

/// The answer for a verified request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `unrouted`: no target's routes want it (stored, delivered nowhere);
    /// `event_type`: as stored, for the per-type counts; `committing`:
    /// when the ledger write began (the commit's span, `traces::webhook`).
    New {
        unrouted: bool,
        event_type: Option<String>,
        committing: Instant,
    },
    /// `conflict`: the stored body differs from this one (provider bug or attack).
    Duplicate { layer: Layer, conflict: bool },
}

#[derive(Debug, thiserror::Error)]
pub enum DedupError {
    /// Another request still owns this event after `inflight_wait`: 409.
    #[error("the same event is being processed by another request")]
    InFlight,
    /// The ledger could not commit: 503, nothing was written.
    #[error("durable storage unavailable")]
    Unavailable(#[source] StoreError),
}

/// One request's claim on an event id.
struct Claimant {
    /// `<prefix>:v1:<source>:<event id>`.
    key: String,
    /// Ours alone: release deletes the key only while it holds this.
    token: String,
    /// SHA-256 of the body, and its hex as stored in the cache.
    sha: [u8; 32],
    hash: String,
}

/// How a claim ends in the cache, once the owned section knows.
enum ClaimEnd {
    /// The outcome is not known (or the ledger failed): give the claim back,
    /// so the next copy claims at once and the ledger decides it.
    Release,
    /// The ledger holds the id: mark the key `done` with the stored hash
    /// (`hash`, the hex of `sha`; `None` for a stored hash that is not 32 bytes).
    Done {
        sha: Option<[u8; 32]>,
        hash: String,
        ttl: Duration,
    },
}

/// A claim whose end the cache has not been told yet. The owned section
/// runs in the request's task (a task of its own would cost a spawn and a
/// wake-up per new event), so a client hanging up or
/// the request deadline may drop it at any await. Dropped before it ended,
/// the guard ends the claim from a task of its own: before the ledger
/// answered with a release (the event may or may not commit, no 2xx went
/// out either way, and the provider's retry finds the id free in the cache
/// and is decided by the ledger's unique key); once it answered, with the
/// mark.
struct OpenClaim<'a> {
    dedup: &'a Arc<Dedup>,
    claim: Option<Claimant>,
    /// How the claim ends if the guard is dropped now.
    end: ClaimEnd,
    have_claim: bool,
}

impl OpenClaim<'_> {
    /// Ends the claim with `end`. A `done` mark for a cache that batches
    /// them is queued without waiting; anything else is awaited with the
    /// guard still armed.
    async fn end(mut self, end: ClaimEnd) {
        let d = self.dedup;
        if let (
            ClaimEnd::Done {
                sha: Some(sha),
                ttl,
                ..
            },
            Some(near),
            Some(c),
        ) = (&end, &d.near, &self.claim)
        {
            near.remember(c.key.clone(), *sha, *ttl);
        }
        match end {
            // The claim moves into the mark: nothing is copied, nothing awaited.
            ClaimEnd::Done { hash, ttl, .. } if d.queues_marks(ttl, self.have_claim) => {
                let c = self.claim.take().expect("ended once");
                d.queue_mark(Mark {
                    key: c.key,
                    body_sha256: hash,
                    ttl,
                });
            }
            end => {
                self.end = end;
                if let Some(c) = &self.claim {
                    d.end_claim(c, &self.end, self.have_claim).await;
                }
                self.claim = None;
            }
        }
    }
}

impl Drop for OpenClaim<'_> {
    fn drop(&mut self) {
        let Some(c) = self.claim.take() else { return };
        let end = std::mem::replace(&mut self.end, ClaimEnd::Release);
        if !self.have_claim && matches!(end, ClaimEnd::Release) {
            // Nothing of ours is in the cache to give back.
            return;
        }
        let (d, have_claim) = (self.dedup.clone(), self.have_claim);
        // Without a runtime the process is stopping: the claim then expires
        // after claim_ttl, as after a crash.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { d.end_claim(&c, &end, have_claim).await });
        }
    }
}

/// The ledger failed: gives our claim back and answers 503.
async fn unavailable(u: OpenClaim<'_>, e: StoreError) -> DedupError {
    // Let the provider's retry claim at once instead of waiting out
    // claim_ttl.
    u.end(ClaimEnd::Release).await;
    tracing::warn!(error = %e, "ledger write failed; answering 503");
    DedupError::Unavailable(e)
}

/// Most `done` marks sent to the cache in one round trip.
const MARK_BATCH: usize = 256;
/// Marks waiting for their round trip, at most (the senders wait beyond).
const MARK_QUEUE: usize = 4096;

/// How often a waiting copy looks at the key again.
const INFLIGHT_POLL: Duration = Duration::from_millis(20);
/// While the cache is failing, one request per this interval tries it; the
/// rest go straight to the ledger instead of each paying the cache deadline.
const CACHE_PROBE_EVERY: Duration = Duration::from_secs(1);

pub struct Dedup {
    cache: Arc<dyn ClaimCache>,
    /// `done` ids marked by this process, in front of a remote cache.
    near: Option<NearCache>,
    ledger: GroupCommit,
    /// For the body claims of `dedup_by_body` sources (one statement each).
    bodies: Arc<dyn EventLog>,
    settings: config::Dedup,
    key_prefix: String,
    /// Last cache state seen, so an outage logs once, not once per request.
    cache_down: AtomicBool,
    /// Milliseconds since `epoch` of the last cache probe during an outage.
    last_probe_ms: AtomicU64,
    epoch: Instant,
    /// `done` marks for a remote cache, sent in batches by one task
    /// (started on first use; see [`Dedup::mark_done`]).
    marks: OnceLock<tokio::sync::mpsc::Sender<Mark>>,
    /// `hookgate_cache_claim_seconds`: one claim's round trip, answered or
    /// failed (docs/operations.md, "Metrics").
    claim_seconds: metrics::Histogram,
    /// `hookgate_cache_near_hits_total`: copies the near cache answered.
    near_hits: metrics::Counter,
}

impl Dedup {
    pub fn new(
        cache: Arc<dyn ClaimCache>,
        ledger: GroupCommit,
        bodies: Arc<dyn EventLog>,
        settings: config::Dedup,
        key_prefix: String,
    ) -> Self {
        Self {
            cache,
            near: None,
            ledger,
            bodies,
            settings,
            key_prefix,
            cache_down: AtomicBool::new(false),
            last_probe_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            marks: OnceLock::new(),
            claim_seconds: metrics::histogram!("hookgate_cache_claim_seconds"),
            near_hits: metrics::counter!("hookgate_cache_near_hits_total"),
        }
    }

    /// Puts a near cache of `capacity` ids in front of a remote cache
    /// ([`near`]); 0 leaves it out.
    pub fn with_near_cache(mut self, capacity: u64) -> Self {
        self.near = (capacity > 0).then(|| NearCache::new(capacity));
        self
    }

    pub fn cache(&self) -> &Arc<dyn ClaimCache> {
        &self.cache
    }

    /// Decides whether `v` is new (and then durably records it) or a duplicate.
    #[tracing::instrument(skip_all, fields(source = %v.source().name, event.id = v.event_id().as_str()))]
    pub async fn admit(
        self: &Arc<Self>,
        v: Verified,
        cache_ttl: Duration,
        now_ms: Millis,
    ) -> Result<Outcome, DedupError> {
        let sha: [u8; 32] = Sha256::digest(v.body()).into();
        // `concat` sizes the string once (this runs for every request).
        let key = [
            self.key_prefix.as_str(),
            ":v1:",
            &v.source().name,
            ":",
            v.event_id().as_str(),
        ]
        .concat();
        if let Some(stored) = self.near.as_ref().and_then(|n| n.done(&key)) {
            self.near_hits.increment(1);
            let conflict = stored != sha;
            if conflict {
                log_conflict(&v, &token::hex(&stored), &token::hex(&sha));
            }
            return Ok(Outcome::Duplicate {
                layer: Layer::Cache,
                conflict,
            });
        }
        // While `expected_write` is held, the ledger's group commit counts
        // this request as a write on its way and may hold a formed batch a
        // moment for it; dropping it says no write is coming from here.
        let mut expected_write = self.ledger.pending_job();
        let c = Claimant {
            key,
            // Only needs to be unique among concurrent claims of one key.
            token: token::random_hex(),
            hash: token::hex(&sha),
            sha,
        };
        let deadline = Instant::now() + self.settings.inflight_wait;
        if !self.try_cache() {
            // Skipping the cache is always safe: the ledger's unique key decides.
            return self
                .owned(v, c, cache_ttl, now_ms, false, expected_write)
                .await;
        }
        loop {
            let asked = Instant::now();
            let claim = self
                .cache
                .claim(&c.key, &c.token, self.settings.claim_ttl)
                .await;
            self.claim_seconds.record(asked.elapsed());
            match claim {
                Ok(Claim::Owned) => {
                    self.cache_up();
                    return self
                        .owned(v, c, cache_ttl, now_ms, true, expected_write)
                        .await;
                }
                Ok(Claim::Done { body_sha256 }) => {
                    self.cache_up();
                    let conflict = body_sha256 != c.hash;
                    if conflict {
                        log_conflict(&v, &body_sha256, &c.hash);
                    }
                    return Ok(Outcome::Duplicate {
                        layer: Layer::Cache,
                        conflict,
                    });
                }
                Ok(Claim::InFlight) => {
                    self.cache_up();
                    if Instant::now() + INFLIGHT_POLL > deadline {
                        return Err(DedupError::InFlight);
                    }
                    // Not on its way to the writer while it waits.
                    drop(expected_write);
                    tokio::time::sleep(INFLIGHT_POLL).await;
                    expected_write = self.ledger.pending_job();
                }
                Err(e) => {
                    self.cache_failed(&e);
                    return self
                        .owned(v, c, cache_ttl, now_ms, false, expected_write)
                        .await;
                }
            }
        }
    }

    /// The section whose outcome the cache must learn: ledger write, then
    /// cache update (or claim release). It runs in the request's task, so a
    /// client hanging up or the request deadline can drop it at any await;
    /// [`OpenClaim`] then finishes the cache's part in a task of its own.
    async fn owned(
        self: &Arc<Self>,
        mut v: Verified,
        mut c: Claimant,
        cache_ttl: Duration,
        now_ms: Millis,
        have_claim: bool,
        expected_write: crate::batch::PendingJob,
    ) -> Result<Outcome, DedupError> {
        let hash = std::mem::take(&mut c.hash);
        let sha = c.sha;
        let u = OpenClaim {
            dedup: self,
            claim: Some(c),
            end: ClaimEnd::Release,
            have_claim,
        };
        let source = v.source().clone();
        let expires_at = now_ms + source.dedup_window;
        if source.dedup_by_body {
            let claim = BodyClaim {
                source: &source.name,
                body_sha256: &sha,
                event_id: v.event_id().as_str(),
                now: now_ms,
                expires_at,
            };
            match self.bodies.claim_body(&claim).await {
                Ok(holder) if holder == claim.event_id => {}
                Ok(holder) => {
                    // No event for the writer from this request.
                    drop(expected_write);
                    // Our id was never recorded: let it go, so only the
                    // body decides the next copy too.
                    u.end(ClaimEnd::Release).await;
                    log_body_duplicate(&v, &holder, &hash);
                    return Ok(Outcome::Duplicate {
                        layer: Layer::Body,
                        conflict: false,
                    });
                }
                Err(e) => {
                    drop(expected_write);
                    return Err(unavailable(u, e).await);
                }
            }
        }
        // Read only now that the event may be stored (verify::Facts).
        let facts = v.take_facts();
        let unrouted = facts.routed.targets.is_empty();
        let event_type = facts.event_type.clone();
        let event = NewEvent {
            source: source.name.clone(),
            event_id: v.event_id().as_str().to_owned(),
            body: v.body().clone(),
            body_sha256: sha,
            headers: facts.headers,
            received_at: now_ms,
            expires_at,
            // Routed by its facts (target/route.rs): only the
            // targets that want this event get a delivery row.
            targets: facts.routed.targets,
            order_keys: facts.routed.order_keys,
            facts: crate::store::EventFacts {
                event_type: facts.event_type,
                key_index: v.key_index().and_then(|i| i32::try_from(i).ok()),
                provider_ts: v.provider_timestamp(),
                object_id: facts.object_id,
                recovered: v.recovered(),
            },
            // Set by the writer, which reserves room on the delivery lanes.
            handoff: None,
            fresh: have_claim,
        };
        let committing = Instant::now();
        match self.ledger.record(event, expected_write).await {
            Ok(Recorded::New) => {
                // Committed: the mark is queued (not awaited) and the
                // request answered; a copy arriving before the mark is sent
                // sees our claim and waits for it.
                let ttl = within(cache_ttl, expires_at);
                u.end(ClaimEnd::Done {
                    sha: Some(sha),
                    hash,
                    ttl,
                })
                .await;
                Ok(Outcome::New {
                    unrouted,
                    event_type,
                    committing,
                })
            }
            Ok(Recorded::Duplicate {
                stored_sha256,
                expires_at,
            }) => {
                let stored = token::hex(&stored_sha256);
                let conflict = stored != hash;
                if conflict {
                    log_conflict(&v, &stored, &hash);
                }
                let ttl = within(cache_ttl, expires_at);
                u.end(ClaimEnd::Done {
                    sha: stored_sha256.as_slice().try_into().ok(),
                    hash: stored,
                    ttl,
                })
                .await;
                Ok(Outcome::Duplicate {
                    layer: Layer::Ledger,
                    conflict,
                })
            }
            Err(e) => Err(unavailable(u, e).await),
        }
    }

    async fn release(&self, c: &Claimant, have_claim: bool) {
        if have_claim && let Err(ce) = self.cache.release(&c.key, &c.token).await {
            self.cache_failed(&ce);
        }
    }

    /// Tells the cache what the owned section decided about `c`.
    async fn end_claim(self: &Arc<Self>, c: &Claimant, end: &ClaimEnd, have_claim: bool) {
        match end {
            ClaimEnd::Release => self.release(c, have_claim).await,
            ClaimEnd::Done { hash, ttl, .. } => self.mark_done(c, hash, *ttl, have_claim).await,
        }
    }

    /// Whether [`Dedup::mark_done`] would queue this mark: a cache that
    /// batches them, a window left, and a claim of ours or a cache not
    /// known to be down.
    fn queues_marks(&self, ttl: Duration, have_claim: bool) -> bool {
        !ttl.is_zero() && self.cache.batches_finishes() && !self.skips_mark(have_claim)
    }

    /// Without a claim of ours, a cache known to be down is left alone.
    fn skips_mark(&self, have_claim: bool) -> bool {
        !have_claim && self.cache_down.load(Ordering::Relaxed)
    }

    /// A `done` mark for a cache that batches them, queued without waiting
    /// (it cannot be cut short); a full queue hands it to a task.
    fn queue_mark(self: &Arc<Self>, mark: Mark) {
        use tokio::sync::mpsc::error::TrySendError;
        let queue = self.mark_queue();
        match queue.try_send(mark) {
            // Closed only when the task is gone (the process is stopping):
            // the claim then expires after claim_ttl, as after a crash.
            Ok(()) | Err(TrySendError::Closed(_)) => {}
            Err(TrySendError::Full(mark)) => {
                let queue = queue.clone();
                tokio::spawn(async move {
                    let _ = queue.send(mark).await;
                });
            }
        }
    }

    /// Turns the key into `done`. With `have_claim` this always tries, even
    /// while the cache is flagged down (another request's error may have
    /// flagged it after we claimed): a pending claim left behind would make
    /// every copy wait and get 409 until `claim_ttl`, instead of a duplicate.
    /// Without a claim it skips a cache known to be down, as it cost nothing
    /// to leave the key unset.
    ///
    /// A zero `ttl` (the row's window is over) sets nothing: our claim, if
    /// any, is released so the next copy is decided by the ledger at once.
    ///
    /// On Redis the mark joins a batch: one task sends the marks of events
    /// committed together in one pipeline (one round trip, not one each).
    /// The mark is queued, not awaited, and the request answered; a copy
    /// that arrives before its mark is sent finds our claim and waits for
    /// it, as for any claim.
    async fn mark_done(
        self: &Arc<Self>,
        c: &Claimant,
        hash: &str,
        ttl: Duration,
        have_claim: bool,
    ) {
        if self.skips_mark(have_claim) {
            return;
        }
        let done = if ttl.is_zero() {
            if !have_claim {
                return;
            }
            self.cache.release(&c.key, &c.token).await
        } else if self.cache.batches_finishes() {
            // Copied: the guard keeps the claim until this returns
            // (`OpenClaim::end` moves it instead on the usual path).
            self.queue_mark(Mark {
                key: c.key.clone(),
                body_sha256: hash.to_owned(),
                ttl,
            });
            Ok(())
        } else {
            self.cache.finish(&c.key, hash, ttl).await
        };
        if let Err(e) = done {
            // The ledger already holds the truth; the next copy pays one
            // ledger lookup instead of a cache hit.
            self.cache_failed(&e);
        }
    }

    /// The queue of [`Dedup::mark_done`], and its task on first use. The
    /// task holds the dedup weakly and ends when it is dropped.
    fn mark_queue(self: &Arc<Self>) -> &tokio::sync::mpsc::Sender<Mark> {
        self.marks.get_or_init(|| {
            let (tx, rx) = tokio::sync::mpsc::channel(MARK_QUEUE);
            tokio::spawn(send_marks(Arc::downgrade(self), rx));
            tx
        })
    }

    /// False while the cache is failing, except for one probe per
    /// [`CACHE_PROBE_EVERY`].
    fn try_cache(&self) -> bool {
        if !self.cache_down.load(Ordering::Relaxed) {
            return true;
        }
        let now = self.epoch.elapsed().as_millis() as u64;
        let last = self.last_probe_ms.load(Ordering::Relaxed);
        now.saturating_sub(last) >= CACHE_PROBE_EVERY.as_millis() as u64
            && self
                .last_probe_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    fn cache_failed(&self, e: &cache::CacheError) {
        metrics::counter!("hookgate_cache_errors_total").increment(1);
        if !self.cache_down.swap(true, Ordering::Relaxed) {
            tracing::warn!(error = %e, "dedup cache unavailable; deciding in the ledger");
        }
    }

    fn cache_up(&self) {
        if self.cache_down.swap(false, Ordering::Relaxed) {
            tracing::info!("dedup cache reachable again");
        }
    }
}

/// Sends queued `done` marks, as many as are waiting (≤ [`MARK_BATCH`]) in
/// one `finish_many`; a failed batch flags the cache down like any call.
async fn send_marks(dedup: Weak<Dedup>, mut rx: tokio::sync::mpsc::Receiver<Mark>) {
    let mut batch = Vec::with_capacity(MARK_BATCH);
    while rx.recv_many(&mut batch, MARK_BATCH).await > 0 {
        let Some(d) = dedup.upgrade() else { return };
        if let Err(e) = d.cache.finish_many(&batch).await {
            d.cache_failed(&e);
        }
        batch.clear();
    }
}

/// The cache may call an id a duplicate only while its ledger row does:
/// `cache_ttl`, cut to what is left of the row's window (`expires_at`), so a
/// cache entry never outlives the row it stands for, including a row that
/// was written before this request (a ledger duplicate).
fn within(cache_ttl: Duration, expires_at: Millis) -> Duration {
    cache_ttl.min(expires_at.saturating_sub(Millis::now()))
}

fn log_conflict(v: &Verified, stored: &str, received: &str) {
    tracing::warn!(
        source = %v.source().name,
        event.id = v.event_id().as_str(),
        body.sha256.stored = stored,
        body.sha256.received = received,
        "same event id with a different body: answered duplicate, not forwarded"
    );
}

fn log_body_duplicate(v: &Verified, holder: &str, sha: &str) {
    tracing::warn!(
        source = %v.source().name,
        event.id = v.event_id().as_str(),
        body.first_event_id = holder,
        body.sha256 = sha,
        "body already seen under another event id (dedup_by_body): answered duplicate, not stored"
    );
}
