# syntax=docker/dockerfile:1
# Multi-stage build: dependencies are compiled in their own layer (cached
# until a manifest or the lock file changes), the runtime image is slim
# Debian with CA certificates and a non-root numeric user.
# CI checks that the files copied here are enough to build the crate
# (scripts/check-docker-context.sh), since no container engine runs there.

FROM rust:1.95-slim-bookworm AS deps
WORKDIR /build
COPY Cargo.toml Cargo.lock ./
COPY bench/Cargo.toml bench/
COPY deploy/docker-stub.sh deploy/
# Stub sources with the real manifests build every dependency once. The
# bench member keeps its empty stub: the gateway's build never needs it.
RUN sh deploy/docker-stub.sh \
    && cargo build --release --locked -p hookgate \
    && rm -rf src target/release/.fingerprint/hookgate-* \
              target/release/deps/hookgate-* target/release/deps/libhookgate-* \
              target/release/build/hookgate-*

FROM deps AS build
COPY build.rs ./
COPY src ./src
COPY providers ./providers
COPY migrations ./migrations
COPY console ./console
RUN cargo build --release --locked -p hookgate --bin hookgate \
    && strip target/release/hookgate

FROM debian:bookworm-slim AS runtime
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/hookgate /etc/hookgate \
    && chown 10001:10001 /var/lib/hookgate
COPY --from=build /build/target/release/hookgate /usr/local/bin/hookgate
# A safe default: no sources, no admin token (the repo's hookgate.toml has
# demo secrets and must never be what an image runs with).
COPY deploy/docker.toml /etc/hookgate/hookgate.toml
USER 10001:10001
WORKDIR /var/lib/hookgate
# Config: mount a file over /etc/hookgate/hookgate.toml (or point
# HOOKGATE_CONFIG elsewhere) and/or set HOOKGATE_SECTION__KEY variables,
# DATABASE_URL and REDIS_URL. Without a DATABASE_URL of your own the ledger
# is the SQLite file /var/lib/hookgate/hookgate.db (mount a volume there):
# absolute, because a relative SQLite path is relative to the config file's
# directory, /etc/hookgate.
ENV HOOKGATE_CONFIG=/etc/hookgate/hookgate.toml \
    HOOKGATE_SERVER__LISTEN=0.0.0.0:8080 \
    DATABASE_URL=sqlite:///var/lib/hookgate/hookgate.db
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/hookgate"]
CMD ["serve"]
