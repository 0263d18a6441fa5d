-- Throughput, sixth pass (issue #9, docs/design.md "Performance").
--
-- Newest-first lists read the console's indexes backwards; they no longer
-- need to be declared descending. A descending index on an increasing key
-- takes every new row at its left edge: each insert descends the tree (the
-- rightmost-leaf fast path only serves the right edge) and a full left-edge
-- page splits 50/50, leaving the right half half-empty for good. Measured on
-- this server: 2 M rows of increasing keys, the descending index 139 MB and
-- 3.5-3.8 s per million, the ascending one 77 MB and 2.5-3.1 s.
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

-- One index for the event id instead of two: event ids compare in byte
-- order (they are opaque provider identifiers), and the unique key leads
-- with the id, so it serves the ledger's (source, id) lookups and ON
-- CONFLICT, an id looked up without its source, and the console's id prefix
-- search (one byte-order range) that hookgate_events_event_id_c served.
-- Changing the collation of a text column rewrites no rows, only the
-- indexes on it.
DROP INDEX hookgate_events_event_id_c;
ALTER TABLE hookgate_events DROP CONSTRAINT hookgate_events_source_event_id_key;
ALTER TABLE hookgate_events ALTER COLUMN event_id TYPE TEXT COLLATE "C";
ALTER TABLE hookgate_events
    ADD CONSTRAINT hookgate_events_event_id_source_key UNIQUE (event_id, source);
