//! Keys a provider handed over in a handshake (Asana's `X-Hook-Secret`),
//! kept per source beside its configured ones. The ledger
//! (`store::handshake_secrets`) is the truth every replica shares; this is
//! each process's copy, as a ready [`Source`] with the learned keys added.
//!
//! Rule: a copy is refreshed from the ledger when it was never loaded, and
//! when a request of a learning source fails its signature check (another
//! replica may have learned a key since), at most once per
//! [`REFRESH_EVERY`] per source, so forged requests cannot turn into a
//! database read each. Nothing here touches the ledger itself: ingest
//! reads it and hands the secrets over.

use super::source::Source;
use crate::primitives::secret::Secret;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Fewest time between two refreshes of one source after failed checks.
pub const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// Per source: the source with its learned keys, and when it was read.
#[derive(Default)]
pub struct Learned {
    // A std mutex: held only to clone an `Arc` or swap one in, never
    // across an await.
    sources: Mutex<HashMap<String, Held>>,
}

struct Held {
    /// The configured source it was built from: a reloaded config's source
    /// is another one, and gets a copy of its own.
    base: Arc<Source>,
    source: Arc<Source>,
    /// The learned secrets it holds, to tell whether a read changed them.
    secrets: Vec<String>,
    read_at: Instant,
}

impl Learned {
    /// `base` with its learned keys, if they were loaded for it.
    pub fn get(&self, base: &Arc<Source>) -> Option<Arc<Source>> {
        let map = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&base.name)
            .filter(|c| Arc::ptr_eq(&c.base, base))
            .map(|c| c.source.clone())
    }

    /// Whether `name` may be read from the ledger again now.
    pub fn due(&self, name: &str) -> bool {
        let map = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        map.get(name)
            .is_none_or(|c| c.read_at.elapsed() >= REFRESH_EVERY)
    }

    /// Replaces the copy of `base` with one holding `secrets` (as read from
    /// the ledger); returns it, and whether the secrets changed. Secrets the
    /// provider's encoding cannot read are skipped.
    pub fn set(&self, base: &Arc<Source>, secrets: Vec<String>) -> (Arc<Source>, bool) {
        let mut map = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = map.get_mut(&base.name)
            && c.secrets == secrets
            && Arc::ptr_eq(&c.base, base)
        {
            c.read_at = Instant::now();
            return (c.source.clone(), false);
        }
        let keys = secrets
            .iter()
            .filter_map(|s| base.provider.signing_key(&Secret::new(s.clone())).ok())
            .collect();
        let source = Arc::new(base.with_learned(keys));
        map.insert(
            base.name.clone(),
            Held {
                base: base.clone(),
                source: source.clone(),
                secrets,
                read_at: Instant::now(),
            },
        );
        (source, true)
    }
}
