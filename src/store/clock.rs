//! Keeps this process on the shared ledger's clock
//! (`primitives::time::follow_ledger_clock` says why).

use super::Backend;
use crate::primitives::time::follow_ledger_clock;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How often the ledger's clock is read again. Between samples the
/// monotonic clock carries it, so this only bounds drift.
const EVERY: Duration = Duration::from_secs(10);
/// A sample whose statement took longer is dropped: its midpoint could be
/// that far off.
const MAX_ROUND_TRIP: Duration = Duration::from_millis(250);
/// How far the ledger's clock may be from this machine's before it is
/// logged (the clocks of one deployment should agree within NTP's error).
const WARN_APART: Duration = Duration::from_secs(2);

/// Takes one sample; `Ok(false)` when the ledger has no shared clock.
/// `apart` remembers whether the last sample was logged as far apart, so
/// that a lasting difference is logged once, and its end once.
pub async fn sample(backend: &dyn Backend, apart: &mut bool) -> Result<bool, super::StoreError> {
    let sent = Instant::now();
    let Some(at) = backend.clock().await? else {
        return Ok(false);
    };
    let answered = Instant::now();
    if answered - sent > MAX_ROUND_TRIP {
        return Ok(true);
    }
    let gap = follow_ledger_clock(at, sent, answered);
    if gap > WARN_APART && !*apart {
        tracing::warn!(
            apart_ms = gap.as_millis() as u64,
            "this machine's clock disagrees with the ledger's: hookgate keeps the ledger's time \
             (leases and retry times are compared across replicas); check NTP on both"
        );
    } else if gap <= WARN_APART && *apart {
        tracing::info!("this machine's clock agrees with the ledger's again");
    }
    *apart = gap > WARN_APART;
    Ok(true)
}

/// Samples the ledger's clock every [`EVERY`] until `stop`; returns at once
/// for a ledger without a shared clock.
pub async fn follow(
    backend: std::sync::Arc<dyn Backend>,
    mut apart: bool,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(EVERY) => {}
        }
        match sample(backend.as_ref(), &mut apart).await {
            Ok(true) => {}
            Ok(false) => return,
            // The monotonic clock carries the last sample meanwhile.
            Err(e) => tracing::debug!(error = %e, "could not read the ledger's clock"),
        }
    }
}
