-- Throughput, sixth pass (issue #9; the PostgreSQL migration of the same
-- number says why): the console's newest-first lists read ascending indexes
-- backwards, and a new row lands at the right edge of each index instead of
-- its left edge.
DROP INDEX hookgate_events_recent;
CREATE INDEX hookgate_events_recent ON hookgate_events (received_at, id);
DROP INDEX hookgate_events_source_recent;
CREATE INDEX hookgate_events_source_recent ON hookgate_events (source, received_at, id);
DROP INDEX hookgate_events_type_recent;
CREATE INDEX hookgate_events_type_recent ON hookgate_events (event_type, received_at, id)
    WHERE event_type IS NOT NULL;
DROP INDEX hookgate_events_recovered_recent;
CREATE INDEX hookgate_events_recovered_recent ON hookgate_events (received_at, id)
    WHERE recovered;
