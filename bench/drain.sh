#!/usr/bin/env bash
# A/B helper for the delivery drain (not part of run.sh): ingests N events with
# delivery off, then starts a gateway with delivery on and times the drain to
# a counting target; prints the exactly-once report, deliveries/s and the
# gateway CPU per delivery. Loopback only, bounded by N.
#   bench/drain.sh N [perf]     env: MODE=pg|embedded CONC=64 BIN=<dir with hookgate, loadgen, target>
# With `perf`, records `perf record -e cpu-clock --call-graph dwarf` of the
# draining gateway (release builds keep no frame pointers, so `-g` would
# show callers as bare addresses); read it with `perf report -i <dir>/perf.data`.
# CONC= (empty): the target's default settings. SQL="…": what-if, run on the
# PostgreSQL database after the backlog is ingested and before the drain (e.g.
# SQL="DROP INDEX hookgate_deliveries_state"). The CPU line counts every
# `postgres` process on this machine (other clients included).
# CALLGRIND=<file>: the draining gateway runs under valgrind's callgrind
# instead (stopped once the drain is done; the CPU line then reads 0). A drain
# of N minus a drain of a smaller N gives instructions per delivery without
# the start-up.
set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"
N=${1:-20000}; PERF=${2:-}
MODE=${MODE:-pg}; CONC=${CONC-64}
BIN=${BIN:-$(cd "$(dirname "$0")/.." && pwd)/target/release}
PG=${PGURL:-postgres://postgres@127.0.0.1:5432}
w=$(mktemp -d); db=hgpf_$$; pre=hgpf_$$
GW=$((21000 + RANDOM % 5000)); TP=$((26000 + RANDOM % 5000))
{ bench_config "$GW"; cat <<T
targets = ["sink"]
[targets.sink]
url = "http://127.0.0.1:$TP/hook"
T
[[ -n $CONC ]] && echo "concurrency = $CONC"
} >$w/c.toml
PIDS=()
cleanup(){ for p in "${PIDS[@]}"; do kill $p 2>/dev/null||true; done; sleep 0.5; psql $PG/postgres -XAtqc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1||true; redis-cli --scan --pattern "$pre:*" | xargs -r -n 1000 redis-cli unlink >/dev/null 2>&1 || true; [[ -z $PERF ]] && rm -rf "$w"; true; }
trap cleanup EXIT
if [[ $MODE == pg ]]; then psql $PG/postgres -XAtqc "CREATE DATABASE $db" >/dev/null
 ENVS=(HOOKGATE_STORAGE__DATABASE_URL=$PG/$db HOOKGATE_STORAGE__REDIS_URL=redis://127.0.0.1:6379 HOOKGATE_STORAGE__KEY_PREFIX=$pre)
else ENVS=(HOOKGATE_STORAGE__DATABASE_URL=sqlite://$w/e.db); fi
$BIN/target --listen 127.0.0.1:$TP > $w/t.log 2>&1 & PIDS+=($!)
hc(){ for i in $(seq 300); do curl -sf http://127.0.0.1:$1/healthz >/dev/null && return; sleep 0.1; done; echo unhealthy; cat $w/g.log; exit 1; }
hc $TP
env -u DATABASE_URL -u REDIS_URL -u RUST_LOG "${ENVS[@]}" HOOKGATE_DELIVERY__ENABLED=false $BIN/hookgate -c $w/c.toml serve >$w/g.log 2>&1 & g=$!; PIDS+=($g)
hc $GW
$BIN/loadgen --url http://127.0.0.1:$GW/webhooks/stripe --secret whsec_bench_secret --conns 64 --body-size 1536 --count $N --duration 0 --id-prefix d$$ --acked-ids $w/acked > $w/l.json
kill $g; wait $g || true
if [[ -n ${SQL:-} ]]; then
  [[ $MODE == pg ]] || { echo "SQL needs MODE=pg" >&2; exit 2; }
  psql $PG/$db -XAtq -v ON_ERROR_STOP=1 -c "$SQL" >/dev/null
fi
ticks() { [[ -r /proc/$1/stat ]] || { echo 0; return; }; local s; s=$(<"/proc/$1/stat"); s=${s##*) }; awk '{print $12 + $13}' <<<"$s"; }
pgticks() { local t=0 p; for p in $(pgrep -x postgres); do t=$((t + $(ticks $p))); done; echo $t; }
p0=$(pgticks)
curl -sf -X POST http://127.0.0.1:$TP/reset >/dev/null
t0=$(date +%s.%N)
VG=(); [[ -n ${CALLGRIND:-} ]] && VG=(valgrind --tool=callgrind "--callgrind-out-file=$CALLGRIND")
env -u DATABASE_URL -u REDIS_URL -u RUST_LOG "${ENVS[@]}" HOOKGATE_DELIVERY__ENABLED=true "${VG[@]}" $BIN/hookgate -c $w/c.toml serve >>$w/g.log 2>&1 & g=$!; PIDS+=($g)
if [[ -n $PERF ]]; then perf record -e cpu-clock --call-graph dwarf,16384 -F 499 -p $g -o $w/perf.data 2>/dev/null & pp=$!; fi
for i in $(seq 1200); do d=$(curl -sf http://127.0.0.1:$TP/report | jq -r .distinct); ((d >= N)) && break; sleep 0.2; done
[[ -n $PERF ]] && { kill -INT $pp; wait $pp || true; }
# callgrind writes its file when the gateway exits.
[[ -n ${CALLGRIND:-} ]] && { kill -TERM $g; wait $g || true; }
ct=0; [[ -r /proc/$g/stat ]] && ct=$(awk '{print $14+$15}' /proc/$g/stat); pt=$(( $(pgticks) - p0 ))
rep=$(curl -sf "http://127.0.0.1:$TP/report?acked=$w/acked")
echo "$rep" | jq -c '{distinct,total,missing,duplicates,unexpected, rps: (if .last_ms > .first_ms then .distinct*1000/(.last_ms-.first_ms) else 0 end)}'
hz=$(getconf CLK_TCK)
echo "cpu µs/delivery: gw $(awk -v t=$ct -v n=$N -v hz=$hz 'BEGIN{printf "%.1f", t*1e6/hz/n}') pg $(awk -v t=$pt -v n=$N -v hz=$hz 'BEGIN{printf "%.1f", t*1e6/hz/n}')  dir=$w"
