-- Secrets providers hand over in a handshake (store/handshake_secrets.rs):
-- Asana's X-Hook-Secret, Notion's verification_token. Every replica reads
-- them, so an event signed with a secret one replica learned verifies on
-- all. learned_at is unix milliseconds.
CREATE TABLE hookgate_handshake_secrets (
    source     TEXT   NOT NULL,
    secret     TEXT   NOT NULL,
    learned_at BIGINT NOT NULL,
    PRIMARY KEY (source, secret)
);
