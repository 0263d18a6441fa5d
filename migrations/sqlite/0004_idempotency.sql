-- Same model as migrations/postgres/0004_idempotency.sql, in SQLite types.
CREATE TABLE hookgate_idempotency (
    api            TEXT    NOT NULL,
    scope          TEXT    NOT NULL,
    idem_key       TEXT    NOT NULL,
    request_sha256 BLOB    NOT NULL,
    state          TEXT    NOT NULL,
    lock_token     TEXT,
    locked_until   INTEGER NOT NULL,
    resp_status    INTEGER,
    resp_headers   TEXT,
    resp_body      BLOB,
    created_at     INTEGER NOT NULL,
    expires_at     INTEGER NOT NULL,
    PRIMARY KEY (api, scope, idem_key)
);
CREATE INDEX hookgate_idempotency_expires_at ON hookgate_idempotency (expires_at);
