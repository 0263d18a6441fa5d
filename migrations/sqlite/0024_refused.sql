-- Same model as migrations/postgres/0024_refused.sql.
CREATE TABLE hookgate_refused (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    received_at  INTEGER NOT NULL,
    source       TEXT    NOT NULL,
    reason       TEXT    NOT NULL,
    detail       TEXT    NOT NULL,
    peer         TEXT,
    query        TEXT,
    headers      TEXT    NOT NULL,
    body         BLOB,
    body_size    INTEGER NOT NULL,
    state        TEXT    NOT NULL DEFAULT 'refused',
    checked_at   INTEGER,
    event_id     TEXT
);
CREATE INDEX hookgate_refused_received ON hookgate_refused (received_at);
CREATE INDEX hookgate_refused_source ON hookgate_refused (source, id);
