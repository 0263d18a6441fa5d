-- The last good keys fetched from providers (PayPal certificates, Plaid
-- JWKs), per source, so a restart starts warm (store/provider_keys.rs).
CREATE TABLE hookgate_provider_keys (
    source      TEXT   NOT NULL,
    name        TEXT   NOT NULL,
    material    BYTEA  NOT NULL,
    valid_until BIGINT NOT NULL,
    saved_at    BIGINT NOT NULL,
    PRIMARY KEY (source, name)
);
