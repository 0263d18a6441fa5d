-- Reconciliation (docs/operations.md, "Reconciliation").
-- A constant NOT NULL DEFAULT is instant on PostgreSQL 11+.
ALTER TABLE hookgate_events
    -- Read from the provider's API by reconciliation, not received as a webhook.
    ADD COLUMN recovered BOOLEAN NOT NULL DEFAULT FALSE;
CREATE INDEX hookgate_events_recovered_recent
    ON hookgate_events (received_at DESC, id DESC) WHERE recovered;

-- One row per reconciled source: who may run it (a lease row: one replica
-- at a time), when the next run is due, where an interrupted run resumes,
-- and what the last run did. Times are unix milliseconds.
CREATE TABLE hookgate_reconcile (
    source        TEXT    PRIMARY KEY,
    -- The replica running it, until lease_until (a crashed run's lease expires).
    lease_owner   TEXT,
    lease_until   BIGINT,
    -- No replica starts a run before this (one run per interval, cluster-wide).
    next_run_at   BIGINT  NOT NULL DEFAULT 0,
    -- An unfinished run: its window start and the provider's page cursor.
    cursor_since  BIGINT,
    cursor        TEXT,
    last_run      BIGINT,
    last_success  BIGINT,
    last_error    TEXT,
    recovered     BIGINT  NOT NULL DEFAULT 0,
    failed_runs   BIGINT  NOT NULL DEFAULT 0
);
