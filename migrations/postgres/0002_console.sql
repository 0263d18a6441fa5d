-- Admin console and events API (issue #10). See docs/operations.md, "Indexes".
-- Adding nullable columns and NOT NULL DEFAULT constants is instant on
-- PostgreSQL 11+; the indexes are built once, under this migration's lock.
ALTER TABLE hookgate_events
    ADD COLUMN event_type  TEXT,
    -- 0-based index of the configured secret that verified the request.
    ADD COLUMN key_index   INTEGER,
    -- The provider's signed timestamp, unix seconds.
    ADD COLUMN provider_ts BIGINT;
-- Duplicate and conflict counts are counted from hookgate_arrivals when a
-- page asks (never stored on the event: updating this wide row for every
-- duplicate cost more PostgreSQL CPU than the duplicate itself).

-- Newest first, with or without a source; the cursor is (received_at, id).
CREATE INDEX hookgate_events_recent ON hookgate_events (received_at DESC, id DESC);
CREATE INDEX hookgate_events_source_recent
    ON hookgate_events (source, received_at DESC, id DESC);
CREATE INDEX hookgate_events_type_recent
    ON hookgate_events (event_type, received_at DESC, id DESC)
    WHERE event_type IS NOT NULL;
-- Event-id prefix search (`q`): byte order, so a prefix is one index range.
CREATE INDEX hookgate_events_event_id_c ON hookgate_events (event_id COLLATE "C");
-- Delivery state / target filters and bulk replay of dead deliveries.
CREATE INDEX hookgate_deliveries_state ON hookgate_deliveries (state, target, event_pk);

-- Duplicate arrivals, as far as recorded.
CREATE TABLE hookgate_arrivals (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_pk   BIGINT  NOT NULL REFERENCES hookgate_events (id) ON DELETE CASCADE,
    arrived_at BIGINT  NOT NULL,
    conflict   BOOLEAN NOT NULL
);
CREATE INDEX hookgate_arrivals_event ON hookgate_arrivals (event_pk, id);

-- Per-minute counters (cluster-wide, like hookgate_counters) for
-- /admin/stats/series; rows older than two days are deleted.
CREATE TABLE hookgate_counter_minutes (
    minute BIGINT NOT NULL,
    source TEXT   NOT NULL,
    name   TEXT   NOT NULL,
    value  BIGINT NOT NULL,
    PRIMARY KEY (minute, source, name)
);
