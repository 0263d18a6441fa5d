-- Same number as migrations/postgres/0009_ordering.sql (per-object ordering).
ALTER TABLE hookgate_deliveries ADD COLUMN order_key TEXT;
ALTER TABLE hookgate_deliveries ADD COLUMN order_seq INTEGER;

CREATE TABLE hookgate_order_keys (
    target    TEXT    NOT NULL,
    order_key TEXT    NOT NULL,
    last_seq  INTEGER NOT NULL,
    PRIMARY KEY (target, order_key)
);

CREATE INDEX hookgate_deliveries_order_pending
    ON hookgate_deliveries (target, order_key, order_seq)
    WHERE state = 'pending' AND order_seq IS NOT NULL;
CREATE INDEX hookgate_deliveries_order
    ON hookgate_deliveries (target, order_key, order_seq)
    WHERE order_key IS NOT NULL;
