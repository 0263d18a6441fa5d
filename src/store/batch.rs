//! Group commit: events from concurrent requests share one ledger transaction.
//!
//! Each request sends its event and waits for its own result; a writer task
//! takes whatever is queued (up to `max_batch`) and writes it in one
//! transaction. No artificial delay: while one commit is in flight the next
//! batch forms by itself, so a lone request pays one commit and a burst pays
//! one commit per batch. A reply is sent only after COMMIT returned.

use super::{Ledger, NewEvent, Recorded, StoreError};
use std::sync::Arc;
use tokio::sync::{Mutex, mpsc, oneshot};

type Reply = oneshot::Sender<Result<Recorded, Arc<StoreError>>>;

/// Handle to the ledger writers; cheap to clone.
#[derive(Clone)]
pub struct GroupCommit {
    tx: mpsc::Sender<(NewEvent, Reply)>,
}

impl GroupCommit {
    /// Starts `writers` writer tasks over `ledger`. They stop when every
    /// handle is dropped, after finishing the batch in hand.
    pub fn start(ledger: Arc<dyn Ledger>, writers: usize, max_batch: usize) -> Self {
        let (tx, rx) = mpsc::channel(max_batch * writers.max(1) * 4);
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..writers.max(1) {
            tokio::spawn(writer(ledger.clone(), rx.clone(), max_batch.max(1)));
        }
        Self { tx }
    }

    /// Records one event; returns once its transaction committed (or failed).
    pub async fn record(&self, event: NewEvent) -> Result<Recorded, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send((event, reply))
            .await
            .map_err(|_| StoreError::Closed)?;
        match rx.await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(StoreError::Shared(e)),
            Err(_) => Err(StoreError::Closed),
        }
    }
}

async fn writer(
    ledger: Arc<dyn Ledger>,
    rx: Arc<Mutex<mpsc::Receiver<(NewEvent, Reply)>>>,
    max_batch: usize,
) {
    loop {
        let mut jobs = Vec::new();
        {
            // Only the task taking a batch holds the receiver; the others
            // are committing meanwhile.
            let mut rx = rx.lock().await;
            match rx.recv().await {
                Some(j) => jobs.push(j),
                None => return,
            }
            while jobs.len() < max_batch {
                match rx.try_recv() {
                    Ok(j) => jobs.push(j),
                    Err(_) => break,
                }
            }
        }
        let (events, replies): (Vec<NewEvent>, Vec<Reply>) = jobs.into_iter().unzip();
        metrics::histogram!("hookgate_ledger_batch_size").record(events.len() as f64);
        match ledger.record(&events).await {
            Ok(results) => {
                for (reply, r) in replies.into_iter().zip(results) {
                    let _ = reply.send(Ok(r));
                }
            }
            Err(e) => {
                let e = Arc::new(e);
                for reply in replies {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }
}
