//! Group commit: jobs from concurrent tasks share one ledger transaction.
//!
//! Each caller sends its job and waits for its own result; a writer task
//! takes whatever is queued (up to `max_batch`) and writes it in one
//! transaction. No artificial delay: while one commit is in flight the next
//! batch forms by itself, so a lone job pays one commit and a burst pays one
//! commit per batch. A reply is sent only after COMMIT returned.
//!
//! Two batchers use this: ingest ([`GroupCommit`]: events + their delivery
//! rows) and delivery (attempt outcomes, see `deliver::record`).

use super::{Ledger, NewEvent, Recorded, StoreError};
use async_trait::async_trait;
use std::sync::Arc;
use tokio::sync::{Mutex, mpsc, oneshot};

type Reply<R> = oneshot::Sender<Result<R, Arc<StoreError>>>;
/// The queue the writers share; only the task forming a batch holds it.
type Queue<J, R> = Arc<Mutex<mpsc::Receiver<(J, Reply<R>)>>>;

/// Writes one batch in one transaction; one result per job, in job order.
#[async_trait]
pub trait BatchWrite<J, R>: Send + Sync + 'static {
    async fn write(&self, jobs: &[J]) -> Result<Vec<R>, StoreError>;
}

/// Handle to a batcher's writer tasks; cheap to clone.
pub struct Batcher<J, R> {
    tx: mpsc::Sender<(J, Reply<R>)>,
}

impl<J, R> Clone for Batcher<J, R> {
    fn clone(&self) -> Self {
        Self {
            tx: self.tx.clone(),
        }
    }
}

impl<J: Send + 'static, R: Send + 'static> Batcher<J, R> {
    /// Starts `writers` writer tasks over `sink`. They stop when every
    /// handle is dropped, after finishing the batch in hand. `metric` names
    /// the batch-size histogram.
    pub fn start<W: BatchWrite<J, R>>(
        sink: Arc<W>,
        writers: usize,
        max_batch: usize,
        metric: &'static str,
    ) -> Self {
        let (tx, rx) = mpsc::channel(max_batch.max(1) * writers.max(1) * 4);
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..writers.max(1) {
            tokio::spawn(writer(sink.clone(), rx.clone(), max_batch.max(1), metric));
        }
        Self { tx }
    }

    /// Submits one job; returns once its transaction committed (or failed).
    pub async fn submit(&self, job: J) -> Result<R, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send((job, reply))
            .await
            .map_err(|_| StoreError::Closed)?;
        match rx.await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(StoreError::Shared(e)),
            Err(_) => Err(StoreError::Closed),
        }
    }
}

async fn writer<J, R, W: BatchWrite<J, R>>(
    sink: Arc<W>,
    rx: Queue<J, R>,
    max_batch: usize,
    metric: &'static str,
) {
    let histogram = metrics::histogram!(metric);
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
        let (jobs, replies): (Vec<J>, Vec<Reply<R>>) = jobs.into_iter().unzip();
        histogram.record(jobs.len() as f64);
        match sink.write(&jobs).await {
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

/// Ingest's batcher: events and their delivery rows.
struct Events(Arc<dyn Ledger>);

#[async_trait]
impl BatchWrite<NewEvent, Recorded> for Events {
    async fn write(&self, jobs: &[NewEvent]) -> Result<Vec<Recorded>, StoreError> {
        self.0.record(jobs).await
    }
}

/// Handle to the ledger's event writers; cheap to clone.
#[derive(Clone)]
pub struct GroupCommit(Batcher<NewEvent, Recorded>);

impl GroupCommit {
    /// Starts `writers` writer tasks over `ledger`.
    pub fn start(ledger: Arc<dyn Ledger>, writers: usize, max_batch: usize) -> Self {
        Self(Batcher::start(
            Arc::new(Events(ledger)),
            writers,
            max_batch,
            "hookgate_ledger_batch_size",
        ))
    }

    /// Records one event; returns once its transaction committed (or failed).
    pub async fn record(&self, event: NewEvent) -> Result<Recorded, StoreError> {
        self.0.submit(event).await
    }
}
