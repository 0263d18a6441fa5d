-- Idempotency-Key proxy (docs/idempotency.md): one row per (api, scope, key),
-- the truth behind the claim. `state` is in_progress (a request owns the key
-- until locked_until, under lock_token) or completed (the stored response is
-- replayed until expires_at). Times are unix milliseconds, like the ledger.
CREATE TABLE hookgate_idempotency (
    api            TEXT    NOT NULL,
    scope          TEXT    NOT NULL,
    idem_key       TEXT    NOT NULL,
    -- SHA-256 of method, path, query and body: a different request under the
    -- same key is a conflict.
    request_sha256 BYTEA   NOT NULL,
    state          TEXT    NOT NULL,
    lock_token     TEXT,
    locked_until   BIGINT  NOT NULL,
    resp_status    INTEGER,
    -- JSON array of [name, value] pairs (allow-listed response headers).
    resp_headers   TEXT,
    resp_body      BYTEA,
    created_at     BIGINT  NOT NULL,
    expires_at     BIGINT  NOT NULL,
    PRIMARY KEY (api, scope, idem_key)
);
CREATE INDEX hookgate_idempotency_expires_at ON hookgate_idempotency (expires_at);
