-- One row per alert condition (`<alert>/<condition>/<subject>`): whether it
-- is firing and the number of its latest episode. Replicas move a row with
-- compare-and-set, so a condition is told once per change, not once per
-- replica (src/store/alert_state.rs, src/alerts/).
CREATE TABLE hookgate_alert_state (
    key        TEXT    NOT NULL PRIMARY KEY,
    episode    BIGINT  NOT NULL,
    firing     BOOLEAN NOT NULL,
    changed_at BIGINT  NOT NULL
);
