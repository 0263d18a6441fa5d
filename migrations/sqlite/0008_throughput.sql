-- Same number as migrations/postgres/0008_throughput.sql. Nothing to change
-- on SQLite: its foreign-key checks are in-process index lookups (no row
-- lock is written), and it has no fillfactor or HOT updates.
SELECT 1;
