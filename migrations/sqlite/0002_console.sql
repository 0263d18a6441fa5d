-- Same model as migrations/postgres/0002_console.sql, in SQLite terms.
ALTER TABLE hookgate_events ADD COLUMN event_type TEXT;
ALTER TABLE hookgate_events ADD COLUMN key_index INTEGER;
ALTER TABLE hookgate_events ADD COLUMN provider_ts INTEGER;

CREATE INDEX hookgate_events_recent ON hookgate_events (received_at DESC, id DESC);
CREATE INDEX hookgate_events_source_recent
    ON hookgate_events (source, received_at DESC, id DESC);
CREATE INDEX hookgate_events_type_recent
    ON hookgate_events (event_type, received_at DESC, id DESC)
    WHERE event_type IS NOT NULL;
-- SQLite compares TEXT bytewise (BINARY) by default.
CREATE INDEX hookgate_events_event_id ON hookgate_events (event_id);
CREATE INDEX hookgate_deliveries_state ON hookgate_deliveries (state, target, event_pk);

CREATE TABLE hookgate_arrivals (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    event_pk   INTEGER NOT NULL REFERENCES hookgate_events (id) ON DELETE CASCADE,
    arrived_at INTEGER NOT NULL,
    conflict   BOOLEAN NOT NULL
);
CREATE INDEX hookgate_arrivals_event ON hookgate_arrivals (event_pk, id);

CREATE TABLE hookgate_counter_minutes (
    minute INTEGER NOT NULL,
    source TEXT    NOT NULL,
    name   TEXT    NOT NULL,
    value  INTEGER NOT NULL,
    PRIMARY KEY (minute, source, name)
);
