//! The SQLite backend's own tests: ordered claims here, the writer's
//! connection and writes beside other writers in [`writer`].

mod writer;

use super::SqliteStore;
use super::outbox::last_key;
use crate::primitives::headers::StoredHeaders;
use crate::primitives::time::Millis;
use crate::store::{
    AttemptRecord, Backend, EventFacts, EventLog, LeaseRequest, NewEvent, NextState, Outbox,
    Tallies,
};
use bytes::Bytes;

/// A new event of source `s` with a delivery row to `t<i>` per key.
pub(super) fn event(id: &str, keys: &[Option<&str>]) -> NewEvent {
    NewEvent {
        source: "s".into(),
        event_id: id.into(),
        body: Bytes::from_static(b"{}"),
        body_sha256: [0; 32],
        headers: StoredHeaders::default(),
        received_at: Millis(1),
        expires_at: Millis(1_000_000),
        targets: (0..keys.len()).map(|i| format!("t{i}")).collect(),
        order_keys: keys.iter().map(|k| k.map(str::to_owned)).collect(),
        facts: EventFacts::default(),
        handoff: None,
        fresh: true,
    }
}

/// A claim of `limit` rows of `target` at 10, leased until 1000 to `tok`.
fn lease(target: &str, limit: i64) -> LeaseRequest<'_> {
    LeaseRequest {
        target,
        token: "tok",
        now: Millis(10),
        until: Millis(1_000),
        limit,
    }
}

async fn claim(l: &SqliteStore, after: &str, limit: i64) -> (Vec<String>, Option<String>) {
    let (rows, last) = l
        .claim_due_ordered(&lease("t0", limit), after)
        .await
        .unwrap();
    (rows.into_iter().map(|r| r.event_id).collect(), last)
}

async fn finish(l: &SqliteStore, id: &str, next: NextState) {
    let pk: i64 = sqlx::query_scalar(
        "SELECT d.id FROM hookgate_deliveries d JOIN hookgate_events e ON e.id = d.event_pk
         WHERE e.event_id = ? AND d.target = 't0'",
    )
    .bind(id)
    .fetch_one(&l.pool)
    .await
    .unwrap();
    let rec = AttemptRecord {
        started_at: Millis(10),
        latency_ms: 1,
        status: Some(200),
        error: None,
        next,
    };
    assert!(l.finish_attempt(pk, "tok", &rec).await.unwrap());
}

/// Sequence per (target, key) in batch order; one row per key out at a
/// time; retrying blocks, delivered and dead free the key; keys are
/// visited round-robin from the cursor; a keyless row is unordered.
#[tokio::test]
async fn the_first_pending_row_of_each_key_is_the_only_one_claimed() {
    let l = SqliteStore::connect("sqlite::memory:", Some(1))
        .await
        .unwrap();
    l.migrate().await.unwrap();
    let batch = [
        event("a1", &[Some("a"), None]),
        event("b1", &[Some("b")]),
        event("a2", &[Some("a")]),
        event("x1", &[Some("")]),
        event("a3", &[Some("a")]),
    ];
    l.record(&batch).await.unwrap();
    let seqs: Vec<(String, Option<String>, Option<i64>)> = sqlx::query_as(
        "SELECT e.event_id, d.order_key, d.order_seq FROM hookgate_deliveries d
         JOIN hookgate_events e ON e.id = d.event_pk ORDER BY d.event_pk, d.order_key IS NULL",
    )
    .fetch_all(&l.pool)
    .await
    .unwrap();
    let s = |id: &str, k: Option<&str>, n: Option<i64>| (id.to_owned(), k.map(str::to_owned), n);
    assert_eq!(
        seqs,
        [
            s("a1", Some("a"), Some(1)),
            s("a1", None, None),
            s("b1", Some("b"), Some(1)),
            s("a2", Some("a"), Some(2)),
            s("x1", None, Some(0)),
            s("a3", Some("a"), Some(3)),
        ]
    );

    // Heads of a and b, and the keyless row; a2 waits for a1.
    let (mut got, last) = claim(&l, "", 10).await;
    got.sort();
    assert_eq!(got, ["a1", "b1", "x1"]);
    assert_eq!(last.as_deref(), Some("b"));
    assert!(
        claim(&l, "", 10).await.0.is_empty(),
        "leased rows still block"
    );
    // A retry keeps the key blocked (a1 is due again, a2 is not).
    finish(&l, "a1", NextState::RetryAt(Millis(5))).await;
    assert_eq!(claim(&l, "", 10).await.0, ["a1"]);
    // Dead frees the key: a2 next, through the successor claim.
    finish(&l, "a1", NextState::Dead).await;
    let next = l
        .claim_successor(&lease("t0", 1), "a")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (next.event_id.as_str(), next.order_key.as_deref()),
        ("a2", Some("a"))
    );
    finish(&l, "a2", NextState::Delivered).await;
    finish(&l, "b1", NextState::Delivered).await;
    // Round-robin: with one slot, the walk starts after the cursor.
    let more = [event("b2", &[Some("b")])];
    l.record(&more).await.unwrap();
    assert_eq!(
        claim(&l, "a", 1).await,
        (vec!["b2".to_owned()], Some("b".into()))
    );
    assert_eq!(
        claim(&l, "b", 1).await,
        (vec!["a3".to_owned()], Some("a".into()))
    );
    // a1 is dead, overtaken by a2 (delivered); a3 is still out.
    let over = l.overtaken().await.unwrap();
    assert_eq!(over.len(), 1);
    assert_eq!((over[0].target.as_str(), over[0].count), ("t0", 1));
}

#[test]
fn the_cursor_is_the_last_key_in_walk_order() {
    let keys = |k: &[&str]| k.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(last_key(keys(&["c", "d"]), "b"), Some("d".into()));
    assert_eq!(last_key(keys(&["c", "d", "a"]), "b"), Some("a".into()));
    assert_eq!(last_key(vec![], "b"), None);
}

/// Issue #32: purge was one unbounded DELETE. It now deletes in batches of
/// `PURGE_BATCH` until none is left, keeping undelivered events.
#[tokio::test]
async fn purge_deletes_a_backlog_larger_than_one_batch_in_bounded_batches() {
    let l = SqliteStore::connect("sqlite::memory:", Some(1))
        .await
        .unwrap();
    l.migrate().await.unwrap();
    let n = 2 * crate::store::PURGE_BATCH as usize + 7;
    let events: Vec<NewEvent> = (0..n).map(|i| event(&format!("e{i}"), &[])).collect();
    for chunk in events.chunks(500) {
        l.record(chunk).await.unwrap();
    }
    l.record(&[event("kept", &[None])]).await.unwrap();
    assert_eq!(l.purge(Millis(2_000_000)).await.unwrap(), n as u64);
    let left: Vec<String> = sqlx::query_scalar("SELECT event_id FROM hookgate_events")
        .fetch_all(&l.pool)
        .await
        .unwrap();
    assert_eq!(left, ["kept"], "the undelivered event stays");
    assert_eq!(l.purge(Millis(2_000_000)).await.unwrap(), 0);
}
