-- Same model as migrations/postgres/0001_ledger.sql, in SQLite types.
CREATE TABLE hookgate_events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    source      TEXT    NOT NULL,
    event_id    TEXT    NOT NULL,
    body        BLOB    NOT NULL,
    body_sha256 BLOB    NOT NULL,
    headers     TEXT    NOT NULL,
    received_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    UNIQUE (source, event_id)
);
CREATE INDEX hookgate_events_expires_at ON hookgate_events (expires_at);

CREATE TABLE hookgate_deliveries (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    event_pk        INTEGER NOT NULL REFERENCES hookgate_events (id) ON DELETE CASCADE,
    source          TEXT    NOT NULL,
    target          TEXT    NOT NULL,
    state           TEXT    NOT NULL DEFAULT 'pending',
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    lease_until     INTEGER,
    lease_token     TEXT,
    last_status     INTEGER,
    last_error      TEXT,
    updated_at      INTEGER NOT NULL,
    UNIQUE (event_pk, target)
);
CREATE INDEX hookgate_deliveries_due ON hookgate_deliveries (target, next_attempt_at)
    WHERE state = 'pending';

CREATE TABLE hookgate_attempts (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id INTEGER NOT NULL REFERENCES hookgate_deliveries (id) ON DELETE CASCADE,
    attempt     INTEGER NOT NULL,
    started_at  INTEGER NOT NULL,
    latency_ms  INTEGER NOT NULL,
    status      INTEGER,
    error       TEXT
);
CREATE INDEX hookgate_attempts_delivery ON hookgate_attempts (delivery_id);

CREATE TABLE hookgate_counters (
    source TEXT    NOT NULL,
    name   TEXT    NOT NULL,
    value  INTEGER NOT NULL,
    PRIMARY KEY (source, name)
);
