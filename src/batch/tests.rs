//! The batcher with an in-memory sink: one-by-one retries, deadlines, linger.

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
    async fn write(&self, jobs: &mut [i32]) -> Result<Vec<i32>, StoreError> {
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
    announced: PendingJob,
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
    let announced = b.pending_job();
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
    assert_eq!(b.submit(1, Some(b.pending_job())).await.unwrap(), 2);
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(*sink.writes.lock().unwrap(), [vec![1]]);
}

#[tokio::test(start_paused = true)]
async fn an_announced_job_that_never_comes_holds_the_batch_for_linger_only() {
    let (sink, b) = lingering(16, Duration::from_millis(5));
    let _never = b.pending_job();
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
        drop(b.pending_job());
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
    let _never = b.pending_job();
    let announced = b.pending_job();
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
        let a = b.pending_job();
        if i % 5 < 2 {
            b.submit(i + 1, Some(a)).await.unwrap();
        }
    }
    // Three on their way: 1.2 jobs expected, so the batch waits; once
    // one came, 0.8 are, and it goes.
    let (a1, _a2, _a3) = (b.pending_job(), b.pending_job(), b.pending_job());
    assert_eq!(
        now_and_in_10ms(&b, 1000, 1001, a1).await,
        ((2000, 2002), Duration::from_millis(10))
    );
    assert_eq!(sink.writes.lock().unwrap().last(), Some(&vec![1000, 1001]));
}
