-- Throughput, fifth pass (issue #9, docs/design.md "Performance").
--
-- Every delivery row written at ingest ran the foreign-key trigger on
-- hookgate_events: one SPI query per row and a FOR KEY SHARE lock on the
-- event that was inserted by the same statement. Delivery rows are only
-- ever written in their event's own statement (store::postgres::record) and
-- purge now deletes them in the same statement as their event
-- (store::postgres::purge), as migration 0008 did for arrivals and attempts.
ALTER TABLE hookgate_deliveries DROP CONSTRAINT IF EXISTS hookgate_deliveries_event_pk_fkey;
