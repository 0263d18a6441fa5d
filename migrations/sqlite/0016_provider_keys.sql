-- Same model as migrations/postgres/0016_provider_keys.sql, in SQLite terms.
CREATE TABLE hookgate_provider_keys (
    source      TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    material    BLOB    NOT NULL,
    valid_until INTEGER NOT NULL,
    saved_at    INTEGER NOT NULL,
    PRIMARY KEY (source, name)
);
