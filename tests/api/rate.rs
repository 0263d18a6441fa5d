//! A target's `rate` cap: deliveries go out at the cap, the backlog waits
//! in the outbox, nothing is dropped.

use crate::both_backends;
use crate::helpers::*;
use std::sync::Arc;
use std::time::Duration;

both_backends!(a_rate_capped_target_gets_a_backlog_at_the_cap_and_all_of_it);

async fn a_rate_capped_target_gets_a_backlog_at_the_cap_and_all_of_it(b: Backend) {
    const N: usize = 80;
    const RATE: f64 = 20.0;
    let t = TestTarget::start().await;
    let mut opts = Opts::new(b);
    opts.stripe_targets = vec!["slow".into()];
    opts.extra = format!("[targets.slow]\nurl = \"{}\"\nrate = \"20/s\"\n", t.url);
    let app = Arc::new(spawn_app(opts).await);
    // The whole backlog arrives far faster than the cap.
    let sem = Arc::new(tokio::sync::Semaphore::new(16));
    let mut tasks = vec![];
    for i in 0..N {
        let (app, sem) = (app.clone(), sem.clone());
        tasks.push(tokio::spawn(async move {
            let _p = sem.acquire().await.unwrap();
            app.post_stripe(&format!("evt_rate_{i}")).await.status()
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), 200);
    }
    let s = app.stats().await;
    let waiting = s["sources"]["stripe"]["pending"].as_i64().unwrap();
    assert!(
        waiting > N as i64 / 2,
        "the backlog waits in the outbox: {s}"
    );

    let all = eventually(Duration::from_secs(30), || async { t.count() >= N }).await;
    assert!(all, "every event delivered ({} of {N})", t.count());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let times = t.times();
    assert_eq!(times.len(), N, "each event once");
    let span = times[N - 1].duration_since(times[0]).as_secs_f64();
    let measured = (N - 1) as f64 / span;
    assert!(
        (measured - RATE).abs() <= RATE * 0.10,
        "measured {measured:.1}/s over {span:.2}s, cap {RATE}/s"
    );
}
