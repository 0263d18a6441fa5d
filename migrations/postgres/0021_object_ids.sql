-- Find an event by what it is about (issue #36, docs/operations.md "Events
-- API"): the provider object id its source locates (`object_id` in the
-- provider definition or the source; Stripe's `data.object.id`).
-- A nullable column without a default is instant; events without an object
-- id (providers that define none) stay out of the partial index.
ALTER TABLE hookgate_events ADD COLUMN object_id TEXT COLLATE "C";
-- `GET /admin/events?object=…`, newest first, with or without a source.
CREATE INDEX hookgate_events_object_recent ON hookgate_events (object_id, received_at, id)
    WHERE object_id IS NOT NULL;
