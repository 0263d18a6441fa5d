-- Same model as migrations/postgres/0005_body_hashes.sql, in SQLite types.
CREATE TABLE hookgate_body_hashes (
    source      TEXT    NOT NULL,
    body_sha256 BLOB    NOT NULL,
    event_id    TEXT    NOT NULL,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (source, body_sha256)
);
CREATE INDEX hookgate_body_hashes_expires_at ON hookgate_body_hashes (expires_at);
