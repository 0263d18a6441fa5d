-- Same model as migrations/postgres/0007_reconcile.sql, in SQLite terms.
ALTER TABLE hookgate_events ADD COLUMN recovered BOOLEAN NOT NULL DEFAULT FALSE;
CREATE INDEX hookgate_events_recovered_recent
    ON hookgate_events (received_at DESC, id DESC) WHERE recovered;

CREATE TABLE hookgate_reconcile (
    source        TEXT    PRIMARY KEY,
    lease_owner   TEXT,
    lease_until   INTEGER,
    next_run_at   INTEGER NOT NULL DEFAULT 0,
    cursor_since  INTEGER,
    cursor        TEXT,
    last_run      INTEGER,
    last_success  INTEGER,
    last_error    TEXT,
    recovered     INTEGER NOT NULL DEFAULT 0,
    failed_runs   INTEGER NOT NULL DEFAULT 0
);
