//! The text of `record`'s statements: events, their delivery rows and the
//! NOTIFY in one `INSERT … SELECT FROM UNNEST(…)` (and its ordered form), the
//! events alone, and the plain insert of a fresh batch.
//!
//! Rule: text only; `record` binds it. The parameter numbers are shared by
//! every form, so one binding order serves them all.

/// The statement's head, shared by both forms: insert the events, skipping
/// ids already stored (`ins`), then the form's own CTEs follow.
macro_rules! events_cte {
    () => {
        "WITH ins AS (
         INSERT INTO hookgate_events
             (source, event_id, body, body_sha256, headers, received_at, expires_at,
              event_type, key_index, provider_ts, object_id, recovered)
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::bytea[], $4::bytea[],
                              $5::text[], $6::int8[], $7::int8[],
                              $8::text[], $9::int4[], $10::int8[], $11::text[], $18::bool[])
         ON CONFLICT (source, event_id) DO NOTHING
         RETURNING id, source, event_id, received_at
     ), "
    };
}

/// The statement's tail, shared by both forms: after `dl` (the delivery
/// rows) ends `INSERT … SELECT …`, one NOTIFY per target with unleased
/// rows, then the inserted events (kind 0) and their leased rows (kind 1).
macro_rules! result_tail {
    () => {
        "
         RETURNING id, event_pk, target, lease_token IS NOT NULL AS leased
     ), woke AS (
         SELECT pg_notify($15, target)
         FROM (SELECT DISTINCT target FROM dl WHERE NOT leased) AS x
     )
     SELECT 0 AS kind, id, source, event_id, NULL::text AS target,
            (SELECT count(*) FROM woke) AS woke
     FROM ins
     UNION ALL
     SELECT 1, dl.id, ins.source, ins.event_id, dl.target, 0
     FROM dl JOIN ins ON ins.id = dl.event_pk WHERE dl.leased"
    };
}

/// Events, their delivery rows and the NOTIFY, in one statement. The scalar
/// subquery makes `woke` run (once), after `dl`. Rows of kind 0 are the
/// inserted events, kind 1 their leased delivery rows.
pub(super) const INSERT_SQL: &str = concat!(
    events_cte!(),
    "dl AS (
         INSERT INTO hookgate_deliveries
             (event_pk, source, target, next_attempt_at, updated_at, lease_until, lease_token)
         SELECT ins.id, ins.source, t.target, ins.received_at, ins.received_at,
                t.lease_until, t.token
         FROM ins JOIN UNNEST($12::text[], $13::text[], $14::text[], $16::int8[], $17::text[])
             AS t(source, event_id, target, lease_until, token)
           ON t.source = ins.source AND t.event_id = ins.event_id",
    result_tail!()
);

/// The events alone, `recovered` as `$12`: the head of [`FRESH_INSERT_SQL`]
/// and [`EVENTS_ONLY_SQL`].
macro_rules! events_insert {
    () => {
        "INSERT INTO hookgate_events
             (source, event_id, body, body_sha256, headers, received_at, expires_at,
              event_type, key_index, provider_ts, object_id, recovered)
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::bytea[], $4::bytea[],
                              $5::text[], $6::int8[], $7::int8[],
                              $8::text[], $9::int4[], $10::int8[], $11::text[], $12::bool[])"
    };
}

/// `record::insert_fresh`: no conflict handling, no rows back.
pub(super) const FRESH_INSERT_SQL: &str = events_insert!();

/// [`INSERT_SQL`] for a batch without delivery rows: the events alone, with
/// the same result rows (kind 0).
pub(super) const EVENTS_ONLY_SQL: &str = concat!(
    events_insert!(),
    "
     ON CONFLICT (source, event_id) DO NOTHING
     RETURNING 0 AS kind, id, source, event_id, NULL::text AS target"
);

/// [`INSERT_SQL`] for a batch with ordering keys (`$19`, parallel to the
/// delivery arrays: NULL for an unordered target, `''` for an ordered one
/// whose event has no key, stored as key NULL and sequence 0; `$20` = each
/// row's place in the batch's arrival order).
/// Per (target, key) of the inserted events, `bump` adds the number of new
/// rows to `hookgate_order_keys.last_seq` and each row takes its number in
/// arrival order. The counter's row lock is held until COMMIT, so a second
/// batch with the same key waits for this one: sequence order is commit
/// order (docs/design.md "Ordering"). `bump` runs after `ins` has finished
/// (its window sort reads all of it) and takes keys sorted, so two batches
/// lock counters in one order and never deadlock.
pub(super) const ORDERED_INSERT_SQL: &str = concat!(
    events_cte!(),
    "t AS (
         SELECT * FROM UNNEST($12::text[], $13::text[], $14::text[], $16::int8[], $17::text[],
                              $19::text[], $20::int8[])
             AS t(source, event_id, target, lease_until, token, order_key, arrival)
     ), ord AS (
         SELECT t.target, t.order_key, t.arrival,
                row_number() OVER (PARTITION BY t.target, t.order_key ORDER BY t.arrival) AS r,
                count(*) OVER (PARTITION BY t.target, t.order_key) AS c
         FROM ins JOIN t ON t.source = ins.source AND t.event_id = ins.event_id
         WHERE t.order_key <> ''
     ), bump AS (
         INSERT INTO hookgate_order_keys AS k (target, order_key, last_seq)
         SELECT target, order_key, count(*) FROM ord
         GROUP BY target, order_key ORDER BY target, order_key
         ON CONFLICT (target, order_key) DO UPDATE SET last_seq = k.last_seq + excluded.last_seq
         RETURNING k.target, k.order_key, k.last_seq
     ), dl AS (
         INSERT INTO hookgate_deliveries
             (event_pk, source, target, next_attempt_at, updated_at, lease_until, lease_token,
              order_key, order_seq)
         SELECT ins.id, ins.source, t.target, ins.received_at, ins.received_at,
                t.lease_until, t.token, NULLIF(t.order_key, ''),
                CASE WHEN t.order_key = '' THEN 0 ELSE b.last_seq - o.c + o.r END
         FROM ins JOIN t ON t.source = ins.source AND t.event_id = ins.event_id
         LEFT JOIN ord o ON o.target = t.target AND o.arrival = t.arrival
         LEFT JOIN bump b ON b.target = t.target AND b.order_key = t.order_key",
    result_tail!()
);
