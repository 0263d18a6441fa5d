-- Same model as migrations/postgres/0021_object_ids.sql.
ALTER TABLE hookgate_events ADD COLUMN object_id TEXT;
CREATE INDEX hookgate_events_object_recent ON hookgate_events (object_id, received_at, id)
    WHERE object_id IS NOT NULL;
