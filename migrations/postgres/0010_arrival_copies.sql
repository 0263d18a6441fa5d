-- Duplicate arrivals aggregated per flush (issue #9): one row stands for
-- `copies` arrivals of one event, all with the same body or all
-- conflicting, from `arrived_at` to `last_at` (NULL: one arrival). A retry
-- storm of one id costs one narrow row per flush instead of one per copy.
-- Constant defaults: instant on PostgreSQL 11+.
ALTER TABLE hookgate_arrivals
    ADD COLUMN copies  INTEGER NOT NULL DEFAULT 1,
    ADD COLUMN last_at BIGINT;
