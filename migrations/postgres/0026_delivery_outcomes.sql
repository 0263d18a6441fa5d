-- Throughput, second round (issue #38; docs/design.md "Delivery"): a
-- delivery's outcome writes fewer index entries.
--
-- Moving a row from 'pending' to 'delivered' is never a HOT update (`state`
-- is in the due index's predicate), so the new row version gets an entry in
-- every index whose predicate it meets. Delivered rows are the bulk of the
-- table and nothing looks them up through this index: the backlog, the
-- scrape and the console's pending, retrying and dead filters read the rows
-- that are not delivered; the console's delivered filter checks each event's
-- (event_pk, target) row instead.
DROP INDEX hookgate_deliveries_state;
CREATE INDEX hookgate_deliveries_state ON hookgate_deliveries (state, target, event_pk)
    WHERE state <> 'delivered';

-- Attempts are read by their delivery, oldest first, and deleted with it:
-- one index on (delivery_id, id) serves both and identifies the row, in place
-- of the primary key on id and a second index on delivery_id.
ALTER TABLE hookgate_attempts DROP CONSTRAINT hookgate_attempts_pkey;
ALTER TABLE hookgate_attempts ADD PRIMARY KEY (delivery_id, id);
DROP INDEX hookgate_attempts_delivery;
