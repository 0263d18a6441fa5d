#!/usr/bin/env bash
# Runs hookgate's whole test suite on a fresh machine: makes sure PostgreSQL
# (127.0.0.1:5432, user postgres, trust auth) and Redis (127.0.0.1:6379) are
# installed and running, removes databases left by killed test runs, then
# runs `cargo test --locked`. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

PGHOST_ADDR=127.0.0.1
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v pg_ctlcluster >/dev/null 2>&1 || ! command -v redis-server >/dev/null 2>&1; then
  echo "installing postgresql and redis-server"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql redis-server >/dev/null
fi

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

# Databases of test runs that were killed before they could drop them.
for db in $(psql -h "$PGHOST_ADDR" -U postgres -d postgres -Atc \
    "SELECT datname FROM pg_database WHERE datname LIKE 'hg_test_%'"); do
  psql -h "$PGHOST_ADDR" -U postgres -d postgres -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true
done

cargo test --locked "$@"

# The admin console in headless Chromium (skip with HOOKGATE_SKIP_BROWSER=1).
if [ -z "${HOOKGATE_SKIP_BROWSER:-}" ]; then
  ./scripts/browser-test.sh
fi
