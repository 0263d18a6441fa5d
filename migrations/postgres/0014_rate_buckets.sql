-- A target's `rate` cap, cluster-wide (docs/design.md, "Delivery", rate).
-- One token bucket per rate-capped target, shared by every replica: each
-- takes tokens in small batches (at most the bucket's capacity, a tenth of
-- a second's worth) before it claims rows to send. The bucket refills by the
-- database's clock, so replicas' clocks do not matter. The embedded backend
-- (one process) keeps its bucket in memory and has no such table.
CREATE TABLE hookgate_rate_buckets (
    target  TEXT             NOT NULL PRIMARY KEY,
    tokens  DOUBLE PRECISION NOT NULL,
    -- When `tokens` was last computed: the database's clock, microseconds.
    at_us   BIGINT           NOT NULL
);
