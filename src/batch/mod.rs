//! Group commit: jobs from concurrent tasks share one write (one database
//! transaction).
//!
//! Each caller sends its job and waits for its own result; a writer task
//! takes whatever is queued (up to `max_batch`) and writes it in one
//! transaction. No artificial delay: while one commit is in flight the next
//! batch forms by itself, so a lone job pays one commit and a burst pays one
//! commit per batch. A reply is sent only after COMMIT returned.
//!
//! Two batchers use this: dedup's event writer (`dedup::writer`: events +
//! their delivery rows) and delivery's attempt records (`deliver::record`).
//!
//! One bad row never fails its batch: when the database refuses a batch
//! because of its rows ([`StoreError::is_about_the_data`]), the writer
//! writes the batch's jobs again one by one, each in its own transaction, so
//! only the job(s) at fault fail. A connection error or a timeout still fails
//! the whole batch: one by one would only repeat the wait per job.
//!
//! Linger ([`linger`]): a writer may hold a formed batch a moment for jobs
//! announced as on their way, so that a loaded writer does not alternate
//! between full batches and batches of one.
//!
//! Bounded waits: with a deadline ([`Batcher::with_deadline`]) a caller gives
//! up after it, whether its job is still queued or being written, and a job
//! whose caller gave up before its batch formed is not written at all. So
//! while the database hangs, callers (and the memory they hold) leave at the
//! rate they arrive instead of piling up behind the queue.
//!
//! Rule: storage-agnostic; a [`BatchWrite`] does the writing, and a job's
//! reply is its own result or the batch's error.

mod linger;
#[cfg(test)]
mod tests;

pub use linger::PendingJob;

use crate::store::StoreError;
use async_trait::async_trait;
use linger::{Expected, PendingJobs};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

type Reply<R> = oneshot::Sender<Result<R, Arc<StoreError>>>;
type Queue<J, R> = mpsc::Receiver<(J, Reply<R>)>;

/// Writes one batch in one transaction; one result per job, in job order.
/// The jobs are lent mutably: a writer may note on them what it prepared
/// for this write (the event writer, its lane reservations).
#[async_trait]
pub trait BatchWrite<J, R>: Send + Sync + 'static {
    async fn write(&self, jobs: &mut [J]) -> Result<Vec<R>, StoreError>;
}

/// Handle to a batcher's writer task; cheap to clone.
pub struct Batcher<J, R> {
    tx: mpsc::Sender<(J, Reply<R>)>,
    /// Longest wait of one `submit`, queue included; `None`: no bound here.
    deadline: Option<Duration>,
    pending_jobs: Arc<PendingJobs>,
}

impl<J, R> Clone for Batcher<J, R> {
    fn clone(&self) -> Self {
        Self {
            tx: self.tx.clone(),
            deadline: self.deadline,
            pending_jobs: self.pending_jobs.clone(),
        }
    }
}

impl<J: Send + 'static, R: Send + 'static> Batcher<J, R> {
    /// Starts the writer task over `sink`. One writer: while its batch
    /// commits, the next jobs queue and go in one bigger batch (several
    /// writers each took whatever was queued the moment one was free: smaller
    /// batches, more statements and commits). It stops when every
    /// handle is dropped, after finishing the batch in hand. `metrics`
    /// names two histograms: `<metrics>_batch_size` (jobs per write) and
    /// `<metrics>_write_seconds` (one batch: statement and COMMIT, and the
    /// one-by-one writes when its rows were refused). The sum
    /// of the second over a minute, divided by 60, is the share of the time
    /// the one writer was busy: near 1, this batcher's throughput is what the
    /// database's commit path allows (docs/operations.md, "Metrics").
    ///
    /// `linger` (zero: never) is how long the writer may hold a formed
    /// batch for jobs announced with [`Batcher::pending_job`] and not submitted
    /// yet; see [`linger`].
    pub fn start<W: BatchWrite<J, R>>(
        sink: Arc<W>,
        max_batch: usize,
        metrics: &'static str,
        linger: Duration,
    ) -> Self {
        let (tx, rx) = mpsc::channel(max_batch.max(1) * 4);
        let pending_jobs = Arc::new(PendingJobs::default());
        tokio::spawn(writer(
            sink,
            rx,
            max_batch.max(1),
            metrics,
            pending_jobs.clone(),
            linger,
        ));
        Self {
            tx,
            deadline: None,
            pending_jobs,
        }
    }

    /// Announces a job that will probably be submitted soon.
    pub fn pending_job(&self) -> PendingJob {
        PendingJob::new(&self.pending_jobs)
    }

    /// Makes every `submit` give up after `deadline` (queue wait included)
    /// with [`StoreError::Timeout`].
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Submits one job; returns once its transaction committed (or failed).
    /// A job that outlives the deadline may still be committed later, after
    /// its caller was told it failed: for ingest, the provider's retry then
    /// finds the row and is a duplicate.
    pub async fn submit(&self, job: J, pending: Option<PendingJob>) -> Result<R, StoreError> {
        let wait = async {
            let (reply, rx) = oneshot::channel();
            self.tx
                .send((job, reply))
                .await
                .map_err(|_| StoreError::Closed)?;
            drop(pending);
            match rx.await {
                Ok(Ok(r)) => Ok(r),
                Ok(Err(e)) => Err(StoreError::BatchFailed(e)),
                Err(_) => Err(StoreError::Closed),
            }
        };
        match self.deadline {
            Some(d) => tokio::time::timeout(d, wait)
                .await
                .unwrap_or(Err(StoreError::Timeout(d))),
            None => wait.await,
        }
    }
}

async fn writer<J, R, W: BatchWrite<J, R>>(
    sink: Arc<W>,
    mut rx: Queue<J, R>,
    max_batch: usize,
    metrics: &'static str,
    pending_jobs: Arc<PendingJobs>,
    linger: Duration,
) {
    let batch_size = metrics::histogram!(format!("{metrics}_batch_size"));
    let write_seconds = metrics::histogram!(format!("{metrics}_write_seconds"));
    let mut expected = Expected::default();
    loop {
        let mut jobs: Vec<(J, Reply<R>)> = Vec::new();
        match rx.recv().await {
            Some(j) => jobs.push(j),
            None => return,
        }
        drain(&mut rx, &mut jobs, max_batch);
        if !linger.is_zero() {
            expected.update(&pending_jobs, jobs.len());
            let until = tokio::time::Instant::now() + linger;
            while jobs.len() < max_batch && expected.more(&pending_jobs) {
                // Woken by each job (the batch may be full, or the jobs
                // still expected fewer than one), by the last announced one
                // leaving without a job, or by the end of the linger.
                tokio::select! {
                    biased;
                    j = rx.recv() => match j {
                        Some(j) => jobs.push(j),
                        None => break,
                    },
                    () = pending_jobs.none_left.notified() => {}
                    () = tokio::time::sleep_until(until) => break,
                }
                drain(&mut rx, &mut jobs, max_batch);
            }
            drain(&mut rx, &mut jobs, max_batch);
        }
        expected.received += jobs.len() as u64;
        // A caller that gave up (deadline) no longer waits for its job.
        jobs.retain(|(_, reply)| !reply.is_closed());
        if jobs.is_empty() {
            continue;
        }
        let (mut jobs, replies): (Vec<J>, Vec<Reply<R>>) = jobs.into_iter().unzip();
        batch_size.record(jobs.len() as f64);
        let started = Instant::now();
        let written = sink.write(&mut jobs).await;
        match written {
            Ok(results) => {
                for (reply, r) in replies.into_iter().zip(results) {
                    let _ = reply.send(Ok(r));
                }
            }
            Err(e) if jobs.len() > 1 && e.is_about_the_data() => {
                tracing::warn!(error = %e, jobs = jobs.len(), "batch refused for its rows; writing its jobs one by one");
                one_by_one(sink.as_ref(), jobs, replies).await;
            }
            Err(e) => {
                let e = Arc::new(e);
                for reply in replies {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
        // The batch's whole time, one-by-one retries included: the sum is
        // the writer's busy time.
        write_seconds.record(started.elapsed());
    }
}

/// Moves what is queued into `jobs`, up to `max_batch` in all.
fn drain<J, R>(rx: &mut Queue<J, R>, jobs: &mut Vec<(J, Reply<R>)>, max_batch: usize) {
    while jobs.len() < max_batch {
        match rx.try_recv() {
            Ok(j) => jobs.push(j),
            Err(_) => break,
        }
    }
}

/// Writes each job in its own transaction, so a refused row fails only its
/// own job. Once a write fails for another reason (the connection), the jobs
/// left get that error without another try.
async fn one_by_one<J, R, W: BatchWrite<J, R>>(sink: &W, jobs: Vec<J>, replies: Vec<Reply<R>>) {
    let mut gave_up: Option<Arc<StoreError>> = None;
    for (mut job, reply) in jobs.into_iter().zip(replies) {
        let result = match &gave_up {
            Some(e) => Err(e.clone()),
            None => match sink.write(std::slice::from_mut(&mut job)).await {
                // One job in, one result out (`BatchWrite`'s contract).
                Ok(r) => r
                    .into_iter()
                    .next()
                    .ok_or_else(|| Arc::new(StoreError::Closed)),
                Err(e) => {
                    let e = Arc::new(e);
                    if !e.is_about_the_data() {
                        gave_up = Some(e.clone());
                    }
                    Err(e)
                }
            },
        };
        let _ = reply.send(result);
    }
}
