-- Per-object ordering (issue #11, docs/design.md "Ordering").
--
-- A target with `order_by` stores each delivery's key (`order_key`) and its
-- place in that key (`order_seq`). Both stay NULL for every other delivery:
-- nullable columns are added without rewriting the table, and the two
-- indexes below are partial, so unordered rows never enter them.
ALTER TABLE hookgate_deliveries
    ADD COLUMN order_key TEXT,
    ADD COLUMN order_seq BIGINT;

-- The last sequence number given out per (target, key). Ingest bumps the row inside
-- its transaction (INSERT … ON CONFLICT DO UPDATE): its row lock makes
-- same-key ingests commit one after the other, so sequence order is
-- commit order.
CREATE TABLE hookgate_order_keys (
    target    TEXT   NOT NULL,
    order_key TEXT   NOT NULL,
    last_seq  BIGINT NOT NULL,
    PRIMARY KEY (target, order_key)
);

-- The claim rule: a pending row is eligible only when no pending row of
-- its key has a lower sequence number. The ordered claim walks this index
-- key by key (each key's first pending row) and finds the rows of an
-- ordered target whose event had no key (order_key NULL, order_seq 0) in
-- its NULL section. Rows of unordered targets (order_seq NULL) stay out.
CREATE INDEX hookgate_deliveries_order_pending
    ON hookgate_deliveries (target, order_key, order_seq)
    WHERE state = 'pending' AND order_seq IS NOT NULL;
-- Overtaken counts of dead deliveries: the delivered rows of the key after
-- the dead one.
CREATE INDEX hookgate_deliveries_order
    ON hookgate_deliveries (target, order_key, order_seq)
    WHERE order_key IS NOT NULL;
