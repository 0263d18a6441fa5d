-- `hookgate listen` (admin/listen.rs): a source's events in ledger order
-- (id), from a cursor, without scanning other sources' rows.
CREATE INDEX hookgate_events_source_id ON hookgate_events (source, id);
