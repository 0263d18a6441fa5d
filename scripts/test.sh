#!/usr/bin/env bash
# Runs hookgate's whole test suite on a fresh machine: makes sure PostgreSQL
# (127.0.0.1:5432, user postgres, trust auth), Redis (127.0.0.1:6379), NATS
# with JetStream (127.0.0.1:4222) and RabbitMQ (127.0.0.1:5672, guest/guest)
# are installed (Debian packages) and running, that nginx and openssl are
# installed (the reverse-proxy test starts its own nginx), removes databases left by
# killed test runs, then runs `cargo test --locked`. Extra arguments go to
# `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

PGHOST_ADDR=127.0.0.1
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
command -v pg_ctlcluster >/dev/null 2>&1 || missing+=(postgresql)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
[ -x /usr/sbin/nats-server ] || command -v nats-server >/dev/null 2>&1 || missing+=(nats-server)
command -v rabbitmq-server >/dev/null 2>&1 || [ -x /usr/sbin/rabbitmq-server ] || missing+=(rabbitmq-server)
# The reverse-proxy test (tests/api/reverse_proxy.rs) runs nginx with TLS.
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null 2>&1 || missing+=(nginx-light)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
# A clock-step test (tests/api/crash_recovery.rs) runs one gateway under libfaketime.
ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || missing+=(libfaketime)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
export PATH="$PATH:/usr/sbin"

# Whether something accepts TCP connections on 127.0.0.1:$1.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if ! pg_isready -q -h "$PGHOST_ADDR" -p 5432; then
  echo "starting PostgreSQL"
  for v in $(ls /etc/postgresql); do
    as_root pg_ctlcluster --skip-systemctl-redirect "$v" main start || true
  done
  for _ in $(seq 1 30); do pg_isready -q -h "$PGHOST_ADDR" -p 5432 && break; sleep 1; done
fi
pg_isready -h "$PGHOST_ADDR" -p 5432

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "starting Redis"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
  for _ in $(seq 1 30); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 1; done
fi
redis-cli -h 127.0.0.1 -p 6379 ping

# NATS with JetStream: its own store directory, in the background.
if ! port_open 4222; then
  echo "starting nats-server (JetStream)"
  as_root mkdir -p /var/lib/nats-server
  as_root start-stop-daemon --start --oknodo --background --exec "$(command -v nats-server)" -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server
  for _ in $(seq 1 30); do port_open 4222 && break; sleep 1; done
fi
port_open 4222 && echo "nats-server: 127.0.0.1:4222"

# RabbitMQ: the package's default node (guest/guest on loopback). A package
# install may start it already; it takes a few seconds to accept clients.
if ! port_open 5672; then
  echo "starting rabbitmq-server"
  as_root rabbitmq-server -detached || true
fi
for _ in $(seq 1 60); do
  port_open 5672 && as_root rabbitmqctl -q await_startup >/dev/null 2>&1 && break
  sleep 1
done
port_open 5672 && echo "rabbitmq-server: 127.0.0.1:5672"

# Databases of test runs that were killed before they could drop them.
for db in $(psql -h "$PGHOST_ADDR" -U postgres -d postgres -Atc \
    "SELECT datname FROM pg_database WHERE datname LIKE 'hg_test_%'"); do
  psql -h "$PGHOST_ADDR" -U postgres -d postgres -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true
done

started=$SECONDS
cargo test --locked "$@"
echo "(cargo test took $((SECONDS - started)) s)"

# The admin console in headless Chromium (skip with HOOKGATE_SKIP_BROWSER=1),
# on the binary `cargo test` just built: `cargo build` builds it with the
# feature set without the dev-dependencies', which on a fresh target
# directory means compiling again every crate whose features differ.
if [ -z "${HOOKGATE_SKIP_BROWSER:-}" ]; then
  started=$SECONDS
  HOOKGATE_BIN=${HOOKGATE_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/debug/hookgate} \
    ./scripts/browser-test.sh
  echo "(browser tests took $((SECONDS - started)) s)"
fi
