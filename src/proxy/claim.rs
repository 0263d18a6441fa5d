//! Who answers a keyed request: the claim state machine of
//! docs/idempotency.md. The row is the truth; the claim cache in front of
//! it only spares the database the waiting and the conflicts.
//!
//! ```text
//! cache claim ─ Owned ──→ row begin ─ Claimed    → Owner (forward, store)
//!             │                      ├ Completed  → Replay | Conflict   (cache := done)
//!             │                      ├ InProgress → release cache claim; poll the row
//!             │                      └ error      → release cache claim; 503
//!             ├ Done(h) → h ≠ ours: Conflict; else read the row → Replay
//!             ├ InFlight → re-claim every 20 ms for ≤ inflight_wait; then 409
//!             └ error ──→ row only (the row's unique key keeps it exact)
//! ```

use crate::config::apis::Api;
use crate::dedup::cache::{Claim, ClaimCache};
use crate::primitives::time::Millis;
use crate::store::StoreError;
use crate::store::idempotency::{Begin, IdemKey, IdempotencyStore, RowClaim, StoredResponse};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a waiter re-claims in the cache.
const CACHE_POLL: Duration = Duration::from_millis(20);
/// How often a waiter reads the row when the cache cannot tell.
const ROW_POLL: Duration = Duration::from_millis(50);

/// Everything that names one keyed request.
pub struct Keyed {
    pub api: Arc<Api>,
    pub key: IdemKey,
    pub cache_key: String,
    pub fingerprint: [u8; 32],
    /// Ours alone: releases and completions only act while they hold it.
    pub token: String,
}

impl Keyed {
    pub fn hash(&self) -> String {
        hex::encode(self.fingerprint)
    }
}

/// The decision for one keyed request.
#[derive(Debug)]
pub enum Decision {
    /// This request owns the key: call the upstream. `cache_claim`: it also
    /// holds the cache claim.
    Owner {
        cache_claim: bool,
    },
    Replay(StoredResponse),
    /// The key was first used for a different request.
    Conflict,
    /// The first attempt is still running after `inflight_wait`.
    InFlight,
}

/// Decides who answers; `waited` is set if the request had to wait.
pub async fn decide(
    k: &Keyed,
    cache: &dyn ClaimCache,
    store: &dyn IdempotencyStore,
    waited: &mut bool,
) -> Result<Decision, StoreError> {
    let deadline = Instant::now() + k.api.inflight_wait;
    let mut use_cache = true;
    loop {
        let mut cache_claim = false;
        if use_cache {
            match cache.claim(&k.cache_key, &k.token, k.api.lock_ttl).await {
                Ok(Claim::Owned) => cache_claim = true,
                Ok(Claim::Done { body_sha256 }) => {
                    if body_sha256 != k.hash() {
                        return Ok(Decision::Conflict);
                    }
                    match store.lookup(&k.key).await? {
                        Begin::Completed {
                            request_sha256,
                            response,
                        } => return Ok(replay_or_conflict(k, &request_sha256, response)),
                        // The cache outlived the row: the row decides.
                        _ => use_cache = false,
                    }
                    continue;
                }
                Ok(Claim::InFlight) => {
                    if !wait(deadline, CACHE_POLL, waited).await {
                        return Ok(Decision::InFlight);
                    }
                    continue;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "claim cache unavailable; deciding in the row");
                    use_cache = false;
                }
            }
        }
        let now = Millis::now();
        let row = RowClaim {
            key: &k.key,
            request_sha256: &k.fingerprint,
            token: &k.token,
            now,
            locked_until: now + k.api.lock_ttl,
            expires_at: now + k.api.ttl.max(k.api.lock_ttl),
        };
        let begun = store.begin(&row).await;
        if cache_claim && !matches!(begun, Ok(Begin::Claimed) | Ok(Begin::Completed { .. })) {
            // The row is held by someone the cache did not see (or failed):
            // free the cache so it does not stand in the way.
            let _ = cache.release(&k.cache_key, &k.token).await;
            use_cache = false;
        }
        match begun? {
            Begin::Claimed => return Ok(Decision::Owner { cache_claim }),
            Begin::Completed {
                request_sha256,
                response,
            } => {
                if cache_claim {
                    let stored = hex::encode(&request_sha256);
                    let _ = cache.finish(&k.cache_key, &stored, k.api.ttl).await;
                }
                return Ok(replay_or_conflict(k, &request_sha256, response));
            }
            Begin::InProgress { request_sha256 } => {
                if request_sha256 != k.fingerprint {
                    return Ok(Decision::Conflict);
                }
                if !wait(deadline, ROW_POLL, waited).await {
                    return Ok(Decision::InFlight);
                }
            }
            // Released between our statements: claim again at once.
            Begin::Vanished => {}
        }
    }
}

fn replay_or_conflict(k: &Keyed, stored: &[u8], response: StoredResponse) -> Decision {
    if stored == k.fingerprint {
        Decision::Replay(response)
    } else {
        Decision::Conflict
    }
}

/// Sleeps `step` unless that passes `deadline`; false when out of time.
async fn wait(deadline: Instant, step: Duration, waited: &mut bool) -> bool {
    if Instant::now() + step > deadline {
        return false;
    }
    *waited = true;
    tokio::time::sleep(step).await;
    true
}
