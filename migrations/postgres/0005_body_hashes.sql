-- `dedup_by_body`: which event id first brought a body, per source, until the
-- end of that event's dedup window. Only sources that opt in write here; a
-- body held by a live row under another id is a duplicate (store::body_hashes).
CREATE TABLE hookgate_body_hashes (
    source      TEXT   NOT NULL,
    body_sha256 BYTEA  NOT NULL,
    event_id    TEXT   NOT NULL,
    expires_at  BIGINT NOT NULL,
    PRIMARY KEY (source, body_sha256)
);
CREATE INDEX hookgate_body_hashes_expires_at ON hookgate_body_hashes (expires_at);
