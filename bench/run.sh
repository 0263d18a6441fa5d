#!/usr/bin/env bash
# Load figures for the two hot paths, on both deployments, on this machine:
#   new events  (verify → claim → group-commit → 2xx)   bench/new.lua
#   duplicates  (verify → one cache round trip → 2xx)    bench/dup.lua
# Each run is bounded (DURATION, default 8s) and talks to 127.0.0.1 only.
# wrk shares the cores with the gateway and the databases: compare ratios
# within one run, not absolute numbers across machines.
#   usage: bench/run.sh            (needs wrk; installs it with apt if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-8s}
CONNS=${CONNS:-32}
PORT=${PORT:-18090}
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
cargo build --release --locked -q
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/hookgate.toml" <<TOML
[server]
listen = "127.0.0.1:$PORT"
admin_token = "bench"
log_level = "warn"
[sources.bench]
provider = "bearer"
secrets = ["bench-token"]
TOML

run() {
  local label=$1; shift
  (cd "$work" && rm -f hookgate.db* && env "$@" "$OLDPWD/target/release/hookgate" -c hookgate.toml serve) &
  local pid=$!
  for _ in $(seq 1 50); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
  for kind in new dup; do
    printf '%-11s %-10s ' "$label" "$kind"
    wrk -t2 -c"$CONNS" -d"$DURATION" -s "bench/$kind.lua" "http://127.0.0.1:$PORT/webhooks/bench" |
      awk '/Requests\/sec/ {rps=$2} /Latency/ {lat=$2" avg, "$4" max"} /Non-2xx/ {bad=$5}
           END {printf "%10s req/s  latency %s  non-2xx %s\n", rps, lat, (bad==""?0:bad)}'
  done
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
}

run embedded
db="hg_bench_$$"
psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE $db"
run production DATABASE_URL="postgres://postgres@127.0.0.1:5432/$db" \
  REDIS_URL=redis://127.0.0.1:6379 HOOKGATE_STORAGE__KEY_PREFIX="$db"
psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE $db WITH (FORCE)"
redis-cli --scan --pattern "$db:*" | xargs -r -n 500 redis-cli del >/dev/null
