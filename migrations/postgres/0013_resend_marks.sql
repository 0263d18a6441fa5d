-- Resends reconciliation asked for (docs/operations.md, "Reconciliation").
--
-- GitHub and PayPal recover an event by resending it: it arrives signed at
-- POST /webhooks/<source> like any webhook, so ingest stores it with
-- recovered = FALSE (ingest does no extra lookup per request). Each resend
-- the provider accepted leaves a row here; the next reconciliation pass
-- (right after the run's resends, and at the start of every later run)
-- sets recovered = TRUE on the events that arrived at or after
-- requested_at, then deletes the rows that are applied, moot (the event
-- arrived by itself before the request) or past expires_at. Times are unix
-- milliseconds.
CREATE TABLE hookgate_resends (
    source       TEXT   NOT NULL,
    -- The id the ledger dedupes on (GitHub delivery GUID, PayPal event id);
    -- byte order, like hookgate_events.event_id (migration 0012).
    event_id     TEXT   COLLATE "C" NOT NULL,
    -- Just before the first accepted request: an event received earlier
    -- came by itself and is never marked.
    requested_at BIGINT NOT NULL,
    -- The retention bound, moved on by a repeated request.
    expires_at   BIGINT NOT NULL,
    PRIMARY KEY (source, event_id)
);
CREATE INDEX hookgate_resends_expires_at ON hookgate_resends (expires_at);
