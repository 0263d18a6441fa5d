-- Requests that failed verification (store/refused.rs, issue #36): kept
-- for `[refused] keep` and at most `[refused] max_rows`, newest first by
-- id. `headers` is JSON `[[name, value], …]`: as received when the body
-- was captured (re-verification needs the signature), else with every
-- credential-bearing value redacted before it was written. `body` is NULL
-- unless `[refused] capture_body`; `body_size` is the received size.
-- `state` is `refused` or `re-verified`; times are unix milliseconds.
CREATE TABLE hookgate_refused (
    id           BIGSERIAL PRIMARY KEY,
    received_at  BIGINT  NOT NULL,
    source       TEXT    NOT NULL,
    reason       TEXT    NOT NULL,
    detail       TEXT    NOT NULL,
    peer         TEXT,
    query        TEXT,
    headers      TEXT    NOT NULL,
    body         BYTEA,
    body_size    BIGINT  NOT NULL,
    state        TEXT    NOT NULL DEFAULT 'refused',
    checked_at   BIGINT,
    event_id     TEXT
);
-- Pruning by age and the `since`/`until` filters.
CREATE INDEX hookgate_refused_received ON hookgate_refused (received_at);
-- A source's page, newest first.
CREATE INDEX hookgate_refused_source ON hookgate_refused (source, id);
