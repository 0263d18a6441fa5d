//! A crash of PostgreSQL itself, on a throwaway cluster of the test's own
//! (`helpers::pg_server`; the shared server is never touched): immediate
//! shutdown, no checkpoint, WAL recovery at the next start.

use crate::helpers::pg_server::PgServer;
use crate::helpers::*;
use sqlx::Connection;
use std::time::Duration;

/// Attempt records commit asynchronously (`store::postgres`): a crash can
/// lose the last ones, after the target already answered. Such a record is
/// gone as if it had never been written: the row is still leased, the lease
/// expires and the event is sent again. Events themselves commit
/// synchronously before their 2xx, so none may be lost. With the WAL writer
/// slowed to 10 s, an asynchronous commit is on disk only once a later
/// synchronous one flushed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_crash_around_the_attempt_records_loses_no_event_and_no_delivery() {
    const N: usize = 30;
    let pg = PgServer::start(&["wal_writer_delay = '10s'"]).await;
    let target = TestTarget::start().await;
    let keys = format!("concurrency = {N}\ntimeout = \"1s\"");
    let mut opts = Opts::forwarding_to(Backend::Production, "sink", &target, &keys);
    opts.database_url = Some(pg.url("postgres"));
    opts.lease = "6s";
    let app = spawn_app(opts).await;
    let ids: Vec<String> = (0..N).map(|i| format!("evt_pgcrash_{i}")).collect();
    for id in &ids {
        assert_eq!(app.post_stripe(id).await.status(), 200, "{id}");
    }
    let sends = || target.sends_per_id();
    let sent = eventually(Duration::from_secs(15), || async { sends().len() == N }).await;
    assert!(sent, "every event reached the target before the crash");
    // At once: the records are in flight, or committed and not yet flushed.
    pg.crash();
    pg.pg_ctl_start().await;

    let count = |sql: &'static str| {
        let url = pg.url("postgres");
        async move {
            let mut c = sqlx::PgConnection::connect(&url).await.ok()?;
            sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(&mut c)
                .await
                .ok()
        }
    };
    let events = count("SELECT count(*) FROM hookgate_events").await;
    assert_eq!(events, Some(N as i64), "every acknowledged event survived");
    let recorded = eventually(Duration::from_secs(45), || async {
        count("SELECT count(*) FROM hookgate_deliveries WHERE state = 'delivered'").await
            == Some(N as i64)
    })
    .await;
    let per_id = sends();
    assert!(
        recorded,
        "every delivery is recorded delivered in the end: {per_id:?}"
    );
    for id in &ids {
        assert!(per_id.get(id).copied().unwrap_or(0) >= 1, "{id} delivered");
    }
    let resent: usize = per_id.values().map(|n| n - 1).sum();
    eprintln!("after the crash {resent} of {N} events were sent again (lost records)");
}
