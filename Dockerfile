# syntax=docker/dockerfile:1
# Multi-stage build: dependencies are compiled in their own layer (cached
# until Cargo.toml/Cargo.lock change), the runtime image is slim Debian with
# CA certificates and a non-root numeric user.

FROM rust:1.95-slim-bookworm AS deps
WORKDIR /build
COPY Cargo.toml Cargo.lock ./
# A stub crate with the real manifest builds every dependency once.
RUN mkdir -p src && echo "fn main() {}" > src/main.rs && echo "" > src/lib.rs \
    && cargo build --release --locked \
    && rm -rf src target/release/.fingerprint/hookgate-* target/release/deps/hookgate-* \
              target/release/deps/libhookgate-*

FROM deps AS build
COPY src ./src
COPY providers ./providers
COPY migrations ./migrations
RUN cargo build --release --locked && strip target/release/hookgate

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
# DATABASE_URL and REDIS_URL. Without DATABASE_URL the ledger is the SQLite
# file /var/lib/hookgate/hookgate.db (mount a volume there).
ENV HOOKGATE_CONFIG=/etc/hookgate/hookgate.toml \
    HOOKGATE_SERVER__LISTEN=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/hookgate"]
CMD ["serve"]
