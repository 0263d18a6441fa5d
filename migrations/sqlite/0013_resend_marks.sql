-- Same model as migrations/postgres/0013_resend_marks.sql, in SQLite terms
-- (SQLite compares text in byte order already).
CREATE TABLE hookgate_resends (
    source       TEXT    NOT NULL,
    event_id     TEXT    NOT NULL,
    requested_at INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    PRIMARY KEY (source, event_id)
);
CREATE INDEX hookgate_resends_expires_at ON hookgate_resends (expires_at);
