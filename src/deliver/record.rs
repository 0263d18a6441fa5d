//! Group commit of attempt outcomes: attempts that finish at about the same
//! time, to any target, are recorded in ONE ledger transaction (as ingest
//! does for events), instead of one transaction each.
//!
//! Rule: an attempt counts as recorded only once its batch committed. A crash
//! between "sent" and "recorded" leaves the row leased under our token; the
//! lease expires and the event is sent again (at least once, never lost).

use crate::batch::{BatchWrite, Batcher};
use crate::store::{AttemptRecord, Outbox, StoreError};
use async_trait::async_trait;
use std::sync::Arc;

/// Largest batch of outcomes in one transaction.
const MAX_BATCH: usize = 256;

/// Writes outcomes under this process's lease token.
struct Outcomes {
    outbox: Arc<dyn Outbox>,
    token: String,
}

#[async_trait]
impl BatchWrite<(i64, AttemptRecord), bool> for Outcomes {
    async fn write(&self, jobs: &mut [(i64, AttemptRecord)]) -> Result<Vec<bool>, StoreError> {
        self.outbox.finish_attempts(&self.token, jobs).await
    }
}

/// Handle to the outcome writer; cheap to clone.
#[derive(Clone)]
pub struct Recorder(Batcher<(i64, AttemptRecord), bool>);

impl Recorder {
    pub fn start(outbox: Arc<dyn Outbox>, token: String) -> Self {
        Self(Batcher::start(
            Arc::new(Outcomes { outbox, token }),
            MAX_BATCH,
            "hookgate_attempt",
            // Attempts are not announced: a batch goes as soon as it forms.
            std::time::Duration::ZERO,
        ))
    }

    /// Records one attempt of `delivery_id`; `false` when the lease was lost.
    pub async fn finish(&self, delivery_id: i64, rec: AttemptRecord) -> Result<bool, StoreError> {
        self.0.submit((delivery_id, rec), None).await
    }
}
