-- Throughput (issue #9, docs/design.md "Performance").
--
-- Arrival and attempt rows are append-only logs written in batches on the
-- hot paths (every duplicate, every delivery attempt). A foreign key made
-- each inserted row run a trigger that locks its parent row FOR KEY SHARE,
-- which writes (and WAL-logs) the parent tuple again: measured as ~45 % of
-- an arrival insert. Purge deletes these rows together with their event
-- (store::postgres::purge), so the cascade is no longer needed.
ALTER TABLE hookgate_arrivals DROP CONSTRAINT IF EXISTS hookgate_arrivals_event_pk_fkey;
ALTER TABLE hookgate_attempts DROP CONSTRAINT IF EXISTS hookgate_attempts_delivery_id_fkey;

-- Leasing a delivery changes only unindexed columns (lease_until,
-- lease_token): with free space on the page PostgreSQL can update it in
-- place (HOT) instead of adding an entry to every index.
ALTER TABLE hookgate_deliveries SET (fillfactor = 70);
