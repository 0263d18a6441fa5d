-- Same model as migrations/postgres/0023_alert_state.sql, in SQLite terms.
CREATE TABLE hookgate_alert_state (
    key        TEXT    NOT NULL PRIMARY KEY,
    episode    INTEGER NOT NULL,
    firing     BOOLEAN NOT NULL,
    changed_at INTEGER NOT NULL
);
