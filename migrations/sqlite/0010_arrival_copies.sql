-- Same number as migrations/postgres/0010_arrival_copies.sql: duplicate
-- arrivals aggregated per flush, `copies` arrivals from `arrived_at` to
-- `last_at` (NULL: one arrival).
ALTER TABLE hookgate_arrivals ADD COLUMN copies INTEGER NOT NULL DEFAULT 1;
ALTER TABLE hookgate_arrivals ADD COLUMN last_at INTEGER;
