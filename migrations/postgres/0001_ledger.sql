-- The ledger: one row per (source, event id), the truth behind dedup.
-- Times are unix milliseconds (BIGINT) so both backends share one model.
CREATE TABLE hookgate_events (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source      TEXT   NOT NULL,
    event_id    TEXT   NOT NULL,
    body        BYTEA  NOT NULL,
    body_sha256 BYTEA  NOT NULL,
    -- JSON array of [name, value] pairs: the provider headers to forward.
    headers     TEXT   NOT NULL,
    received_at BIGINT NOT NULL,
    -- received_at + the source's dedup_window; purge deletes past this.
    expires_at  BIGINT NOT NULL,
    UNIQUE (source, event_id)
);
CREATE INDEX hookgate_events_expires_at ON hookgate_events (expires_at);

-- The outbox: one row per (event, target), written in the event's transaction.
CREATE TABLE hookgate_deliveries (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_pk        BIGINT NOT NULL REFERENCES hookgate_events (id) ON DELETE CASCADE,
    source          TEXT   NOT NULL,
    target          TEXT   NOT NULL,
    -- pending | delivered | dead
    state           TEXT   NOT NULL DEFAULT 'pending',
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,
    -- A worker owns the row until lease_until; a crashed worker's rows come back.
    lease_until     BIGINT,
    lease_token     TEXT,
    last_status     INTEGER,
    last_error      TEXT,
    updated_at      BIGINT NOT NULL,
    UNIQUE (event_pk, target)
);
CREATE INDEX hookgate_deliveries_due ON hookgate_deliveries (target, next_attempt_at)
    WHERE state = 'pending';

CREATE TABLE hookgate_attempts (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id BIGINT  NOT NULL REFERENCES hookgate_deliveries (id) ON DELETE CASCADE,
    attempt     INTEGER NOT NULL,
    started_at  BIGINT  NOT NULL,
    latency_ms  BIGINT  NOT NULL,
    status      INTEGER,
    error       TEXT
);
CREATE INDEX hookgate_attempts_delivery ON hookgate_attempts (delivery_id);

-- Cluster-wide counters: each instance adds its deltas every flush interval.
CREATE TABLE hookgate_counters (
    source TEXT   NOT NULL,
    name   TEXT   NOT NULL,
    value  BIGINT NOT NULL,
    PRIMARY KEY (source, name)
);
