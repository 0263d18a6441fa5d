#!/usr/bin/env bash
# A/B helper for the ingest paths (not part of run.sh): the same load against two
# hookgate binaries, alternated, ROUNDS times; prints events/s, p99 and CPU per
# request of the gateway, every `postgres` process (other clients included) and
# Redis. Loopback only, bounded by DUR seconds per run; own database and Redis
# prefix per run, dropped after it.
#   bench/ingest-ab.sh dup|unique ROUNDS DIR_A DIR_B    env: DUR=8 LOADGEN=<loadgen binary>
#   EMBEDDED=1: the embedded default instead (SQLite file in the run's temporary
#   directory, in-process cache); the pg and redis columns then count only other clients.
#   What-if runs of one build: SQL_A / SQL_B = SQL run on that side's database once the
#   gateway has migrated it (e.g. SQL_B="DROP INDEX hookgate_events_type_recent"), and
#   ENV_A / ENV_B = extra environment for that side's gateway (e.g. ENV_B=TOKIO_WORKER_THREADS=1).
#   PERF=<dir>: also `perf record -e cpu-clock --call-graph dwarf,16384 -F 499` each gateway
#   for the load's duration into <dir>/perf.<A|B>.<round>.data (read with `perf report -i`);
#   the sampling costs CPU, so the figures of such a run do not compare with others.
set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"
MODE=$1; ROUNDS=$2; A=$3; B=$4; DUR=${DUR:-8}
PG=postgres://postgres@127.0.0.1:5432
LG=${LOADGEN:-$(cd "$(dirname "$0")/.." && pwd)/target/release/loadgen}
HZ=$(getconf CLK_TCK)
REDIS_PID=$(redis-cli info server | tr -d '\r' | awk -F: '/^process_id:/ {print $2}')
ticks() { [[ -r /proc/$1/stat ]] || { echo 0; return; }; local s; s=$(<"/proc/$1/stat"); s=${s##*) }; awk '{print $12 + $13}' <<<"$s"; }
pgticks() { local t=0 p; for p in $(pgrep -x postgres); do t=$((t + $(ticks $p))); done; echo $t; }
run() { # dir label round
  local dir=$1 w db pre GW g sql=SQL_$2 extra=ENV_$2
  w=$(mktemp -d); db=hgab_$$_$3_${2,,}; pre=hgab_$$_$3_${2,,}; GW=$((21000 + RANDOM % 5000))
  bench_config "$GW" >$w/c.toml
  psql $PG/postgres -XAtqc "CREATE DATABASE $db" >/dev/null
  local backend=(HOOKGATE_STORAGE__DATABASE_URL=$PG/$db HOOKGATE_STORAGE__REDIS_URL=redis://127.0.0.1:6379)
  [[ ${EMBEDDED:-0} == 1 ]] && backend=(HOOKGATE_STORAGE__DATABASE_URL=sqlite://$w/hg.db)
  # shellcheck disable=SC2086  # ENV_x is a list of NAME=value words
  env -u DATABASE_URL -u REDIS_URL -u RUST_LOG "${backend[@]}" ${!extra:-} HOOKGATE_STORAGE__KEY_PREFIX=$pre HOOKGATE_DELIVERY__ENABLED=false $dir/hookgate -c $w/c.toml serve >$w/g.log 2>&1 & g=$!
  for i in $(seq 300); do curl -sf http://127.0.0.1:$GW/healthz >/dev/null && break; sleep 0.1; done
  if [[ -n ${!sql:-} ]]; then
    [[ ${EMBEDDED:-0} == 1 ]] && { echo "SQL_$2 needs the PostgreSQL backend" >&2; exit 2; }
    psql $PG/$db -XAtqc "${!sql}" >/dev/null
  fi
  local ds=0; [[ $MODE == dup ]] && ds=0.99
  local g0 p0 r0 g1 p1 r1
  g0=$(ticks $g); p0=$(pgticks); r0=$(ticks $REDIS_PID)
  local pp=
  if [[ -n ${PERF:-} ]]; then
    mkdir -p "$PERF"
    perf record -e cpu-clock --call-graph dwarf,16384 -F 499 -p $g -o "$PERF/perf.$2.$3.data" 2>/dev/null & pp=$!
  fi
  $LG --url http://127.0.0.1:$GW/webhooks/stripe --secret whsec_bench_secret --conns 64 --duration $DUR --dup-share $ds --id-prefix ab$$_$3_$2 > $w/l.json
  if [[ -n $pp ]]; then kill -INT $pp; wait $pp 2>/dev/null || true; fi
  sleep 0.5  # arrivals flush
  g1=$(ticks $g); p1=$(pgticks); r1=$(ticks $REDIS_PID)
  local ok rps p99
  ok=$(jq -r .ok $w/l.json); rps=$(jq -r .rps $w/l.json); p99=$(jq -r .p99_ms $w/l.json)
  awk -v l=$2 -v r=$3 -v ok=$ok -v rps=$rps -v p99=$p99 -v g=$((g1-g0)) -v p=$((p1-p0)) -v rd=$((r1-r0)) -v hz=$HZ \
    'BEGIN {printf "%s round %s: %8.0f req/s p99 %6.2f ms  cpu/req µs gw %5.1f pg %5.1f redis %5.1f\n", l, r, rps, p99, g*1e6/hz/ok, p*1e6/hz/ok, rd*1e6/hz/ok}'
  kill $g; wait $g 2>/dev/null || true
  psql $PG/postgres -XAtqc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  redis-cli --scan --pattern "$pre:*" | xargs -r -n 1000 redis-cli unlink >/dev/null 2>&1 || true
  rm -rf $w
}
for r in $(seq 1 $ROUNDS); do
  if ((r % 2)); then run $A A $r; run $B B $r; else run $B B $r; run $A A $r; fi
done
