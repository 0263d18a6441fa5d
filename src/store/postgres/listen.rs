//! Cross-replica wake-ups: `record` NOTIFYs target names at COMMIT; every
//! replica LISTENs and wakes that target's delivery loop.
//!
//! Rule: a lost LISTEN connection is never fatal; delivery falls back to
//! polling and the connection is retried every second until `stop`.

use super::NOTIFY_CHANNEL;
use crate::store::OnCommit;
use sqlx::postgres::{PgListener, PgPool};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Calls `on_commit(target)` for every NOTIFY until `stop`.
pub(super) async fn listen(pool: &PgPool, on_commit: OnCommit, stop: CancellationToken) {
    // Log an outage once when it starts, and once when it ends.
    let mut failing = false;
    while !stop.is_cancelled() {
        tokio::select! {
            e = relay(pool, &on_commit, &mut failing) => {
                if !failing {
                    tracing::warn!(error = %e, "LISTEN connection lost; polling until it is back");
                }
                failing = true;
            }
            _ = stop.cancelled() => return,
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// Passes every NOTIFY on to `on_commit` until the connection fails;
/// returns that failure.
async fn relay(pool: &PgPool, on_commit: &OnCommit, failing: &mut bool) -> sqlx::Error {
    let mut l = match PgListener::connect_with(pool).await {
        Ok(l) => l,
        Err(e) => return e,
    };
    if let Err(e) = l.listen(NOTIFY_CHANNEL).await {
        return e;
    }
    if std::mem::take(failing) {
        tracing::info!("LISTEN connection is back");
    }
    loop {
        match l.recv().await {
            Ok(n) => on_commit(n.payload()),
            Err(e) => return e,
        }
    }
}
