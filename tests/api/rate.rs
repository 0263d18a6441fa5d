//! A target's `rate` cap: deliveries go out at the cap, the backlog waits
//! in the outbox, nothing is dropped.

use crate::both_backends;
use crate::helpers::*;
use std::sync::Arc;
use std::time::Duration;

both_backends!(
    a_rate_capped_target_gets_a_backlog_at_the_cap_and_all_of_it,
    an_ordered_rate_capped_target_is_held_to_the_cap_too
);

async fn a_rate_capped_target_gets_a_backlog_at_the_cap_and_all_of_it(b: Backend) {
    capped_backlog(b, 80, "", 1).await;
}

/// The cap is the cluster's: two replicas sharing one outbox (and so one
/// bucket, `hookgate_rate_buckets`) send at the cap together, not twice it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_together_are_held_to_the_cap() {
    capped_backlog(Backend::Production, 80, "", 2).await;
}

/// With `order_by`, each key's next row is leased as soon as the one
/// before it is recorded, outside the loop's claims: it takes its token
/// too. Every test event has the same object id, so all of them form one
/// key and, without the cap, would follow each other at the target's speed.
async fn an_ordered_rate_capped_target_is_held_to_the_cap_too(b: Backend) {
    capped_backlog(b, 60, "order_by = \"json:/data/object/id\"\n", 1).await;
}

/// `n` events to a target capped at 20/s (plus `extra` keys), sent to
/// `replicas` gateways on one ledger: they all arrive, once each, at the
/// cap within 10 %.
async fn capped_backlog(b: Backend, n: usize, extra: &str, replicas: usize) {
    const RATE: f64 = 20.0;
    let t = TestTarget::start().await;
    let mut opts = Opts::new(b);
    opts.stripe_targets = vec!["slow".into()];
    opts.extra = format!(
        "[targets.slow]\nurl = \"{}\"\nrate = \"20/s\"\n{extra}",
        t.url
    );
    let app = Arc::new(spawn_app(opts.clone()).await);
    let mut apps = vec![app.clone()];
    for _ in 1..replicas {
        apps.push(Arc::new(
            spawn_on(opts.clone(), app.db.clone(), app.prefix.clone()).await,
        ));
    }
    // The whole backlog arrives far faster than the cap.
    let sem = Arc::new(tokio::sync::Semaphore::new(16));
    let mut tasks = vec![];
    for i in 0..n {
        let (app, sem) = (apps[i % replicas].clone(), sem.clone());
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
        waiting > n as i64 / 2,
        "the backlog waits in the outbox: {s}"
    );

    let all = eventually(Duration::from_secs(30), || async { t.count() >= n }).await;
    assert!(all, "every event delivered ({} of {n})", t.count());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let times = t.times();
    assert_eq!(times.len(), n, "each event once");
    let span = times[n - 1].duration_since(times[0]).as_secs_f64();
    let measured = (n - 1) as f64 / span;
    assert!(
        (measured - RATE).abs() <= RATE * 0.10,
        "measured {measured:.1}/s over {span:.2}s, cap {RATE}/s"
    );
}
