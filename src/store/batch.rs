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
//!
//! One bad row never fails its batch: when the database refuses a batch
//! because of its rows ([`StoreError::is_about_the_data`]), the writer
//! writes the batch's jobs again one by one, each in its own transaction, so
//! only the job(s) at fault fail. A connection error or a timeout still fails
//! the whole batch: one by one would only repeat the wait per job.
//!
//! Linger: with "no artificial delay" alone, a loaded batcher oscillates.
//! Every caller of a big batch is answered at once, sends its next request,
//! and is still verifying it or waiting for its cache claim when the writer
//! looks again: the next batch is the one or two jobs that happened to be
//! queued, and pays a whole statement and commit for them (figure 1 of the
//! benchmark: 18 % of the ledger's batches held one event, the mean 24).
//! So ingest announces a job when it starts deduplicating
//! ([`Batcher::approach`]), before its cache round trip, and the writer
//! holds a formed batch while announced jobs are still on their way, at
//! most `linger` (a 1 ms tokio timer: up to 2 ms) and only while the
//! announced jobs, times the recent share of announcements that became jobs,
//! add up to at least one (a retry answered from the cache never becomes
//! a job: under provider retries the share is small and the writer does not
//! wait). A lone request is never held: it is no longer counted once it is
//! queued. docs/design.md, "Tenth pass", has the figures.
//!
//! Bounded waits: with a deadline ([`Batcher::with_deadline`]) a caller gives
//! up after it, whether its job is still queued or being written, and a job
//! whose caller gave up before its batch formed is not written at all. So
//! while the database hangs, callers (and the memory they hold) leave at the
//! rate they arrive instead of piling up behind the queue.

use super::{Ledger, NewEvent, Recorded, StoreError};
use async_trait::async_trait;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc, oneshot};

type Reply<R> = oneshot::Sender<Result<R, Arc<StoreError>>>;
type Queue<J, R> = mpsc::Receiver<(J, Reply<R>)>;

/// Writes one batch in one transaction; one result per job, in job order.
#[async_trait]
pub trait BatchWrite<J, R>: Send + Sync + 'static {
    async fn write(&self, jobs: &[J]) -> Result<Vec<R>, StoreError>;
}

/// Handle to a batcher's writer task; cheap to clone.
pub struct Batcher<J, R> {
    tx: mpsc::Sender<(J, Reply<R>)>,
    /// Longest wait of one `submit`, queue included; `None`: no bound here.
    deadline: Option<Duration>,
    approaching: Arc<Approaching>,
}

impl<J, R> Clone for Batcher<J, R> {
    fn clone(&self) -> Self {
        Self {
            tx: self.tx.clone(),
            deadline: self.deadline,
            approaching: self.approaching.clone(),
        }
    }
}

/// Jobs on their way to a batcher: callers that announced one
/// ([`Batcher::approach`]) and have not submitted it or given up yet.
#[derive(Default)]
struct Approaching {
    count: AtomicUsize,
    /// Announcements ever made: with the jobs received, the share of
    /// announced jobs that are submitted at all.
    announced: AtomicU64,
    /// Signalled when `count` drops to zero.
    none_left: Notify,
}

/// One announced job; dropping it (at submit, or when the caller decides it
/// has nothing to write) takes it off the count.
pub struct Approach(Arc<Approaching>);

impl Drop for Approach {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.none_left.notify_one();
        }
    }
}

impl<J: Send + 'static, R: Send + 'static> Batcher<J, R> {
    /// Starts the writer task over `sink`. One writer: while its batch
    /// commits, the next jobs queue and go in one bigger batch (several
    /// writers each took whatever was queued the moment one was free: smaller
    /// batches, more statements and commits; docs/design.md "Fifth pass" for
    /// events, "Seventh pass" for attempt records). It stops when every
    /// handle is dropped, after finishing the batch in hand. `metrics`
    /// names two histograms: `<metrics>_batch_size` (jobs per write) and
    /// `<metrics>_write_seconds` (one batch: statement and COMMIT, and the
    /// one-by-one writes when its rows were refused). The sum
    /// of the second over a minute, divided by 60, is the share of the time
    /// the one writer was busy: near 1, this batcher's throughput is what the
    /// database's commit path allows (docs/operations.md, "Metrics").
    ///
    /// `linger` (zero: never) is how long the writer may hold a formed
    /// batch for jobs announced with [`Batcher::approach`] and not submitted
    /// yet; see "Linger" in the module docs.
    pub fn start<W: BatchWrite<J, R>>(
        sink: Arc<W>,
        max_batch: usize,
        metrics: &'static str,
        linger: Duration,
    ) -> Self {
        let (tx, rx) = mpsc::channel(max_batch.max(1) * 4);
        let approaching = Arc::new(Approaching::default());
        tokio::spawn(writer(
            sink,
            rx,
            max_batch.max(1),
            metrics,
            approaching.clone(),
            linger,
        ));
        Self {
            tx,
            deadline: None,
            approaching,
        }
    }

    /// Announces a job that will probably be submitted soon.
    pub fn approach(&self) -> Approach {
        self.approaching.count.fetch_add(1, Ordering::AcqRel);
        self.approaching.announced.fetch_add(1, Ordering::Relaxed);
        Approach(self.approaching.clone())
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
    pub async fn submit(&self, job: J, announced: Option<Approach>) -> Result<R, StoreError> {
        let wait = async {
            let (reply, rx) = oneshot::channel();
            self.tx
                .send((job, reply))
                .await
                .map_err(|_| StoreError::Closed)?;
            drop(announced);
            match rx.await {
                Ok(Ok(r)) => Ok(r),
                Ok(Err(e)) => Err(StoreError::Shared(e)),
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
    approaching: Arc<Approaching>,
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
            expected.update(&approaching, jobs.len());
            let until = tokio::time::Instant::now() + linger;
            while jobs.len() < max_batch && expected.more(&approaching) {
                // Woken by each job (the batch may be full, or the jobs
                // still expected fewer than one), by the last announced one
                // leaving without a job, or by the end of the linger.
                tokio::select! {
                    biased;
                    j = rx.recv() => match j {
                        Some(j) => jobs.push(j),
                        None => break,
                    },
                    () = approaching.none_left.notified() => {}
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
        let (jobs, replies): (Vec<J>, Vec<Reply<R>>) = jobs.into_iter().unzip();
        batch_size.record(jobs.len() as f64);
        let started = Instant::now();
        let written = sink.write(&jobs).await;
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

/// What the writer expects of the announced jobs: the share of finished
/// announcements (queued or not) that became jobs, over windows of at least
/// 256 of them; 1 until the first window closes.
struct Expected {
    received: u64,
    seen_finished: u64,
    seen_jobs: u64,
    share: f64,
}

impl Default for Expected {
    fn default() -> Self {
        Self {
            received: 0,
            seen_finished: 0,
            seen_jobs: 0,
            share: 1.0,
        }
    }
}

impl Expected {
    /// Closes a window if enough announcements finished; `in_hand` jobs are
    /// taken but not yet counted in `received`.
    fn update(&mut self, a: &Approaching, in_hand: usize) {
        // The two loads are not one snapshot: a window is off by a job or
        // two at most.
        let count = a.count.load(Ordering::Acquire) as u64;
        let finished = a.announced.load(Ordering::Acquire).saturating_sub(count);
        let queued = self.received + in_hand as u64;
        if finished.saturating_sub(self.seen_finished) >= 256 {
            self.share = ((queued - self.seen_jobs) as f64
                / (finished - self.seen_finished) as f64)
                .min(1.0);
            (self.seen_finished, self.seen_jobs) = (finished, queued);
        }
    }

    /// At least one more job is expected from the announced ones.
    fn more(&self, a: &Approaching) -> bool {
        a.count.load(Ordering::Acquire) as f64 * self.share >= 1.0
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
    for (job, reply) in jobs.into_iter().zip(replies) {
        let result = match &gave_up {
            Some(e) => Err(e.clone()),
            None => match sink.write(std::slice::from_ref(&job)).await {
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

/// Ingest's batcher: events and their delivery rows.
struct Events(Arc<dyn Ledger>);

#[async_trait]
impl BatchWrite<NewEvent, Recorded> for Events {
    async fn write(&self, jobs: &[NewEvent]) -> Result<Vec<Recorded>, StoreError> {
        self.0.record(jobs).await
    }
}

/// Longest hold of a formed ledger batch for announced events (module docs,
/// "Linger").
pub const LINGER: Duration = Duration::from_millis(1);

/// Handle to the ledger's event writer; cheap to clone.
#[derive(Clone)]
pub struct GroupCommit(Batcher<NewEvent, Recorded>);

impl GroupCommit {
    /// Starts the writer task over `ledger`; a request waits at most
    /// `deadline` (`storage.statement_timeout`) for its event's commit.
    pub fn start(ledger: Arc<dyn Ledger>, max_batch: usize, deadline: Duration) -> Self {
        Self(
            Batcher::start(
                Arc::new(Events(ledger)),
                max_batch,
                "hookgate_ledger",
                LINGER,
            )
            .with_deadline(deadline),
        )
    }

    /// Records one event; returns once its transaction committed (or failed).
    /// `announced` (from [`GroupCommit::approach`]) stops counting once the
    /// event is queued.
    pub async fn record(
        &self,
        event: NewEvent,
        announced: Approach,
    ) -> Result<Recorded, StoreError> {
        self.0.submit(event, Some(announced)).await
    }

    /// Announces an event that will probably be recorded soon: the writer
    /// may wait for it to join the batch.
    pub fn approach(&self) -> Approach {
        self.0.approach()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex as StdMutex;
    use tokio::sync::Notify;

    /// Doubles jobs; refuses a negative one (about the data), a zero fails
    /// the connection. Records every write; the first waits for `gate`.
    #[derive(Default)]
    struct Sink {
        writes: StdMutex<Vec<Vec<i32>>>,
        gate: Option<Arc<Notify>>,
    }

    #[async_trait]
    impl BatchWrite<i32, i32> for Sink {
        async fn write(&self, jobs: &[i32]) -> Result<Vec<i32>, StoreError> {
            let first = {
                let mut w = self.writes.lock().unwrap();
                w.push(jobs.to_vec());
                w.len() == 1
            };
            if let (true, Some(gate)) = (first, &self.gate) {
                gate.notified().await;
            }
            if jobs.contains(&0) {
                return Err(StoreError::Database(sqlx::Error::PoolTimedOut));
            }
            if jobs.iter().any(|j| *j < 0) {
                return Err(StoreError::Database(sqlx::Error::Encode(
                    "refused row".into(),
                )));
            }
            Ok(jobs.iter().map(|j| j * 2).collect())
        }
    }

    // `tokio::join!` polls its submits in one go: on this single-threaded
    // runtime they are all queued before the writer runs (one batch).

    #[tokio::test]
    async fn a_refused_row_fails_only_its_own_job() {
        let sink = Arc::new(Sink::default());
        let b = Batcher::start(sink.clone(), 16, "test", Duration::ZERO);
        let (r1, r2, r3, r4) = tokio::join!(
            b.submit(1, None),
            b.submit(2, None),
            b.submit(-3, None),
            b.submit(4, None)
        );
        let r = [r1, r2, r3, r4];
        let ok: Vec<Option<i32>> = r.iter().map(|r| r.as_ref().ok().copied()).collect();
        assert_eq!(ok, [Some(2), Some(4), None, Some(8)]);
        assert!(r[2].as_ref().unwrap_err().is_about_the_data());
        let writes = sink.writes.lock().unwrap().clone();
        assert_eq!(
            writes,
            [vec![1, 2, -3, 4], vec![1], vec![2], vec![-3], vec![4]]
        );
    }

    #[tokio::test]
    async fn a_connection_error_fails_the_whole_batch_without_one_by_one_retries() {
        let sink = Arc::new(Sink::default());
        let b = Batcher::start(sink.clone(), 16, "test", Duration::ZERO);
        let (r1, r2, r3) = tokio::join!(b.submit(1, None), b.submit(0, None), b.submit(3, None));
        assert!(r1.is_err() && r2.is_err() && r3.is_err());
        assert_eq!(sink.writes.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_caller_past_its_deadline_gets_a_timeout_and_its_job_is_not_written() {
        let gate = Arc::new(Notify::new());
        let sink = Arc::new(Sink {
            gate: Some(gate.clone()),
            ..Sink::default()
        });
        let b = Batcher::start(sink.clone(), 16, "test", Duration::ZERO)
            .with_deadline(Duration::from_millis(50));
        // The first write hangs: its caller and the one queued behind it
        // both give up at the deadline.
        let (r1, r2) = tokio::join!(b.submit(1, None), async {
            // Queued once the writer holds job 1.
            tokio::task::yield_now().await;
            b.submit(2, None).await
        });
        assert!(matches!(r1, Err(StoreError::Timeout(_))));
        assert!(matches!(r2, Err(StoreError::Timeout(_))));
        gate.notify_one();
        // The writer drops job 2 (nobody waits for it) and writes job 3.
        assert_eq!(b.submit(3, None).await.unwrap(), 6);
        assert_eq!(*sink.writes.lock().unwrap(), [vec![1], vec![3]]);
    }

    // Linger tests run on a paused clock: when every task waits, time jumps
    // to the next timer, so the waits below are exact and take no real time.

    /// A batcher of at most `max_batch` jobs that lingers `linger`, and its sink.
    fn lingering(max_batch: usize, linger: Duration) -> (Arc<Sink>, Batcher<i32, i32>) {
        let sink = Arc::new(Sink::default());
        let b = Batcher::start(sink.clone(), max_batch, "test", linger);
        (sink, b)
    }

    /// Submits `first` at once and, 10 ms later, `second` with `announced`:
    /// their results, and the time until both were answered.
    async fn now_and_in_10ms(
        b: &Batcher<i32, i32>,
        first: i32,
        second: i32,
        announced: Approach,
    ) -> ((i32, i32), Duration) {
        let started = tokio::time::Instant::now();
        let (r1, r2) = tokio::join!(b.submit(first, None), async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            b.submit(second, Some(announced)).await
        });
        ((r1.unwrap(), r2.unwrap()), started.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn a_formed_batch_waits_for_an_announced_job_and_goes_when_it_arrives() {
        let (sink, b) = lingering(16, Duration::from_secs(1));
        let announced = b.approach();
        assert_eq!(
            now_and_in_10ms(&b, 1, 2, announced).await,
            ((2, 4), Duration::from_millis(10))
        );
        // One batch, written when job 2 came (not at the linger's end).
        assert_eq!(*sink.writes.lock().unwrap(), [vec![1, 2]]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_announced_job_is_written_at_once() {
        let (sink, b) = lingering(16, Duration::from_secs(1));
        let started = tokio::time::Instant::now();
        assert_eq!(b.submit(1, Some(b.approach())).await.unwrap(), 2);
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert_eq!(*sink.writes.lock().unwrap(), [vec![1]]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_announced_job_that_never_comes_holds_the_batch_for_linger_only() {
        let (sink, b) = lingering(16, Duration::from_millis(5));
        let _never = b.approach();
        let started = tokio::time::Instant::now();
        assert_eq!(b.submit(1, None).await.unwrap(), 2);
        assert_eq!(started.elapsed(), Duration::from_millis(5));
        // Waited for again: too few announcements have ended to know how
        // many become jobs. Once 300 more ended without one (retries the
        // cache answered), the share is near zero and nothing waits.
        let started = tokio::time::Instant::now();
        assert_eq!(b.submit(2, None).await.unwrap(), 4);
        assert_eq!(started.elapsed(), Duration::from_millis(5));
        for _ in 0..300 {
            drop(b.approach());
        }
        let started = tokio::time::Instant::now();
        assert_eq!(b.submit(3, None).await.unwrap(), 6);
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "few announcements become jobs: no wait"
        );
        assert_eq!(*sink.writes.lock().unwrap(), [vec![1], vec![2], vec![3]]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_that_fills_up_goes_without_waiting_out_the_linger() {
        let (sink, b) = lingering(2, Duration::from_secs(1));
        let _never = b.approach();
        let announced = b.approach();
        assert_eq!(
            now_and_in_10ms(&b, 1, 2, announced).await,
            ((2, 4), Duration::from_millis(10))
        );
        assert_eq!(*sink.writes.lock().unwrap(), [vec![1, 2]]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_ends_when_fewer_than_one_job_is_still_expected() {
        let (sink, b) = lingering(16, Duration::from_secs(1));
        // History: 2 of every 5 announcements become jobs (share ~0.4;
        // job 0 would fail the sink, so jobs start at 1).
        for i in 0..300 {
            let a = b.approach();
            if i % 5 < 2 {
                b.submit(i + 1, Some(a)).await.unwrap();
            }
        }
        // Three on their way: 1.2 jobs expected, so the batch waits; once
        // one came, 0.8 are, and it goes.
        let (a1, _a2, _a3) = (b.approach(), b.approach(), b.approach());
        assert_eq!(
            now_and_in_10ms(&b, 1000, 1001, a1).await,
            ((2000, 2002), Duration::from_millis(10))
        );
        assert_eq!(sink.writes.lock().unwrap().last(), Some(&vec![1000, 1001]));
    }
}
