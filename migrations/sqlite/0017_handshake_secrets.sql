-- Same model as migrations/postgres/0017_handshake_secrets.sql.
CREATE TABLE hookgate_handshake_secrets (
    source     TEXT    NOT NULL,
    secret     TEXT    NOT NULL,
    learned_at INTEGER NOT NULL,
    PRIMARY KEY (source, secret)
);
