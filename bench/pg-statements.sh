#!/usr/bin/env bash
# PostgreSQL time per statement under a benchmark load (not part of run.sh):
# starts a throwaway PostgreSQL cluster of its own (initdb in a temporary
# directory, a free loopback port, pg_stat_statements preloaded), runs one
# hookgate against it with the bench load generator, prints the statements
# that took the most execution time (calls, rows, ms in all, ms per call),
# then stops the cluster by its PID file and removes it. The shared server
# is not touched. Loopback only, bounded by DUR seconds.
#   bench/pg-statements.sh unique|target [BIN_DIR]   env: DUR=8 TOP=6
#   unique: figure 1's load (no targets); target: figure 3's (one bench target
#   with the target's default settings, as bench/run.sh runs it, delivery on;
#   TARGET_CONC=N sets its `concurrency`, as in run.sh).
set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"
MODE=${1:-unique}; BIN=${2:-$(cd "$(dirname "$0")/.." && pwd)/target/release}; DUR=${DUR:-8}; TOP=${TOP:-6}
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[[ -x $PGBIN/initdb ]] || { echo "initdb not found under /usr/lib/postgresql" >&2; exit 2; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
w=$(mktemp -d); chmod 755 "$w"
as_pg() { if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[[ $(id -u) == 0 ]] && chown postgres "$w"
PORT=$(free_port); GW=$(free_port); TP=$(free_port)
cleanup() {
  [[ -n ${g:-} ]] && kill "$g" 2>/dev/null; [[ -n ${t:-} ]] && kill "$t" 2>/dev/null
  wait 2>/dev/null || true
  as_pg "$PGBIN/pg_ctl" -D "$w/data" -m fast stop >/dev/null 2>&1 || true
  rm -rf "$w"
}
trap cleanup EXIT
as_pg "$PGBIN/initdb" -D "$w/data" -A trust -U postgres >/dev/null
as_pg "$PGBIN/pg_ctl" -D "$w/data" -l "$w/pg.log" -w -o "-p $PORT -k $w -c listen_addresses=127.0.0.1 \
  -c shared_preload_libraries=pg_stat_statements" start >/dev/null
PG="postgres://postgres@127.0.0.1:$PORT"
psql "$PG/postgres" -XAtqc "CREATE EXTENSION pg_stat_statements" -c "CREATE DATABASE bench" >/dev/null
bench_config "$GW" >"$w/c.toml"
delivery=false
if [[ $MODE == target ]]; then
  delivery=true
  "$BIN/target" --listen "127.0.0.1:$TP" >"$w/t.log" 2>&1 & t=$!
  printf 'targets = ["sink"]\n[targets.sink]\nurl = "http://127.0.0.1:%s/hook"\n' "$TP" >>"$w/c.toml"
  if [[ -n ${TARGET_CONC:-} ]]; then echo "concurrency = $TARGET_CONC" >>"$w/c.toml"; fi
fi
env -u DATABASE_URL -u REDIS_URL -u RUST_LOG HOOKGATE_STORAGE__DATABASE_URL="$PG/bench" \
  HOOKGATE_STORAGE__REDIS_URL=redis://127.0.0.1:6379 HOOKGATE_STORAGE__KEY_PREFIX="hgpss_$$" \
  HOOKGATE_DELIVERY__ENABLED=$delivery "$BIN/hookgate" -c "$w/c.toml" serve >"$w/g.log" 2>&1 & g=$!
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$GW/healthz" >/dev/null && break; sleep 0.1; done
psql "$PG/postgres" -XAtqc "SELECT pg_stat_statements_reset()" >/dev/null
"$BIN/loadgen" --url "http://127.0.0.1:$GW/webhooks/stripe" --secret whsec_bench_secret --conns 64 \
  --duration "$DUR" --dup-share 0 --id-prefix "pss$$" | jq -c '{ok, rps, p99_ms}'
sleep 1 # the last records
psql "$PG/postgres" -XP pager=off -c "SELECT calls, rows, round(total_exec_time::numeric) AS ms,
    round((total_exec_time / calls)::numeric, 3) AS ms_per_call,
    left(regexp_replace(query, '\s+', ' ', 'g'), 70) AS statement
  FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = 'bench')
  ORDER BY total_exec_time DESC LIMIT $TOP"
redis-cli --scan --pattern "hgpss_$$:*" | xargs -r -n 1000 redis-cli unlink >/dev/null 2>&1 || true
