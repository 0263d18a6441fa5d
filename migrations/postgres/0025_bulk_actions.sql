-- Bulk actions (admin/bulk.rs): a plan the operator confirms, then a run in
-- pages whose progress any replica reads. `state`: planned, running,
-- cancelling, cancelled, done, failed, interrupted (the runner stopped
-- heart-beating: its process ended). `bound`: the largest row id the plan
-- covers, so rows that appear later are never part of it.
CREATE TABLE hookgate_bulk_actions (
    id           TEXT PRIMARY KEY,
    kind         TEXT NOT NULL,
    filter       TEXT NOT NULL,
    plan         TEXT NOT NULL,
    planned      BIGINT NOT NULL,
    bound        BIGINT NOT NULL,
    page_size    BIGINT NOT NULL,
    pause_ms     BIGINT NOT NULL,
    state        TEXT NOT NULL,
    total        BIGINT NOT NULL DEFAULT 0,
    done         BIGINT NOT NULL DEFAULT 0,
    created_by   TEXT NOT NULL,
    started_by   TEXT,
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL,
    started_at   BIGINT,
    finished_at  BIGINT,
    heartbeat_at BIGINT,
    error        TEXT
);

-- Who did what to the ledger from the admin API: bulk actions, replays,
-- redeliveries. Listed newest first (the primary key's order).
CREATE TABLE hookgate_audit (
    id       BIGSERIAL PRIMARY KEY,
    at       BIGINT NOT NULL,
    who      TEXT NOT NULL,
    action   TEXT NOT NULL,
    filter   TEXT NOT NULL,
    count    BIGINT NOT NULL,
    outcome  TEXT NOT NULL,
    bulk_id  TEXT
);
CREATE INDEX hookgate_audit_bulk ON hookgate_audit (bulk_id);

-- A bulk replay's pages: the next dead deliveries by id after the last
-- page's, without walking the live rows in between. Only dead rows are in
-- it; `state` is indexed already (0002), so updates of live rows cost the
-- same as before.
CREATE INDEX hookgate_deliveries_dead_id ON hookgate_deliveries (id) WHERE state = 'dead';
